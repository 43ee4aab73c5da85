"""Partial quantization: which nodes cost the most accuracy, so ``lighten`` can keep them in float.

The ranking matches activations, as onnxruntime's ``qdq_loss_debug`` does for
QDQ models, but works for any strategy that keeps tensor names: every weighted
node's output is exposed in the float model and in the quantized one, both
run on the same held-out inputs, and a node's score is the relative error it
*adds* (its output's error minus the worst error among its inputs), so error
inherited from upstream layers is not blamed on it.

The fallback tries a float prefix first (:mod:`onnxlite.search.prefix`), then this ranking, then a
direct sweep; its probes are judged on the select part alone and the repair chosen on the confirm part.

The fallback's cost is bounded by the model's own cost (docs/lighten.md, "The
fallback rule"): each probe costs about what the base candidate's own task
took, so the bases tried and the nodes a direct sweep measures are what fits
in :data:`FALLBACK_SECONDS`; activations are compared a memory-sized batch at
a time, never held for every sample.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from ..ops import WEIGHTED_OPS
from .context import Clock, Repair, probe_drop

if TYPE_CHECKING:
    import numpy as np
    import onnx

    from .context import SearchContext
    from .fallback_rule import Fast
    from .results import CandidateRow

#: over-budget candidates within this fraction of the rule's base size are bases too, the smallest select drop
#: first: near-equal sizes make the size no reason to repair the harder one (on the PP-OCR detector the
#: all-ops QOperator int8 is 3% smaller than the Conv-only QDQ one, but keeping its nodes in float never moved
#: its drop, while 8 float convs bring the Conv-only one within budget)
BASE_SIZE_SLACK = 0.10
#: the most bases whose worst nodes are kept in float before a direct sweep
MAX_BASES = 3
#: wall-clock seconds the fallback's probes may take (estimated at the base's own quantize-and-judge time)
FALLBACK_SECONDS = 600.0
#: a direct sweep measures at least this many nodes however slow one probe is
SWEEP_MIN_NODES = 4
#: share of the memory available that one ranking batch's exposed tensors (both models) may take
RANKING_MEMORY_SHARE = 0.25
#: the most nodes a direct sensitivity sweep quantizes one by one
SWEEP_MAX_NODES = 64
#: held-out samples the activation ranking looks at, at most, and the most in one batch
RANKING_SAMPLES = 64
RANKING_BATCH = 16


@dataclass(frozen=True)
class NodeError:
    node: str
    op_type: str
    output_error: float
    added_error: float


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
               feeds_list: Sequence[Mapping[str, np.ndarray]], threads: int | None = None,
               axes: Mapping[str, int | None] | None = None) -> list[NodeError]:
    """Weighted nodes of ``float_model``, worst first, by the error they add in ``quantized_model``.

    ``axes`` gives each input's sample axis (default 0), so the feeds can be cut into batches that fit memory.
    """
    import numpy as np
    import onnx

    float_proto = onnx.load(str(float_model))
    quant_proto = onnx.load(str(quantized_model))
    initializers = {i.name for i in float_proto.graph.initializer}
    produced_in_quant = ({o for n in quant_proto.graph.node for o in n.output}
                         | {i.name for i in quant_proto.graph.input})
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
    errors = relative_errors(float_proto, quant_proto, names, feeds_list, threads, axes)
    ranked = []
    for node, out, activations in nodes:
        if out not in errors:
            continue
        inherited = max((errors.get(a, 0.0) for a in activations), default=0.0)
        ranked.append(NodeError(node.name, node.op_type, errors[out], errors[out] - inherited))
    ranked.sort(key=lambda e: (-e.added_error, -e.output_error))
    return [e for e in ranked if np.isfinite(e.added_error)]


def relative_errors(float_proto: Any, quant_proto: Any, names: Sequence[str],
                    feeds_list: Sequence[Mapping[str, np.ndarray]], threads: int | None = None,
                    axes: Mapping[str, int | None] | None = None) -> dict[str, float]:
    """``||float - quantized|| / ||float||`` of each tensor in ``names`` over every sample of ``feeds_list``.

    Both models run side by side on the same batch and only the sums are kept, so memory holds one
    batch's tensors, never every sample's (a detector at 480x640 exposes hundreds of MB per image).
    The first batch is a single sample; it measures the bytes a sample exposes, and the later
    batches hold as many samples as fit :data:`RANKING_MEMORY_SHARE` of the memory available
    (at most :data:`RANKING_BATCH`).  Dynamic int8 scales activations per batch, so its figures
    move a little with the batching; a ranking needs the order, not the third digit.
    """
    import itertools

    import numpy as np

    from ..activations import iter_activations
    from ..inputs import available_memory

    sums = {n: [0.0, 0.0] for n in names}
    cut = {"rows": 1, "last": 0}   # samples per batch; samples in the batch just cut
    budget = (available_memory() or 4 * 2**30) * RANKING_MEMORY_SHARE
    # tee hands both sessions the same batch; each batch is cut only after the previous one was measured
    for_float, for_quant = itertools.tee(_pieces(feeds_list, cut, axes))
    reference = iter_activations(float_proto, names, for_float, threads)
    candidate = iter_activations(quant_proto, names, for_quant, threads)
    for ref, cand in zip(reference, candidate):
        used = 0
        for name in names:
            r, c = ref[name], cand[name]
            used += r.nbytes + c.nbytes
            diff = r.astype(np.float64) - c.astype(np.float64)
            sums[name][0] += float(np.sum(diff * diff))
            sums[name][1] += float(np.sum(np.square(r, dtype=np.float64)))
        cut["rows"] = max(1, min(RANKING_BATCH, int(budget // max(1, used // max(1, cut["last"])))))
    return {n: (num / den) ** 0.5 if den > 0 else 0.0 for n, (num, den) in sums.items()}


def _pieces(feeds_list: Sequence[Mapping[str, np.ndarray]], cut: dict[str, int],
            axes: Mapping[str, int | None] | None) -> Iterator[dict[str, np.ndarray]]:
    """The feeds cut into batches of ``cut["rows"]`` samples (read anew for every batch; ``cut["last"]`` says how
    many)."""
    from ..data.dataset import count_rows, take_rows

    for feeds in feeds_list:
        total, start = count_rows(feeds, axes), 0
        while start < total:
            stop = min(total, start + max(1, cut["rows"]))
            cut["last"] = stop - start
            yield take_rows(feeds, start, stop, axes)
            start = stop


def feeds_for_ranking(feeds: Mapping[str, np.ndarray], axes: Mapping[str, int | None] | None = None,
                      samples: int = RANKING_SAMPLES) -> list[dict[str, np.ndarray]]:
    """The first ``samples`` held-out samples (ranking needs a sample, not all of them), cut on each input's axis."""
    from ..data.dataset import take_rows

    return [take_rows(feeds, 0, samples, axes)]


# -- which candidates to repair ------------------------------------------------------------------------

def _select_drop(row: CandidateRow, rank: str) -> float:
    value = (row.select_drops or {}).get(rank, row.drops.get(rank))
    return value if value is not None and math.isfinite(value) else math.inf


def fallback_bases(rows: Sequence[CandidateRow], primary: str, budget: float, can_exclude: Callable[[str], bool],
                   rank: str | None = None, fast: Fast | None = None) -> tuple[list[CandidateRow], str]:
    """The over-budget candidates to repair, in order, and why (``([], reason)`` when none is worth it).

    The first is :func:`~onnxlite.search.fallback_rule.fallback_base`'s.  When it is within 3x of the
    budget, the next ones that rule would pick are bases too while their size stays within
    :data:`BASE_SIZE_SLACK` of it (at most :data:`MAX_BASES`); all of them are then ordered by their
    drop on the select part, so the one with the least to repair is tried first.
    """
    from .fallback_rule import fallback_base

    first, why = fallback_base(rows, primary, budget, can_exclude, fast)
    if first is None:
        return [], why
    bases = [first]
    if first.drops[primary] <= 3 * budget:
        remaining = [r for r in rows if r is not first]
        while len(bases) < MAX_BASES:
            found, _ = fallback_base(remaining, primary, budget, can_exclude, fast)
            if found is None or found.drops[primary] > 3 * budget \
                    or (found.size_bytes or 0) > (first.size_bytes or 0) * (1 + BASE_SIZE_SLACK):
                break
            bases.append(found)
            remaining = [r for r in remaining if r is not found]
    bases.sort(key=lambda r: (_select_drop(r, rank or primary), r.size_bytes or 0))
    if len(bases) > 1:
        why += (f"; {len(bases)} bases within {BASE_SIZE_SLACK:.0%} of the lightest one's size, the smallest "
                f"{rank or primary} drop on the select part first: " + ", ".join(r.name for r in bases))
    return bases, why


def can_exclude(strategy: str) -> bool:
    """The strategy declares an option that keeps nodes in float (``QuantizerSpec.exclude_option``)."""
    from ..registry import get_registry
    from .candidates import exclude_option

    return bool(exclude_option(get_registry().get("quantizer", strategy).spec))


# -- the fallback itself --------------------------------------------------------------------------------

def fallback(ctx: SearchContext, rows: Sequence[CandidateRow], fast: Fast, max_float_nodes: int | None,
             workers: int | None) -> dict[str, Any]:
    """Repair an over-budget candidate by keeping nodes in float (docs/lighten.md); returns the stage's record
    (``tried``, its bases, steps, probes and ``seconds``); the repairs confirmed are rows of the table."""
    started = time.monotonic()
    log = _repair(ctx, rows, fast, max_float_nodes, workers)
    if log.get("tried"):
        log["seconds"] = round(time.monotonic() - started, 1)
    return log


def _repair(ctx: SearchContext, rows: Sequence[CandidateRow], fast: Fast, max_float_nodes: int | None,
            workers: int | None) -> dict[str, Any]:
    """A float prefix, then the activation ranking, then a direct sweep, on each base in turn.

    Every probe is judged on the select part alone (:meth:`~onnxlite.search.context.SearchContext.select_judge`);
    the repair a ranking chooses is then judged like any candidate, its figures and verdict the confirm part's.
    """
    from ..jobs.candidate import default_workers
    from ..registry import get_registry
    from .candidates import Candidate
    from .prefix import exclusion_steps, float_prefix, keep_worst_confirmed

    registry = get_registry()
    rank = ctx.rank
    # speed measured early (search.quick): a base slower than fp32 here is not worth repairing for latency
    bases, why = fallback_bases(rows, ctx.primary, ctx.budget, can_exclude, rank, fast)
    if not bases:
        return {"tried": False, "reason": why}
    parallel = workers or default_workers(_file_size(ctx.fp32))
    # its time share: FALLBACK_SECONDS, or what is left of the search's --time-budget if that is less
    clock = Clock(min(FALLBACK_SECONDS, ctx.trials.budget.left()), parallel)
    # rank on the select part only (the confirm part judges the repair), on what the primary metric judges
    from ..evaluation.intervals import judged_rows

    select = judged_rows(ctx.judge, ctx.primary, ctx.judge.parts.select if ctx.judge.parts else None)
    axes = ctx.judge.batch_axes or None
    feeds = ctx.judge.feeds
    if select:
        from ..data.dataset import pick_rows

        feeds = pick_rows(feeds, select, axes)
    probe_judge = ctx.select_judge()
    log: dict[str, Any] = {"tried": True, "why": why, "bases": [r.name for r in bases], "base": bases[0].name,
                           "steps": [], "budget_seconds": FALLBACK_SECONDS, "probes_judged_on": ctx.probed_on()}
    first = None   # (row, spec, ranking, its quantized nodes) of the first base whose nodes could be ranked:
    #                the sweep's base
    closest = None   # the first base's heaviest activation step: judged on the confirm part if nothing passes
    for index, base_row in enumerate(bases):
        cost = max(base_row.quantize_seconds or 0.0, 1e-3)
        # another base costs its prefix probe and about one quantize-and-judge per doubling step (1, 2, 4 ...)
        steps = 1 + (len(exclusion_steps(max(1, len(first[2]) // 2))) if first else 1)
        if index and clock.probes(cost, parallel=False) < steps:
            log.setdefault("skipped_bases", []).append(
                {"name": base_row.name, "reason": f"its {steps} steps (~{cost:.0f} s each) do not fit in what is left "
                                                  f"of the fallback's {FALLBACK_SECONDS:.0f} s"})
            continue
        spec = registry.get("quantizer", base_row.strategy).spec
        repair = Repair(Candidate(base_row.name, base_row.strategy, dict(base_row.options)), spec, probe_judge,
                        workers, clock, cost, parallel)
        path = str(base_row.path)
        weighted = _quantized_nodes(ctx.fp32, path)   # the prefix's and the sweep's nodes
        ctx.emit("stage", {"message": f"{why if not index else 'next base'}; "
                                      f"trying a float prefix of {base_row.name}"})
        prefix = float_prefix(ctx, repair, weighted, max_float_nodes, log, path) if weighted else None
        repaired = [] if prefix is None or not ctx.confirm(prefix["candidate"], "float prefix", workers, log) \
            else ["float prefix"]
        ctx.emit("stage", {"message": f"ranking nodes of {base_row.name} by the error they add"})
        ranked = rank_nodes(ctx.fp32, path, feeds_for_ranking(feeds, axes), ctx.settings.threads, axes)
        if ranked:
            if first is None:
                first = (base_row, spec, ranked, weighted)
            log |= {"base": base_row.name, "ranking": [asdict(r) for r in ranked[:20]]}
            # Keeping every node in float would just be the float model again: stop at half of them; after a
            # prefix that passed, only repairs keeping fewer float bytes than it are worth a probe.
            found, last, confirmed = keep_worst_confirmed(
                ctx, repair, [r.node for r in ranked], max_float_nodes or max(1, len(ranked) // 2), "activations",
                log, max_bytes=prefix["float_bytes"] if repaired and prefix else None)
            closest = closest or last
            if confirmed:
                repaired.append("activations")
        if repaired:
            # the last one is the lightest (the activation ranking only probes lighter repairs than the prefix)
            return log | {"base": base_row.name, "ranked_by": repaired[-1], "repairs": repaired}
    if first is None:
        return log | {"reason": "no node outputs could be matched between the float and quantized models"}
    # Activation matching ranked badly (its worst nodes in float did not reach the budget): measure each
    # node's own drop directly, on the first base (the least to repair), and try again in that order.
    base_row, spec, ranked, weighted = first
    log |= {"base": base_row.name, "ranking": [asdict(r) for r in ranked[:20]]}
    cost = max(base_row.quantize_seconds or 0.0, 1e-3)
    repair = Repair(Candidate(base_row.name, base_row.strategy, dict(base_row.options)), spec, probe_judge,
                    workers, clock, cost, parallel)
    order = [r.node for r in ranked]
    # The sweep covers every node the written model really has quantized (onnxlite.claims), not only the ones
    # whose activations could be matched; the suspects (activation order) are measured first.
    nodes = weighted or order
    suspects = [n for n in order if n in nodes] + [n for n in nodes if n not in order]
    swept, measured = _measure_sweep(ctx, repair, str(base_row.path), nodes, suspects, log)
    log["sweep"] = swept[:20]
    resorted = [e["node"] for e in swept] + [n for n in suspects if n not in measured]
    found, _, _ = keep_worst_confirmed(ctx, repair, resorted, max_float_nodes or max(1, len(nodes) // 2), "sweep",
                                       log, tried={tuple(sorted(order[:k])) for k in exclusion_steps(
                                           len(order), max_float_nodes or max(1, len(order) // 2))})
    if found is None and closest is not None:
        # nothing passed: the activation ranking's heaviest attempt is judged as a row (the table shows how far it got)
        ctx.confirm(closest, "activations", workers, log, closest=True)
    return log


def _measure_sweep(ctx: SearchContext, repair: Repair, base_path: str, nodes: Sequence[str],
                   suspects: Sequence[str], log: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """Each node's own drop on the select part, worst first, and the nodes measured (noted in ``log``).

    A QDQ base: ``compare --per-node``'s own measurement (:func:`~onnxlite.evaluation.per_node.drops_alone`:
    each node with only its own Q/DQ kept, nothing quantized again), one judged run a node, so every node fits.
    Any other base (dynamic, QOperator): each node quantized alone again (:func:`sweep`), as many as fit.
    """
    from ..evaluation.per_node import drops_alone
    from ..jobs.candidate import load_judge

    rank, clock, cost, parallel = ctx.rank, repair.clock, repair.cost, repair.parallel
    ctx.emit("stage", {"message": f"sensitivity sweep of {repair.base.name}: each node's own drop"})
    judge = load_judge(repair.judge, ctx.settings.to_dict())
    alone = drops_alone(ctx.fp32, base_path, judge, suspects, rank, seconds=max(0.0, clock.left()))
    if alone is not None:
        log |= {"sweep_budget": {"nodes": len(nodes), "measured": len(alone)},
                "ranked_by": f"per-node drops, as compare --per-node ({rank} on {ctx.probed_on()})"}
        return alone, [e["node"] for e in alone]
    fits = clock.probes(cost)
    measured = list(suspects[:max(min(SWEEP_MIN_NODES, len(suspects)), min(fits, SWEEP_MAX_NODES))])
    log["sweep_budget"] = {"nodes": len(nodes), "measured": len(measured), "seconds_per_probe": cost,
                           "parallel": parallel, "seconds_left": round(max(0.0, clock.left()), 1)}
    if len(measured) < len(nodes):
        ctx.emit("note", {"message": f"the sensitivity sweep measures {len(measured)} of {len(nodes)} nodes "
                                     f"(about {cost:.0f} s a probe, {parallel} at a time, within the fallback's "
                                     f"{FALLBACK_SECONDS:.0f} s); the activation ranking's suspects first"})
    log["ranked_by"] = f"direct sweep ({rank} on {ctx.probed_on()})"
    return sweep(ctx, repair, nodes, measured, rank), measured


def _file_size(path: str | os.PathLike[str]) -> int:
    from ..modelio import model_size

    try:
        return int(model_size(path))
    except Exception:  # noqa: BLE001 - an estimate for the worker count only
        return 0


def _quantized_nodes(float_model: str | os.PathLike[str], quantized_model: str | os.PathLike[str]) -> list[str]:
    import onnx

    from ..claims import node_states

    # at run time: a float conv onnxruntime re-quantizes at session start is quantized where it matters
    states = node_states(onnx.load(str(float_model), load_external_data=False),
                         onnx.load(str(quantized_model), load_external_data=False), at_runtime=True)
    return [n for n, quantized in states.items() if quantized]


def sweep(ctx: SearchContext, repair: Repair, nodes: Sequence[str], measured: Sequence[str],
          rank: str) -> list[dict[str, Any]]:
    """Each node of ``measured`` quantized alone (every other node of ``nodes`` kept float), worst first,
    probed on ``repair.judge`` (the select part's)."""
    from .candidates import Candidate, exclude_option, with_keep_float

    base, spec = repair.base, repair.spec
    probes = []
    for node in measured:
        probe = with_keep_float(base, spec, [n for n in nodes if n != node])
        probes.append(Candidate(f"{base.name}[only {node}]", probe.strategy, dict(probe.options), probe.keep_float))
    results = ctx.probe(probes, repair.workers, f"sensitivity sweep of {base.name} ({exclude_option(spec)})",
                        repair.judge)
    ranked: list[dict[str, Any]] = [{"node": node, "drop": probe_drop(r, rank)} for node, r in zip(measured, results)]
    ranked.sort(key=lambda e: -e["drop"] if math.isfinite(e["drop"]) else -math.inf)
    return ranked
