"""What ``lighten`` learns: a :class:`CandidateRow` per candidate, the :class:`LightenResult`, and its report."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..figures import figures_of, row_dict
from ..jobs.candidate import CandidateRecord
from ..report.verdict import ratio_text, speed_text

if TYPE_CHECKING:
    from ..jobs.candidate import JobResult


#: the status of a candidate within budget that a better setting of its own option grid beat on the select part
#: (not over budget: "rejected" is kept for candidates over budget or no lighter than fp32)
LOST_GRID = "lost its grid"

@dataclass
class CandidateRow(CandidateRecord):
    """A candidate with everything the search learnt about it: its record, why it stands where it does, and
    what it repeats.  ``status``: winner | ok (within budget, not chosen) | rejected | lost its grid |
    outpaced | failed."""

    reason: str = ""
    over_budget: bool = False
    quantize_seconds: float = 0.0
    #: the candidate this one repeats (same effective options, or a byte-identical model): shown, never run twice
    same_as: str | None = None

    @property
    def p50(self) -> float:
        return (self.latency_ms or {}).get("p50", float("inf"))

    def to_dict(self) -> dict[str, Any]:
        data = row_dict(self)
        data.pop("path")
        return data


@dataclass(frozen=True)
class LightenResult:
    """What ``lighten`` found, and where it wrote it: made once every stage has returned, never changed after
    (its ``message`` is the verdict rendered by :mod:`onnxlite.report.verdict`)."""

    output_dir: Path
    winner: CandidateRow | None
    baseline: CandidateRow
    candidates: list[CandidateRow]
    skipped: list[dict[str, str]]
    primary_metric: str
    budgets: dict[str, float]
    objective: str
    message: str
    export: dict[str, Any]
    settings: dict[str, Any]
    data: str
    partial: dict[str, Any] | None = None
    #: the confidence rule, the select/confirm parts, unresolvable budgets, grid choices, mixed precision
    evidence: dict[str, Any] = field(default_factory=dict)
    #: fp32 with fp16-rounded weights, judged as a yardstick (search.float_noise); None when skipped
    float_noise: CandidateRow | None = None
    model_path: Path | None = None
    recipe_path: Path | None = None
    reports: dict[str, Path] = field(default_factory=dict)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        from ..report.model import jsonable

        found: dict[str, Any] = jsonable({
            "output_dir": str(self.output_dir),
            "winner": self.winner.to_dict() if self.winner else None,
            "model": str(self.model_path) if self.model_path else None,
            "recipe": str(self.recipe_path) if self.recipe_path else None,
            "reports": {k: str(v) for k, v in self.reports.items()},
            "message": self.message,
            "objective": self.objective,
            "primary_metric": self.primary_metric,
            "budgets": self.budgets,
            "baseline": self.baseline.to_dict(),
            "float_noise": self.float_noise.to_dict() if self.float_noise else None,
            "candidates": [c.to_dict() for c in self.candidates],
            "skipped": self.skipped,
            "partial": self.partial,
            "evidence": self.evidence,
            "export": self.export,
            "settings": self.settings,
            "data": self.data,
            "seconds": self.seconds,
        })
        return found

    def to_report(self) -> Any:
        return _report(self)


def candidate_row(result: JobResult) -> CandidateRow:
    """A task's result as a row of the search: failed, over budget (rejected) or ok."""
    row = CandidateRow(name=result.name, strategy=result.strategy, options=result.options,
                       keep_float=list(result.keep_float), quantize=result.quantize, quantize_seconds=result.seconds,
                       path=result.path, **figures_of(result))
    if result.status == "failed":
        row.status, row.reason = "failed", result.error
    elif result.passed is False:
        row.status, row.reason = "rejected", "over budget: " + "; ".join(result.failures)
        row.over_budget = True
    return row


def why_won(row: CandidateRow, baseline: CandidateRow, objective: str,
             fastest: CandidateRow | None = None) -> str:
    """Why ``row`` won, in the words of the rule that picked it (``objective`` is the deciding one)."""
    figures = f"{ratio_text(baseline.size_bytes, row.size_bytes)} and {speed_text(baseline.p50, row.p50)} fp32"
    if objective != "latency":
        return f"smallest within budget: {figures}"
    if fastest is not None and fastest is not row:
        return (f"within the latency tie margin of the fastest ({fastest.name}), and smaller: {figures}")
    return f"fastest within budget: {figures}"


def _report(result: LightenResult) -> Any:
    from ..report.model import ModelRow, Report, environment

    rows = []
    for row in yardsticks(result) + result.candidates:
        note = row.reason
        if row.keep_float:
            note = f"{note} [kept in float: {', '.join(row.keep_float[:6])}{'...' if len(row.keep_float) > 6 else ''}]"
        if row.changes:
            note = f"{note} (answers: {changes_text(row)})"
        # Candidate files live in the scratch folder, which is gone by now; only the winner is kept.
        path = "model.onnx" if row.status == "winner" else "(not kept)"
        rows.append(ModelRow(name=row.name, path=path, status=row.status, note=note, **figures_of(row)))
    sections = [("Result", result.message),
                ("Budget", "\n".join(f"- `{k}`: drop at most {v:.4g}" for k, v in result.budgets.items())
                 + f"\n- objective: {result.objective}\n- data: {result.data}")]
    if result.skipped:
        sections.append(("Strategies not tried",
                         "\n".join(f"- **{s['strategy']}**: {s['reason']}" for s in result.skipped)))
    confidence = _confidence_section(result)
    if confidence:
        sections.append(("Confidence", confidence))
    if result.partial and result.partial.get("tried"):
        ranking = "\n".join(f"- `{r['node']}` ({r['op_type']}): adds {r['added_error']:.3g} relative error"
                            for r in (result.partial.get("ranking") or [])[:10]) \
            or f"- none: {result.partial.get('reason', 'no node could be ranked')}"
        steps = "\n".join(f"- {s['keep_float']} node(s) in float: {_step_text(s)}" for s in result.partial["steps"])
        why = f" ({result.partial['why']})" if result.partial.get("why") else ""
        swept = "".join(f"\n- `{e['node']}`: drop {e['drop']:.3g} quantized alone"
                        for e in (result.partial.get("sweep") or [])[:10])
        if swept:
            swept = f"\n\nActivation matching's order did not reach the budget; the direct sweep:{swept}"
        sections.append(("Partial quantization", f"Based on {result.partial['base']}{why}. Worst nodes:\n{ranking}"
                                                 f"{swept}\n\nSteps:\n{steps}"))
    line = verification_line(result.export)
    if line:
        sections.append(("Export verification", line))
    return Report(title="onnxlite lighten", kind="lighten", rows=rows, primary_metric=result.primary_metric,
                  settings={"objective": result.objective,   # the hardware record is the environment block's
                            **{k: v for k, v in result.settings.items() if v is not None and k != "hardware"}},
                  sections=sections, verdict=result.message, budgets=dict(result.budgets),
                  metric_why=dict((result.evidence or {}).get("metric_why") or {}),
                  allowances=dict((result.evidence or {}).get("allowances") or {}),
                  details={row.name: _details(row) for row in yardsticks(result) + result.candidates},
                  environment=environment(result.settings.get("threads"), target_cpu=result.settings.get("target_cpu")),
                  verification=list((result.export.get("verification") or {}).get("rows") or []))


def yardsticks(result: LightenResult) -> list[CandidateRow]:
    """The rows every candidate is read against: fp32, and its float noise when it was judged."""
    return [result.baseline] + ([result.float_noise] if result.float_noise is not None else [])


def changes_text(row: CandidateRow) -> str:
    """``logits: 1 of 12 confident, 3 of 12 near-ties changed`` for each classifier output ("" for none)."""
    from ..evaluation.margins import Changes

    return "; ".join(f"{output}: {Changes(**found).text()} changed" for output, found in (row.changes or {}).items())


def _step_text(step: dict[str, Any]) -> str:
    """``rejected (drop 0.0312: output.top1_agreement: drop 0.0312 > max 0.005)``: a rounded drop, and why a
    step was rejected when its drop alone does not say (its confidence bound or another metric was over)."""
    from ..report.text import shorten_paths

    drop = step.get("drop")
    figure = "" if drop is None else f"drop {drop:.4g}"
    reason = step.get("reason") or ""
    if step.get("status") == "ok" or not reason:
        return f"{step.get('status')} ({figure})" if figure else str(step.get("status"))
    return f"{step.get('status')} ({'; '.join(p for p in (figure, shorten_paths(reason)) if p)})"


def _details(row: CandidateRow) -> dict[str, Any]:
    """What the HTML report shows per candidate: drops with intervals, and what the strategy really did."""
    quantize = row.quantize or {}
    return {"strategy": row.strategy, "options": row.options, "reason": row.reason, "drops": dict(row.drops),
            "intervals": dict(row.intervals), "quantized_ops": dict(quantize.get("quantized_ops") or {}),
            "excluded_nodes": list(quantize.get("excluded_nodes") or []), "keep_float": list(row.keep_float),
            "notes": list(quantize.get("notes") or []), "warnings": list(quantize.get("warnings") or []),
            "quantize_seconds": row.quantize_seconds}


def _confidence_section(result: LightenResult) -> str:
    """The confidence rule as applied: parts, what the data could not resolve, and every candidate's interval."""
    evidence = result.evidence or {}
    if not evidence.get("confidence"):
        return ""
    parts = evidence.get("parts") or {}
    lines = [f"A candidate passes when the one-sided {evidence['confidence']:.0%} upper bound of its drop, on the "
             f"{parts.get('confirm')} confirm samples, is within the budget"
             + (f"; option grids are chosen on the other {parts['select']} (select) samples"
                if parts.get("select") else "")
             + f". Candidates are ranked by `{evidence.get('rank_metric')}`; overlapping intervals tie on accuracy."]
    lines += [f"- {message}" for message in (evidence.get("messages") or []) + (evidence.get("split_notes") or [])]
    lines += [f"- {note}" for note in evidence.get("width_notes") or []]
    lines += [f"- {note}" for note in evidence.get("grids") or []]
    mixed = evidence.get("mixed") or {}
    if mixed.get("tried"):
        lines += [f"- mixed precision: {r['name']} {_step_text(r)}" for r in mixed.get("rounds", [])]
    elif mixed.get("reason"):
        lines.append(f"- mixed precision not tried: {mixed['reason']}")
    keys = list(dict.fromkeys([*result.budgets, evidence.get("rank_metric"), *(evidence.get("tails") or [])]))
    table = ["",
             "| candidate | "
             + " | ".join(f"`{k}` drop [{evidence['confidence']:.0%} interval], bound" for k in keys if k) + " |",
             "|---|" + "---|" * len([k for k in keys if k])]
    for row in yardsticks(result) + result.candidates:
        cells = []
        for key in keys:
            if not key:
                continue
            data = row.intervals.get(key)
            cells.append(f"{data['estimate']:.4g} [{bound_text(data['low'])}, {bound_text(data['high'])}], "
                         f"{data['upper']:.4g}" if data and data.get("upper") is not None else "-")
        table.append(f"| {row.name} | " + " | ".join(cells) + " |")
    return "\n".join(lines + table)


def bound_text(value: float | None) -> str:
    """An interval's end, ``-`` where it is unbounded (an order-statistic bound the samples cannot give)."""
    return "-" if value is None else f"{value:.4g}"


def verification_line(export: dict[str, Any]) -> str:
    """What the export check really did: how many output comparisons, on which feed sets, and the worst of them.

    ``export`` is :meth:`ExportResult.to_dict`; each row of its verification is one output on one feed set.
    """
    verification = export.get("verification") or {}
    rows = verification.get("rows") or []
    if not rows:
        return ""
    framework = export.get("framework") or "source"
    feed_sets = sorted({row["feed_set"] for row in rows})
    outputs = sorted({row["output"] for row in rows})
    failed = [row for row in rows if not row["passed"]]
    verdict = "all within tolerance" if not failed else f"{len(failed)} outside tolerance"
    parts = [f"{len(rows)} checks ({len(outputs)} output(s) x {len(feed_sets)} feed sets: {', '.join(feed_sets)}) "
             f"against {framework}, {verdict} (atol {verification.get('atol'):g}, rtol {verification.get('rtol'):g})"]
    diffs = [row for row in rows if not row["exact"] and row["max_abs_diff"] is not None]
    if diffs:
        worst = max(diffs, key=lambda row: row["max_abs_diff"])
        parts.append(f"worst max |diff| {worst['max_abs_diff']:.3g} on {worst['output']} [{worst['feed_set']}]")
    cosines = [row for row in rows if row["cosine_min"] is not None]
    if cosines:
        lowest = min(cosines, key=lambda row: row["cosine_min"])
        parts.append(f"lowest cosine {lowest['cosine_min']:.6f} on {lowest['output']} [{lowest['feed_set']}]")
    exact = [row for row in rows if row["exact"]]
    if exact:
        parts.append(f"{len(exact)} non-float check(s) matched exactly" if all(r["passed"] for r in exact)
                     else f"{sum(not r['passed'] for r in exact)} non-float check(s) differ")
    return "; ".join(parts)
