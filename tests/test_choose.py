"""How lighten picks its winner (onnxlite.search.choose) and words a run without one, on rows built here:
pure, fast unit tests."""

from __future__ import annotations

import pytest

from onnxlite.search.choose import (
    LATENCY_TIE,
    deciding_objective,
    latency_margin,
    no_winner_message,
    pick_winner,
)
from onnxlite.search.results import CandidateRow
from onnxlite.stats import Interval

pytestmark = pytest.mark.unit


def row(name: str, p50: float | None, size: int, *, strategy: str = "dynamic", status: str = "ok",
        p90: float | None = None, drop: float | None = None, interval: tuple[float, float] | None = None,
        over_budget: bool = False) -> CandidateRow:
    latency = None if p50 is None else {"p50": p50, "p90": p90 if p90 is not None else p50}
    out = CandidateRow(name=name, strategy=strategy, options={}, status=status, over_budget=over_budget,
                       size_bytes=size, latency_ms=latency)
    if drop is not None:
        out.drops["m"] = drop
    if interval is not None:
        out.intervals["m"] = Interval(drop or 0.0, interval[0], interval[1], interval[1], 0.95, "exact", 100).to_dict()
    return out


def test_the_fastest_wins_by_latency():
    rows = [row("slow", 10.0, 100), row("fast", 5.0, 400)]
    assert pick_winner(rows, "latency", baseline_p50=20.0).name == "fast"


def test_a_latency_tie_goes_to_the_smaller():
    rows = [row("fast", 5.0, 400), row("almost", 5.0 * (1 + LATENCY_TIE / 2), 100)]
    assert pick_winner(rows, "latency", baseline_p50=20.0).name == "almost"


def test_size_objective_picks_the_smallest():
    rows = [row("big", 1.0, 400), row("small", 9.0, 100)]
    assert pick_winner(rows, "size").name == "small"


def test_rejected_failed_and_unmeasured_rows_never_win():
    rows = [row("rejected", 1.0, 10, status="rejected"), row("failed", 1.0, 10, status="failed"),
            row("unmeasured", None, 10), row("ok", 5.0, 100)]
    assert pick_winner(rows, "latency", baseline_p50=20.0).name == "ok"
    assert pick_winner([rows[0], rows[1]]) is None


def test_when_nothing_beats_fp32_size_decides_but_a_clearly_slower_model_is_vetoed():
    # no candidate is faster than fp32's 10 ms beyond the tie margin: speed cannot decide...
    rows = [row("fp16", 16.0, 50), row("int8", 10.1, 100)]
    assert deciding_objective(rows, "latency", 10.0) == "size"
    # ...and the smallest would be fp16, but it is 60% slower than fp32: the veto keeps int8
    assert pick_winner(rows, "latency", baseline_p50=10.0).name == "int8"


def test_speed_decides_when_a_candidate_really_beats_fp32():
    rows = [row("int8", 5.0, 100)]
    assert deciding_objective(rows, "latency", 10.0) == "latency"
    assert deciding_objective(rows, "size", 10.0) == "size"
    assert deciding_objective(rows, "latency", None) == "latency"


@pytest.mark.parametrize(("p50", "p90", "margin"), [
    (10.0, 10.0, LATENCY_TIE), (10.0, 10.1, LATENCY_TIE), (10.0, 11.0, 0.1), (10.0, 100.0, 0.25),
])
def test_latency_margin_is_the_tie_or_the_runs_own_spread_capped(p50, p90, margin):
    assert latency_margin(row("r", p50, 1, p90=p90)) == pytest.approx(margin)


def test_equal_speed_and_size_the_smaller_drop_wins_when_intervals_do_not_overlap():
    rows = [row("a", 5.0, 100, drop=0.02, interval=(0.015, 0.025)),
            row("b", 5.0, 100, drop=0.001, interval=(0.0, 0.002))]
    assert pick_winner(rows, "latency", baseline_p50=20.0, primary="m").name == "b"


def test_an_accuracy_tie_prefers_the_strategy_that_needs_no_calibration():
    # static needs calibration data, dynamic does not: overlapping intervals tie, and dynamic wins
    rows = [row("static", 5.0, 100, strategy="static", drop=0.001, interval=(0.0, 0.01)),
            row("dynamic", 5.0, 100, strategy="dynamic", drop=0.004, interval=(0.0, 0.012))]
    assert pick_winner(rows, "latency", baseline_p50=20.0, primary="m").name == "dynamic"


def test_no_winner_over_budget():
    rows = [row("a", 5.0, 100, status="rejected", over_budget=True)]
    message = no_winner_message(rows, 400)
    assert message.startswith("nothing qualifies: no candidate stayed within the accuracy budget")
    assert "even with the worst nodes kept in float" in no_winner_message(rows, 400, partial_tried=True)


def test_no_winner_within_budget_but_not_lighter_gives_the_size():
    rows = [row("a", 5.0, 400, status="rejected")]
    message = no_winner_message(rows, 400)
    assert "every candidate stayed within the accuracy budget, but none is lighter than fp32" in message
    assert "1.00x fp32's size" in message


def test_no_winner_mixed_causes_are_all_counted_and_notes_follow():
    rows = [row("a", 5.0, 100, status="rejected", over_budget=True), row("b", None, 100, status="failed")]
    message = no_winner_message(rows, 400, notes=["a note"])
    assert "1 over the accuracy budget" in message and "1 failed before they could be judged" in message
    assert message.endswith("; a note")
    assert no_winner_message([], 400).startswith("nothing qualifies: no candidate was judged")
