"""What a quantized model really holds, checked against what its quantizer plugin said.

A plugin reports the nodes it kept in float (``QuantizeOutcome.excluded_nodes``),
and ``lighten``'s partial fallback asks for nodes to stay float through the
strategy's ``exclude`` option.  Neither is taken on trust: onnxruntime's
``quantize_dynamic`` 1.32, for one, quantizes a Gemm whatever
``nodes_to_exclude`` says.  The host reads the written model and, for every
weighted node of the input, looks for positive evidence that it was quantized:

- a node with its name (or its name as a prefix, as onnxruntime names what it
  puts in a node's place: ``X_quant``, ``X_MatMul_quant``, ``X_Q4``) whose
  operator is a quantized one (``MatMulInteger``, ``QLinearConv``,
  ``MatMulNBits``, ...);
- or the node itself, same name and operator, reading a weight through
  ``DequantizeLinear`` (QDQ) or from an initializer of another type (fp16).

A node that vanished (fused into another operator) gives no evidence either
way and is never called a lie.

The file is not the whole story: at session start onnxruntime's
``WeightBiasQuantization`` pass gives some float Conv / ConvTranspose / Gemm
nodes of a QDQ model int8 weights (:func:`weight_bias_quantization_inputs` has
its conditions).  Such a node reads float in the file yet runs quantized, so it
is reported as ``requantized`` and a claim that it stayed float is a mismatch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .ops import REPLACEMENT_OPS, WEIGHTED_OPS

if TYPE_CHECKING:
    import onnx

# Only REPLACEMENT_OPS are evidence by name. QuantizeLinear/DequantizeLinear are not: QDQ names them after
# *tensors* ("<node>_output_0_QuantizeLinear"), so a float node whose output feeds a quantized one has them too.


@dataclass(frozen=True)
class ClaimCheck:
    """The weighted nodes of the input: which were quantized, which stayed float, and what contradicts the plugin."""

    quantized: tuple[str, ...]
    kept_float: tuple[str, ...]
    unknown: tuple[str, ...]                      # gone from the output (fused): no evidence either way
    claimed_float_but_quantized: tuple[str, ...]  # the plugin said float; the model says quantized
    requested_float_but_quantized: tuple[str, ...]  # asked to stay float (exclude=...), yet quantized
    requantized: tuple[str, ...] = ()             # float in the file, int8 weights once onnxruntime loads it

    @property
    def ok(self) -> bool:
        return not self.claimed_float_but_quantized and not self.requested_float_but_quantized

    def message(self, strategy: str) -> str:
        """One line naming what does not match ('' when everything does)."""
        parts = []
        for nodes, said in ((self.claimed_float_but_quantized, "reported {} as kept in float"),
                            (self.requested_float_but_quantized, "was asked to keep {} in float")):
            written = [n for n in nodes if n not in self.requantized]
            later = [n for n in nodes if n in self.requantized]
            if written:
                parts.append(said.format(_names(written)) + ", but the written model has them quantized")
            if later:
                parts.append(said.format(_names(later)) + ", but onnxruntime re-quantizes them at session start "
                             "(WeightBiasQuantization: per-tensor int8 weights for a float Conv/Gemm between "
                             "DequantizeLinear and QuantizeLinear)")
        if not parts:
            return ""
        return f"strategy {strategy!r} " + "; and ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {"quantized": len(self.quantized), "kept_float": len(self.kept_float), "unknown": len(self.unknown),
                "claimed_float_but_quantized": list(self.claimed_float_but_quantized),
                "requested_float_but_quantized": list(self.requested_float_but_quantized),
                "requantized": list(self.requantized)}


def _names(nodes: Sequence[str], limit: int = 4) -> str:
    shown = ", ".join(nodes[:limit])
    return f"{len(nodes)} node(s) ({shown}{', ...' if len(nodes) > limit else ''})"


def node_states(source: onnx.ModelProto, output: onnx.ModelProto, at_runtime: bool = False) -> dict[str, bool | None]:
    """Each weighted node of ``source``: True (quantized), False (still float), None (gone: fused or renamed).

    ``at_runtime``: also True for a node float in the file that onnxruntime re-quantizes at session start.
    """
    from onnx import TensorProto

    inits = {i.name: i.data_type for i in source.graph.initializer}
    out_inits = {i.name: i.data_type for i in output.graph.initializer}
    produced_by = {o: n for n in output.graph.node for o in n.output}
    by_name = {n.name: n for n in output.graph.node if n.name}
    floats = {TensorProto.FLOAT, TensorProto.DOUBLE}
    states: dict[str, bool | None] = {}
    for node in source.graph.node:
        if node.op_type not in WEIGHTED_OPS or not node.name:
            continue
        weights = [i for i in node.input if i in inits and inits[i] in floats]
        if not weights:
            continue
        prefix = node.name + "_"
        related = [n for n in output.graph.node if n.name == node.name or n.name.startswith(prefix)]
        if any(n.op_type in REPLACEMENT_OPS for n in related):
            states[node.name] = True
            continue
        same = by_name.get(node.name)
        if same is None or same.op_type != node.op_type:
            states[node.name] = None
            continue
        converted = False
        for name in same.input:
            producer = produced_by.get(name)
            if producer is not None and producer.op_type == "DequantizeLinear" and producer.input \
                    and producer.input[0] in out_inits:
                converted = True       # QDQ: a quantized initializer, dequantized on the way in
            elif name in out_inits and name in inits and out_inits[name] != inits[name]:
                converted = True       # the weight itself changed type (fp16)
        if not converted and any(w not in same.input for w in weights):
            # the weight was swapped for another tensor: look at what feeds it now
            converted = any(out_inits.get(i) not in (None, *floats) for i in same.input)
        states[node.name] = converted
    if at_runtime:
        states.update({name: True for name in weight_bias_quantization_inputs(output) if states.get(name) is False})
    return states


def check_claims(source: onnx.ModelProto, output: onnx.ModelProto, claimed_float: Sequence[str] = (),
                 requested_float: Sequence[str] = ()) -> ClaimCheck:
    """Compare what the plugin claimed (``claimed_float``) and what was asked (``requested_float``) with the model."""
    states = node_states(source, output)
    quantized = tuple(n for n, s in states.items() if s is True)
    later = set(weight_bias_quantization_inputs(output))
    requantized = tuple(n for n, s in states.items() if s is False and n in later)
    kept = tuple(n for n, s in states.items() if s is False and n not in later)
    unknown = tuple(n for n, s in states.items() if s is None)
    hit = set(quantized) | set(requantized)
    claimed = tuple(dict.fromkeys(n for n in claimed_float if n in hit))
    requested = tuple(dict.fromkeys(n for n in requested_float if n in hit and n not in claimed))
    return ClaimCheck(quantized, kept, unknown, claimed, requested, requantized)


def weight_bias_quantization_inputs(model: onnx.ModelProto) -> dict[str, onnx.NodeProto]:
    """The float nodes onnxruntime's ``WeightBiasQuantization`` gives int8 weights, each with its input's DQ node.

    onnxruntime 1.32 (``core/optimizer/qdq_transformer/weight_bias_quantization.cc``) runs this pass at
    graph optimisation level 1 (basic, so every default session) on every execution provider, unless
    ``session.disable_quant_qdq`` is set or the session disables it by name.  It rewrites a node when:

    - it is a Conv, ConvTranspose or Gemm;
    - its input 0 comes from a DequantizeLinear whose scale is a scalar (per tensor; a per-axis scale,
      even with equal values, is left alone);
    - its one output goes, without branching, through any Relu / Clip to a QuantizeLinear;
    - its weight is a float32 initializer (a weight already behind a DequantizeLinear only gets its bias
      quantized: that node is quantized in the file already);
    - its bias, if any, is a 1-D initializer (anything else: the node is skipped).

    The weight then becomes symmetric per-tensor int8 (Q/DQ inserted) and the bias int32.  Identity nodes
    are seen through (level 1 removes them first); other rewrites that run before it (QDQ propagation
    through Reshape or Transpose, say) are not modelled.  ``tests/test_requantize.py`` checks this rule
    against onnxruntime's own optimised model.
    """
    from onnx import TensorProto

    links = _Links(model.graph)
    found: dict[str, onnx.NodeProto] = {}
    for node in model.graph.node:
        if node.op_type not in ("Conv", "ConvTranspose", "Gemm") or len(node.input) < 2 or len(node.output) != 1:
            continue
        dq = links.source_of(node.input[0])
        if dq is None or dq.op_type != "DequantizeLinear" or len(dq.input) < 2 \
                or links.shapes.get(dq.input[1], ((0,), None))[0] not in ((), (1,)):
            continue
        if not links.reaches_quantize(node.output[0]):
            continue
        weight = links.shapes.get(node.input[1])
        if weight is None or weight[1] != TensorProto.FLOAT:
            continue        # behind a DequantizeLinear (quantized already) or not a float32 constant
        bias = node.input[2] if len(node.input) > 2 and node.input[2] else None
        if bias is not None and (bias not in links.shapes or len(links.shapes[bias][0]) != 1):
            continue
        found[node.name] = dq
    return found


class _Links:
    """Who produces and who consumes each tensor of a graph, and the constants' shapes, seen as level 1 sees them."""

    def __init__(self, graph: onnx.GraphProto) -> None:
        self.outputs = {o.name for o in graph.output}
        self.shapes = {i.name: (tuple(i.dims), i.data_type) for i in graph.initializer}
        for node in graph.node:     # a Constant node is an initializer once onnxruntime has loaded the model
            if node.op_type == "Constant" and node.output and node.attribute and node.attribute[0].name == "value":
                t = node.attribute[0].t
                self.shapes[node.output[0]] = (tuple(t.dims), t.data_type)
        self.produced_by = {o: n for n in graph.node for o in n.output}
        self.consumers: dict[str, list[onnx.NodeProto]] = {}
        for node in graph.node:
            for name in node.input:
                self.consumers.setdefault(name, []).append(node)

    def source_of(self, name: str) -> onnx.NodeProto | None:
        """The node that produces ``name``, through Identity nodes."""
        node = self.produced_by.get(name)
        while node is not None and node.op_type == "Identity" and node.input:
            node = self.produced_by.get(node.input[0])
        return node

    def reaches_quantize(self, name: str) -> bool:
        """Whether ``name`` flows, without branching, through Identity / Relu / Clip into a QuantizeLinear."""
        from .ops import RANGE_ACTIVATIONS

        while True:
            users = self.consumers.get(name, [])
            if len(users) != 1:
                return False
            user = users[0]
            if user.op_type == "Identity" and user.output[0] not in self.outputs:
                name = user.output[0]
                continue
            if user.op_type == "QuantizeLinear":
                return True
            if user.op_type not in RANGE_ACTIVATIONS or len(user.output) != 1:
                return False
            name = user.output[0]


def requested_float_nodes(source: onnx.ModelProto, patterns: Sequence[str]) -> list[str]:
    """The source's node names that ``exclude``-style patterns (exact names or globs) ask to keep float."""
    from fnmatch import fnmatchcase

    names = [n.name for n in source.graph.node if n.name]
    return [n for n in names if any(n == p or fnmatchcase(n, p) for p in patterns)]
