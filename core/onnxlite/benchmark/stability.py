"""When an interleaved benchmark has measured enough: the p50s stopped moving.

After every round of turns (each model measured once more, interleaved), each model's figure is
taken: with two or more models its p50 over the first model's p50 (the ratio the table prints
and ``lighten`` ranks by; a load that comes and goes moves both and leaves the ratio), with one
model its own p50.  Once every model has ``min_runs`` runs, none of those figures moved by more
than :data:`STABLE_WITHIN` over the last :data:`STABLE_ROUNDS` rounds, and each one's 95% interval
is narrower than that too, more runs would not change which models tie, and the benchmark stops;
otherwise it goes on to ``max_runs``.

The interval matters: on noisy timings a running median can sit still for a few rounds by chance
(recorded sequences with 5% noise stopped after ~12 runs on movement alone, and 16 in 100 then
landed more than the tie margin away from the full run's ratio; with the interval, none did).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

#: p50 latencies within this fraction tie (``lighten`` then picks the smaller model; see search.choose)
TIE_MARGIN = 0.03
#: a benchmark may stop once its figures move by less than this: half the tie margin, so that what the runs
#: not taken could still move is unlikely to carry a ratio across the margin
STABLE_WITHIN = TIE_MARGIN / 2
#: ... over this many rounds in a row (a single quiet round is chance)
STABLE_ROUNDS = 3
#: lighten's final benchmark: at least this many runs per model (its --runs, 20 by default, is the most)
SEARCH_MIN_RUNS = 10


@dataclass
class Stability:
    """Decides, round by round, whether an interleaved benchmark may stop (``update`` returns True)."""

    min_runs: int
    max_runs: int
    within: float = STABLE_WITHIN
    rounds: int = STABLE_ROUNDS
    #: each round's figures (None for a model with no runs or failed)
    history: list[list[float | None]] = field(default_factory=list)
    stopped_early: bool = False
    #: the last round's widest 95% interval half-width (relative)
    interval: float | None = None

    def figures(self, latencies: Sequence[Sequence[float]], live: Sequence[bool]) -> list[float | None]:
        """Each model's p50 over the first model's (its own p50 with one model, or when the first failed)."""
        p50s = [statistics.median(lat) if ok and lat else None for lat, ok in zip(latencies, live)]
        base = p50s[0] if len(p50s) > 1 else None
        if not base:
            return p50s
        return [None if p is None else p / base for p in p50s[1:]]

    def update(self, latencies: Sequence[Sequence[float]], live: Sequence[bool]) -> bool:
        """Record one finished round; True when every live model has ``min_runs`` and its figure is stable
        (moved less than ``within`` over the last ``rounds`` rounds, and known to within ``within``)."""
        self.history.append(self.figures(latencies, live))
        self.interval = self.uncertainty(latencies, live) if any(live) else None
        if self.min_runs >= self.max_runs or len(self.history) <= self.rounds:
            return False
        if any(ok and len(lat) < self.min_runs for lat, ok in zip(latencies, live)):
            return False
        if not any(live):
            return False
        if self.interval is None or self.interval > self.within:
            return False
        window = self.history[-(self.rounds + 1):]
        for j, last in enumerate(window[-1]):
            if last is None:
                continue
            earlier = [w[j] if j < len(w) else None for w in window[:-1]]
            if any(e is None or abs(e - last) > self.within * abs(last) for e in earlier):
                return False
        self.stopped_early = True
        return True

    def uncertainty(self, latencies: Sequence[Sequence[float]], live: Sequence[bool]) -> float:
        """The widest figure's 95% interval half-width, relative: each p50's from its order statistics
        (distribution-free), a ratio's the two combined as if independent."""
        widths = [median_width(lat) if ok and lat else None for lat, ok in zip(latencies, live)]
        base = widths[0] if len(widths) > 1 else None
        if base is None:
            return max((w for w in widths if w is not None), default=math.inf)
        return max((math.hypot(base, w) for w in widths[1:] if w is not None), default=base)

    def moved(self) -> float | None:
        """How far the figures moved over the last rounds (largest relative change), None before enough rounds."""
        if len(self.history) <= self.rounds:
            return None
        window = self.history[-(self.rounds + 1):]
        moves = [abs(earlier - last) / abs(last) for j, last in enumerate(window[-1]) if last
                 for w in window[:-1] if j < len(w) and (earlier := w[j]) is not None]
        return max(moves) if moves else None

    def describe(self, runs_taken: Sequence[int]) -> dict[str, Any]:
        """What the JSON and the table's footnote say: runs taken, and why the benchmark stopped where it did."""
        moved = self.moved()
        early = self.stopped_early
        return {"min_runs": self.min_runs, "max_runs": self.max_runs, "runs_taken": list(runs_taken),
                "rounds": len(self.history), "stopped_early": early,
                "stable_within": self.within, "stable_rounds": self.rounds,
                "moved": None if moved is None else round(moved, 4),
                "interval": None if self.interval is None or not math.isfinite(self.interval)
                else round(self.interval, 4),
                "reason": (f"p50s stable within {self.within:.1%} over the last {self.rounds} rounds" if early
                           else "fixed count (min runs = max runs)" if self.min_runs >= self.max_runs
                           else "reached the maximum runs before the p50s were stable")}


def median_width(latencies: Sequence[float], z: float = 1.96) -> float:
    """Half the width of the p50's ~95% interval over the p50 (infinite below 5 runs): the order statistics
    ``n/2 -+ z sqrt(n)/2`` bound the median whatever the distribution."""
    n = len(latencies)
    if n < 5:
        return math.inf
    ordered = sorted(latencies)
    half = z * math.sqrt(n) / 2
    lo, hi = ordered[max(0, math.floor(n / 2 - half))], ordered[min(n - 1, math.ceil(n / 2 + half) - 1)]
    mid = statistics.median(ordered)
    return (hi - lo) / (2 * mid) if mid > 0 else math.inf


def footnote(stopping: dict[str, Any] | None) -> str | None:
    """One line under the table: how many runs each model took, and why."""
    if not stopping:
        return None
    taken = sorted(set(stopping.get("runs_taken") or []))
    runs = (f"{taken[0]}" if len(taken) == 1 else f"{taken[0]}-{taken[-1]}") if taken else "0"
    if stopping.get("stopped_early"):
        return (f"{runs} timed runs per model: stopped early, the p50s (as ratios to the first model) moved less than "
                f"{stopping['stable_within']:.1%} over the last {stopping['stable_rounds']} rounds "
                f"(at least {stopping['min_runs']}, at most {stopping['max_runs']})")
    if stopping["min_runs"] >= stopping["max_runs"]:
        return f"{runs} timed runs per model (a fixed count)"
    moved, interval = stopping.get("moved"), stopping.get("interval")
    return (f"{runs} timed runs per model: the maximum; the p50s were not yet stable (moved "
            f"{'?' if moved is None else f'{moved:.1%}'} over the last {stopping['stable_rounds']} rounds, "
            f"95% interval +-{'?' if interval is None else f'{interval:.1%}'}; stable is both under "
            f"{stopping['stable_within']:.1%})")
