"""Mixed precision's sensitivity sweep gets a time share (issue 24): it stops starting probes when its share is
spent, plans from what it measured, and the verdict says it was cut.  Real searches on the fragile MLP."""

from __future__ import annotations

import math

import pytest

import onnxlite
from onnxlite.mixed_stage import mixed_nodes, mixed_probes
from onnxlite.search import shares
from onnxlite.search.trials import TimeBudget

from helpers import fragile_model


def _search(model, out, **options):
    return onnxlite.lighten(str(model), out, strategies=["dynamic", "mixed"], metric="cosine_mean", max_drop="1%",
                            runs=2, partial=False, cache=False, workers=1, **options)


@pytest.mark.unit
def test_the_share_is_half_of_what_is_left_and_ten_minutes_at_most():
    assert shares.mixed_seconds(TimeBudget(100.0)) == pytest.approx(50.0, abs=0.5)
    assert shares.mixed_seconds(TimeBudget(4000.0)) == shares.MIXED_SECONDS
    assert shares.mixed_seconds(TimeBudget(None)) == shares.MIXED_SECONDS
    assert shares.mixed_seconds(TimeBudget(1.0, started=0.0)) == 0.0   # a spent budget leaves no share
    # the share is a clock of its own, starting now; the search's budget it came from is left as it was
    budget = TimeBudget(100.0)
    share = shares.mixed_share(budget)
    assert share is not budget and share.seconds == pytest.approx(50.0, abs=0.5) and budget.seconds == 100.0
    assert share.started >= budget.started


def test_a_sweep_cut_by_its_share_plans_from_what_it_measured(tmp_path, monkeypatch):
    model = fragile_model(tmp_path / "fragile.onnx")
    nodes = mixed_nodes(model)
    order = [f"{n}={s}" for n, s in mixed_probes(model, nodes)]
    weights = [nodes[p.split("=")[0]] for p in order]
    assert weights == sorted(weights, reverse=True) and len(set(weights)) > 1   # heaviest node first
    whole = _search(model, tmp_path / "whole")
    sweep = whole.evidence["mixed"]["sweep"]
    assert sweep["measured"] == sweep["probes"] == len(order) >= 6 and not sweep["cut"], sweep
    assert "sweep was cut" not in whole.message

    # a share of a third of what the whole sweep took, one probe at a time: it measures some, not all
    monkeypatch.setattr(shares, "MIXED_SECONDS", sweep["seconds"] / 3)
    cut = _search(model, tmp_path / "cut")
    record = cut.evidence["mixed"]["sweep"]
    assert record["cut"] and 0 < record["measured"] < record["probes"] == len(order), record
    assert "mixed precision's sweep was cut at its time share" in cut.message
    # not a search cut short by --time-budget: no such verdict, no probe listed as a skipped strategy
    assert "cut short" not in cut.message and not any("mixed[" in s["strategy"] for s in cut.skipped)
    assert "cut_short" not in cut.settings
    # the heaviest nodes first: what it measured is the head of the order, the rest counts as unusable
    sensitivity = cut.evidence["mixed"]["sensitivity"]
    measured = [p for p in order if math.isfinite(sensitivity[p.split("=")[0]][p.split("=")[1]])]
    assert measured == order[:len(measured)] and len(measured) <= record["measured"]
    # the plan uses only schemes it measured (a node with none stays float)
    for round_ in cut.evidence["mixed"]["rounds"]:
        for node, scheme in round_["plan"].items():
            assert scheme == "float" or math.isfinite(sensitivity[node][scheme]), round_
    assert (tmp_path / "cut" / "recipe.toml").is_file()
