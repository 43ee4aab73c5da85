"""Mixed precision's sensitivity sweep gets a time share (issue 24): it stops starting probes when its share is
spent, plans from what it measured, and the verdict says it was cut.  Real searches on the fragile MLP."""

from __future__ import annotations

import math

import pytest

import onnxlite
from onnxlite.search import shares
from onnxlite.search.mixed_stage import mixed_nodes, mixed_probes
from onnxlite.search.trials import TimeBudget

from conftest import other_cpu
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


@pytest.mark.unit
def test_the_final_benchmark_takes_its_least_runs_only_once_the_budget_is_spent():
    from onnxlite.benchmark.stability import SEARCH_MIN_RUNS
    from onnxlite.search.stopping import final_runs

    assert final_runs(TimeBudget(None), 40) == (40, None)
    assert final_runs(TimeBudget(3600.0), 40) == (40, None)
    spent = TimeBudget(1.0, started=0.0)
    runs, note = final_runs(spent, 40)
    assert runs == SEARCH_MIN_RUNS and note is not None and f"{SEARCH_MIN_RUNS} runs per model" in note
    assert final_runs(spent, SEARCH_MIN_RUNS - 2) == (SEARCH_MIN_RUNS - 2, None)   # already fewer: left alone


def test_past_the_time_budget_the_benchmark_takes_its_least_runs(tmp_path):
    """The final benchmark's --runs is a most; once the --time-budget is spent it takes only the least (10), for
    every model it times (how many those are is the search's business; for the other kind of CPU,
    conftest.other_cpu, they are the same on either ISA)."""
    from onnxlite.benchmark.stability import SEARCH_MIN_RUNS

    from helpers import make_mlp

    model = make_mlp(tmp_path / "mlp.onnx")
    cache = tmp_path / "cache"
    options = {"strategies": ["dynamic"], "max_drop": "5%", "metric": "cosine_mean", "partial": False,
               "runs": 40, "cache_dir": cache, "target_cpu": other_cpu()}
    whole = onnxlite.lighten(str(model), tmp_path / "warm", **options)   # fills the cache: the cut run has a winner
    assert whole.evidence["bench_stopping"]["max_runs"] == 40 and "the least" not in whole.message
    cut = onnxlite.lighten(str(model), tmp_path / "cut", time_budget="0.01s", **options)
    assert cut.winner is not None and cut.winner.latency_ms, cut.message
    stopping = cut.evidence["bench_stopping"]
    timed = [r for r in cut.candidates if r.latency_ms]
    assert stopping["max_runs"] == SEARCH_MIN_RUNS, stopping
    assert stopping["runs_taken"] == [SEARCH_MIN_RUNS] * (1 + len(timed)), (stopping, [r.name for r in timed])
    assert f"benchmarked with {SEARCH_MIN_RUNS} runs per model, the least" in cut.message
    # the report says the runs taken as a sentence; the figures are in the JSON's evidence, not its settings
    assert cut.settings["bench_runs"].startswith(f"{SEARCH_MIN_RUNS} timed runs per model")
    assert "bench_stopping" not in cut.settings
    report = (tmp_path / "cut" / "report.md").read_text()
    assert f"{SEARCH_MIN_RUNS} timed runs per model" in report
