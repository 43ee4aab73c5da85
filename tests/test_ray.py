"""The Ray executor and sweeps on a local two-node cluster (one CPU per node), with tiny ONNX models.

One cluster serves the whole module: starting one costs 5-6 s here.
"""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import numpy as np
import pytest

import onnxlite

from conftest import make_plugin_dist, save_graph

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow

BENCH_LABEL = {"onnxlite-test": "bench"}
STORE = 80 * 1024**2   # object store per node: the tiny models need little, and the machine is shared

# Quantizers that kill the Ray worker running their candidate (the candidate's process is its child),
# the way the kernel's OOM killer or a lost node would: "dies-once" only on its first attempt.
KILLERS = '''
import os, signal
from pathlib import Path
from onnxlite import hookimpl, QuantizerSpec


def _kill_the_ray_worker():
    parent = os.getppid()
    with open(f"/proc/{parent}/cmdline", "rb") as f:
        title = f.read()
    if b"ray::" not in title:          # never anything but a Ray worker (not pytest, not lighten)
        os.abort()
    os.kill(parent, signal.SIGKILL)
    os._exit(1)


class DiesOnce:
    def quantize(self, model, output, options, context):
        mark = Path(os.environ["ONNXLITE_TEST_MARKS"]) / "dies-once"
        if not mark.exists():
            mark.write_text("first attempt")
            _kill_the_ray_worker()
        from onnxruntime.quantization import quantize_dynamic
        quantize_dynamic(str(model), str(output))


class Sleeps:
    def quantize(self, model, output, options, context):
        import time
        (Path(os.environ["ONNXLITE_TEST_MARKS"]) / "sleeps").write_text("started")
        time.sleep(120)


class SlowOnce:
    """Its first attempt waits (until its Ray worker is gone) for the test to remove the node it runs on."""

    def quantize(self, model, output, options, context):
        import time
        mark = Path(os.environ["ONNXLITE_TEST_MARKS"]) / "slow-once"
        if not mark.exists():
            parent = os.getppid()
            mark.write_text("first attempt")
            deadline = time.monotonic() + 60
            while os.getppid() == parent and time.monotonic() < deadline:
                time.sleep(0.1)
            os._exit(1)
        from onnxruntime.quantization import quantize_dynamic
        quantize_dynamic(str(model), str(output))


class AlwaysDies:
    def quantize(self, model, output, options, context):
        _kill_the_ray_worker()


@hookimpl
def register_quantizers():
    return [QuantizerSpec(name="dies-once", description="its worker is killed on the first attempt",
                          factory=DiesOnce),
            QuantizerSpec(name="always-dies", description="its worker is killed every time", factory=AlwaysDies),
            QuantizerSpec(name="sleeps", description="takes two minutes", factory=Sleeps),
            QuantizerSpec(name="slow-once", description="waits on its first attempt", factory=SlowOnce)]
'''


def tiny_mlp(path: Path, seed: int = 0, hidden: int = 128) -> Path:
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    w1 = (rng.standard_normal((32, hidden)) / np.sqrt(32)).astype(np.float32)
    b1 = (rng.standard_normal(hidden) * 0.1).astype(np.float32)
    w2 = (rng.standard_normal((hidden, 8)) / np.sqrt(hidden)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Add", ["h", "b1"], ["hb"]),
             helper.make_node("Relu", ["hb"], ["r"]), helper.make_node("MatMul", ["r", "w2"], ["y"])]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])],
                              [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(b1, "b1"),
                               numpy_helper.from_array(w2, "w2")])
    save_graph(graph, path)
    return path


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Head node plus one node labelled for benchmarks; the test plugins are on every worker's path."""
    from ray.cluster_utils import Cluster

    site = make_plugin_dist(tmp_path_factory.mktemp("site"), "acme-killers", "0.1", "acme_killers", KILLERS)
    marks = tmp_path_factory.mktemp("marks")
    saved = {k: os.environ.get(k) for k in ("PYTHONPATH", "ONNXLITE_TEST_MARKS")}
    # The nodes' workers inherit this environment when the cluster starts.
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), saved["PYTHONPATH"]]))
    os.environ["ONNXLITE_TEST_MARKS"] = str(marks)
    head = {"num_cpus": 1, "object_store_memory": STORE}
    nodes = Cluster(initialize_head=True, head_node_args=head)
    bench_node = nodes.add_node(num_cpus=1, object_store_memory=STORE, labels=BENCH_LABEL)
    nodes.wait_for_nodes()
    ray.init(address=nodes.address, include_dashboard=False, log_to_driver=False)
    try:
        yield {"cluster": nodes, "bench_node_id": bench_node.node_id, "site": site, "marks": marks}
    finally:
        ray.shutdown()
        nodes.shutdown()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture
def killer_plugins(cluster, fresh_plugins):
    fresh_plugins.syspath_prepend(str(cluster["site"]))   # this process builds the tasks, so it needs them too
    return cluster


def _candidates(result) -> dict[str, object]:
    return {c.name: c for c in result.candidates}


def test_ray_lighten_matches_the_local_pool(cluster, tmp_path):
    model = tiny_mlp(tmp_path / "mlp.onnx")
    # A budget only fp16 meets: the winner is decided by accuracy, not by a latency that noise could flip.
    # No result cache: the Ray run must compute every candidate itself, not read the local run's results.
    common = dict(strategies=["dynamic", "fp16"], metric="y.cosine_min", max_drop="1e-5", runs=5, cache=False)
    local = onnxlite.lighten(model, tmp_path / "local", **common)
    remote = onnxlite.lighten(model, tmp_path / "ray", executor="ray", **common)
    assert local.winner is not None and remote.winner is not None, (local.message, remote.message)
    assert remote.winner.name == local.winner.name == "fp16"
    mine, theirs = _candidates(remote), _candidates(local)
    assert sorted(mine) == sorted(theirs) and len(mine) >= 3
    for name, row in theirs.items():
        assert mine[name].status == row.status, name
        assert mine[name].size_bytes == row.size_bytes, name
        for metric, value in row.metrics.items():
            assert mine[name].metrics[metric] == pytest.approx(value, rel=1e-6, abs=1e-7), (name, metric)
    # The winner came back to this machine and is the same model.
    import onnx

    assert onnx.load(str(remote.model_path)).graph == onnx.load(str(local.model_path)).graph
    executor = remote.settings["executor"]
    assert executor["name"] == "ray" and sum(executor["tasks_per_node"].values()) == len(mine)


def test_bench_on_runs_the_benchmark_on_the_labelled_node(cluster, tmp_path):
    model = tiny_mlp(tmp_path / "mlp.onnx", seed=1)
    result = onnxlite.lighten(model, tmp_path / "out", executor="ray", bench_on="onnxlite-test=bench",
                              strategies=["dynamic"], metric="y.cosine_min", max_drop="5%", runs=5)
    measured = result.settings["bench_node"]
    assert measured["node_id"] == cluster["bench_node_id"]
    assert measured["labels"]["onnxlite-test"] == "bench"
    assert result.baseline.latency_ms and result.winner is not None
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["settings"]["bench_node"]["node_id"] == cluster["bench_node_id"]
    assert "onnxlite-test=bench" in (tmp_path / "out" / "report.md").read_text()


def test_files_can_travel_through_a_shared_folder(cluster, tmp_path):
    from onnxlite.executors.ray import RayExecutor

    shared = tmp_path / "shared"
    shared.mkdir()
    model = tiny_mlp(tmp_path / "mlp.onnx", seed=5)
    result = onnxlite.lighten(model, tmp_path / "out", executor=RayExecutor(shared_dir=shared), strategies=["fp16"],
                              metric="y.cosine_min", max_drop="5%", runs=3)
    assert result.winner is not None and result.model_path.is_file()
    assert list(shared.iterdir()) == []   # the run's folder there is removed at the end


def test_bench_on_a_label_no_node_has_is_one_usage_error(cluster, tmp_path):
    model = tiny_mlp(tmp_path / "mlp.onnx")
    with pytest.raises(onnxlite.UsageError, match="no live node of the Ray cluster carries that label"):
        onnxlite.lighten(model, tmp_path / "out", executor="ray", bench_on="arch=riscv", strategies=["dynamic"],
                         metric="y.cosine_min", max_drop="5%", runs=3)
    assert not (tmp_path / "out").exists()


def test_a_killed_worker_is_retried_then_recorded_as_failed(killer_plugins, tmp_path):
    from onnxlite.executors.ray import RayExecutor

    model = tiny_mlp(tmp_path / "mlp.onnx", seed=2)
    result = onnxlite.lighten(model, tmp_path / "out", executor=RayExecutor(max_retries=1),
                              strategies=["dies-once", "always-dies", "dynamic"], metric="y.cosine_min",
                              max_drop="5%", runs=3)
    rows = _candidates(result)
    assert (killer_plugins["marks"] / "dies-once").read_text() == "first attempt"
    assert rows["dies-once"].status in {"ok", "winner"}, rows["dies-once"].reason   # the retry succeeded
    assert rows["always-dies"].status == "failed"
    assert "failed 2 times" in rows["always-dies"].reason and "WorkerCrashedError" in rows["always-dies"].reason
    assert result.winner is not None   # the search went on


def test_a_lost_node_is_retried_on_another(killer_plugins, tmp_path):
    import threading
    import time

    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    nodes = killer_plugins["cluster"]
    doomed = nodes.add_node(num_cpus=1, object_store_memory=STORE)
    nodes.wait_for_nodes()
    release = tmp_path / "release"

    @ray.remote(num_cpus=1)
    def hold(path: str) -> None:
        while not os.path.exists(path):
            time.sleep(0.1)

    # The other two nodes are busy, so the candidate's first attempt can only run on the doomed one.
    holders = [hold.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False))
               .remote(str(release)) for node_id in (nodes.head_node.node_id, killer_plugins["bench_node_id"])]
    mark = killer_plugins["marks"] / "slow-once"

    def lose_the_node() -> None:
        deadline = time.monotonic() + 120
        while not mark.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        nodes.remove_node(doomed)
        release.write_text("go")

    killer = threading.Thread(target=lose_the_node, daemon=True)
    killer.start()
    try:
        result = onnxlite.lighten(tiny_mlp(tmp_path / "mlp.onnx", seed=4), tmp_path / "out", executor="ray",
                                  strategies=["slow-once"], metric="y.cosine_min", max_drop="5%", runs=3)
    finally:
        release.write_text("go")
        killer.join(timeout=60)
        ray.get(holders)
    assert mark.read_text() == "first attempt"
    row = _candidates(result)["slow-once"]
    assert row.status == "winner", row.reason
    assert doomed.node_id[:12] not in result.settings["executor"]["tasks_per_node"]


def test_ctrl_c_cancels_the_cluster_tasks_and_leaves_no_outdir(killer_plugins, tmp_path):
    import time

    model = tiny_mlp(tmp_path / "mlp.onnx", seed=3)
    mark = killer_plugins["marks"] / "sleeps"

    def interrupt_when_sleeping(kind, info):
        # fp16 is done; "sleeps" has a minute and more to go on the other node.
        if kind == "candidate_done" and info["name"] == "fp16":
            deadline = time.monotonic() + 60
            while not mark.exists() and time.monotonic() < deadline:
                time.sleep(0.1)
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        onnxlite.lighten(model, tmp_path / "out", executor="ray", strategies=["sleeps", "fp16"],
                         metric="y.cosine_min", max_drop="5%", runs=3, on_event=interrupt_when_sleeping)
    assert mark.read_text() == "started"
    assert not (tmp_path / "out").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    # This driver is still connected, so only the cancel can have freed the sleeping task's CPU.
    deadline = time.monotonic() + 30
    while ray.available_resources().get("CPU", 0) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ray.available_resources().get("CPU", 0) == 2


def _zoo(folder: Path, count: int) -> Path:
    folder.mkdir()
    entries = []
    for i in range(count):
        tiny_mlp(folder / f"m{i}.onnx", seed=10 + i, hidden=64 + 32 * i)
        entries.append(f'[[models]]\nsource = "m{i}.onnx"\n' + ('max_drop = "10%"\n' if i == 1 else ""))
    manifest = folder / "zoo.toml"
    manifest.write_text(textwrap.dedent("""
        [defaults]
        metric = "y.cosine_min"
        max_drop = "5%"
        runs = 3
        strategies = ["dynamic"]
    """) + "\n".join(entries))
    return manifest


def test_an_interrupted_sweep_resumes_and_keeps_what_finished(cluster, tmp_path):
    manifest = _zoo(tmp_path / "zoo", 3)
    root = tmp_path / "out"
    done: list[str] = []

    def stop_after_first(kind, info):
        if kind == "model_done":
            done.append(info["name"])
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        onnxlite.sweep(manifest, root, executor="ray", on_event=stop_after_first)
    first = done[0]
    assert sorted(p.name for p in root.iterdir() if not p.name.startswith(".") and p.is_dir()) == [first]
    summary = json.loads((root / "summary.json").read_text())
    assert [m["status"] for m in summary["models"] if m["name"] == first] == ["lightened"]
    assert sorted(m["status"] for m in summary["models"]) == ["lightened", "not run", "not run"]
    kept = (root / first / "model.onnx").stat()

    events: list[tuple[str, str]] = []
    # The rest also benchmark on the labelled node: a task of the model's task.
    result = onnxlite.sweep(manifest, root, executor="ray", bench_on="onnxlite-test=bench",
                            on_event=lambda kind, info: events.append((kind, info.get("name", ""))))
    assert result.ok, [m.message for m in result.models]
    assert [m.kept for m in result.models if m.name == first] == [True]
    assert ("model_kept", first) in events and ("model_start", first) not in events
    assert sorted(n for k, n in events if k == "model_start") == sorted({"m0", "m1", "m2"} - {first})
    assert (root / first / "model.onnx").stat().st_mtime_ns == kept.st_mtime_ns   # untouched
    for m in result.models:
        assert (root / m.name / "model.onnx").is_file() and (root / m.name / "recipe.toml").is_file()
        assert m.smaller and m.smaller > 2
    for m in result.models:
        if not m.kept:
            bench_node = json.loads((root / m.name / "report.json").read_text())["settings"]["bench_node"]
            assert bench_node["node_id"] == cluster["bench_node_id"], m.name
    assert "m2" in (root / "summary.html").read_text()
    assert not [p for p in root.iterdir() if p.name.endswith(".incoming")]
