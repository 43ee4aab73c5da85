"""``onnxlite bench`` and ``onnxlite.bench`` on small real models built here (fp32 and dynamic int8).

No timing assertions: latencies are checked for sanity and order
(p50 <= p90 <= p99), the interleaving through the recorded schedule, memory
through the worker processes' own figures.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

import onnxlite
from onnxlite.errors import UsageError

from conftest import run_cli, save_graph
from helpers import streaming_model


def _mlp(path: Path, width: int, layers: int, seed: int = 0) -> Path:
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    nodes, inits, prev = [], [], "x"
    for i in range(layers):
        inits += [numpy_helper.from_array((rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32),
                                          f"w{i}"),
                  numpy_helper.from_array(rng.standard_normal(width).astype(np.float32) * 0.1, f"b{i}")]
        nodes += [helper.make_node("MatMul", [prev, f"w{i}"], [f"m{i}"]),
                  helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"]),
                  helper.make_node("Relu", [f"a{i}"], [f"r{i}"])]
        prev = f"r{i}"
    nodes.append(helper.make_node("Identity", [prev], ["y"]))
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", width])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", width])], inits)
    return save_graph(graph, path, ir_version=9)


def _token_model(path: Path, vocab: int = 100, hidden: int = 32) -> Path:
    """A tiny "encoder": embedding lookup, masked mean over the sequence (dynamic batch and seq)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(1)
    emb = numpy_helper.from_array(rng.standard_normal((vocab, hidden)).astype(np.float32), "emb")
    axes = numpy_helper.from_array(np.array([1], np.int64), "axes")
    last = numpy_helper.from_array(np.array([2], np.int64), "last")
    nodes = [
        helper.make_node("Gather", ["emb", "input_ids"], ["h"]),
        helper.make_node("Cast", ["attention_mask"], ["m"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["m", "last"], ["m3"]),
        helper.make_node("Mul", ["h", "m3"], ["hm"]),
        helper.make_node("ReduceSum", ["hm", "axes"], ["s"], keepdims=0),
        helper.make_node("ReduceSum", ["m3", "axes"], ["n"], keepdims=0),
        helper.make_node("Div", ["s", "n"], ["pooled"]),
    ]
    graph = helper.make_graph(
        nodes, "tok",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("pooled", TensorProto.FLOAT, ["batch", hidden])], [emb, axes, last])
    return save_graph(graph, path, ir_version=9)


def _fixed_batch_one(path: Path) -> Path:
    """Loads fine but cannot run a batch of 2: a Reshape to a fixed [1, 4]."""
    from onnx import TensorProto, helper, numpy_helper

    shape = numpy_helper.from_array(np.array([1, 4], np.int64), "shape")
    graph = helper.make_graph([helper.make_node("Reshape", ["x", "shape"], ["y"])], "fixed",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], [shape])
    return save_graph(graph, path, ir_version=9)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    from onnxruntime.quantization import QuantType, quantize_dynamic

    root = tmp_path_factory.mktemp("bench_models")
    fp32 = _mlp(root / "mlp_fp32.onnx", 256, 3)
    int8 = root / "mlp_int8.onnx"
    quantize_dynamic(str(fp32), str(int8), weight_type=QuantType.QInt8)
    return {
        "fp32": fp32,
        "int8": int8,
        "tiny": _mlp(root / "tiny.onnx", 8, 1),
        # ~50 MB of weights: onnxruntime has to hold them, so its process must peak well above the tiny one's
        "big": _mlp(root / "big.onnx", 1536, 5),
        "tokens": _token_model(root / "tokens.onnx"),
        "fixed": _fixed_batch_one(root / "fixed.onnx"),
        "root": root,
    }


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def fp32_vs_int8(models):
    import onnxlite

    before = {k: _digest(models[k]) for k in ("fp32", "int8")}
    result = onnxlite.bench([models["fp32"], models["int8"]], batch=3, runs=24, warmup=2)
    return result, before


def test_rows_have_sane_figures(fp32_vs_int8, models):
    import onnx

    from onnxlite.modelio import model_size, op_counts

    result, _ = fp32_vs_int8
    assert [r.name for r in result.rows] == ["mlp_fp32", "mlp_int8"]
    for row, key in zip(result.rows, ("fp32", "int8")):
        assert row.status == "ok", row.note
        assert row.runs == 24 == len(row.latencies_ms)
        assert all(v > 0 for v in row.latencies_ms)
        lat = row.latency_ms
        assert 0 < lat["p50"] <= lat["p90"] <= lat["p99"] <= max(row.latencies_ms)
        assert min(row.latencies_ms) <= lat["mean"] <= max(row.latencies_ms)
        assert row.throughput == pytest.approx(3 / (lat["mean"] / 1e3))
        assert row.load_seconds > 0
        assert row.size_bytes == model_size(models[key])
        assert row.op_count == sum(op_counts(onnx.load(str(models[key]))).values())
        assert row.providers[0] == "CPUExecutionProvider"
    # dynamic int8 really is a different graph: integer ops, a quarter-ish of the weight bytes
    assert result.rows[1].op_count > result.rows[0].op_count
    assert result.rows[1].size_bytes < result.rows[0].size_bytes


def test_measurement_is_interleaved(fp32_vs_int8):
    result, _ = fp32_vs_int8
    order = [i for i, _ in result.schedule]
    assert len(order) >= 2 * 2
    # A B A B ...: never the same model twice in a row while both still had runs to do
    assert order[: len(order) // 2 * 2] == [0, 1] * (len(order) // 2)
    for index in (0, 1):
        assert sum(n for i, n in result.schedule if i == index) == 24


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads process states from /proc")
def test_idle_workers_are_paused_between_their_turns(models):
    """While one worker is timed, the others are stopped, so their spinning threads cannot take its cores."""
    import onnxlite

    def workers() -> dict[int, str]:
        states = {}
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                pid, rest = stat.read_text().split(" (", 1)
                cmdline = (stat.parent / "cmdline").read_bytes()
            except OSError:
                continue
            fields = rest.rsplit(") ", 1)[1].split()
            if int(fields[1]) == os.getpid() and b"onnxlite.benchmark.worker" in cmdline:
                states[int(pid)] = fields[0]
        return states

    seen: list[dict[int, str]] = []
    result = onnxlite.bench([models["fp32"], models["int8"]], batch=3, runs=8, warmup=1, runs_per_turn=2,
                            progress=lambda fraction, text: seen.append(workers()) if text.startswith("measuring")
                            else None)
    assert all(row.status == "ok" for row in result.rows)
    # Progress is reported between turns: by then the worker that just ran has been stopped too.
    assert len(seen) >= 4 and all(len(s) == 2 and set(s.values()) == {"T"} for s in seen), seen
    assert not workers()   # all were resumed and told to exit at the end


PARENT_SCRIPT = """
import json, os, sys, time
import onnxlite

def progress(fraction, text):
    if text.startswith("measuring"):
        pids = [int(p.name) for p in __import__("pathlib").Path("/proc").glob("[0-9]*")
                if p.name.isdigit() and _child(p)]
        open(sys.argv[3], "w").write(json.dumps(pids))
        time.sleep(600)   # killed here, with its workers paused

def _child(proc):
    try:
        stat = (proc / "stat").read_text()
        parent = int(stat.rsplit(") ", 1)[1].split()[1])
        return parent == os.getpid() and b"onnxlite.benchmark.worker" in (proc / "cmdline").read_bytes()
    except OSError:
        return False

onnxlite.bench([sys.argv[1], sys.argv[2]], batch=2, runs=50, warmup=1, runs_per_turn=1, progress=progress)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signal is Linux-only")
def test_paused_workers_die_with_a_killed_parent(models, tmp_path):
    """A paused worker cannot read EOF on stdin, so the kernel must end it when the parent dies."""
    import signal
    import subprocess
    import time

    script, pids_file = tmp_path / "parent.py", tmp_path / "pids.json"
    script.write_text(PARENT_SCRIPT)
    parent = subprocess.Popen([sys.executable, str(script), str(models["fp32"]), str(models["int8"]), str(pids_file)])
    try:
        deadline = time.monotonic() + 120
        while not pids_file.exists() or not pids_file.read_text():
            assert parent.poll() is None and time.monotonic() < deadline, "the benchmark never started measuring"
            time.sleep(0.05)
        workers = json.loads(pids_file.read_text())
        assert len(workers) == 2
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    deadline = time.monotonic() + 10
    while any(Path(f"/proc/{pid}").exists() and "Z" not in _state(pid) for pid in workers):
        assert time.monotonic() < deadline, {pid: _state(pid) for pid in workers}
        time.sleep(0.05)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()[0]
    except OSError:
        return "gone"


def test_memory_is_measured_in_separate_worker_processes(fp32_vs_int8):
    result, _ = fp32_vs_int8
    pids = {row.worker_pid for row in result.rows}
    assert os.getpid() not in pids and len(pids) == 2
    for row in result.rows:
        assert row.peak_rss_bytes > 0
        assert row.peak_rss_bytes >= row.baseline_rss_bytes > 0


def test_ratios_are_against_the_first_model(fp32_vs_int8):
    result, _ = fp32_vs_int8
    first, second = result.rows
    ratios = result.ratios()
    assert ratios[0] == {"size": 1.0, "speedup": 1.0, "memory": 1.0}
    assert ratios[1]["size"] == pytest.approx(second.size_bytes / first.size_bytes)
    assert ratios[1]["speedup"] == pytest.approx(first.latency_ms["p50"] / second.latency_ms["p50"])
    assert ratios[1]["memory"] == pytest.approx(second.peak_rss_bytes / first.peak_rss_bytes)
    data = json.loads(json.dumps(result.to_dict()))
    assert data["baseline"] == "mlp_fp32"
    assert data["models"][1]["ratios"]["size"] == pytest.approx(ratios[1]["size"])
    assert data["schedule"] == [list(t) for t in result.schedule]


def test_inputs_are_never_modified(fp32_vs_int8, models):
    _, before = fp32_vs_int8
    assert {k: _digest(models[k]) for k in before} == before


def test_report_from_bench(fp32_vs_int8):
    result, _ = fp32_vs_int8
    report = result.to_report("fp32 vs int8")
    assert report.kind == "bench"
    assert [r.status for r in report.rows] == ["reference", "ok"]
    assert report.settings["batch"] == 3 and report.settings["provider"] == "cpu"
    assert report.rows[1].latency_ms == result.rows[1].latency_ms


def test_bigger_model_takes_more_memory(models):
    import onnxlite

    seen = []
    result = onnxlite.bench([models["tiny"], models["big"]], batch=2, runs=4, warmup=1,
                            progress=lambda fraction, text: seen.append((fraction, text)))
    fractions = [f for f, _ in seen]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
    assert any(text == "loading big" for _, text in seen) and any(t.startswith("measuring") for _, t in seen)
    tiny, big = result.rows
    assert big.peak_rss_bytes > tiny.peak_rss_bytes
    assert big.model_rss_bytes > tiny.model_rss_bytes
    assert result.ratios()[1]["memory"] > 1


def test_time_budget_and_padded_token_inputs(models):
    import onnxlite

    result = onnxlite.bench([models["tokens"], models["tokens"]], batch=4, seq_len=16, seconds=0.05, warmup=2)
    assert [r.name for r in result.rows] == ["tokens", "tokens#2"]
    for row in result.rows:
        assert row.status == "ok", row.note
        assert sum(row.latencies_ms) >= 50   # ran until its budget of running time was spent
    order = [i for i, _ in result.schedule]
    assert order[:4] == [0, 1, 0, 1]
    assert result.settings["seconds"] == 0.05


def test_data_file_and_too_few_samples(models, tmp_path):
    import onnxlite

    data = tmp_path / "samples.npz"
    rng = np.random.default_rng(0)
    np.savez(data, x=rng.standard_normal((7, 8)).astype(np.float32), labels=np.arange(7))
    result = onnxlite.bench([models["tiny"]], batch=3, runs=5, warmup=0, data=data)
    assert result.rows[0].status == "ok" and result.rows[0].runs == 5
    assert result.settings["inputs"] == str(data)
    with pytest.raises(UsageError, match="fewer than --batch 8"):
        onnxlite.bench([models["tiny"]], batch=8, runs=2, data=data)


def test_explicit_feeds_set_the_batch(models):
    import onnxlite

    feeds = {"x": np.ones((5, 8), np.float32)}
    result = onnxlite.bench([models["tiny"]], feeds=feeds, runs=3, warmup=0)
    assert result.batch == 5
    assert result.rows[0].throughput == pytest.approx(5 / (result.rows[0].latency_ms["mean"] / 1e3))


def test_the_batch_is_read_on_each_inputs_own_sample_axis(tmp_path):
    """A state [2, batch, 8] batches on axis 1 and a scalar sample rate on none (issue 12, cause 4):
    bench read axis 0 of every input, so --data crashed on the scalar (IndexError) and given feeds
    fell back to a batch of 1, dividing the throughput by their real batch."""
    import onnxlite

    model = streaming_model(tmp_path / "stream.onnx")
    rng = np.random.default_rng(1)
    data = tmp_path / "stream.npz"
    np.savez(data, x=rng.standard_normal((12, 16)).astype(np.float32),
             state=rng.standard_normal((2, 12, 8)).astype(np.float32), sr=np.array(16000, np.int64))
    result = onnxlite.bench([model], batch=4, runs=3, warmup=1, data=data)
    row = result.rows[0]
    assert row.status == "ok", row.note
    assert result.batch == 4 and row.throughput == pytest.approx(4 / (row.latency_ms["mean"] / 1e3))
    # 12 samples on the state's axis 1, not its 2 on axis 0
    with pytest.raises(UsageError, match="12 samples, fewer than --batch 13"):
        onnxlite.bench([model], batch=13, runs=2, data=data)
    feeds = {"x": rng.standard_normal((6, 16)).astype(np.float32), "state": np.zeros((2, 6, 8), np.float32),
             "sr": np.array(16000, np.int64)}
    given = onnxlite.bench([model], feeds=feeds, runs=3, warmup=0)
    assert given.rows[0].status == "ok", given.rows[0].note
    assert given.batch == 6
    assert given.rows[0].throughput == pytest.approx(6 / (given.rows[0].latency_ms["mean"] / 1e3))
    generated = run_cli("bench", str(model), "--batch", "3", "--runs", "2", "--warmup", "0", "--json")
    assert generated.returncode == 0, generated.stderr
    assert json.loads(generated.stdout)["models"][0]["status"] == "ok"


def test_a_model_that_fails_to_run_is_reported_failed(models):
    import onnxlite

    result = onnxlite.bench([models["tiny"], models["fixed"]], batch=2, runs=4, warmup=1)
    ok, failed = result.rows
    assert ok.status == "ok" and ok.runs == 4
    assert failed.status == "failed" and failed.latency_ms is None
    assert "reshape" in failed.note.lower()
    assert result.to_report().rows[1].status == "failed"


@pytest.mark.parametrize("kwargs, match", [
    ({"batch": 0}, "--batch"),
    ({"runs": 0}, "--runs"),
    ({"seconds": -1.0}, "--seconds"),
    ({"names": ["a", "b"]}, "--name"),
])
def test_bad_arguments(models, kwargs, match):
    import onnxlite

    with pytest.raises(UsageError, match=match):
        onnxlite.bench([models["tiny"]], **kwargs)


# -- the command ---------------------------------------------------------------------------------------

def test_cli_json_and_report(models, tmp_path):
    out = tmp_path / "out"
    proc = run_cli("bench", str(models["fp32"]), str(models["int8"]), "--runs", "6", "--warmup", "1",
                   "--batch", "2", "--threads", "1", "--json", "--report", str(out))
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert [m["name"] for m in data["models"]] == ["mlp_fp32", "mlp_int8"]
    assert data["settings"]["threads"] == 1 and data["batch"] == 2
    assert all("latencies_ms" not in m for m in data["models"])
    assert [i for i, _ in data["schedule"]][:2] == [0, 1]
    for name in ("report.html", "report.json", "report.md"):
        assert (out / name).stat().st_size > 0
    assert data["report"]["html"] == str(out / "report.html")
    saved = json.loads((out / "report.json").read_text())
    assert saved["kind"] == "bench" and saved["baseline"] == "mlp_fp32"


def test_cli_prints_the_table_with_ratios(models):
    proc = run_cli("bench", str(models["fp32"]), str(models["int8"]), "--runs", "4", "--warmup", "0",
                   "--name", "fp32", "--name", "int8")
    assert proc.returncode == 0, proc.stderr
    for text in ("fp32", "int8", "p50 ms", "speedup", "size ratio", "peak RSS", "reference"):
        assert text in proc.stdout


def test_cli_failed_model_exits_1(models):
    proc = run_cli("bench", str(models["tiny"]), str(models["fixed"]), "--runs", "2", "--batch", "2")
    assert proc.returncode == 1
    assert "fixed failed" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("args, match", [
    (["--provider", "cuda"], "cuda"),
    (["--provider", "nosuch"], "nosuch"),
    (["--batch", "0"], "--batch"),
    (["--batch", "two"], "--batch"),
    (["--seconds", "0"], "--seconds"),
])
def test_cli_bad_options_exit_2(models, args, match):
    proc = run_cli("bench", str(models["tiny"]), *args)
    assert proc.returncode == 2, proc.stderr
    assert match in proc.stderr and "Traceback" not in proc.stderr


def test_cli_unreadable_and_missing_models_exit_2(tmp_path, models):
    bad = tmp_path / "broken.onnx"
    bad.write_text("this is not a protobuf")
    before = bad.read_bytes()
    proc = run_cli("bench", str(models["tiny"]), str(bad))
    assert proc.returncode == 2
    assert str(bad) in proc.stderr and "not a readable ONNX model" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and bad.read_bytes() == before
    proc = run_cli("bench", str(tmp_path / "missing.onnx"))
    assert proc.returncode == 2 and "missing.onnx" in proc.stderr


def test_models_onnxruntime_runs_are_benched_though_onnx_checker_refuses_them(tmp_path):
    """onnxruntime's transformer fusions write LayerNormalization into opset-13 graphs, and its float16
    converter leaves Casts out of topological order: onnx's checker refuses both, onnxruntime runs both,
    so bench (and lighten's benchmark of such candidates) must not refuse them.  A truly unknown
    operator is still one line, exit 2 (tests/test_bad_input.py)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], axis=-1, name="ln")], "ln13",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])],
        [numpy_helper.from_array(np.ones(8, np.float32), "g"), numpy_helper.from_array(np.zeros(8, np.float32), "b")])
    path = tmp_path / "ln13.onnx"
    save_graph(graph, path, opset=13, ir_version=7)
    with pytest.raises(Exception, match="No Op registered for LayerNormalization"):
        onnx.checker.check_model(str(path))
    half = onnxlite.quantize(path, tmp_path / "half.onnx", strategy="fp16", keep_io_types=False)
    result = onnxlite.bench([path, half.path], batch=2, runs=3, warmup=1)
    assert [r.latency_ms["p50"] > 0 for r in result.rows] == [True, True]


def test_seq_len_is_shown_only_for_models_with_a_sequence_axis(models):
    """Issue 25 §2: an MLP ``[batch, 8]`` has no sequence axis, so neither its bench settings nor compare's data
    line speak of one; a token model's do."""
    import onnxlite

    tokens = onnxlite.bench([models["tokens"]], batch=2, seq_len=16, runs=3, warmup=0)
    assert tokens.to_dict()["seq_len"] == 16 and tokens.to_report().settings["seq_len"] == 16
    mlp = onnxlite.bench([models["tiny"]], batch=2, runs=3, warmup=0)
    assert mlp.to_dict()["seq_len"] is None and "seq_len" not in mlp.to_report().settings
    compared = onnxlite.compare(models["tiny"], models["tiny"], samples=8)
    assert "seq" not in compared.data and "generated" in compared.data
    assert "(padded, seq " in onnxlite.compare(models["tokens"], models["tokens"], samples=4).data
