"""Keep onnxruntime from fusing a quantized graph into a kernel slower than the operators it replaces.

onnxruntime's level-2 optimizer fuses ``Add -> LayerNormalization`` (the
residual of every transformer block) into the contrib operator
``SkipLayerNormalization`` whenever the graph proves that the Add's two inputs
have the same 3-D shape.  Its CPU kernel (``contrib_ops/cpu/skip_layer_norm.cc``,
onnxruntime 1.32) is a scalar loop with a division per element, where the
``LayerNormalization`` kernel it replaces is vectorized, so the fused node takes
several times as long as the pair (``benchmarks/minilm_other_domain.py --fusion``
measures both on any machine; docs/quantize.md gives the figures).

A float export carries no intermediate shapes, so onnxruntime cannot prove the
two inputs alike and leaves the pair alone.  onnxruntime's quantizers run shape
inference and keep what it found in ``value_info``; there the two inputs share
symbolic dimensions, and the quantized model is fused: an int8 transformer then
spends a good part of its time in those nodes and loses much of int8's speed-up
(the same benchmark times all-MiniLM-L6-v2 with and without the annotations).

:func:`unblock` removes those shape annotations, so onnxruntime sees the
quantized graph's residual Adds as it saw the float ones.  It changes no
operator, weight or value: only what onnxruntime can prove about two shapes.
A graph whose shapes onnxruntime infers on its own (fixed sizes) is still fused,
as its float source is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .subgraphs import iter_graphs

if TYPE_CHECKING:
    import onnx

#: where a LayerNormalization begins: the fused operator (opset 17), or the ReduceMean of a decomposed one,
#: which onnxruntime's LayerNormFusion turns into the operator before it fuses the Add into it
NORM_STARTS = frozenset({"LayerNormalization", "ReduceMean"})


def unblock(model: onnx.ModelProto) -> int:
    """Drop the ``value_info`` that lets onnxruntime fuse an Add into ``SkipLayerNormalization``, in place.

    Every annotation of a graph that has such an Add goes, not only the Add's own: onnxruntime infers
    shapes again when it loads a model, and from any annotation left upstream it would prove the two
    inputs alike once more.  A graph without such an Add (a CNN) keeps its annotations.  Returns how many
    were dropped (0 when there was nothing to drop).
    """
    dropped = 0
    for graph in iter_graphs(model.graph):
        readers: dict[str, set[str]] = {}
        for node in graph.node:
            for name in node.input:
                readers.setdefault(name, set()).add(node.op_type)
        if any(node.op_type == "Add" and readers.get(node.output[0], set()) & NORM_STARTS for node in graph.node):
            dropped += len(graph.value_info)
            del graph.value_info[:]
    return dropped
