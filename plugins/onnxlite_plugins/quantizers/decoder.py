"""What weight-only strategies need to know about a causal decoder graph (a language model with a cache).

* :func:`lm_head`: the MatMul that writes the logits (the LM head), found by walking back from the
  graph's ``logits`` output, so ``lm_head=float|int8|int4`` can treat it on its own;
* :func:`tied_table`: the embedding ``Gather`` that reads the LM head's weight through a ``Transpose``
  (onnxruntime-genai's builder writes tied embeddings so), and :func:`share_tied_table`, which points it
  at the LM head's quantized blocks with ``GatherBlockQuantized`` (what the builder itself does for its
  int4 models) instead of keeping a float copy;
* :func:`with_empty_past` (the host's :mod:`onnxlite.decoder_inputs`): calibration feeds of token windows
  completed with the positions and an empty cache the graph also takes;
* :func:`weight_error_ranking`: MatMuls ordered by how much output noise 4-bit blocks add to them, the
  data-free sensitivity proxy that ``keep8`` uses (see there).

Everything reads or rewrites the ``onnx.ModelProto`` only; onnxruntime's quantizers do the rounding.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from onnxlite.decoder_inputs import with_empty_past
from onnxlite.graph_family import PAST_PREFIXES, is_decoder
from onnxlite.ops import MATMUL_OPS

__all__ = ["PAST_PREFIXES", "is_decoder", "lm_head", "tied_table", "share_tied_table", "with_empty_past",
           "weight_error_ranking", "odd_block_nodes"]


def _producers(proto) -> dict[str, Any]:
    return {out: node for node in proto.graph.node for out in node.output}


def lm_head(proto, eligible: Iterable[str]) -> str | None:
    """The eligible MatMul nearest to the ``logits`` output (the first output when none is so named)."""
    eligible = set(eligible)
    outputs = [o.name for o in proto.graph.output]
    start = next((o for o in outputs if o == "logits"), outputs[0] if outputs else None)
    producers = _producers(proto)
    frontier: list[str] = [start] if start else []
    seen: set[int] = set()
    while frontier:
        tensor = frontier.pop(0)
        node = producers.get(tensor)
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if node.op_type == "MatMul" and node.name in eligible:
            return str(node.name)
        if node.op_type in MATMUL_OPS:
            continue     # another projection before the logits: not a plain LM head
        frontier.extend(node.input)
    return None


def tied_table(proto, head: str | None) -> Any | None:
    """The embedding Gather that reads ``head``'s weight transposed (tied embeddings), or None."""
    if head is None:
        return None
    nodes = {n.name: n for n in proto.graph.node}
    weight = nodes[head].input[1]
    producers = _producers(proto)
    for node in proto.graph.node:
        if node.op_type == "Gather" and node.input:
            source = producers.get(node.input[0])
            if source is not None and source.op_type == "Transpose" and list(source.input) == [weight]:
                return node
    return None


def share_tied_table(proto, gather_name: str, head: str, hidden: int) -> str | None:
    """Point the tied embedding ``gather_name`` at ``head``'s MatMulNBits blocks; None when done, else why not.

    The quantized LM head's weight ``[vocab, blocks, blob]`` is the table row by row, so a ``Reshape`` to
    ``[vocab, blocks * blob]`` feeds ``GatherBlockQuantized`` (and a ``Slice`` cuts the last block's padding).
    """
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    nodes = {n.name: n for n in proto.graph.node}
    # onnxruntime names the node it writes "<name>_Q<bits>"
    nbits = next((n for n in proto.graph.node if n.op_type == "MatMulNBits" and n.name.rsplit("_Q", 1)[0] == head),
                 None)
    gather = nodes.get(gather_name)
    if nbits is None or gather is None:
        return "the LM head was not quantized"
    attrs = {a.name: helper.get_attribute_value(a) for a in nbits.attribute}
    inits = {i.name: i for i in proto.graph.initializer}
    zero = inits.get(nbits.input[3]) if len(nbits.input) > 3 and nbits.input[3] else None
    if zero is not None and zero.data_type != TensorProto.UINT8:
        return "its zero points are float (GatherBlockQuantized takes integer ones)"
    weight = inits[nbits.input[1]]
    vocab, blocks, blob = (int(d) for d in weight.dims)
    base = gather.name
    shape = numpy_helper.from_array(np.array([vocab, blocks * blob], dtype="int64"),
                                    f"{base}/table_shape")
    proto.graph.initializer.append(shape)
    flat = f"{base}/table_blocks"
    looked = f"{base}/GatherBlockQuantized/output_0"
    new = [helper.make_node("Reshape", [nbits.input[1], shape.name], [flat], name=f"{base}/table_reshape"),
           helper.make_node("GatherBlockQuantized", [flat, gather.input[1], nbits.input[2]]
                            + ([nbits.input[3]] if zero is not None else []), [looked],
                            name=f"{base}/GatherBlockQuantized", domain="com.microsoft", bits=int(attrs["bits"]),
                            block_size=int(attrs["block_size"]), gather_axis=0, quantize_axis=1)]
    if blocks * int(attrs["block_size"]) != hidden:
        ends = [numpy_helper.from_array(np.array(v, dtype="int64"), f"{base}/slice_{k}")
                for k, v in (("start", [0]), ("end", [hidden]), ("axis", [-1]))]
        proto.graph.initializer.extend(ends)
        new.append(helper.make_node("Slice", [looked] + [e.name for e in ends], [gather.output[0]],
                                    name=f"{base}/table_slice"))
    else:
        new[-1].output[0] = gather.output[0]
    transpose = gather.input[0]
    index = list(proto.graph.node).index(gather)
    proto.graph.node.remove(gather)
    for offset, node in enumerate(new):
        proto.graph.node.insert(index + offset, node)
    if not any(transpose in n.input for n in proto.graph.node):
        for node in list(proto.graph.node):
            if transpose in node.output:
                proto.graph.node.remove(node)
    used = {i for n in proto.graph.node for i in n.input}
    for init in [i for i in proto.graph.initializer if i.name not in used]:
        proto.graph.initializer.remove(init)
    return None


def odd_block_nodes(proto, nodes: Iterable[str], block: int) -> list[str]:
    """MatMuls whose K splits into an odd number of ``block``-sized blocks: onnxruntime 1.32's Python packer
    of 4-bit zero points (k-quant, asymmetric GPTQ) packs them across rows and fails on these."""
    shapes = {i.name: list(i.dims) for i in proto.graph.initializer}
    wanted = set(nodes)
    return [n.name for n in proto.graph.node if n.name in wanted
            and (-(-shapes[n.input[1]][0] // block)) % 2 == 1]


def weight_error_ranking(proto, nodes: Iterable[str], block: int, symmetric: bool, base_dir: str = "") -> list[str]:
    """``nodes`` (MatMuls with a constant weight) by the output noise 4-bit blocks add, largest first.

    The noise of ``x @ W`` when ``W`` becomes its 4-bit round-to-nearest ``Q(W)`` is ``x @ (W - Q(W))``; for inputs
    of unit variance per channel (what the RMS/LayerNorm in front of every decoder projection makes) its
    expected energy is ``||W - Q(W)||_F^2``.  No data, no run: a proxy for the per-node sweep, which needs
    QDQ graphs (``compare --per-node``) and does not apply to MatMulNBits.  Ties keep graph order.
    """
    import numpy as np
    from onnx import numpy_helper
    from onnxruntime.quantization.neural_compressor.weight_only import pad_tensor, qdq_tensor

    inits = {i.name: i for i in proto.graph.initializer}
    scores: list[tuple[float, int, str]] = []
    wanted = set(nodes)
    for order, node in enumerate(n for n in proto.graph.node if n.name in wanted):
        weight = numpy_helper.to_array(inits[node.input[1]], base_dir=base_dir).astype(np.float32)
        k = weight.shape[0]
        padded = pad_tensor(weight, block, -(-k // block))
        rounded = qdq_tensor(padded.T, 4, block, "sym" if symmetric else "asym", "int")
        error = padded - np.reshape(rounded, (padded.shape[1], -1)).T
        scores.append((-float(np.square(error[:k]).sum()), order, str(node.name)))
    return [name for _, _, name in sorted(scores)]
