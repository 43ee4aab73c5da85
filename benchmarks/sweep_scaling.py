"""A sweep of 8 small models on one Ray node against two nodes of a local cluster.

Run:
    .venv/bin/python benchmarks/sweep_scaling.py [--models 8] [--hidden 512]

Builds 8 MLPs (ONNX, 256 inputs, hidden sizes from --hidden up) and a manifest
(dynamic and fp16 strategies, 1 thread, 10 benchmark runs), then sweeps it with
``ray.cluster_utils.Cluster``: once with one node of 1 CPU and once with two
nodes of 1 CPU each (1 CPU per model), plus the local executor (one model after
another) as the baseline, after an untimed one-model warm-up.  Prints each
one's wall time and its speedup over local (above 1 is faster), cluster
start-up apart.

On one physical machine two "nodes" share its cores, so this measures how well
the sweep keeps two workers busy and what moving inputs and OUTDIRs costs, not
what two real machines would give.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np


def tiny_mlp(path: Path, seed: int, hidden: int) -> None:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    w1 = (rng.standard_normal((256, hidden)) / 16).astype(np.float32)
    w2 = (rng.standard_normal((hidden, hidden)) / np.sqrt(hidden)).astype(np.float32)
    w3 = (rng.standard_normal((hidden, 10)) / np.sqrt(hidden)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h1"]), helper.make_node("Relu", ["h1"], ["r1"]),
             helper.make_node("MatMul", ["r1", "w2"], ["h2"]), helper.make_node("Relu", ["h2"], ["r2"]),
             helper.make_node("MatMul", ["r2", "w3"], ["y"])]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 256])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 10])],
                              [numpy_helper.from_array(w, n) for w, n in ((w1, "w1"), (w2, "w2"), (w3, "w3"))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))


def manifest(folder: Path, count: int, hidden: int) -> Path:
    entries = []
    for i in range(count):
        tiny_mlp(folder / f"mlp{i}.onnx", seed=i, hidden=hidden + 64 * i)
        entries.append(f'[[models]]\nsource = "mlp{i}.onnx"\n')
    path = folder / "zoo.toml"
    path.write_text(textwrap.dedent("""
        [defaults]
        max_drop = "5%"
        strategies = ["dynamic", "fp16"]
        threads = 1
        runs = 10
    """) + "\n".join(entries))
    return path


def run(path: Path, out: Path, nodes: int | None) -> tuple[float, float, dict]:
    import onnxlite

    if nodes is None:
        started = time.perf_counter()
        result = onnxlite.sweep(path, out, force=True)
        return time.perf_counter() - started, 0.0, result.executor
    import ray
    from ray.cluster_utils import Cluster

    began = time.perf_counter()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "object_store_memory": 256 * 1024**2})
    for _ in range(nodes - 1):
        cluster.add_node(num_cpus=1, object_store_memory=256 * 1024**2)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
    startup = time.perf_counter() - began
    try:
        started = time.perf_counter()
        result = onnxlite.sweep(path, out, executor="ray", cpus_per_model=1, force=True)
        seconds = time.perf_counter() - started
    finally:
        ray.shutdown()
        cluster.shutdown()
    if not result.ok:
        sys.exit(f"the sweep did not lighten every model: {[m.message for m in result.models]}")
    return seconds, startup, result.executor


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=512)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sweep-scaling-") as tmp:
        folder = Path(tmp) / "zoo"
        folder.mkdir()
        path = manifest(folder, args.models, args.hidden)
        # Untimed warm-up (imports, page cache), so the first contender does not pay for everyone.
        import onnxlite
        from onnxlite.sweeps import read_manifest
        from onnxlite.sweeps.manifest import Manifest

        plan = read_manifest(path)
        onnxlite.sweep(Manifest(plan.path, plan.models[:1]), Path(tmp) / "warm-up")
        figures = {}
        for label, nodes in (("local", None), ("ray, 1 node", 1), ("ray, 2 nodes", 2)):
            figures[label] = run(path, Path(tmp) / label.replace(" ", "").replace(",", "-"), nodes)
            print(f"  {label}: {figures[label][0]:.1f} s", flush=True)
    import ray

    load = os.getloadavg()
    print(f"\n{args.models} MLPs (hidden {args.hidden}..{args.hidden + 64 * (args.models - 1)}), dynamic+fp16, "
          f"1 thread; ray {ray.__version__}, {platform.machine()} {os.cpu_count()} CPUs, "
          f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    base = figures["local"][0]
    print(f"{'executor':14}{'sweep s':>9}{'speedup':>9}{'start-up s':>12}  models per node")
    for label, (seconds, startup, info) in figures.items():
        per_node = info.get("models_per_node", {})
        print(f"{label:14}{seconds:9.1f}{base / seconds:9.2f}{startup:12.1f}  "
              f"{', '.join(str(n) for n in per_node.values()) or '-'}")


if __name__ == "__main__":
    main()
