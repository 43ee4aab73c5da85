"""How ``lighten`` weighs its evidence: confidence, selection, the fallback rule, sensitivity sweeps, mixed precision.

- **Confidence.** The held-out samples are cut into a *select* part and a
  disjoint *confirm* part.  A candidate passes when the one-sided upper bound
  of its drop on the confirm part, at ``confidence``, is within the budget.
  Before any quantizing, a budget on a rate metric (agreement, accuracy) that
  the confirm part cannot resolve is announced in one line with the samples it
  would need; that budget is then held to the measured drop and candidates are
  ranked by a continuous companion (logit cosine) instead.
- **Selection.** Candidates of one strategy that differ only in options that
  leave the size alone (smoothquant's alpha, static's calibration method) are
  an option grid: the one with the smallest drop on the *select* part stays,
  the others are set aside.  The figures reported are the confirm part's.
- **Fallback.** Partial quantization repairs a light over-budget candidate that
  is not slower than fp32 here (quick timing, :mod:`onnxlite.search.quick`).  A
  float prefix is tried first, then nodes ranked by activation matching, then a
  direct sweep.  Every probe gets the select part's judge only
  (:func:`select_judge`); the confirm samples judge the repair chosen (:func:`confirm`).
- **Mixed precision.** Each weighted node gets its own scheme from a sweep of
  per-node, per-scheme drops, planned under the budget (:mod:`onnxlite.mixed_plan`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from .candidates import Candidate
    from .results import CandidateRow

#: the held-out samples below which there is no select/confirm split (all of them confirm)
MIN_SPLIT = 8
#: "clearly lighter": an over-budget candidate at most this fraction of the best passing one's size is repaired
CLEARLY_LIGHTER = 0.8
#: sizes within this fraction are one option grid point (the grid's options left the weights alone)
GRID_SIZE_TIE = 0.01
#: the most nodes a direct sensitivity sweep quantizes one by one
SWEEP_MAX_NODES = 64
#: the most probe models the mixed-precision sweep runs unless mixed is named in --strategies
MIXED_MAX_PROBES = 48
#: rounds of "judge the plan, promote its worst node"
MIXED_ROUNDS = 3


# -- confidence ------------------------------------------------------------------------------------------

def configure_judge(judge: Any, confidence: float, seed: int = 0) -> dict[str, Any]:
    """Set the judge's confidence, parts, companion and unresolvable budgets; say what cannot be resolved.

    Returns a record with ``messages`` (one line per budget the data cannot resolve),
    ``rank_metric`` (the key that ranks candidates) and the parts' sizes.
    """
    from ..evaluation.intervals import companion, split_parts

    samples = judge.samples
    extra = companion(judge.metrics, judge.primary) or add_companion(judge)
    extras = (extra,) if extra else ()
    by_key = {m.key: m for m in judge.metrics}
    parts = split_parts(samples, seed=seed) if samples >= MIN_SPLIT else None
    unresolved = judge.set_confidence(confidence, parts, extras)
    notes = []
    if parts is not None and unresolved:
        # Halving the samples cannot help a budget they cannot resolve: judge on all of them, and say that
        # the option grids are then chosen on the samples that also confirm.
        parts = None
        unresolved = judge.set_confidence(confidence, None, extras)
        notes.append(f"too few held-out samples to set a select part aside ({samples}); option grids and the "
                     "verdict share them")
    confirm = len(parts.confirm) if parts else samples
    where = "confirm samples" if parts else "held-out samples"
    messages = []
    for key, found in unresolved.items():
        needed = found.samples_needed
        total = math.ceil(needed * samples / confirm) if needed else None
        ranking = extra or key
        messages.append(
            f"the held-out data cannot resolve the {key} budget ({judge.budgets[key]:.3g}) at {confidence:.0%} "
            f"confidence: one of the {confirm} {where} is worth {found.sample_worth:.3g}"
            + (f"; it needs >= {needed} {where}" + (f" ({total} held-out samples in all)" if parts else "")
               if needed else "")
            + f"; {key} is held to its measured drop and candidates are ranked by {ranking}")
    allowances = budget_allowances(judge, by_key, confirm, confidence, unresolved)
    messages += [a["text"] for a in allowances.values()]
    rank = judge.primary if judge.primary not in unresolved else (extra or judge.primary)
    return {"confidence": confidence, "parts": parts.to_dict() if parts else {"confirm": samples},
            "unresolved": {k: v.to_dict() for k, v in unresolved.items()}, "rank_metric": rank,
            "companion": extra, "messages": messages, "split_notes": notes, "allowances": allowances}


def budget_allowances(judge: Any, by_key: dict[str, Any], samples: int, confidence: float,
                      unresolved: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """For each budget on a rate metric (agreement, accuracy), how many changed answers it lets pass on the
    samples that judge, said before any quantizing so that a verdict can be predicted: by the confidence bound,
    or by the measured drop when the data cannot resolve the budget; and how many samples one more would need."""
    from ..evaluation.intervals import is_rate_metric
    from ..stats import allowance_text, allowed_changes, samples_for_changes

    found: dict[str, dict[str, Any]] = {}
    for key, budget in judge.budgets.items():
        metric = by_key[key]
        if not is_rate_metric(metric, judge.reference_outputs[metric.output], judge.context(metric.output)):
            continue
        if key in unresolved:
            allowed = math.floor(budget * samples + 1e-9)     # held to the measured drop: k / n <= budget
            text = (f"{key}: held to its measured drop, so up to {allowed} changed answer(s) of {samples} pass "
                    f"the {budget:.3g} budget (more data makes this stricter: proving it at {confidence:.0%} "
                    f"needs >= {unresolved[key].samples_needed} samples)")
            found[key] = {"allowed": allowed, "samples": samples, "by": "measured drop", "text": text,
                          "next_samples": None}
            continue
        allowed = allowed_changes(samples, budget, confidence)
        found[key] = {"allowed": allowed, "samples": samples, "by": f"{confidence:.0%} bound",
                      "next_samples": samples_for_changes(allowed + 1, budget, confidence),
                      "text": f"{key}: {allowance_text(samples, budget, confidence)}"}
    return found


def add_companion(judge: Any) -> str | None:
    """For a rate primary metric (agreement, accuracy), add a continuous one on the same output to rank by."""
    from ..errors import UsageError
    from ..evaluation.intervals import COMPANIONS, is_rate_metric
    from ..evaluation.metrics import compute, resolve_metrics

    main = next(m for m in judge.metrics if m.key == judge.primary)
    reference = judge.reference_outputs[main.output]
    context = judge.context(main.output)
    if not is_rate_metric(main, reference, context):
        return None
    for name in COMPANIONS:
        try:
            found = resolve_metrics(judge.reference_outputs, judge.feeds, judge.labels, [f"{main.output}.{name}"])[0]
            if not found.metric.applies(reference, context):
                continue
        except (UsageError, Exception):  # noqa: BLE001 - a companion that cannot apply is simply not added
            continue
        judge.metrics.append(found)
        judge.reference_scores[found.key] = compute(found, reference, reference, context)
        return found.key
    return None


def width_notes(rows: Sequence[CandidateRow], budgets: Mapping[str, float], skip: Sequence[str]) -> list[str]:
    """For continuous metrics: when the passing candidates' intervals are wider than the budget, say what would
    resolve it."""
    from ..stats import Interval, interval_resolution

    notes = []
    for key, budget in budgets.items():
        if key in skip:
            continue
        worst = None
        for row in rows:
            data = row.intervals.get(key)
            if not data or row.status not in {"ok", "winner"}:
                continue
            found = interval_resolution(Interval.from_dict(data), budget)
            if not found.resolvable and (worst is None or (found.samples_needed or 0) > (worst.samples_needed or 0)):
                worst = found
        if worst is not None:
            notes.append(f"{key}: {worst.reason}")
    return notes


# -- selection -------------------------------------------------------------------------------------------

def select_on_grids(rows: Sequence[CandidateRow], rank: str) -> list[str]:
    """Within each option grid (same strategy and kept-float nodes, sizes within 1%), keep the select part's best.

    The others that passed are set aside (status ``lost its grid``) with the reason; the
    winner's own figures stay the confirm part's.  Returns one note per grid decided.
    """
    from .results import LOST_GRID

    notes = []
    groups: dict[tuple, list[CandidateRow]] = {}
    for row in rows:
        if row.status in {"ok", "rejected"} and row.size_bytes and rank in row.select_drops \
                and (row.status == "ok" or row.over_budget):
            groups.setdefault((row.strategy, tuple(row.keep_float)), []).append(row)
    for (strategy, _), members in groups.items():
        members.sort(key=lambda r: r.size_bytes or 0)
        clusters: list[list[CandidateRow]] = []
        for row in members:
            if clusters and (row.size_bytes or 0) <= (clusters[-1][0].size_bytes or 0) * (1 + GRID_SIZE_TIE):
                clusters[-1].append(row)
            else:
                clusters.append([row])
        for cluster in clusters:
            if len(cluster) < 2:
                continue

            def on_select(r: CandidateRow) -> float:
                value = r.select_drops.get(rank)
                return value if value is not None and math.isfinite(value) else math.inf

            best = min(cluster, key=on_select)
            aside = 0
            for row in cluster:
                if row is best or row.status != "ok":
                    continue
                row.status = LOST_GRID
                row.reason = (f"lost {strategy}'s option grid on the select part: {rank} drop "
                              f"{on_select(row):.4g} vs {on_select(best):.4g} for {best.name}")
                aside += 1
            if aside:
                notes.append(f"{strategy}: {best.name} chosen on the select part over {aside} other setting(s) "
                             f"of the same size")
    return notes


# -- the fallback rule -----------------------------------------------------------------------------------

def fallback_base(rows: Sequence[CandidateRow], primary: str, budget: float, can_exclude: Any,
                  fast: Any = None) -> tuple[Any, str]:
    """The over-budget candidate to repair, and why (``(None, reason)`` when there is none worth it).

    With nothing passing: the lightest candidate within 3x of the budget, else the
    closest.  With a passing one: only candidates at most ``CLEARLY_LIGHTER`` of its size.
    ``fast(row)`` (:func:`onnxlite.search.quick.fast_enough`) says whether a row is no slower than fp32
    here: a slower one is never a base, and a slower passing one never stops a fast one's repair.
    """
    fast = fast or (lambda _row: True)
    usable = [r for r in rows if r.over_budget and r.path and primary in r.drops and not getattr(r, "same_as", None)
              and math.isfinite(r.drops[primary]) and can_exclude(r.strategy)]
    if usable and not any(fast(r) for r in usable):
        return None, "every over-budget candidate is slower than fp32 on this machine (--objective size repairs them)"
    usable = [r for r in usable if fast(r)]
    passing = [r for r in rows if r.status in {"ok", "winner"} and r.size_bytes and fast(r)]
    if passing:
        lightest = min(r.size_bytes for r in passing)
        usable = [r for r in usable if (r.size_bytes or 0) <= CLEARLY_LIGHTER * lightest]
        if not usable:
            return None, (f"no over-budget candidate is clearly lighter (<= {CLEARLY_LIGHTER:.0%} of the size) "
                          "than the lightest one within budget")
    if not usable:
        return None, "no quantized candidate can keep nodes in float"
    close = [r for r in usable if r.drops[primary] <= 3 * budget]
    base = (min(close, key=lambda r: (r.size_bytes or 0, r.drops[primary])) if close
            else min(usable, key=lambda r: r.drops[primary]))
    if passing:
        best = min(passing, key=lambda r: r.size_bytes)
        why = (f"{base.name} is over budget but {best.size_bytes / base.size_bytes:.2f}x lighter than "
               f"{best.name}, the lightest within budget")
    else:
        why = "no candidate fits the budget"
    return base, why


# -- probes: models that measure, never compete ------------------------------------------------------------

def run_probes(state: Any, candidates: Sequence[Candidate], workers: int | None, what: str,
               judge: Any = None) -> list[Any]:
    """Quantize and judge ``candidates`` like any candidate, without adding them to the rows.

    ``judge`` is the folder of the judge they get instead of the search's (the fallback's: the select part's).
    """
    offset = 100000 + len(getattr(state, "_probes", []))
    tasks = [state._task(c, offset + i) | ({"judge": str(judge)} if judge else {}) for i, c in enumerate(candidates)]
    state.emit("stage", {"message": f"{what}: {len(tasks)} probe model(s)"})
    from .trials import run_trials, untried_result

    # through the trials: a probe repeating a candidate, or cached from an earlier run, is not run again
    found = run_trials(state.trials, candidates, tasks, workers, state.work / "probes", stage=f"probes: {what}")
    results = [r if r is not None else untried_result(c) for c, r in zip(candidates, found)]
    state._probes = getattr(state, "_probes", []) + results
    return results


def probe_drop(result: Any, rank: str) -> float:
    """A probe's drop on the select part (the confirm part when there is no split); failed probes are infinitely bad."""
    if result.status != "ok":
        return math.inf
    value = (result.select_drops or result.drops).get(rank)
    return value if value is not None and math.isfinite(value) else math.inf


def select_judge(state: Any) -> Any:
    """The folder of the judge the fallback's probes get: the select part's samples only (the search's without one)."""
    from .tasks import save_judge

    parts = state.judge.parts
    if not parts:
        return state.judge_dir
    return save_judge(state.judge, state.work / "judge-select", samples=parts.select)


def probed_on(state: Any) -> str:
    """What the fallback's probes are judged on, in words (tables, stages and JSON say it the same way)."""
    return "the select part" if state.judge.parts else "every held-out sample (no select part)"


def passes(result: Any) -> bool:
    """A probe is within every budget of the judge it got."""
    return result.status == "ok" and result.passed is not False


def confirm(state: Any, candidate: Any, ranking: str, workers: int | None, closest: bool = False) -> bool:
    """The repair a ranking chose on the select part, judged like any candidate (a row: the confirm part's verdict).

    ``closest``: nothing passed, and this is the attempt shown so that the table says how far the repair got.
    """
    where = probed_on(state)
    what = "the closest attempt, over budget on" if closest else "chosen on"
    state.emit("stage",
               {"message": f"judging {candidate.name} ({what} {where}, ranked by {ranking}) like any candidate"})
    row = state.run_candidates(workers, [candidate])[0]
    state.partial.setdefault("confirmed", []).append({"name": row.name, "ranked_by": ranking, "status": row.status,
                                                      "drop": row.drops.get(state.judge.primary), "closest": closest})
    return row.status == "ok"


# -- mixed precision -----------------------------------------------------------------------------------

def mixed_candidates_wanted(state: Any, strategies: Sequence[str] | None) -> tuple[bool, str]:
    """Whether the mixed-precision stage runs, and why not."""
    from ..registry import get_registry

    registry = get_registry()
    named = bool(strategies) and "mixed" in strategies
    if strategies and not named:
        return False, "not among --strategies"
    for name in ("mixed", "weightonly", "dynamic"):
        if name not in registry.names("quantizer") or not registry.get("quantizer", name).available:
            return False, f"strategy {name!r} is not available"
    nodes = mixed_nodes(state.fp32)
    if len(nodes) < 2:
        return False, "fewer than two MatMul/Gemm nodes with a constant weight: a uniform scheme is all there is"
    probes = len(mixed_probes(state.fp32, nodes))
    if probes > MIXED_MAX_PROBES and not named:
        return False, (f"its sweep needs {probes} probe models ({len(nodes)} nodes, one per scheme each can take); "
                       "name mixed in --strategies to run it")
    return True, ""


def mixed_probes(model: Any, nodes: Mapping[str, int]) -> list[tuple[str, str]]:
    """(node, scheme) pairs worth measuring: block schemes only where MatMulNBits can take the node."""
    import onnx

    from ..mixed_plan import LIGHTEST_FIRST, weighted_nodes

    eligible = weighted_nodes(onnx.load(str(model), load_external_data=False))
    return [(n, s) for n in nodes for s in LIGHTEST_FIRST if s != "float" and n in eligible[s]]


def mixed_nodes(model: Any) -> dict[str, int]:
    """Weighted nodes the mixed strategy can give a scheme, with their weight counts."""
    import math as _math

    import onnx

    from ..mixed_plan import weighted_nodes

    proto = onnx.load(str(model), load_external_data=False)
    names = weighted_nodes(proto)["float"]
    dims = {i.name: list(i.dims) for i in proto.graph.initializer}
    return {n.name: int(_math.prod(dims.get(n.input[1], [0]))) for n in proto.graph.node if n.name in names}


def mixed_stage(state: Any, workers: int | None, rank: str, budget: float) -> dict[str, Any]:
    """Sweep every node x scheme, plan under the budget, then judge the plan (promoting its worst node if need be)."""
    from .. import mixed_plan
    from ..mixed_plan import BYTES_PER_WEIGHT, LIGHTEST_FIRST
    from .candidates import Candidate, candidate_name

    nodes = mixed_nodes(state.fp32)
    probes = [Candidate(f"mixed[{n}={s}]", "mixed", {"default": "float", "assign": (f"{n}={s}",)})
              for n, s in mixed_probes(state.fp32, nodes)]
    # measured on the select part's judge: the samples confirming the plan never reach its probes
    results = run_probes(state, probes, workers, "mixed precision: per-node sensitivity", judge=select_judge(state))
    sensitivity: dict[str, dict[str, float]] = {n: {} for n in nodes}
    for candidate, result in zip(probes, results):
        node, scheme = candidate.options["assign"][0].rsplit("=", 1)
        sensitivity[node][scheme] = probe_drop(result, rank)
    chosen = mixed_plan.plan(sensitivity, nodes, budget, LIGHTEST_FIRST, BYTES_PER_WEIGHT)
    record: dict[str, Any] = {"tried": True, "rank_metric": rank, "sensitivity": sensitivity, "rounds": []}
    rows = []
    for _round in range(MIXED_ROUNDS):
        if all(s == "float" for s in chosen.values()):
            break
        options = mixed_plan.assignment_options(chosen)
        # named by what it keeps apart from its default (``+float1``), not by a bare count (``+1``)
        suffix = mixed_plan.plan_suffix(cast("tuple[str, ...]", options["assign"]))
        name = candidate_name("mixed", {"default": options["default"]}) + suffix
        row = state.run_candidates(workers, [Candidate(name, "mixed", options)])[0]
        rows.append(row)
        record["rounds"].append({"name": row.name, "status": row.status, "plan": dict(chosen),
                                 "drop": row.drops.get(rank)})
        if row.status != "rejected" or not row.over_budget:
            break
        promoted = mixed_plan.promote(chosen, sensitivity, LIGHTEST_FIRST)
        if promoted is None:
            break
        chosen = promoted
    return record


def evidence_record(evidence: Mapping[str, Any], rows: Sequence[CandidateRow], judge: Any) -> dict[str, Any]:
    """The evidence the report shows: the search's, with the width notes and why each default metric judges."""
    record = dict(evidence)
    record["width_notes"] = width_notes(rows, judge.budgets, judge.estimate_only)
    record["metric_why"] = {m.key: m.why for m in judge.metrics if m.why}   # defaults: why each one
    return record
