"""The last resort: strategies that train the source model (``qat``), run only when post-training lost.

A quantizer that declares ``QuantizerSpec.needs_source`` (``qat``: quantization-aware training with
distillation) costs minutes of training, so the grid never tries it.  ``lighten`` runs it after mixed
precision and the partial fallback, and only when

- no post-training candidate at least :data:`RATIO` times smaller than fp32 is within every budget,
- the source was loaded by a framework the strategy declares (PyTorch for ``qat``), with calibration data,
- the search is not replaying a recipe, ``--strategies`` (when given) names it, and time is left.

Its task carries the source's path, framework and loading options (:func:`source_task`); the task loads the
module through the framework plugin (:func:`onnxlite.jobs.candidate.source_model`) and hands it to the strategy as
``QuantizeContext.source_model``.  Its candidate is a row like any other: judged on the held-out samples,
none of which trained it (it trains and stops early on the calibration samples only).  The stage returns a
:class:`LastResort`: ``evidence["last_resort"]`` and a note in the verdict say whether it ran and why.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .config import LightenConfig
    from .context import SearchContext
    from .results import CandidateRow
    from .setup import Inputs

#: a post-training candidate at least this much smaller than fp32 within budget makes training needless
RATIO = 3.0


@dataclass(frozen=True)
class LastResort:
    """What the last resort did: the strategies it ran (none: it did not), why, and the rows they gave.

    ``cut_short``: it was wanted, but the ``--time-budget`` was spent before it could start.
    """

    reason: str
    names: tuple[str, ...] = ()
    rows: tuple[CandidateRow, ...] = ()
    cut_short: bool = False

    @property
    def tried(self) -> bool:
        return bool(self.names)

    def note(self) -> str | None:
        """The verdict's sentence when it ran (None when it did not)."""
        if not self.names:
            return None
        outcome = ", ".join(f"{r.name} {'within budget' if r.status == 'ok' else r.status}" for r in self.rows)
        return f"{' and '.join(self.names)} ran as the last resort because {self.reason}: {outcome}"

    def to_dict(self) -> dict[str, Any]:
        record: dict[str, Any] = {"tried": self.tried, "reason": self.reason}
        if self.tried:
            record["rows"] = [{"name": r.name, "status": r.status, "drops": dict(r.drops),
                               "size_bytes": r.size_bytes} for r in self.rows]
        return record


def trainers(framework: str) -> list[str]:
    """Installed quantizers that need the loaded source model of ``framework``."""
    from ..registry import get_registry

    return [entry.name for entry in get_registry().all("quantizer")
            if framework in entry.spec.needs_source and entry.unavailable_reason() is None]


def light_enough(rows: Sequence[CandidateRow], baseline_size: int | None,
                 ratio: float = RATIO) -> CandidateRow | None:
    """The lightest row within every budget that is at least ``ratio`` times smaller than fp32, or None."""
    ok = [r for r in rows if r.status == "ok" and r.size_bytes and baseline_size
          and baseline_size / r.size_bytes >= ratio]
    return min(ok, key=lambda r: r.size_bytes or 0) if ok else None


def wanted(framework: str, has_calibration: bool, rows: Sequence[CandidateRow], baseline_size: int | None,
           strategies: Sequence[str] | None) -> tuple[list[str], str]:
    """The strategies to run as the last resort and why (``([], why not)`` when none)."""
    names = trainers(framework)
    if strategies:
        names = [n for n in names if n in strategies]
    if not names:
        return [], (f"no installed strategy trains a {framework} source" if not strategies else
                    f"--strategies names no strategy that trains a {framework} source")
    if not has_calibration:
        return [], "training needs calibration data (--calibration)"
    found = light_enough(rows, baseline_size)
    if found is not None and baseline_size and found.size_bytes:
        return [], (f"not needed: {found.name} is within budget at "
                    f"{baseline_size / found.size_bytes:.2f}x smaller (>= {RATIO:g}x)")
    return names, f"no post-training candidate at >= {RATIO:g}x smaller met the budget, and the source is {framework}"


def last_resort(ctx: SearchContext, rows: Sequence[CandidateRow], baseline: CandidateRow, inputs: Inputs,
                config: LightenConfig) -> LastResort:
    """Run the training strategies when :func:`wanted` says so, judged like any candidate (their rows join the
    table through ``ctx.run``)."""
    from .candidates import Candidate

    names, why = wanted(inputs.framework, inputs.calibration_file is not None, rows, baseline.size_bytes,
                        config.strategies)
    if not names:
        return LastResort(why)
    if ctx.trials.budget.spent():
        return LastResort(f"{why}, but the --time-budget was spent", cut_short=True)
    ctx.emit("stage", {"message": f"last resort: {', '.join(names)} ({why})"})
    found = ctx.run(config.workers, [Candidate(name, name, {}) for name in names])
    return LastResort(why, tuple(names), tuple(found))


def source_task(source: str, framework: str, config: LightenConfig) -> dict[str, Any]:
    """What a task needs to load the source again (JSON: a path, the framework, its loading options)."""
    given = config.framework_options
    options = dict(given) if isinstance(given, Mapping) else list(given or [])
    return {"path": str(source), "framework": framework, "model_class": config.model_class,
            "framework_options": options}

