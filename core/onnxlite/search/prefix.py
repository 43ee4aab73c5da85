"""What the partial fallback probes: a float prefix of the graph, or the worst nodes of a ranking, kept in float.

:func:`float_prefix` keeps the start of the graph in float, up to its k-th weighted node;
:func:`keep_worst` keeps the first 1, 2, 4 ... nodes of a ranked order in float.  Both probe on the judge
they are given (the select part's, :meth:`onnxlite.search.context.SearchContext.select_judge`) and return what
passed.

Most of a CNN's quantization error enters at the input end (the stem and the first blocks see the widest
activation ranges), and keeping *scattered* nodes in float does not help a QDQ model: onnxruntime's
``WeightBiasQuantization`` pass gives a float Conv that reads a DequantizeLinear int8 weights again.  A prefix
avoids both: every node before the k-th weighted node (the Clips, Adds and Muls too) stays float, so its convs
read float input.  The smallest k whose drop on the select part is within the budget is found by a k-ary
search (as many probes at once as run in parallel), within the fallback's time bound
(docs/lighten.md, "The fallback rule").  On a CNN (EfficientNet-Lite0, per-channel QDQ int8) a float stem
and first blocks recover most of the drop while the model stays several times smaller than fp32.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any

from .context import passes

if TYPE_CHECKING:
    from .candidates import Candidate
    from .context import Repair, SearchContext

#: the most float bytes a float prefix may keep: this share of what the weighted nodes the base quantized hold
PREFIX_SHARE = 0.5


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


def prefixes(model: Any, weighted: Sequence[str], written: Any = None) -> list[list[str]]:
    """For each node of ``weighted``, in graph order, every named node up to it: the k-th is the prefix of k.

    With ``written`` (the base's quantized model), the other nodes are named only where the base quantized
    them too: they read a DequantizeLinear (QDQ) or were replaced by ``NAME_...`` (QOperator).  An exclusion
    must name a node the strategy can quantize: static's pre-processing folds some away (a ``Shape``),
    dynamic accepts only MatMul/Gemm names, and a node nobody quantized needs no keeping.
    """
    wanted, found, names = set(weighted), [], []
    touched = None if written is None else _quantized_by(written)

    for node in model.graph.node:
        if node.name and (touched is None or node.name in wanted or node.name in touched):
            names.append(node.name)
        if node.name in wanted:
            found.append(list(names))
    return found


def _quantized_by(written: Any) -> set[str]:
    """Names of the nodes a written model quantized: QDQ nodes reading a DequantizeLinear, and replaced ones."""
    produced = {o: n.op_type for n in written.graph.node for o in n.output}
    held = {n.name for n in written.graph.node if n.name}
    from ..ops import QDQ_OPS

    reads_dq = {n.name for n in written.graph.node if n.op_type not in QDQ_OPS
                and any(produced.get(i) == "DequantizeLinear" for i in n.input)}
    replaced = set()
    for name in held:
        head, sep, _ = name.rpartition("_")
        while sep and head:
            if head not in held:
                replaced.add(head)
            head, sep, _ = head.rpartition("_")
    return reads_dq | replaced


def float_bytes(model: Any, nodes: Sequence[str], sizes: dict[str, int] | None = None) -> int:
    """Bytes of the float initializers ``nodes`` read (what keeping them in float costs; from dims, no data loaded).

    ``sizes``: :func:`float_sizes` of ``model``, for a caller asking about many node sets of one model.
    """
    wanted = set(nodes)
    sizes = float_sizes(model) if sizes is None else sizes
    read = {i for n in model.graph.node if n.name in wanted for i in n.input if i in sizes}
    return int(sum(sizes[i] for i in read))


def float_sizes(model: Any) -> dict[str, int]:
    """Bytes of each float initializer of ``model``, by name."""
    from onnx import TensorProto, helper

    return {i.name: math.prod(i.dims) * helper.tensor_dtype_to_np_dtype(i.data_type).itemsize
            for i in model.graph.initializer if i.data_type in (TensorProto.FLOAT, TensorProto.FLOAT16,
                                                                TensorProto.DOUBLE)}


def prefix_limit(model: Any, cuts: Sequence[Sequence[str]], weighted: Sequence[str]) -> int:
    """The longest prefix whose float weights are at most :data:`PREFIX_SHARE` of all the weighted nodes' (at least 1).

    A CNN's first layers are light (EfficientNet-Lite0's stem and blocks 0-8 hold 27 of its 50 weighted
    nodes and a small share of its weights), so the limit is on bytes, not on the count of nodes.
    """
    sizes = float_sizes(model)   # once: a CNN has about 50 cuts
    total = float_bytes(model, weighted, sizes)
    fits = [k for k, cut in enumerate(cuts, 1) if _cost(model, cut, weighted, sizes) <= PREFIX_SHARE * total]
    return max(fits, default=1)


def _cost(model: Any, cut: Sequence[str], weighted: Sequence[str], sizes: dict[str, int] | None = None) -> int:
    """What keeping ``cut`` float costs: the weights of its nodes the base quantized (the others stay float anyway:
    a transformer's embedding tables, which dynamic int8 leaves alone, would otherwise outweigh every MatMul)."""
    wanted = set(weighted)
    return float_bytes(model, [n for n in cut if n in wanted], sizes)


def float_prefix(ctx: SearchContext, repair: Repair, weighted: Sequence[str], limit: int | None,
                 log: dict[str, Any], written: str | None = None) -> dict[str, Any] | None:
    """The smallest prefix (of at most ``limit`` weighted nodes) whose probe passes on ``repair.judge``, or None.

    Without ``limit``, the prefix may keep up to :data:`PREFIX_SHARE` of the weighted nodes' float bytes
    (:func:`prefix_limit`).  The probe at the limit comes first: when it fails, no shorter prefix passes
    (the drop falls as the prefix grows, near enough) and the repair costs that one probe.  Each later
    round probes up to ``parallel`` points between the longest failing and the shortest passing prefix,
    while the time bound allows a round (``repair.clock``, at the base's own quantize-and-judge cost).
    ``written``: the path of the base's quantized model (:func:`prefixes`); ``log``: the fallback's record.
    """
    from dataclasses import replace

    import onnx

    from .candidates import with_keep_float

    base, spec, parallel = repair.base, repair.spec, repair.parallel
    model = onnx.load(str(ctx.fp32), load_external_data=False)
    cuts = prefixes(model, weighted, onnx.load(str(written), load_external_data=False) if written else None)
    if not cuts:
        return None
    cuts = cuts[:max(1, limit or prefix_limit(model, cuts, weighted))]
    record = log.setdefault("prefix", {"base": base.name, "weighted_nodes": len(weighted),
                                                 "limit": len(cuts), "probes": []})
    where = ctx.probed_on()
    primary = ctx.primary
    lo, hi, passing = 0, None, None   # the longest prefix known to fail; the shortest known to pass
    points = [len(cuts)]
    while points:
        ctx.emit("stage", {"message": f"keeping a float prefix of {base.name} in float: the first "
                                        f"{', '.join(map(str, points))} weighted node(s) and every node before "
                                        f"(judged on {where})"})
        probes = [replace(with_keep_float(base, spec, cuts[k - 1]), name=f"{base.name}+prefix{k}") for k in points]
        results = ctx.probe(probes, repair.workers, f"float prefix of {base.name}", judge=repair.judge)
        for k, probe, result in zip(points, probes, results):
            ok = passes(result)
            record["probes"].append({"k": k, "nodes": len(cuts[k - 1]), "passed": ok, "status": result.status,
                                     "drop": result.drops.get(primary)}
                                    | ({"error": result.error} if result.error else {}))
            if ok and (hi is None or k < hi):
                hi, passing = k, probe
            elif not ok and k > lo and (hi is None or k < hi):
                lo = k
        if hi is None or hi - lo <= 1 or repair.clock.probes(repair.cost, parallel=False) < 1:
            break
        step = (hi - lo) / (min(parallel, hi - lo - 1) + 1)
        points = sorted({min(hi - 1, max(lo + 1, int(round(lo + step * (i + 1)))))
                         for i in range(min(parallel, hi - lo - 1))})
    if passing is None or hi is None:   # hi is set whenever a prefix passed
        record["result"] = f"no prefix of up to {len(cuts)} weighted node(s) passes on {where}"
        return None
    nodes = cuts[hi - 1]
    record |= {"k": hi, "nodes": len(nodes), "float_bytes": _cost(model, nodes, weighted),
               "last": cuts[hi - 1][-1], "exact": hi - lo <= 1}
    return {"candidate": passing, "k": hi, "float_bytes": record["float_bytes"]}


def keep_worst(ctx: SearchContext, repair: Repair, order: Sequence[str], limit: int, ranking: str,
               log: dict[str, Any], tried: Collection[tuple[str, ...]] = frozenset(),
               max_bytes: int | None = None) -> tuple[Candidate | None, Candidate | None]:
    """The first 1, 2, 4... nodes of ``order`` kept in float, probed on ``repair.judge`` until one passes.

    Returns (the candidate that passed or None, the last one probed).  Sets already ``tried`` are
    skipped; with ``max_bytes``, the steps stop at the first set keeping that many float bytes or
    more (a repair no lighter than one already found).  Each step is noted in ``log["steps"]``.
    """
    import onnx

    from .candidates import with_keep_float

    base, spec, primary = repair.base, repair.spec, ctx.primary
    model = onnx.load(str(ctx.fp32), load_external_data=False) if max_bytes is not None else None
    sizes = float_sizes(model) if model is not None else None
    last = None
    for k in exclusion_steps(len(order), limit):
        if tuple(sorted(order[:k])) in tried:
            continue
        candidate = with_keep_float(base, spec, order[:k])
        if model is not None and max_bytes is not None and float_bytes(model, order[:k], sizes) >= max_bytes:
            log["steps"].append({"keep_float": k, "name": candidate.name, "status": "not tried",
                                           "drop": None, "ranked_by": ranking,
                                           "reason": "no lighter than the float prefix that passed"})
            break
        ctx.emit("stage", {"message": f"keeping the {k} worst node(s) of {base.name} in float (ranked by {ranking})"})
        result = ctx.probe([candidate], repair.workers, candidate.name, repair.judge)[0]
        ok = passes(result)
        log["steps"].append({"keep_float": k, "name": candidate.name,
                                       "status": "ok" if ok else "failed" if result.status == "failed" else "rejected",
                                       "drop": result.drops.get(primary), "ranked_by": ranking,
                                       # why a step with a small drop still failed (its bound, another metric)
                                       "reason": result.error if result.status == "failed"
                                       else "; ".join(result.failures)})
        last = candidate
        if ok:
            return candidate, last
    return None, last


def keep_worst_confirmed(ctx: SearchContext, repair: Repair, order: Sequence[str], limit: int, ranking: str,
                         log: dict[str, Any], **options: Any) -> tuple[Candidate | None, Candidate | None, bool]:
    """:func:`keep_worst`, each count that passes on the select part judged on the confirm part; when the
    confirm part refuses it, on to the next larger count while the fallback's clock has room.

    A repair one count short of the budget (its bound just over it with 4 nodes in float) is worth the
    8-node probe, not "nothing qualifies".  Returns (the last
    candidate that passed on the select part or None, the last one probed, whether it was confirmed).
    """
    after, last = 0, None
    tried = set(options.pop("tried", ()))
    while True:
        # counts up to the one the confirm part refused count as tried: the next probe keeps more in float
        tried |= {tuple(sorted(order[:k])) for k in range(1, after + 1)}
        found, probed = keep_worst(ctx, repair, order, limit, ranking, log, tried=tried, **options)
        last = probed or last
        if found is None:
            return None, last, False
        if ctx.confirm(found, ranking, repair.workers, log):
            return found, last, True
        after = len(found.keep_float)
        # the next probe and its confirmation must fit
        if after >= limit or repair.clock.probes(repair.cost, parallel=False) < 2:
            log.setdefault("stopped", []).append(
                {"after": found.name, "reason": "the confirm part refused it, and no larger count fits in what is "
                                                "left of the fallback's time" if after < limit else
                                                "the confirm part refused it at the most nodes kept in float"})
            return found, last, False
