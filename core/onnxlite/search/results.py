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
        from ..report.lighten_table import lighten_report

        return lighten_report(self, changes_text)


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


def changes_text(row: CandidateRow) -> str:
    """``logits: 1 of 12 confident, 3 of 12 near-ties changed`` for each classifier output ("" for none)."""
    from ..evaluation.margins import Changes

    return "; ".join(f"{output}: {Changes(**found).text()} changed" for output, found in (row.changes or {}).items())
