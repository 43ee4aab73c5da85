"""The interleaved benchmark stops once the p50s are stable within the tie margin (issue 24).

The rule is driven through the real round loop (``measure_turns``) by recorded timings; one test
times real onnxruntime runs of a small MLP (fp32 and dynamic int8) and replays them.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from onnxlite.benchmark.bench import BenchRow
from onnxlite.benchmark.stability import STABLE_WITHIN, TIE_MARGIN, Stability, footnote, median_width
from onnxlite.benchmark.turns import measure_turns


class Recorded:
    """A benchmark worker that answers each turn with the next of its recorded latencies."""

    def __init__(self, latencies: Sequence[float]):
        self.latencies, self.at = list(latencies), 0

    def timed_turn(self, runs: int) -> dict:
        taken = self.latencies[self.at:self.at + runs]
        self.at += runs
        return {"ok": True, "latencies_ms": taken}

    def close(self) -> None:
        pass


def replay(sequences: Sequence[Sequence[float]], min_runs: int, max_runs: int, per_turn: int | None = 1):
    rows = [BenchRow(name=f"m{i}", path="") for i in range(len(sequences))]
    schedule: list[tuple[int, int]] = []
    stopping = measure_turns([Recorded(s) for s in sequences], rows, (min_runs, max_runs), 0, None, per_turn,
                             schedule, None)
    return rows, stopping, schedule


def ratio(rows) -> float:
    return statistics.median(rows[1].latencies_ms) / statistics.median(rows[0].latencies_ms)


def machine_like(seed: int, sigma: float, n: int = 400) -> tuple[np.ndarray, np.ndarray]:
    """fp32 at 10 ms and a candidate at 5 ms: log-normal noise, 3% of runs doubled (a neighbour's burst)."""
    rng = np.random.default_rng(seed)
    fp32, fast = 10 * np.exp(rng.normal(0, sigma, n)), 5 * np.exp(rng.normal(0, sigma, n))
    fp32[rng.random(n) < 0.03] *= 2
    fast[rng.random(n) < 0.03] *= 2
    return fp32, fast


@pytest.mark.unit
def test_the_tie_margin_is_the_searchs():
    from onnxlite.search.choose import LATENCY_TIE

    assert TIE_MARGIN == LATENCY_TIE and STABLE_WITHIN < TIE_MARGIN


@pytest.mark.unit
def test_a_stable_sequence_stops_early_and_says_so():
    fp32, fast = machine_like(0, 0.01)
    rows, stopping, schedule = replay([fp32, fast], 20, 400)
    taken = [len(r.latencies_ms) for r in rows]
    assert stopping["stopped_early"] and stopping["runs_taken"] == taken
    assert 20 <= taken[0] < 100 and taken[0] == taken[1]
    assert sum(n for _, n in schedule) == sum(taken)   # the schedule holds exactly the runs taken
    full = float(np.median(fast) / np.median(fp32))
    assert abs(ratio(rows) / full - 1) < TIE_MARGIN
    assert "stopped early" in footnote(stopping)


@pytest.mark.unit
def test_a_drifting_sequence_runs_to_the_maximum():
    """A candidate that slows down run after run (a leak, a throttle of its own) never has a stable p50."""
    fp32, fast = machine_like(1, 0.01)
    fast = fast * (1 + 0.01 * np.arange(len(fast)))
    rows, stopping, _ = replay([fp32, fast], 20, 200, per_turn=10)   # rounds of 10 runs each
    assert [len(r.latencies_ms) for r in rows] == [200, 200]
    assert not stopping["stopped_early"] and stopping["moved"] > STABLE_WITHIN
    assert "the maximum" in footnote(stopping)


@pytest.mark.unit
def test_a_noisy_sequence_runs_to_the_maximum():
    """20% noise: a running median can sit still by chance, but its interval is far wider than the margin."""
    stopped = []
    for seed in range(20):
        rows, stopping, _ = replay(list(machine_like(seed, 0.2, 150)), 20, 150)
        stopped.append(stopping["stopped_early"])
        assert [len(r.latencies_ms) for r in rows] == [150, 150] or stopping["stopped_early"]
    assert not any(stopped)


@pytest.mark.unit
@pytest.mark.parametrize("sigma", [0.01, 0.03, 0.05, 0.1])
def test_the_early_ratio_stays_within_the_tie_margin_of_the_full_runs(sigma):
    """Over many recorded machines, wherever the rule stops, the ratio is the full run's within the margin."""
    early = 0
    for seed in range(60):
        fp32, fast = machine_like(seed, sigma)
        rows, stopping, _ = replay([fp32, fast], 10, len(fp32))
        early += stopping["stopped_early"]
        full = float(np.median(fast) / np.median(fp32))
        assert abs(ratio(rows) / full - 1) < TIE_MARGIN, (seed, stopping)
    if sigma <= 0.03:
        assert early == 60   # quiet machines do stop early, every time


@pytest.mark.unit
def test_min_runs_equal_to_max_is_a_fixed_count():
    fp32, fast = machine_like(2, 0.0)
    rows, stopping, _ = replay([fp32, fast], 50, 50, per_turn=None)
    assert [len(r.latencies_ms) for r in rows] == [50, 50]
    assert stopping["reason"].startswith("fixed count") and footnote(stopping).endswith("(a fixed count)")


@pytest.mark.unit
def test_one_model_is_judged_on_its_own_p50():
    rng = np.random.default_rng(3)
    rows, stopping, _ = replay([10 * np.exp(rng.normal(0, 0.01, 300))], 20, 300)
    assert stopping["stopped_early"] and len(rows[0].latencies_ms) < 300


@pytest.mark.unit
def test_median_interval_width():
    assert median_width([1.0, 2.0]) == float("inf")
    assert median_width([5.0] * 50) == 0.0
    rng = np.random.default_rng(4)
    wide, narrow = median_width(list(rng.normal(10, 2, 200))), median_width(list(rng.normal(10, 0.2, 200)))
    assert 5 * narrow < wide < 0.1


@pytest.mark.unit
def test_a_failed_model_does_not_hold_the_others():
    stability = Stability(min_runs=5, max_runs=100)
    lat = [[10.0] * 30, [5.0] * 30, []]
    stopped = [stability.update(lat, [True, True, False]) for _ in range(5)]
    assert stopped[-1] and not stopped[0]


@pytest.fixture(scope="module")
def mlp_pair(tmp_path_factory) -> tuple[Path, Path]:
    from onnx import TensorProto, helper, numpy_helper, save
    from onnxruntime.quantization import QuantType, quantize_dynamic

    root = tmp_path_factory.mktemp("stability")
    rng = np.random.default_rng(0)
    # ~1 ms per fp32 batch: at tens of microseconds (width 512, batch 16) the scheduler's jitter was most of
    # every run, and the full run's own ratio was only known to within ~3%
    width, nodes, inits, prev = 1024, [], [], "x"
    for i in range(3):
        inits.append(numpy_helper.from_array((rng.standard_normal((width, width)) / np.sqrt(width))
                                             .astype(np.float32), f"w{i}"))
        nodes += [helper.make_node("MatMul", [prev, f"w{i}"], [f"m{i}"]),
                  helper.make_node("Relu", [f"m{i}"], [f"r{i}"])]
        prev = f"r{i}"
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", width])],
                              [helper.make_tensor_value_info(prev, TensorProto.FLOAT, ["batch", width])], inits)
    fp32 = root / "fp32.onnx"
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), str(fp32))
    int8 = root / "int8.onnx"
    quantize_dynamic(str(fp32), str(int8), weight_type=QuantType.QInt8)
    return fp32, int8


def test_real_runs_stop_within_the_tie_margin_of_the_full_run(mlp_pair):
    """onnxruntime timings of fp32 and int8: a full run of 150, then its own latencies replayed through the
    rule; and a live run that may stop early reports the runs it took in the JSON and the footnote."""
    import onnxlite

    full = onnxlite.bench(list(mlp_pair), batch=64, runs=150, warmup=3)   # an int: a fixed count
    assert full.settings["stopping"]["reason"].startswith("fixed count")
    assert [r.runs for r in full.rows] == [150, 150]
    recorded = [r.latencies_ms for r in full.rows]
    rows, stopping, _ = replay(recorded, 10, 150)
    full_ratio = full.rows[1].latency_ms["p50"] / full.rows[0].latency_ms["p50"]
    # The rule promises the early ratio within the tie margin of the true one; the full run's ratio is itself
    # an estimate of it, known to within its own 95% interval (on a loaded CI machine that was 1-4%, and a
    # 3.3% gap failed a bare TIE_MARGIN bound once), so the two may differ by the margin plus that interval.
    full_interval = Stability(10, 150).uncertainty(recorded, [True, True])
    assert abs(ratio(rows) / full_ratio - 1) < TIE_MARGIN + full_interval, (stopping, full_interval)

    live = onnxlite.bench(list(mlp_pair), batch=64, runs=(10, 150), warmup=3)
    record = live.to_dict(latencies=False)["settings"]["stopping"]
    assert record["runs_taken"] == [r.runs for r in live.rows]
    assert all(10 <= r.runs <= 150 for r in live.rows)
    assert record["stopped_early"] == (live.rows[0].runs < 150)
    assert footnote(record) in live.to_report().sections[0][1]


def test_cli_min_runs(mlp_pair):
    import json

    from conftest import run_cli

    done = run_cli("bench", *map(str, mlp_pair), "--runs", "12", "--min-runs", "12", "--warmup", "1", "--json")
    assert done.returncode == 0, done.stderr
    stopping = json.loads(done.stdout)["settings"]["stopping"]
    assert stopping["runs_taken"] == [12, 12] and not stopping["stopped_early"]
    table = run_cli("bench", *map(str, mlp_pair), "--runs", "12", "--min-runs", "4", "--warmup", "1")
    assert table.returncode == 0, table.stderr
    assert "timed runs per model" in table.stdout
    bad = run_cli("bench", str(mlp_pair[0]), "--min-runs", "0")
    assert bad.returncode == 2 and "--min-runs" in bad.stderr and "Traceback" not in bad.stderr


def test_runs_as_a_list_is_min_and_max(mlp_pair):
    """A manifest or JSON gives (min, max) as a list: the same as the tuple; anything else is one clear error."""
    import onnxlite
    from onnxlite.errors import UsageError

    fixed = onnxlite.bench(list(mlp_pair), batch=16, runs=[12, 12], warmup=1)
    assert fixed.settings["stopping"]["runs_taken"] == [12, 12] and not fixed.settings["stopping"]["stopped_early"]
    over = onnxlite.bench([mlp_pair[0]], batch=16, runs=[30, 8], warmup=1)   # a least over the most is the most
    assert over.settings["stopping"]["runs_taken"] == [8]
    with pytest.raises(UsageError, match="runs: expected a count or"):
        onnxlite.bench([mlp_pair[0]], batch=16, runs=[5], warmup=1)
