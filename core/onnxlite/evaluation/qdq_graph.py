"""A QDQ model's Quantize/DequantizeLinear nodes, attributed to the compute nodes they serve, and taken out.

``compare --per-node`` (:mod:`~onnxlite.evaluation.per_node`) measures a node's share of the error by
taking every other node's Q/DQ out (only it quantized) or its own (only it float).  Taking them out must
give back exactly what the float model computes: the float weight of that name, and the Relu or Clip
onnxruntime's QDQ quantizer folded into an output's QuantizeLinear.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import onnx

from ..ops import QDQ_OPS

QUANTIZED_SUFFIX = "_quantized"     # onnxruntime's name for a quantized initializer (W -> W_quantized)


@dataclass(frozen=True)
class QdqGroups:
    """The candidate's quantized nodes in graph order, and per node the Q/DQ nodes that are its own."""

    nodes: tuple[tuple[str, str, str], ...]          # (node name, op type, first output)
    own: dict[str, tuple[str, ...]]                  # node name -> names of its weight DQs and output Q/DQs


def qdq_groups(model: onnx.ModelProto) -> QdqGroups:
    """Attribute every QuantizeLinear/DequantizeLinear of a QDQ model to the compute node it serves."""
    graph = model.graph
    inits = {i.name for i in graph.initializer}
    producer = {o: n for n in graph.node for o in n.output}
    users: dict[str, list[Any]] = {}
    for n in graph.node:
        for i in n.input:
            users.setdefault(i, []).append(n)
    own: dict[str, list[str]] = {}
    for n in graph.node:
        if n.op_type == "DequantizeLinear" and n.input[0] in inits:          # a weight or bias
            for user in users.get(n.output[0], []):
                own.setdefault(user.name, []).append(n.name)
        elif n.op_type == "QuantizeLinear" and n.input[0] not in inits:     # an activation's Q/DQ pair
            owner = producer.get(n.input[0])
            if owner is None or owner.op_type in QDQ_OPS:
                continue
            own.setdefault(owner.name, []).append(n.name)
            own[owner.name] += [u.name for u in users.get(n.output[0], []) if u.op_type == "DequantizeLinear"]
    nodes = tuple((n.name, n.op_type, n.output[0]) for n in graph.node if n.name in own)
    return QdqGroups(nodes=nodes, own={k: tuple(v) for k, v in own.items()})


def without_qdq(model: onnx.ModelProto, drop: set[str], float_model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` with the Q/DQ nodes named in ``drop`` taken out.

    A dropped weight DequantizeLinear becomes an Identity of the float model's weight of that name when it
    is the one quantized (within one quantization step of the dequantized value), else of the dequantized
    value itself.  A dropped activation DequantizeLinear becomes an Identity of the tensor before its Q;
    where onnxruntime folded a Relu or Clip into that Q (the float model's tensor of that name comes out of
    one), the Relu or Clip comes back instead, so the float node computes what the float model does.
    """
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    inits = {i.name: i for i in graph.initializer}
    by_output = {o: n for n in graph.node for o in n.output}
    float_inits = {i.name: i for i in float_model.graph.initializer}
    clips = folded_bounds(float_model)
    nodes = []
    for n in graph.node:
        if n.name not in drop:
            nodes.append(n)
            continue
        if n.op_type == "QuantizeLinear":
            continue                            # its DQs are dropped with it (same owner)
        source = n.input[0]
        if source in inits:
            value = _dequantized(n, inits)
            name = source.removesuffix(QUANTIZED_SUFFIX)
            if name in float_inits:
                original = numpy_helper.to_array(float_inits[name]).astype(np.float64)
                step = np.max(np.abs(numpy_helper.to_array(inits[n.input[1]]))) if n.input[1] in inits else 0
                if original.shape == value.shape and np.max(np.abs(original - value), initial=0) <= step:
                    value = original
            graph.initializer.append(numpy_helper.from_array(value.astype(np.float32), f"{n.name}_float_value"))
            nodes.append(helper.make_node("Identity", [f"{n.name}_float_value"], list(n.output), name=n.name))
            continue
        q = by_output.get(source)
        tensor = q.input[0] if q is not None else source
        bounds = clips.get(q.input[0]) if q is not None else None
        if bounds is not None:
            # a Relu or Clip folded into the Q: restore it as a Clip with constant bounds
            names = []
            for tag, value in zip(("low", "high"), bounds):
                names.append(f"{n.name}_{tag}" if math.isfinite(value) else "")
                if names[-1]:
                    graph.initializer.append(numpy_helper.from_array(np.array(value, np.float32), names[-1]))
            while names and not names[-1]:
                names.pop()
            nodes.append(helper.make_node("Clip", [tensor, *names], list(n.output), name=n.name))
        else:
            nodes.append(helper.make_node("Identity", [tensor], list(n.output), name=n.name))
    del graph.node[:]
    graph.node.extend(nodes)
    used = {i for n in graph.node for i in n.input}
    keep = [i for i in graph.initializer if i.name in used]
    del graph.initializer[:]
    graph.initializer.extend(keep)
    return out


def folded_bounds(float_model: onnx.ModelProto) -> dict[str, tuple[float, float]]:
    """Output tensor -> (low, high) of every Relu and constant-bound Clip in the float model."""
    from onnx import numpy_helper

    inits = {i.name: numpy_helper.to_array(i) for i in float_model.graph.initializer}
    for n in float_model.graph.node:
        if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value":
            inits[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
    found = {}
    for n in float_model.graph.node:
        if n.op_type == "Relu":
            found[n.output[0]] = (0.0, float("inf"))
        elif n.op_type == "Clip":
            attrs = {a.name: a.f for a in n.attribute}
            bounds = [attrs.get("min", -float("inf")), attrs.get("max", float("inf"))]
            for i, name in enumerate(n.input[1:3]):
                if name in inits:
                    bounds[i] = float(inits[name])
            found[n.output[0]] = (bounds[0], bounds[1])
    return found


def _dequantized(dq: Any, inits: dict[str, Any]) -> Any:
    import numpy as np
    from onnx import numpy_helper

    q = numpy_helper.to_array(inits[dq.input[0]]).astype(np.float64)
    scale = numpy_helper.to_array(inits[dq.input[1]]).astype(np.float64)
    zero = numpy_helper.to_array(inits[dq.input[2]]).astype(np.float64) if len(dq.input) > 2 and dq.input[2] \
        else np.zeros_like(scale)
    axis = next((a.i for a in dq.attribute if a.name == "axis"), 1)
    if scale.ndim == 1 and scale.size > 1:
        shape = [1] * q.ndim
        shape[axis] = -1
        scale, zero = scale.reshape(shape), zero.reshape(shape)
    return (q - zero) * scale


