"""Partial quantization: which nodes cost the most accuracy, so ``lighten`` can keep them in float.

The ranking matches activations, as onnxruntime's ``qdq_loss_debug`` does for
QDQ models, but works for any strategy that keeps tensor names: every weighted
node's output is exposed in the float model and in the quantized one, both
run on the same held-out inputs, and a node's score is the relative error it
*adds* (its output's error minus the worst error among its inputs), so error
inherited from upstream layers is not blamed on it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from ..ops import WEIGHTED_OPS

if TYPE_CHECKING:
    import numpy as np
    import onnx


@dataclass(frozen=True)
class NodeError:
    node: str
    op_type: str
    output_error: float
    added_error: float


def _relative_error(reference: list[np.ndarray], candidate: list[np.ndarray]) -> float:
    import numpy as np

    num = sum(float(np.sum((r.astype(np.float64) - c.astype(np.float64)) ** 2)) for r, c in zip(reference, candidate))
    den = sum(float(np.sum(r.astype(np.float64) ** 2)) for r in reference)
    return (num / den) ** 0.5 if den > 0 else 0.0


def _was_quantized(node: onnx.NodeProto, weights: Sequence[str], quant_nodes: Sequence[onnx.NodeProto],
                   quant_initializers: set[str]) -> bool:
    """Whether the quantizer rewrote ``node``, so that excluding it by name changes something.

    Quantizers keep the name as a prefix of what they put in its place (``X_quant``,
    ``X_MatMul_quant``) or keep the node and feed it dequantized weights (QDQ).
    A node that was fused away into another operator cannot be excluded by name.
    """
    prefix = node.name + "_"
    related = [q for q in quant_nodes if q.name == node.name or q.name.startswith(prefix)]
    if not related:
        return False
    untouched = any(q.name == node.name and q.op_type == node.op_type
                    and all(w in q.input and w in quant_initializers for w in weights) for q in related)
    return not untouched


def rank_nodes(float_model: str | os.PathLike[str], quantized_model: str | os.PathLike[str],
               feeds_list: Sequence[Mapping[str, np.ndarray]], threads: int | None = None) -> list[NodeError]:
    """Weighted nodes of ``float_model``, worst first, by the error they add in ``quantized_model``."""
    import numpy as np
    import onnx

    from ..activations import collect

    float_proto = onnx.load(str(float_model))
    quant_proto = onnx.load(str(quantized_model))
    initializers = {i.name for i in float_proto.graph.initializer}
    produced_in_quant = {o for n in quant_proto.graph.node for o in n.output} | {i.name for i in quant_proto.graph.input}
    float_types = {}
    for value in list(float_proto.graph.value_info) + list(float_proto.graph.output) + list(float_proto.graph.input):
        float_types[value.name] = value.type.tensor_type.elem_type

    quant_initializers = {i.name for i in quant_proto.graph.initializer}
    quant_nodes = list(quant_proto.graph.node)
    nodes = []
    for node in float_proto.graph.node:
        if node.op_type not in WEIGHTED_OPS or not node.name or not node.output:
            continue
        weights = [i for i in node.input if i in initializers]
        if not weights or not _was_quantized(node, weights, quant_nodes, quant_initializers):
            continue
        out = node.output[0]
        if out not in produced_in_quant:
            continue
        activations = [i for i in node.input if i and i not in initializers and i in produced_in_quant]
        nodes.append((node, out, activations))
    if not nodes:
        return []
    names = list(dict.fromkeys([out for _, out, _ in nodes] + [a for _, _, acts in nodes for a in acts]))
    # Integer tensors (ids, shapes) carry no rounding error worth ranking.
    names = [n for n in names if float_types.get(n, onnx.TensorProto.FLOAT) in (onnx.TensorProto.FLOAT,
                                                                                  onnx.TensorProto.FLOAT16)]
    reference = collect(float_proto, names, feeds_list, threads)
    candidate = collect(quant_proto, names, feeds_list, threads)
    errors = {n: _relative_error(reference[n], candidate[n]) for n in names}
    ranked = []
    for node, out, activations in nodes:
        if out not in errors:
            continue
        inherited = max((errors.get(a, 0.0) for a in activations), default=0.0)
        ranked.append(NodeError(node.name, node.op_type, errors[out], errors[out] - inherited))
    ranked.sort(key=lambda e: (-e.added_error, -e.output_error))
    return [e for e in ranked if np.isfinite(e.added_error)]


def exclusion_steps(count: int, limit: int | None = None) -> list[int]:
    """How many of the worst nodes to keep in float at each step: 1, 2, 4, 8, ... up to ``count``."""
    steps, k = [], 1
    top = min(count, limit or count)
    while k < top:
        steps.append(k)
        k *= 2
    if top:
        steps.append(top)
    return steps


def feeds_for_ranking(feeds: Mapping[str, np.ndarray], batch: int = 16, max_batches: int = 4) -> list[dict]:
    """The first ``max_batches`` batches of the held-out inputs (ranking needs a sample, not all of them)."""
    from ..data import Dataset

    return list(Dataset(dict(feeds)).take(batch * max_batches).batches(batch))


# -- the fallback itself --------------------------------------------------------------------------------

def fallback(state: Any, max_float_nodes: int | None, workers: int | None) -> None:
    """Repair an over-budget candidate by keeping its worst nodes in float (the rule: search.evidence.fallback_base)."""
    from ..registry import get_registry
    from .candidates import Candidate, exclude_option
    from .evidence import fallback_base, sweep_ranking

    registry = get_registry()
    primary = state.judge.primary
    budget = state.judge.budgets.get(primary) or 0.0
    base_row, why = fallback_base(state.rows, primary, budget,
                                  lambda strategy: exclude_option(registry.get("quantizer", strategy).spec))
    if base_row is None:
        state.partial = {"tried": False, "reason": why}
        return
    spec = registry.get("quantizer", base_row.strategy).spec
    state.emit("stage", {"message": f"{why}; ranking nodes of {base_row.name} by the error they add"})
    # rank on the select part only: the confirm part judges the repaired model
    select = state.judge.parts.select if state.judge.parts else None
    feeds = {k: v[list(select)] for k, v in state.judge.feeds.items()} if select else state.judge.feeds
    ranked = rank_nodes(state.fp32, base_row.path, feeds_for_ranking(feeds), state.settings.threads)
    state.partial = {"tried": True, "base": base_row.name, "why": why, "ranking": [asdict(r) for r in ranked[:20]],
                     "ranked_by": "activations", "steps": []}
    if not ranked:
        state.partial["reason"] = "no node outputs could be matched between the float and quantized models"
        return
    base = Candidate(base_row.name, base_row.strategy, dict(base_row.options))
    # Keeping every node in float would just be the float model again: stop at half of them.
    limit = max_float_nodes or max(1, len(ranked) // 2)
    order = [r.node for r in ranked]
    if _keep_worst(state, base, spec, order, limit, workers, "activations"):
        return
    # Activation matching ranked badly (its worst nodes in float did not reach the budget): measure each
    # node's own drop directly and try again in that order.
    # The sweep covers every node the written model really has quantized (onnxlite.claims), not only the ones
    # whose activations could be matched.
    import onnx

    from ..claims import node_states

    states = node_states(onnx.load(str(state.fp32), load_external_data=False),
                         onnx.load(str(base_row.path), load_external_data=False))
    nodes = [n for n, quantized in states.items() if quantized] or order
    rank = state.evidence["rank_metric"]
    swept = sweep_ranking(state, base, spec, nodes, workers, rank)
    state.partial["sweep"] = swept[:20]
    state.partial["ranked_by"] = f"direct sweep ({rank} on the select part)"
    _keep_worst(state, base, spec, [e["node"] for e in swept], max_float_nodes or max(1, len(nodes) // 2), workers,
                "sweep", tried={tuple(sorted(order[:k])) for k in exclusion_steps(len(order), limit)})


def _keep_worst(state: Any, base, spec, order, limit, workers, ranking, tried=frozenset()) -> bool:
    """Keep the first 1, 2, 4... nodes of ``order`` in float until a candidate passes (skipping sets already tried)."""
    from .candidates import with_keep_float

    primary = state.judge.primary
    for k in exclusion_steps(len(order), limit):
        if tuple(sorted(order[:k])) in tried:
            continue
        candidate = with_keep_float(base, spec, order[:k])
        state.emit("stage", {"message": f"keeping the {k} worst node(s) in float (ranked by {ranking})"})
        row = state.run_candidates(workers, [candidate])[0]
        state.partial["steps"].append({"keep_float": k, "name": row.name, "status": row.status,
                                       "drop": row.drops.get(primary), "ranked_by": ranking})
        if row.status == "ok":
            return True
    return False
