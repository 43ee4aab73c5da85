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
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def best_so_far(rows: list[Any], quick: Any = None) -> Any:
    """The candidate to keep when the search stops: within budget, fastest in the quick timing, else smallest."""
    passing = [r for r in rows if r.status in {"ok", "winner"} and r.path and os.path.exists(r.path)]
    if not passing:
        return None
    ratios = getattr(quick, "ratios", None) or {}
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
def interrupted(state: Any, out: Path) -> Iterator[None]:
    """On Ctrl-C, keep the best candidate so far beside OUTDIR (never in it), then let the interrupt go on."""
    try:
        yield
    except KeyboardInterrupt:
        rows = list(getattr(state, "rows", []))
        rows += [r for r in getattr(state, "settled", {}).values() if r not in rows]
        best = best_so_far(rows, getattr(state, "quick", None))
        if best is not None:
            with contextlib.suppress(OSError):
                kept = keep_best(best, state, interrupted_dir(out), rows)
                state.emit("note", {"message": f"interrupted: the best candidate so far, {best.name}, is in {kept} "
                                               f"({out} is untouched)"})
        raise


def keep_best(best: Any, state: Any, folder: Path, rows: list[Any] | None = None) -> Path:
    """Write ``best``'s model and a note of the search so far into ``folder``, whole or not at all."""
    scratch = folder.with_name(f".{folder.name}.{uuid.uuid4().hex[:8]}")
    scratch.mkdir(parents=True)
    try:
        shutil.copyfile(best.path, scratch / "model.onnx")
        ledger = state.trials.ledger.to_dict() if getattr(state, "trials", None) else {}
        note = {"interrupted": True, "best_so_far": best.to_dict(),
                "note": "judged within budget but not benchmarked: the search was interrupted before its benchmark",
                "candidates": [r.to_dict() for r in (rows if rows is not None else state.rows)], "trials": ledger}
        (scratch / "best-so-far.json").write_text(json.dumps(note, indent=2, default=str))
        os.rename(scratch, folder)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    return folder


def later_stages(state: Any, workers: int | None, strategies: Any, partial: bool, max_float_nodes: int | None,
                 search: bool) -> None:
    """Mixed precision and the partial fallback, each only while the time budget lasts (a skipped one is noted)."""
    budget = state.trials.budget
    skipped = []
    if search:
        why = None if budget.spent() else _mixed_does_not_fit(state, strategies, workers)
        if not budget.spent() and why is None:
            state.mixed_precision(workers, strategies)
        elif _mixed_wanted(state, strategies):
            skipped.append("mixed precision")
            state.evidence["mixed"] = {"tried": False, "reason": why or "the --time-budget was spent"}
    if partial and search:
        if not budget.spent():
            state.partial_fallback(max_float_nodes, workers)
        elif _fallback_wanted(state):
            skipped.append("the partial fallback")
    state.skipped_stages = skipped


def _mixed_does_not_fit(state: Any, strategies: Any, workers: int | None) -> str | None:
    """Under a time budget, why mixed precision's sweep cannot fit in what is left (None: it may run).

    Its probes cost about what a candidate took (the median), as many at once as candidates ran.
    """
    import statistics

    budget = state.trials.budget
    if budget.seconds is None or not _mixed_wanted(state, strategies):
        return None
    from .evidence import mixed_nodes, mixed_probes
    from .tasks import default_workers

    costs = [r.quantize_seconds for r in state.rows if r.quantize_seconds]
    if not costs:
        return None
    probes = len(mixed_probes(state.fp32, mixed_nodes(state.fp32)))
    parallel = workers or default_workers(0)
    need = probes * statistics.median(costs) / max(1, parallel)
    if need <= budget.left():
        return None
    return (f"its {probes} probes need about {need:.0f} s ({statistics.median(costs):.1f} s each, {parallel} at once); "
            f"{max(0.0, budget.left()):.0f} s of the --time-budget are left")


def _mixed_wanted(state: Any, strategies: Any) -> bool:
    from .evidence import mixed_candidates_wanted

    return mixed_candidates_wanted(state, strategies)[0]


def _fallback_wanted(state: Any) -> bool:
    """Whether the fallback would have had a base to repair (a skipped stage is news only then)."""
    from ..registry import get_registry
    from .candidates import exclude_option
    from .partial import fallback_bases
    from .quick import fast_enough

    registry = get_registry()
    primary = state.judge.primary
    bases, _ = fallback_bases(state.rows, primary, state.judge.budgets.get(primary) or 0.0,
                              lambda strategy: exclude_option(registry.get("quantizer", strategy).spec),
                              state.evidence["rank_metric"],
                              fast_enough(getattr(state, "quick", None), getattr(state, "objective", "latency")))
    return bool(bases)


def account(state: Any, result: Any) -> None:
    """Say on ``result`` what the cache gave, what repeated, and what the time budget cut."""
    ctx = getattr(state, "trials", None)
    if ctx is None:
        return
    ledger = ctx.ledger.to_dict()
    result.settings["trials"] = ledger
    if ctx.budget.seconds is not None:
        result.settings["time_budget_seconds"] = ctx.budget.seconds
    notes = []
    if ctx.cache is not None:
        result.settings["cache"] = ctx.cache.describe()
        if ctx.cache.hits:
            notes.append(f"reused {len(ctx.cache.hits)} quantized model(s) and judgement(s) from the cache "
                         f"({ctx.cache.folder}); timings measured afresh")
    if ledger["duplicates"]:
        notes.append(f"{ledger['duplicates']} candidate(s) or probe(s) repeated another and ran once")
    untried = ledger["untried"]
    stages = getattr(state, "skipped_stages", [])
    if untried or stages:
        names = [u["name"] for u in untried]
        shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
        left = "; ".join(x for x in (f"left untried: {shown}" if names else "",
                                     f"stages not started: {', '.join(stages)}" if stages else "") if x)
        notes.append(f"the search was cut short by --time-budget ({ctx.budget.seconds:.0f} s): the best so far "
                     f"is shown; {left}")
        result.skipped.extend({"strategy": n, "reason": "not tried: the --time-budget was spent"} for n in names)
        result.settings["cut_short"] = {"untried": names, "stages": stages}
    for note in notes:
        result.message += f"; {note}"
        state.emit("note", {"message": note})
