"""Time shares: how long one stage of a search may take, within the search's ``--time-budget``.

Mixed precision's per-node sensitivity sweep gets :data:`MIXED_SHARE` of what is left when it starts
(:data:`MIXED_SECONDS` at most, with or without a budget), as the partial fallback gets
``partial.FALLBACK_SECONDS``.  The share is a value, a :class:`~onnxlite.search.trials.TimeBudget` of its own
computed from the search's clock when the stage starts, and handed to the stage's probes
(``SearchContext.probe(..., until=share)``): no probe starts once it is spent, and the plan is made from what
was measured (a scheme not measured counts as unusable, so its node stays float).  The search's own budget is
never replaced or changed.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .trials import TimeBudget, Trial

#: mixed precision's sensitivity sweep may take this share of what is left of the --time-budget when it
#: starts: the plan it makes still has to be judged, and the fallback and the benchmark come after it
MIXED_SHARE = 0.5
#: ... and at most this long, with or without a budget (the fallback's is partial.FALLBACK_SECONDS)
MIXED_SECONDS = 600.0
#: a sweep that can measure fewer probes than this in its share is not started: its plan would be all float
MIXED_MIN_PROBES = 4
#: what the sweep's probes are called (``SearchContext.probe``'s ``what``); the ledger's stage is ``probes: ...``
MIXED_SWEEP = "mixed precision: per-node sensitivity"
MIXED_SWEEP_STAGE = f"probes: {MIXED_SWEEP}"


def mixed_seconds(budget: TimeBudget) -> float:
    """The seconds mixed precision's sweep may take: :data:`MIXED_SHARE` of what is left of ``budget``, at most
    :data:`MIXED_SECONDS` (that alone without a budget)."""
    return min(MIXED_SECONDS, MIXED_SHARE * max(0.0, budget.left()))


def mixed_share(budget: TimeBudget) -> TimeBudget:
    """The sweep's own clock, starting now: :func:`mixed_seconds` of ``budget``."""
    from .trials import TimeBudget

    return TimeBudget(mixed_seconds(budget))


def sweep_record(share: TimeBudget, trials: Sequence[Trial], within_budget: bool) -> dict[str, Any]:
    """What the sweep did with its ``share``: its seconds, the probes, those measured and those left unmeasured
    (``trials``: the ledger's entries for its probes).  A cut sweep's record has a ``note`` for the verdict.

    ``within_budget``: the search has a --time-budget, so the share is part of it (the note says which part).
    """
    mine = [t for t in trials if t.stage == MIXED_SWEEP_STAGE]
    untried = sum(1 for t in mine if t.how == "untried")
    assert share.seconds is not None   # a share always has its seconds
    record: dict[str, Any] = {"share_seconds": round(share.seconds, 1), "probes": len(mine),
                              "measured": len(mine) - untried, "cut": bool(untried),
                              "seconds": round(time.monotonic() - share.started, 2)}
    if untried:
        # the share is at most half of what was left, so it, not the search's budget, cut the sweep
        what = f", {MIXED_SHARE:.0%} of what was left of the --time-budget" if within_budget else ""
        record["note"] = (f"mixed precision's sweep was cut at its time share ({share.seconds:.3g} s{what}): "
                          f"{len(mine) - untried} of {len(mine)} probes measured, the heaviest nodes first; "
                          "a scheme not measured is not used (a node with none stays float)")
    return record
