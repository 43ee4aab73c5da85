"""How ``lighten`` weighs its evidence: the confidence set-up, before any quantizing.

The held-out samples are cut into a *select* part and a disjoint *confirm* part.  A candidate passes when
the one-sided upper bound of its drop on the confirm part, at ``confidence``, is within the budget
(:meth:`onnxlite.evaluation.judge.Judge.set_confidence`, which ``compare`` shares).  Before any quantizing,
a budget on a rate metric (agreement, accuracy) that the confirm part cannot resolve is announced in one
line with the samples it would need; that budget is then held to the measured drop and candidates are
ranked by a continuous companion (logit cosine) instead.

The other concerns have their own modules: option grids (:mod:`onnxlite.search.grids`), the fallback's
base (:mod:`onnxlite.search.fallback_rule`), probes (:mod:`onnxlite.search.context`) and mixed precision
(:mod:`onnxlite.search.mixed_stage`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..evaluation.judge import Judge
    from .results import CandidateRow

#: the held-out samples below which there is no select/confirm split (all of them confirm)
MIN_SPLIT = 8


@dataclass(frozen=True)
class ConfidenceSetup:
    """What :func:`configure_judge` decided: the confidence, the parts' sizes, the budgets the data cannot
    resolve, the metric that ranks, and the lines said about them before any quantizing."""

    confidence: float
    parts: Mapping[str, Any]
    unresolved: Mapping[str, Any]
    rank_metric: str
    companion: str | None = None
    messages: tuple[str, ...] = ()
    split_notes: tuple[str, ...] = ()
    allowances: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    #: the tail metrics a run with default metrics adds beside each ``_min`` (the percentile its samples bound)
    tails: tuple[str, ...] = ()
    #: one line per classifier output: how many judging samples are near-ties (evaluation.margins)
    near_ties: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"confidence": self.confidence, "parts": dict(self.parts), "unresolved": dict(self.unresolved),
                "rank_metric": self.rank_metric, "companion": self.companion, "messages": list(self.messages),
                "split_notes": list(self.split_notes), "allowances": dict(self.allowances),
                "tails": list(self.tails), "near_ties": list(self.near_ties)}


def configure_judge(judge: Judge, confidence: float, seed: int = 0, tails: bool = False) -> ConfidenceSetup:
    """Set the judge's confidence, parts, companion and unresolvable budgets (:meth:`Judge.set_confidence`);
    say what cannot be resolved, and which metric ranks the candidates.  With ``tails`` (the metrics are the
    defaults), each ``_min`` metric gets the tail metric its judging samples can bound beside it."""
    from ..evaluation.intervals import companion, split_parts

    samples = judge.samples
    extra = companion(judge.metrics, judge.primary) or add_companion(judge)
    extras: tuple[str, ...] = (extra,) if extra else ()
    by_key = {m.key: m for m in judge.metrics}
    parts = split_parts(samples, seed=seed) if samples >= MIN_SPLIT else None
    unresolved = judge.set_confidence(confidence, parts, extras)
    notes: list[str] = []
    if parts is not None and unresolved:
        # Halving the samples cannot help a budget they cannot resolve: judge on all of them, and say that
        # the option grids are then chosen on the samples that also confirm.
        parts = None
        unresolved = judge.set_confidence(confidence, None, extras)
        notes.append(f"too few held-out samples to set a select part aside ({samples}); option grids and the "
                     "verdict share them")
    confirm = len(parts.confirm) if parts else samples
    where = "confirm samples" if parts else "held-out samples"
    messages: list[str] = []
    added: tuple[str, ...] = ()
    if tails:
        added, said = add_tails(judge, confirm, confidence)
        messages += said
        if added:
            extras = (*extras, *added)
            unresolved = judge.set_confidence(confidence, parts, extras)
    for key, found in unresolved.items():
        if found.sample_worth is None:      # a tail percentile: too few samples to bound it at all
            messages.append(f"the held-out data cannot resolve the {key} budget ({judge.budgets[key]:.3g}): "
                            f"{found.reason}; {key} is held to its measured drop")
            continue
        needed = found.samples_needed
        total = math.ceil(needed * samples / confirm) if needed else None
        ranking = extra or key
        messages.append(
            f"the held-out data cannot resolve the {key} budget ({judge.budgets[key]:.3g}) at {confidence:.0%} "
            f"confidence: one of the {found.samples} {where}"
            + (" it judges" if found.samples != confirm else "") + f" is worth {found.sample_worth:.3g}"
            + (f"; it needs >= {needed} {where}" + (f" ({total} held-out samples in all)" if parts else "")
               if needed else "")
            + f"; {key} is held to its measured drop and candidates are ranked by {ranking}")
    allowances = budget_allowances(judge, by_key, confirm, confidence, unresolved)
    messages += [a["text"] for a in allowances.values()]
    ties = near_tie_lines(judge)
    messages += ties
    rank = judge.primary if judge.primary not in unresolved else (extra or judge.primary)
    return ConfidenceSetup(confidence, parts.to_dict() if parts else {"confirm": samples},
                           {k: v.to_dict() for k, v in unresolved.items()}, rank, extra, tuple(messages), tuple(notes),
                           allowances, added, tuple(ties))


def near_tie_lines(judge: Judge) -> list[str]:
    """How many of the judging samples of each classifier output are near-ties (:mod:`onnxlite.evaluation.margins`)."""
    from ..evaluation.margins import near_tie_note

    index = judge.parts.confirm if judge.parts is not None else None
    # the warning is for budgets that count every changed answer, near-ties too
    counting = {k.rsplit(".", 1)[0] for k in judge.budgets if k.rsplit(".", 1)[-1] in COUNTS_EVERY_ANSWER}
    return [near_tie_note(name, judge.reference_outputs[name], index, warn=name in counting)
            for name in judge.classifier_outputs]


#: metrics whose budget every changed answer consumes, near-ties included
COUNTS_EVERY_ANSWER = ("top1_agreement", "top5_agreement", "accuracy")


#: the ``_min`` metrics a tail metric can stand beside, and the tail's name stem
TAIL_OF = {"cosine_min": "cosine", "pooled_cosine_min": "pooled_cosine"}
#: the percentiles a tail metric is offered at, lowest first (the metrics plugin registers these)
TAIL_QUANTILES = (0.01, 0.05, 0.10)


def supported_tail(samples: int, confidence: float) -> float | None:
    """The lowest of :data:`TAIL_QUANTILES` that ``samples`` can bound at ``confidence`` (None: not even the last)."""
    from ..order_stats import quantile_samples

    for q in TAIL_QUANTILES:
        needed = quantile_samples(q, confidence)
        if needed is not None and samples >= needed:
            return q
    return None


def add_tails(judge: Judge, samples: int, confidence: float) -> tuple[tuple[str, ...], list[str]]:
    """Beside each default ``_min`` metric, the tail metric its ``samples`` judging samples can bound; the keys
    added and one line each saying which percentile and why."""
    from ..errors import UsageError
    from ..evaluation.metrics import compute, resolve_metrics
    from ..order_stats import quantile_samples

    added: list[str] = []
    lines: list[str] = []
    q = supported_tail(samples, confidence)
    for m in list(judge.metrics):
        stem = TAIL_OF.get(m.name)
        if stem is None:
            continue
        if q is None:
            last = TAIL_QUANTILES[-1]
            lines.append(f"{m.key} is the worst of {samples}: no tail percentile can be bounded on so few (the "
                         f"{last:.0%} one needs >= {quantile_samples(last, confidence)}), so none is shown beside it")
            continue
        key = f"{m.output}.{stem}_p{round(q * 100):02d}"
        try:
            found = resolve_metrics(judge.reference_outputs, judge.feeds, judge.labels, [key])[0]
        except UsageError:
            continue
        if any(x.key == found.key for x in judge.metrics):
            continue
        judge.metrics.append(found)
        reference = judge.reference_outputs[m.output]
        judge.reference_scores[found.key] = compute(found, reference, reference, judge.context(m.output))
        added.append(found.key)
        lower = [x for x in TAIL_QUANTILES if x < q]
        more = (f"; the {lower[-1]:.0%} one needs >= {quantile_samples(lower[-1], confidence)}" if lower else "")
        lines.append(f"tail: {found.key} beside {m.key}, the lowest percentile the {samples} judging samples bound "
                     f"at {confidence:.0%} confidence{more}")
    return tuple(added), lines


def budget_allowances(judge: Judge, by_key: dict[str, Any], samples: int, confidence: float,
                      unresolved: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """For each budget on a rate metric (agreement, accuracy), how many changed answers it lets pass on the
    samples that judge, said before any quantizing so that a verdict can be predicted: by the confidence bound,
    or by the measured drop when the data cannot resolve the budget; and how many samples one more would need."""
    from ..evaluation.intervals import is_rate_metric, judged_index, quantile_of
    from ..order_stats import quantile_samples, worst_promise
    from ..stats import allowance_text, allowed_changes, samples_for_changes

    found: dict[str, dict[str, Any]] = {}
    index = judge.parts.confirm if judge.parts is not None else None
    for key, budget in judge.budgets.items():
        metric = by_key[key]
        reference, context = judge.reference_outputs[metric.output], judge.context(metric.output)
        if metric.name.endswith("_min") and samples > 0:
            promise = worst_promise(samples, confidence)
            tail = TAIL_OF.get(metric.name)
            hint = f"; a tail budget ({tail}_p05, {tail}_p10) bounds a percentile instead" if tail else ""
            found[key] = {"kind": "worst", "samples": samples, "one_in": promise.one_in, "upper": promise.upper,
                          "text": f"{key}: {promise.text()}{hint}"}
            continue
        q = quantile_of(metric)
        if q is not None:       # a tail: bounded on new samples, or held to its measured value when too few
            needed = quantile_samples(q, confidence)
            found[key] = {"kind": "tail", "samples": samples, "quantile": q, "needed": needed,
                          "bounded": key not in unresolved,
                          "text": f"{key}: the {q:.0%} tail of {samples} samples, "
                                  + (f"bounded at {confidence:.0%} confidence for new samples" if key not in unresolved
                                     else f"held to its measured value (a bound for new samples needs >= {needed})")}
            continue
        if not is_rate_metric(metric, reference, context):
            continue
        count = int(judged_index(metric, reference, context, index).size)   # the confident ones, for some
        if key in unresolved:
            allowed = math.floor(budget * count + 1e-9)     # held to the measured drop: k / n <= budget
            text = (f"{key}: held to its measured drop, so up to {allowed} changed answer(s) of {count} pass "
                    f"the {budget:.3g} budget (more data makes this stricter: proving it at {confidence:.0%} "
                    f"needs >= {unresolved[key].samples_needed} samples)")
            found[key] = {"allowed": allowed, "samples": count, "by": "measured drop", "text": text,
                          "next_samples": None}
            continue
        allowed = allowed_changes(count, budget, confidence)
        found[key] = {"allowed": allowed, "samples": count, "by": f"{confidence:.0%} bound",
                      "next_samples": samples_for_changes(allowed + 1, budget, confidence),
                      "text": f"{key}: {allowance_text(count, budget, confidence)}"}
    return found


def add_companion(judge: Judge) -> str | None:
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

    notes: list[str] = []
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


def evidence_record(setup: ConfidenceSetup, stages: Mapping[str, Any], rows: Sequence[CandidateRow],
                    judge: Judge) -> dict[str, Any]:
    """The evidence the report shows: the confidence set-up, the later stages' records (``grids``,
    ``quick_times``, ``mixed``: those that ran), the width notes and why each default metric judges."""
    record = setup.to_dict() | {k: v for k, v in stages.items() if v is not None}
    record["width_notes"] = width_notes(rows, judge.budgets, judge.estimate_only)
    record["metric_why"] = {m.key: m.why for m in judge.metrics if m.why}   # defaults: why each one
    return record
