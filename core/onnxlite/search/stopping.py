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
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..events import Kind
    from .quick import QuickTimes
    from .results import CandidateRow
    from .trials import TimeBudget, TrialContext


class SoFar(Protocol):
    """What a search has so far, as Ctrl-C finds it: the rows judged, those settled while a stage ran, the
    quick timing, and the trials' ledger."""

    trials: TrialContext

    @property
    def rows(self) -> list[CandidateRow]: ...

    @property
    def settled(self) -> dict[str, CandidateRow]: ...

    @property
    def quick(self) -> QuickTimes | None: ...

    def emit(self, kind: Kind, info: dict[str, Any]) -> None: ...


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


def final_runs(budget: TimeBudget, runs: int) -> tuple[int, str | None]:
    """The most runs per model the final benchmark may take: ``runs``, or only its least
    (:data:`~onnxlite.benchmark.stability.SEARCH_MIN_RUNS`) once the --time-budget is spent, with the note
    that says so (None when ``runs`` stands): a full benchmark of every contender can cost more than the
    whole budget on a model of transformer size."""
    from ..benchmark.stability import SEARCH_MIN_RUNS

    if not budget.spent() or runs <= SEARCH_MIN_RUNS:
        return runs, None
    return SEARCH_MIN_RUNS, (f"benchmarked with {SEARCH_MIN_RUNS} runs per model, the least, as the --time-budget "
                             "was spent")
