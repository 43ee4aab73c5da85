"""Packing the MatMuls that read one activation into one MatMul: a transformer's Q, K and V projections.

onnxruntime-genai's builder writes attention this way (one packed QKV MatMul, then a split).  For dynamic
int8 it means one wider integer MatMul instead of three narrow ones: the activation is quantized once and
read once, and onnxruntime fuses the lone DynamicQuantizeLinear into the MatMul (DynamicQuantizeMatMul).
The graph computes the same function: the weights (and biases) are concatenated along the output axis and
the result is split back into the outputs the rest of the graph reads.

A group is packed only when every member is a MatMul reading the same activation with a 2-D weight of the
same input size, each with a bias Add of its own or none of them with one, and no member is kept in float.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

#: a packed MatMul is named after its group's first member with this suffix (the claims check reads the prefix)
PACKED_SUFFIX = "_packed"


def _bias_add(node: Any, consumers: dict[str, list[Any]], weights: dict[str, Any]) -> Any | None:
    """The Add that adds a 1-D initializer to ``node``'s output and is its only reader, or None."""
    readers = consumers.get(node.output[0], [])
    if len(readers) != 1 or readers[0].op_type != "Add":
        return None
    add = readers[0]
    other = add.input[1] if add.input[0] == node.output[0] else add.input[0]
    bias = weights.get(other)
    return add if bias is not None and len(bias.dims) == 1 else None


def pack_groups(model: Any, keep_float: Collection[str] = (), min_members: int = 2) -> list[list[str]]:
    """Pack, in ``model`` (an ``onnx.ModelProto``, changed in place), each group of MatMuls that read one
    activation; returns the node names of each group packed (none: ``model`` is unchanged)."""
    import numpy as np
    from onnx import helper, numpy_helper

    graph = model.graph
    weights = {i.name: i for i in graph.initializer}
    order = list(graph.node)
    consumers: dict[str, list[Any]] = {}
    for node in order:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    groups: dict[tuple[str, int], list[int]] = {}
    for index, node in enumerate(order):
        weight = weights.get(node.input[1]) if node.op_type == "MatMul" and len(node.input) == 2 else None
        if weight is None or len(weight.dims) != 2 or node.name in keep_float:
            continue
        if len(consumers.get(node.input[1], [])) != 1:     # a weight shared with another node stays as it is
            continue
        groups.setdefault((node.input[0], weight.dims[0]), []).append(index)
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
    starts: dict[int, list[Any]] = {}
    gone: set[int] = set()
    dropped: set[str] = set()
    new_inits: list[Any] = []
    packed: list[list[str]] = []
    position = {id(n): i for i, n in enumerate(order)}
    for (activation, _), indices in groups.items():
        members = [order[i] for i in indices]
        if len(members) < min_members:
            continue
        found = [_bias_add(m, consumers, weights) for m in members]
        adds = [a for a in found if a is not None]
        with_bias = len(adds) == len(members)
        if adds and not with_bias:
            continue
        arrays = [numpy_helper.to_array(weights[m.input[1]]) for m in members]
        if len({a.dtype for a in arrays}) != 1:
            continue
        name = f"{members[0].name or members[0].output[0]}{PACKED_SUFFIX}"
        inits = [numpy_helper.from_array(np.concatenate(arrays, axis=1), f"{name}.weight")]
        nodes = [helper.make_node("MatMul", [activation, f"{name}.weight"], [f"{name}.out"], name=name)]
        last = f"{name}.out"
        outputs = [m.output[0] for m in members]
        dropped |= {m.input[1] for m in members}
        gone |= set(indices)
        if with_bias:
            terms = [a.input[1] if a.input[0] == m.output[0] else a.input[0] for m, a in zip(members, adds)]
            inits.append(numpy_helper.from_array(np.concatenate([numpy_helper.to_array(weights[t]) for t in terms]),
                                                 f"{name}.bias"))
            nodes.append(helper.make_node("Add", [last, f"{name}.bias"], [f"{name}.biased"], name=f"{name}/Add"))
            last = f"{name}.biased"
            outputs = [a.output[0] for a in adds]
            dropped |= set(terms)
            gone |= {position[id(a)] for a in adds}
        sizes = [a.shape[1] for a in arrays]
        if opset >= 13:
            inits.append(numpy_helper.from_array(np.asarray(sizes, np.int64), f"{name}.split"))
            nodes.append(helper.make_node("Split", [last, f"{name}.split"], outputs, name=f"{name}/Split", axis=-1))
        else:
            nodes.append(helper.make_node("Split", [last], outputs, name=f"{name}/Split", axis=-1, split=sizes))
        starts[indices[0]] = nodes      # where the first member was: its activation is ready, no reader yet ran
        new_inits += inits
        packed.append([m.name for m in members])
    if not packed:
        return packed
    rebuilt = []
    for index, node in enumerate(order):
        rebuilt += starts.get(index, [])
        if index not in gone:
            rebuilt.append(node)
    survivors = [i for i in graph.initializer if i.name not in dropped]
    del graph.node[:]
    graph.node.extend(rebuilt)
    del graph.initializer[:]
    graph.initializer.extend(survivors + new_inits)
    return packed
