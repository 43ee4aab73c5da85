"""What the search's stages share once the judge is set up: one frozen :class:`SearchContext`.

Every stage after the export (grid selection, quick timing, mixed precision, the partial fallback) takes a
context and the rows it reads, and returns its own record; none of them reaches into another's state.  The
context runs *probes* (models that measure, never compete: they are judged like candidates but never rows
of the table) and *confirms* a repair as a candidate (``run``: a row of the table, judged on the confirm part).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..events import Event

if TYPE_CHECKING:
    from ..evaluation.judge import Judge
    from ..jobs.candidate import JobResult
    from ..runtime import SessionSettings
    from ..specs import QuantizerSpec
    from .candidates import Candidate
    from .results import CandidateRow
    from .trials import TimeBudget, TrialContext

#: judge candidates like any candidate (``workers``, candidates): their rows join the table
RunCandidates = Callable[[int | None, Sequence["Candidate"]], list["CandidateRow"]]
#: a candidate's job for the trials (what an executor runs); its index names its files
MakeJob = Callable[["Candidate", int], dict[str, Any]]

#: probes' file indices start here, apart from the candidates'
PROBE_OFFSET = 100000


@dataclass(frozen=True)
class SearchContext:
    """The fixed facts of one ``lighten`` run after the export, and the two ways to judge a model."""

    fp32: Path
    work: Path
    settings: SessionSettings
    judge: Judge
    judge_dir: Path
    trials: TrialContext
    emit: Event
    job: MakeJob
    run: RunCandidates
    #: the metric that ranks candidates (the primary, or its continuous companion when the data cannot resolve it)
    rank: str
    #: every probe result so far, in order (append-only: their count numbers the next probes' files)
    probed: list[JobResult] = field(default_factory=list)

    @property
    def primary(self) -> str:
        return self.judge.primary

    @property
    def budget(self) -> float:
        """The primary metric's budget (0 when it has none)."""
        return self.judge.budgets.get(self.judge.primary) or 0.0

    def probe(self, candidates: Sequence[Candidate], workers: int | None, what: str,
              judge: Path | None = None, until: TimeBudget | None = None) -> list[JobResult]:
        """Quantize and judge ``candidates`` like any candidate, without adding them to the rows.

        ``judge`` is the folder of the judge they get instead of the search's (the fallback's: the select part's);
        ``until`` the stage's time share (:mod:`onnxlite.search.shares`): no probe starts once it is spent.
        """
        from .trials import run_trials, untried_result

        offset = PROBE_OFFSET + len(self.probed)
        jobs = [self.job(c, offset + i) | ({"judge": str(judge)} if judge else {}) for i, c in enumerate(candidates)]
        self.emit("stage", {"message": f"{what}: {len(jobs)} probe model(s)"})
        # through the trials: a probe repeating a candidate, or cached from an earlier run, is not run again
        found = run_trials(self.trials, candidates, jobs, workers, self.work / "probes", stage=f"probes: {what}",
                           until=until)
        results = [r if r is not None else untried_result(c) for c, r in zip(candidates, found)]
        self.probed.extend(results)
        return results

    def select_judge(self) -> Path:
        """The folder of the judge probes get: the select part's samples only (the search's without one)."""
        from ..jobs.candidate import save_judge

        parts = self.judge.parts
        if not parts:
            return self.judge_dir
        return save_judge(self.judge, self.work / "judge-select", samples=parts.select)

    def probed_on(self) -> str:
        """What the probes are judged on, in words (tables, stages and JSON say it the same way)."""
        return "the select part" if self.judge.parts else "every held-out sample (no select part)"

    def confirm(self, candidate: Candidate, ranking: str, workers: int | None, log: dict[str, Any],
                closest: bool = False) -> bool:
        """The repair a ranking chose on the select part, judged like any candidate (a row: the confirm part's
        verdict), noted in ``log["confirmed"]``.

        ``closest``: nothing passed, and this is the attempt shown so that the table says how far the repair got.
        """
        what = "the closest attempt, over budget on" if closest else "chosen on"
        self.emit("stage", {"message": f"judging {candidate.name} ({what} {self.probed_on()}, ranked by {ranking}) "
                                       "like any candidate"})
        row = self.run(workers, [candidate])[0]
        log.setdefault("confirmed", []).append({"name": row.name, "ranked_by": ranking, "status": row.status,
                                                "drop": row.drops.get(self.primary), "closest": closest})
        return row.status == "ok"


def probe_drop(result: JobResult, rank: str) -> float:
    """A probe's drop on the select part (the confirm part when there is no split); failed probes are infinitely bad."""
    if result.status != "ok":
        return math.inf
    value = (result.select_drops or result.drops).get(rank)
    return value if value is not None and math.isfinite(value) else math.inf


def passes(result: JobResult) -> bool:
    """A probe is within every budget of the judge it got."""
    return result.status == "ok" and result.passed is not False


class Clock:
    """A stage's time budget: what was spent, and how many probes of a given cost still fit."""

    def __init__(self, seconds: float, parallel: int):
        self.started, self.seconds, self.parallel = time.monotonic(), seconds, max(1, parallel)

    def left(self) -> float:
        return self.seconds - (time.monotonic() - self.started)

    def probes(self, cost: float, parallel: bool = True) -> int:
        """How many probes of ``cost`` seconds fit in what is left (run ``parallel`` at a time, or one by one)."""
        return max(0, int(self.left() * (self.parallel if parallel else 1) // max(cost, 1e-3)))


@dataclass(frozen=True)
class Repair:
    """One base the fallback repairs, and how its probes run: on ``judge`` (the select part's), ``workers`` at
    once, while ``clock`` has room for probes of ``cost`` seconds (the base's own quantize-and-judge time)."""

    base: Candidate
    spec: QuantizerSpec
    judge: Path
    workers: int | None
    clock: Clock
    cost: float
    parallel: int
