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

    def to_dict(self) -> dict[str, Any]:
        return {"confidence": self.confidence, "parts": dict(self.parts), "unresolved": dict(self.unresolved),
                "rank_metric": self.rank_metric, "companion": self.companion, "messages": list(self.messages),
                "split_notes": list(self.split_notes), "allowances": dict(self.allowances)}


def configure_judge(judge: Judge, confidence: float, seed: int = 0) -> ConfidenceSetup:
    """Set the judge's confidence, parts, companion and unresolvable budgets (:meth:`Judge.set_confidence`);
    say what cannot be resolved, and which metric ranks the candidates."""
    from ..evaluation.intervals import companion, split_parts

    samples = judge.samples
    extra = companion(judge.metrics, judge.primary) or add_companion(judge)
    extras = (extra,) if extra else ()
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
    return ConfidenceSetup(confidence, parts.to_dict() if parts else {"confirm": samples},
                           {k: v.to_dict() for k, v in unresolved.items()}, rank, extra, tuple(messages), tuple(notes),
                           allowances)


def budget_allowances(judge: Judge, by_key: dict[str, Any], samples: int, confidence: float,
                      unresolved: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
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
