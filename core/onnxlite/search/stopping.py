"""A search that stops early and says so: ``--time-budget`` and Ctrl-C.

- When the time budget is spent, no new candidate, probe or stage starts
  (:class:`~onnxlite.search.trials.TimeBudget`); what passed is benchmarked and the best so far
  written to OUTDIR as usual, and the verdict says the search was cut short and what was left untried.
- On Ctrl-C, OUTDIR is left as it was (the search builds in a scratch folder); the best
  candidate judged so far, if any passed, is kept in a separate folder ``OUTDIR.interrupted``
  with a JSON note of what it is and what was left, and the interrupt goes on.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from .shares import MIXED_MIN_PROBES, MIXED_SHARE, MIXED_SWEEP_STAGE, mixed_seconds, mixed_share

if TYPE_CHECKING:
    from .config import LightenConfig
    from .context import SearchContext
    from .fallback_rule import Fast
    from .mixed_stage import MixedPlan
    from .quick import QuickTimes
    from .results import CandidateRow, LightenResult
    from .trials import TimeBudget, TrialContext


class SoFar(Protocol):
    """What a search has so far, as Ctrl-C finds it: the rows judged, those settled while a stage ran, the
    quick timing, and the trials' ledger."""

    rows: list[CandidateRow]
    settled: dict[str, CandidateRow]
    quick: QuickTimes | None
    trials: TrialContext

    def emit(self, kind: str, info: Mapping[str, Any]) -> None: ...


@dataclass(frozen=True)
class LaterStages:
    """What the stages after the option grids did: mixed precision's record and the fallback's (None: not
    started), the stages the time budget kept from starting, and what the verdict should say of them
    (a sweep cut at its time share)."""

    mixed: dict[str, Any] | None = None
    partial: dict[str, Any] | None = None
    skipped: tuple[str, ...] = field(default_factory=tuple)
    notes: tuple[str, ...] = field(default_factory=tuple)

    def with_skipped(self, stage: str) -> LaterStages:
        """This record with one more stage the time budget kept from starting (one that runs after these)."""
        return replace(self, skipped=(*self.skipped, stage))


def best_so_far(rows: Sequence[CandidateRow], quick: QuickTimes | None = None) -> CandidateRow | None:
    """The candidate to keep when the search stops: within budget, fastest in the quick timing, else smallest."""
    passing = [r for r in rows if r.status in {"ok", "winner"} and r.path and os.path.exists(r.path)]
    if not passing:
        return None
    ratios = quick.ratios if quick is not None else {}
    return min(passing, key=lambda r: (ratios.get(r.name, 1.0), r.size_bytes or 0))


def interrupted_dir(out: Path) -> Path:
    """``OUTDIR.interrupted``, or ``OUTDIR.interrupted-2`` ... when that exists: nothing is ever replaced."""
    found = out.with_name(out.name + ".interrupted")
    number = 2
    while found.exists():
        found = out.with_name(f"{out.name}.interrupted-{number}")
        number += 1
    return found


@contextlib.contextmanager
def interrupted(state: SoFar, out: Path) -> Iterator[None]:
    """On Ctrl-C, keep the best candidate so far beside OUTDIR (never in it), then let the interrupt go on."""
    try:
        yield
    except KeyboardInterrupt:
        rows = list(state.rows)
        rows += [r for r in state.settled.values() if r not in rows]
        best = best_so_far(rows, state.quick)
        if best is not None:
            with contextlib.suppress(OSError):
                kept = keep_best(best, state, interrupted_dir(out), rows)
                state.emit("note", {"message": f"interrupted: the best candidate so far, {best.name}, is in {kept} "
                                               f"({out} is untouched)"})
        raise


def keep_best(best: CandidateRow, state: SoFar, folder: Path, rows: list[CandidateRow] | None = None) -> Path:
    """Write ``best``'s model and a note of the search so far into ``folder``, whole or not at all."""
    scratch = folder.with_name(f".{folder.name}.{uuid.uuid4().hex[:8]}")
    scratch.mkdir(parents=True)
    try:
        shutil.copyfile(str(best.path), scratch / "model.onnx")
        ledger = state.trials.ledger.to_dict()
        note = {"interrupted": True, "best_so_far": best.to_dict(),
                "note": "judged within budget but not benchmarked: the search was interrupted before its benchmark",
                "candidates": [r.to_dict() for r in (rows if rows is not None else state.rows)], "trials": ledger}
        (scratch / "best-so-far.json").write_text(json.dumps(note, indent=2, default=str))
        os.rename(scratch, folder)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    return folder


def later_stages(ctx: SearchContext, rows: Sequence[CandidateRow], quick: QuickTimes | None, config: LightenConfig,
                 search: bool) -> LaterStages:
    """Mixed precision and the partial fallback, each only while the time budget lasts (a skipped one is noted)."""
    from .mixed_stage import mixed_plan_for, mixed_stage
    from .partial import fallback
    from .quick import fast_enough

    budget = ctx.trials.budget
    skipped = []
    mixed = partial = None
    if search:
        plan = mixed_plan_for(ctx.fp32, config.strategies)
        why = None if budget.spent() else _mixed_does_not_fit(ctx, plan, rows, config.workers)
        if not budget.spent() and why is None:
            # the sweep's own clock, a share of what is left now: the search's budget is never changed
            mixed = mixed_stage(ctx, plan, config.workers, mixed_share(budget))
        elif plan.wanted:
            skipped.append("mixed precision")
            mixed = {"tried": False, "reason": why or "the --time-budget was spent"}
    fast = fast_enough(quick, config.objective or "latency")
    if config.partial and search:
        if not budget.spent():
            partial = fallback(ctx, rows, fast, config.max_float_nodes, config.workers)
        elif _fallback_wanted(ctx, rows, fast):
            skipped.append("the partial fallback")
    notes = (mixed["sweep"]["note"],) if mixed and "note" in mixed.get("sweep", {}) else ()
    return LaterStages(mixed, partial, tuple(skipped), notes)


def _mixed_does_not_fit(ctx: SearchContext, plan: MixedPlan, rows: Sequence[CandidateRow],
                        workers: int | None) -> str | None:
    """Under a time budget, why mixed precision's sweep cannot start (None: it may run, within its share).

    Its probes cost about what a candidate took (the median), as many at once as candidates ran; a share
    that fits fewer than :data:`MIXED_MIN_PROBES` of them (or all of them, when there are fewer) is too small.
    """
    import statistics

    from ..jobs.candidate import default_workers

    budget = ctx.trials.budget
    if budget.seconds is None or not plan.wanted:
        return None
    costs = [r.quantize_seconds for r in rows if r.quantize_seconds]
    if not costs:
        return None
    probes = len(plan.probes)
    parallel = workers or default_workers(0)
    share, each = mixed_seconds(budget), statistics.median(costs)
    fit = int(share * max(1, parallel) // max(each, 1e-3))
    if fit >= min(probes, MIXED_MIN_PROBES):
        return None
    return (f"its share of the --time-budget ({share:.0f} s, {MIXED_SHARE:.0%} of what is left) fits {fit} of its "
            f"{probes} probes ({each:.1f} s each, {parallel} at once)")


def final_runs(budget: TimeBudget, runs: int) -> tuple[int, str | None]:
    """The most runs per model the final benchmark may take: ``runs``, or only its least
    (:data:`~onnxlite.benchmark.stability.SEARCH_MIN_RUNS`) once the --time-budget is spent, with the note
    that says so (None when ``runs`` stands).  On the README job under ``--time-budget 2m`` the benchmark of
    six MiniLMs at 20 runs each was most of the overrun."""
    from ..benchmark.stability import SEARCH_MIN_RUNS

    if not budget.spent() or runs <= SEARCH_MIN_RUNS:
        return runs, None
    return SEARCH_MIN_RUNS, (f"benchmarked with {SEARCH_MIN_RUNS} runs per model, the least, as the --time-budget "
                             "was spent")


def _fallback_wanted(ctx: SearchContext, rows: Sequence[CandidateRow], fast: Fast) -> bool:
    """Whether the fallback would have had a base to repair (a skipped stage is news only then)."""
    from .partial import can_exclude, fallback_bases

    bases, _ = fallback_bases(rows, ctx.primary, ctx.budget, can_exclude, ctx.rank, fast)
    return bool(bases)


def account(ctx: TrialContext, later: LaterStages, result: LightenResult,
            emit: Callable[[str, Mapping[str, Any]], None]) -> None:
    """Say on ``result`` what the later stages noted (``later.notes``: said as they happened), what the cache
    gave, what repeated, and what the time budget cut (``later.skipped``: the stages it kept from starting)."""
    ledger = ctx.ledger.to_dict()
    result.settings["trials"] = ledger
    if ctx.budget.seconds is not None:
        result.settings["time_budget_seconds"] = ctx.budget.seconds
    result.message += "".join(f"; {note}" for note in later.notes)   # emitted by their stage already
    stages = later.skipped
    notes = []
    if ctx.cache is not None:
        result.settings["cache"] = ctx.cache.describe()
        if ctx.cache.hits:
            notes.append(f"reused {len(ctx.cache.hits)} quantized model(s) and judgement(s) from the cache "
                         f"({ctx.cache.folder}); timings measured afresh")
    if ledger["duplicates"]:
        notes.append(f"{ledger['duplicates']} candidate(s) or probe(s) repeated another and ran once")
    # probes the sweep's own time share left unmeasured are said by its note, not as a search cut short
    untried = [u for u in ledger["untried"] if u["stage"] != MIXED_SWEEP_STAGE]
    if untried or stages:
        names = [u["name"] for u in untried]
        shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
        left = "; ".join(x for x in (f"left untried: {shown}" if names else "",
                                     f"stages not started: {', '.join(stages)}" if stages else "") if x)
        notes.append(f"the search was cut short by --time-budget ({ctx.budget.seconds:.0f} s): the best so far "
                     f"is shown; {left}")
        result.skipped.extend({"strategy": n, "reason": "not tried: the --time-budget was spent"} for n in names)
        result.settings["cut_short"] = {"untried": names, "stages": list(stages)}
    for note in notes:
        result.message += f"; {note}"
        emit("note", {"message": note})
