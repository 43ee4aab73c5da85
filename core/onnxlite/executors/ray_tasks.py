"""What the Ray executor runs on the cluster's workers: one candidate, or the benchmark.

These functions travel to the workers by reference (``onnxlite.executors.ray_tasks.run_candidate``),
so every node needs the same onnxlite installed.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .machine import describe_machine
from .transfer import pack, unpack


def node_info() -> dict[str, Any]:
    import ray

    context = ray.get_runtime_context()
    info = describe_machine()
    info["node_id"] = context.get_node_id()
    for node in ray.nodes():
        if node["NodeID"] == info["node_id"]:
            info["labels"] = dict(node.get("Labels") or {})
            info["address"] = node.get("NodeManagerAddress")
            info["resources"] = {k: v for k, v in node["Resources"].items() if not k.startswith("node:")}
    return info


def materialize(value: Any, folder: Path) -> str | None:
    """An input as a local path: unpacked from the object store, or already on the shared folder."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if not isinstance(value, dict):   # an ObjectRef inside a list: Ray resolves only top-level arguments
        import ray

        value = ray.get(value)
    return str(unpack(value, folder))


def run_candidate(task: dict[str, Any], model: Any, judge: Any, calibration: Any,
                   shared_output: str | None) -> dict[str, Any]:
    """One candidate on this node, in its own subprocess, exactly as the local pool runs it."""
    import ray

    from ..jobs.candidate import run_tasks

    node_id = ray.get_runtime_context().get_node_id()
    with tempfile.TemporaryDirectory(prefix="onnxlite-candidate-") as tmp:
        work = Path(tmp)
        local = dict(task)
        local["model"] = materialize(model, work / "model")
        local["judge"] = materialize(judge, work / "judge")
        local["calibration"] = materialize(calibration, work / "calibration")
        out = Path(shared_output) if shared_output else work / "out"
        local["output"] = str(out / Path(task["output"]).name)
        result = list(run_tasks([local], work / "task", 1))[0]
        reply: dict[str, Any] = {"node": node_id[:12], "model": None}
        if result.status == "ok" and result.path:
            reply["model"] = result.path if shared_output else pack(result.path)
        result.path = None
        reply["result"] = result.to_dict()
        return reply


def run_bench(models: list[Any], names: Sequence[str] | None, options: dict[str, Any]) -> tuple[Any, dict]:
    from ..benchmark.bench import bench

    with tempfile.TemporaryDirectory(prefix="onnxlite-bench-models-") as tmp:
        paths = [str(materialize(m, Path(tmp) / f"m{i}")) for i, m in enumerate(models)]
        result = bench(paths, names=names, **options)
    return result, node_info()
