"""What a sweep keeps: a small record of each model's lighten (enough for the summary table), and the sweep's result."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class ModelOutcome:
    name: str
    source: str
    status: str = "not run"       # lightened | no winner | failed | not run
    kept: bool = False            # finished by an earlier run of the sweep, kept and skipped
    output_dir: str | None = None
    message: str = ""
    winner: str | None = None
    strategy: str | None = None
    primary_metric: str | None = None
    drop: float | None = None
    budget: float | None = None
    size_before: int | None = None
    size_after: int | None = None
    p50_before: float | None = None
    p50_after: float | None = None
    seconds: float | None = None
    ran_on: dict[str, Any] = field(default_factory=dict)

    @property
    def smaller(self) -> float | None:
        return self.size_before / self.size_after if self.size_before and self.size_after else None

    @property
    def faster(self) -> float | None:
        return self.p50_before / self.p50_after if self.p50_before and self.p50_after else None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"smaller": self.smaller, "faster": self.faster}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelOutcome:
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass
class SweepResult:
    output_dir: Path
    manifest: str
    models: list[ModelOutcome]
    executor: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    reports: dict[str, Path] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(m.status == "lightened" for m in self.models)

    def to_dict(self) -> dict[str, Any]:
        return {"output_dir": str(self.output_dir), "manifest": self.manifest, "executor": self.executor,
                "seconds": self.seconds, "reports": {k: str(v) for k, v in self.reports.items()},
                "models": [m.to_dict() for m in self.models]}


def from_lighten(name: str, source: str, result: Any, seconds: float, ran_on: dict[str, Any]) -> ModelOutcome:
    """The record of a :class:`~onnxlite.search.results.LightenResult` (or its ``to_dict()``)."""
    data = result if isinstance(result, dict) else result.to_dict()
    winner, base = data.get("winner"), data.get("baseline") or {}
    primary = data.get("primary_metric")
    outcome = ModelOutcome(name=name, source=source, status="lightened" if winner else "no winner",
                           output_dir=data.get("output_dir"), message=data.get("message", ""),
                           primary_metric=primary, budget=(data.get("budgets") or {}).get(primary),
                           size_before=base.get("size_bytes"), p50_before=(base.get("latency_ms") or {}).get("p50"),
                           seconds=round(seconds, 1), ran_on=ran_on)
    if winner:
        outcome.winner, outcome.strategy = winner["name"], winner["strategy"]
        outcome.drop = (winner.get("drops") or {}).get(primary)
        outcome.size_after = winner.get("size_bytes")
        outcome.p50_after = (winner.get("latency_ms") or {}).get("p50")
    return outcome


def from_report(name: str, source: str, outdir: Path) -> ModelOutcome:
    """A finished OUTDIR whose record is missing (the sweep stopped between the two): read its report.json."""
    report = json.loads((outdir / "report.json").read_text())
    rows = report.get("rows", [])
    winner = next((r for r in rows if r.get("status") == "winner"), None)
    base: dict[str, Any] = next((r for r in rows if r.get("status") == "reference"), {})
    message = next((s["text"] for s in report.get("sections", []) if s.get("heading") == "Result"), "")
    return ModelOutcome(name=name, source=source, status="lightened" if winner else "no winner",
                        output_dir=str(outdir), message=message, winner=winner and winner["name"],
                        primary_metric=report.get("primary_metric"), size_before=base.get("size_bytes"),
                        size_after=winner and winner.get("size_bytes"),
                        p50_before=(base.get("latency_ms") or {}).get("p50"),
                        p50_after=winner and (winner.get("latency_ms") or {}).get("p50"))
