"""Picking the winner: fastest within budget (ties by size, then accuracy), or smallest with ``objective="size"``."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..benchmark.stability import TIE_MARGIN

if TYPE_CHECKING:
    from .results import CandidateRow
    pass


#: p50 latencies within this fraction (or the measured spread, if larger) tie; then the smaller model wins
#: (one constant with the benchmark's stopping rule, which stops once the p50s move by less than half of it)
LATENCY_TIE = TIE_MARGIN


#: when speed cannot decide, candidates more than this much slower than fp32 (or the noise margin, if larger)
#: do not win for their size while one that is not exists; a few percent either way is noise (run-to-run
#: spread of the interleaved benchmark: benchmarks/lighten_vs_baseline.py shows it per model)
SLOWER_VETO = 0.10


#: sizes within this fraction count as a tie under objective="size" (then the faster one wins)
SIZE_TIE = 0.01


def pick_winner(rows: Sequence[CandidateRow], objective: str = "latency",
                baseline_p50: float | None = None, primary: str | None = None) -> CandidateRow | None:
    """Fastest within budget (p50 ties within 3% go to the smaller), or smallest with ``objective="size"``.

    When no candidate beats the float model's latency (``baseline_p50``) by more than the
    tie margin, speed cannot decide and the smallest one wins, among those not more than 10%
    (or the margin) slower than the float model, when there are any.  Candidates that tie on
    speed and on size (within 1%) are told apart by accuracy on the ``primary`` metric (the
    key that ranks: the budget's metric, or its continuous companion when the data cannot
    resolve the budget): overlapping confidence intervals tie, and then a candidate that
    needs no calibration data is preferred; otherwise the smaller drop wins.
    """
    eligible = _eligible(rows)
    if not eligible:
        return None
    best = min(eligible, key=lambda r: r.p50)
    margin = latency_margin(best)
    decided = deciding_objective(rows, objective, baseline_p50)
    if objective == "latency" and decided == "size" and baseline_p50:   # "size" under latency needs a baseline
        # Speed cannot decide, but it still vetoes: a model clearly slower than fp32 (fp16 on a CPU, which
        # has no fast fp16 kernels for most ops) is not the answer to "fastest within budget" for being smaller.
        not_slower = [r for r in eligible if r.p50 <= baseline_p50 * (1 + max(margin, SLOWER_VETO))]
        eligible = not_slower or eligible
    objective = decided

    def drop(row: CandidateRow) -> float:
        value = row.drops.get(primary) if primary else None
        return value if value is not None and math.isfinite(value) else math.inf

    if objective == "size":
        smallest = min(r.size_bytes or 0 for r in eligible)
        tied = [r for r in eligible if (r.size_bytes or 0) <= smallest * (1 + SIZE_TIE)]
        fastest = min(r.p50 for r in tied)
        tied = [r for r in tied if r.p50 <= fastest * (1 + margin)]
        return _on_accuracy(tied, primary, drop, lambda r: (r.p50, r.size_bytes or 0))
    tied = [r for r in eligible if r.p50 <= best.p50 * (1 + margin)]
    smallest = min(r.size_bytes or 0 for r in tied)
    tied = [r for r in tied if (r.size_bytes or 0) <= smallest * (1 + SIZE_TIE)]
    return _on_accuracy(tied, primary, drop, lambda r: (r.size_bytes or 0, r.p50))


def _on_accuracy(tied: Sequence[CandidateRow], key: str | None, drop: Callable[[CandidateRow], float],
                 then: Callable[[CandidateRow], tuple[Any, ...]]) -> CandidateRow:
    """Among candidates tied on speed and size: those whose drop intervals overlap the best one's are tied on
    accuracy too, and then the one whose quality does not depend on calibration data wins; then the smaller drop."""
    from ..stats import Interval
    from ..stats import tied as overlapping

    best = min(tied, key=lambda r: (drop(r), *then(r)))

    def interval(row: CandidateRow) -> Interval | None:
        data = row.intervals.get(key) if key else None
        return Interval.from_dict(data) if data else None

    same = [r for r in tied if r is best or overlapping(interval(r), interval(best))]
    return min(same, key=lambda r: (needs_calibration(r.strategy), drop(r), *then(r)))


def needs_calibration(strategy: str) -> bool:
    """Whether a strategy's quality depends on calibration data (an unknown one counts as not)."""
    from ..registry import get_registry

    try:
        return bool(get_registry().get("quantizer", strategy).spec.needs_calibration)
    except Exception:  # noqa: BLE001 - a strategy that vanished is judged on its figures alone
        return False


def _eligible(rows: Sequence[CandidateRow]) -> list[CandidateRow]:
    return [r for r in rows if r.status in {"ok", "winner"} and r.latency_ms]


def deciding_objective(rows: Sequence[CandidateRow], objective: str, baseline_p50: float | None) -> str:
    """``objective``, except that speed cannot decide when no candidate beats fp32 beyond the tie margin."""
    eligible = _eligible(rows)
    if objective != "latency" or not eligible or not baseline_p50:
        return objective
    best = min(eligible, key=lambda r: r.p50)
    return "size" if best.p50 > baseline_p50 * (1 - latency_margin(best)) else objective


def latency_margin(row: CandidateRow) -> float:
    """How close two p50s must be to count as a tie: 3%, or the run-to-run spread of the
    fastest model ((p90 - p50) / p50) when the machine is noisier than that."""
    latency = row.latency_ms or {}
    p50, p90 = latency.get("p50"), latency.get("p90")
    spread = (p90 - p50) / p50 if p50 and p90 and p90 > p50 else 0.0
    return max(LATENCY_TIE, min(spread, 0.25))


def no_winner_message(rows: Sequence[CandidateRow], baseline_size: int | None, partial_tried: bool = False,
                      notes: Sequence[str] = ()) -> str:
    """Why nothing won, as it happened: over the budget, within it but not lighter, or failed before judging.

    "No candidate stayed within the accuracy budget" is said only when that is true: on a model whose
    weights no quantizer finds (Paddle2ONNX's ``Constant`` nodes), every candidate is within the budget
    at 1.00x, and blaming accuracy would send the user the wrong way.
    """
    over = [r for r in rows if r.over_budget]
    not_lighter = [r for r in rows if r.status == "rejected" and not r.over_budget]
    failed = [r for r in rows if r.status == "failed"]
    parts = []
    if over:
        parts.append(f"{len(over)} over the accuracy budget"
                     + (", even with the worst nodes kept in float" if partial_tried else ""))
    if not_lighter:
        smallest = min((r.size_bytes for r in not_lighter if r.size_bytes), default=None)
        size = f"; the smallest is {smallest / baseline_size:.2f}x fp32's size" if smallest and baseline_size else ""
        parts.append(f"{len(not_lighter)} within the budget but not lighter than fp32{size}")
    if failed:
        parts.append(f"{len(failed)} failed before they could be judged")
    if over and not not_lighter and not failed:
        head = "nothing qualifies: no candidate stayed within the accuracy budget" + (
            ", even with the worst nodes kept in float" if partial_tried else "")
    elif not_lighter and not over and not failed:
        head = "nothing qualifies: every candidate stayed within the accuracy budget, but none is lighter than fp32"
        head += parts[0][parts[0].index(";"):] if ";" in parts[0] else ""
    else:
        head = "nothing qualifies: " + ", ".join(parts) if parts else "nothing qualifies: no candidate was judged"
    return head + "; see the report for how far each one was" + "".join(f"; {note}" for note in notes)
