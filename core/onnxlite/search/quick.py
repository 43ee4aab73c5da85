"""Speed measured early: every judged candidate timed quickly against fp32, on this machine, before any repair.

The final interleaved benchmark decides the winner; this only tells the stages that
pick a base (the partial fallback) which formats are fast *here*: the same format can beat fp32
on one ISA and trail it on another (8-bit MatMulNBits gains from VNNI and loses without it), so a
base chosen by size alone can spend the whole repair budget on a model no one would ship.

Each candidate is timed in turns with the fp32 model (``runs`` turns of one run each after a
warm-up), so a load that comes and goes touches both alike; the figure is the ratio of the
two medians (above 1: slower than fp32).  Both sessions live in this process, so each stops
its intra-op threads' spinning at the end of a run (:data:`SPIN_STOP`): else the threads of
the session that just ran keep the cores busy through the other's run.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .context import SearchContext
    from .results import CandidateRow

#: timed turns per candidate (each: one fp32 run, one candidate run)
QUICK_RUNS = 3
#: a base more than this much slower than fp32 in the quick timing is "slower than fp32 here"
SLOWER_MARGIN = 0.10
#: below this fp32 time per batch, per-call overhead rather than the format decides the speed: the quick
#: timing then says nothing about the format, and the bases are chosen by size
MEANINGFUL_MS = 1.0
#: onnxruntime's intra-op threads spin for a while after a run, waiting for more work; in turns of two
#: sessions the next run is the other one's, so the spinning threads slow it down and the ratios read
#: far from an isolated benchmark's (benchmarks/lighten_cost.py --quick measures both ways).
#: ``onnxlite bench`` stops idle workers instead;
#: here the spin stops at each run's end, which costs a thread wake-up a run: nothing at >= 1 ms a batch.
SPIN_STOP = ("session.force_spinning_stop", "1")


@dataclass(frozen=True)
class QuickTimes:
    """Each candidate's quick p50 over fp32's, measured in turns with it (above 1: slower)."""

    ratios: Mapping[str, float] = field(default_factory=dict)
    fp32_ms: float | None = None
    batch: int = 0
    runs: int = QUICK_RUNS
    seconds: float = 0.0

    def slower_than_fp32(self, name: str) -> bool:
        ratio = self.ratios.get(name)
        return ratio is not None and ratio > 1 + SLOWER_MARGIN

    def to_dict(self) -> dict[str, Any]:
        return {"ratios": {k: round(v, 3) for k, v in self.ratios.items()}, "fp32_ms": self.fp32_ms,
                "batch": self.batch, "runs": self.runs, "seconds": self.seconds}


def time_quickly(fp32: str, models: Mapping[str, str], feeds: Mapping[str, Any], settings: Any,
                 runs: int = QUICK_RUNS) -> QuickTimes:
    """Time each of ``models`` (name -> path) in turns with ``fp32`` on ``feeds``; one that will not run is left out."""
    from ..runtime import create_session, run_session, session_options

    def open_session(path: str) -> Any:
        options = session_options(settings)
        options.add_session_config_entry(*SPIN_STOP)
        return create_session(path, settings, options)

    started = time.perf_counter()
    base = open_session(fp32)
    run_session(base, feeds)   # warm-up
    ratios: dict[str, float] = {}
    fp32_all: list[float] = []
    for name, path in models.items():
        try:
            session = open_session(path)
            run_session(session, feeds)
        except Exception:  # noqa: BLE001, S112 - the final benchmark reports a model that cannot run
            continue
        mine: list[float] = []
        theirs: list[float] = []
        for _ in range(runs):
            for session_, into in ((base, theirs), (session, mine)):
                began = time.perf_counter()
                run_session(session_, feeds)
                into.append(time.perf_counter() - began)
        del session
        fp32_all += theirs
        ratios[name] = statistics.median(mine) / max(statistics.median(theirs), 1e-9)
    fp32_ms = round(statistics.median(fp32_all) * 1000, 3) if fp32_all else None
    return QuickTimes(ratios, fp32_ms, 0, runs, round(time.perf_counter() - started, 2))


def quick_times(ctx: SearchContext, rows: Sequence[CandidateRow]) -> QuickTimes:
    """Time every judged candidate (within budget or over it) quickly; ``batch`` is 0 when nothing was timed."""
    from dataclasses import replace

    rows = [r for r in rows if r.path and r.status in {"ok", "rejected"} and (r.status == "ok" or r.over_budget)]
    if not rows or ctx.trials.budget.spent():
        return QuickTimes()
    samples = ctx.judge.samples
    size = max(1, min(32, samples, ctx.judge.batch_cap or samples))
    ctx.emit("stage", {"message": f"timing {len(rows)} candidate(s) quickly against fp32 on this machine "
                                  f"({QUICK_RUNS} runs each, batch {size})"})
    # an executor may time them itself (where it benchmarks; a test's executor replays another CPU's figures)
    timer = getattr(ctx.trials.executor, "time_quickly", None) or time_quickly
    try:
        found = timer(str(ctx.fp32), {r.name: str(r.path) for r in rows}, ctx.judge.first_feeds(size), ctx.settings)
    except Exception as exc:  # noqa: BLE001 - without quick figures the bases are chosen by size
        ctx.emit("note", {"message": f"quick timing failed ({exc}); fallback bases chosen by size alone"})
        found = QuickTimes()
    return replace(found, batch=size)


#: a base whose quick time is this much slower than the fastest candidate within budget cannot win on speed once
#: repaired (a repair only keeps nodes in float); the margin covers the quick timing's noise at 3 runs
OUTPACED_MARGIN = 0.15


@dataclass(frozen=True)
class BaseSpeed:
    """May a row be a repair's base, by its speed here (:func:`fast_enough`): a predicate on rows, plus
    :meth:`outpaced` against the candidates already within budget."""

    quick: QuickTimes | None = None
    objective: str = "latency"

    def _judges(self) -> bool:
        quick = self.quick
        return (quick is not None and self.objective != "size" and bool(quick.ratios)
                and (quick.fp32_ms or 0.0) >= MEANINGFUL_MS)

    def __call__(self, row: CandidateRow) -> bool:
        """Not slower than fp32 here (every row is, under ``objective="size"`` or without a meaningful timing)."""
        return not self._judges() or not (self.quick is not None and self.quick.slower_than_fp32(row.name))

    def outpaced(self, row: CandidateRow, passing: Sequence[CandidateRow]) -> str | None:
        """The name of a passing candidate that ``row`` cannot catch on speed, or None.

        Under the latency objective the winner is the fastest within budget, and keeping nodes in float
        never makes a model faster, so a base already slower than a passing candidate that beats fp32 is
        repaired for nothing (a 4-bit weight-only base near fp32's speed, beside a passing int8 candidate at
        twice fp32's: no float node makes the base catch up).  When no passing candidate beats fp32 clearly,
        speed cannot decide and size does: then nothing is outpaced."""
        if not self._judges() or self.quick is None or row.name not in self.quick.ratios:
            return None
        ratios = self.quick.ratios
        timed = [p for p in passing if p.name in ratios]
        if not timed:
            return None
        best = min(timed, key=lambda p: ratios[p.name])
        if ratios[best.name] >= 1 - OUTPACED_MARGIN or ratios[row.name] <= ratios[best.name] * (1 + OUTPACED_MARGIN):
            return None
        return best.name


#: the final benchmark times each candidate whose quick time is within this fraction of the best one's (the
#: quick timing's noise at 3 runs, as for a base); the others cannot win on speed there
CONTENDER_MARGIN = OUTPACED_MARGIN
#: the status of a candidate within budget that the final benchmark did not time: outpaced in the quick timing
OUTPACED = "outpaced"


def contenders(rows: Sequence[CandidateRow], quick: QuickTimes | None,
               objective: str) -> tuple[list[CandidateRow], dict[str, str]]:
    """The candidates within budget the final benchmark times, and why each other one is not timed.

    Under the latency objective, with a meaningful quick timing in which the best candidate beats fp32
    clearly, the contenders are those whose quick ratio is within :data:`CONTENDER_MARGIN` of the best one's,
    plus every row the quick timing never saw (the repairs built after it); they are then timed together,
    interleaved, and ranked on those figures.  Otherwise (size decides, or speed may not) every row is."""
    speed = BaseSpeed(quick, objective)
    ratios = quick.ratios if quick is not None else {}
    timed = [r for r in rows if r.name in ratios]
    if not speed._judges() or not timed:
        return list(rows), {}
    best = min(timed, key=lambda r: ratios[r.name])
    if ratios[best.name] >= 1 - CONTENDER_MARGIN:
        return list(rows), {}
    limit = ratios[best.name] * (1 + CONTENDER_MARGIN)
    kept = [r for r in rows if r.name not in ratios or ratios[r.name] <= limit]
    aside = {r.name: (f"within budget, but {1 / ratios[r.name]:.2f}x fp32's speed in the quick timing against "
                      f"{best.name}'s {1 / ratios[best.name]:.2f}x (more than {CONTENDER_MARGIN:.0%} behind): "
                      "not timed in the final benchmark")
             for r in rows if r not in kept}
    return kept, aside


def fast_enough(quick: QuickTimes | None, objective: str) -> BaseSpeed:
    """A predicate on rows: may this one be a repair's base? Under ``objective="size"`` every one may."""
    return BaseSpeed(quick, objective)
