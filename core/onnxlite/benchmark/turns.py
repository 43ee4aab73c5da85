"""The rounds of an interleaved benchmark: warm-up, then turns A B A B ... until each model has its runs.

A round gives every model still measuring one turn; after each round the stopping rule
(:mod:`onnxlite.benchmark.stability`) may end the benchmark before the maximum.
"""

from __future__ import annotations

import math
from typing import Any

from .stability import Stability
from .workers import MIN_TURNS, TURN_SECONDS


def _warm_up(workers, rows, warmup, progress) -> list[float | None]:
    """Warm each worker up; each one's median warm-up latency in seconds (None without warm-up or on failure)."""
    estimates: list[float | None] = []
    for worker, row in zip(workers, rows):
        if not warmup:
            estimates.append(None)
            continue
        if progress:
            progress(0.0, f"warming up {row.name}")
        reply = worker.timed_turn(warmup)
        if not reply["ok"]:
            _fail(row, worker, reply["error"])
            estimates.append(None)
            continue
        lat = sorted(reply["latencies_ms"])
        estimates.append(lat[len(lat) // 2] / 1e3)
    return estimates


def measure_turns(workers, rows, counts: tuple[int, int], warmup, seconds, runs_per_turn, schedule,
             progress) -> dict[str, Any] | None:
    """Warm up, then turns round after round until every model has its runs (``counts``: min, max) or its
    seconds; what the stopping rule decided (None under ``seconds``).

    ``workers`` are anything with ``timed_turn(n)`` (the reply: ``ok``, ``latencies_ms`` or ``error``) and
    ``close()``: the worker processes here, recorded timings in the tests.
    """
    min_runs, runs = counts
    estimates = _warm_up(workers, rows, warmup, progress)
    # under --seconds the user asked for running time, not for stable figures
    stability = None if seconds else Stability(min_runs=min_runs, max_runs=runs)

    def turn_size(estimate: float | None) -> int:
        if runs_per_turn:
            return runs_per_turn
        n = max(1, round(TURN_SECONDS / estimate)) if estimate else 1
        return n if seconds else min(n, max(1, math.ceil(runs / MIN_TURNS)))

    per_turn = [turn_size(e) for e in estimates]
    done = [0] * len(rows)
    spent = [0.0] * len(rows)

    def remaining(i: int) -> bool:
        if rows[i].status == "failed":
            return False
        return spent[i] < seconds * 1e3 if seconds else done[i] < runs

    def fraction() -> float:
        live = [i for i in range(len(rows)) if rows[i].status != "failed"] or [0]
        if seconds:
            return min(1.0, sum(min(spent[i] / (seconds * 1e3), 1.0) for i in live) / len(live))
        return sum(min(done[i], runs) for i in live) / (runs * len(live))

    while any(remaining(i) for i in range(len(rows))):
        for i, (worker, row) in enumerate(zip(workers, rows)):
            if not remaining(i):
                continue
            n = per_turn[i] if seconds else min(per_turn[i], runs - done[i])
            reply = worker.timed_turn(n)
            if not reply["ok"]:
                _fail(row, worker, reply["error"])
                continue
            row.latencies_ms.extend(reply["latencies_ms"])
            # Keep sizing turns from the latest one (the warm-up's estimate may be missing or from cold runs).
            per_turn[i] = turn_size(sorted(reply["latencies_ms"])[n // 2] / 1e3)
            done[i] += n
            spent[i] += sum(reply["latencies_ms"])
            schedule.append((i, n))
            if progress:
                progress(fraction(), f"measuring {row.name}")
        if stability is not None and stability.update([r.latencies_ms for r in rows],
                                                      [r.status != "failed" for r in rows]):
            break
    return None if stability is None else stability.describe([len(r.latencies_ms) for r in rows])


def _fail(row: Any, worker: Any, error: str) -> None:
    row.status, row.note = "failed", error
    worker.close()
