"""A sweep on Ray: every model's lighten is one task; its OUTDIR comes back to this machine."""

from __future__ import annotations

import os
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..events import Event
from ..executors.transfer import pack, unpack
from .manifest import ModelJob
from .outcome import ModelOutcome


def run_on_ray(jobs: Sequence[ModelJob], root: Path, force: bool, ray_options: Mapping[str, Any], cpus: float,
               finished: Callable[[ModelOutcome], None], emit: Event
               ) -> dict[str, Any]:
    from ..atomic import replace_dir
    from ..executors.ray import DEFAULT_MAX_RETRIES, POLL_SECONDS, RayExecutor
    from .one_model import path_values, staging_dir

    max_retries = ray_options.get("max_retries")
    max_retries = DEFAULT_MAX_RETRIES if max_retries is None else max_retries
    cluster = RayExecutor(address=ray_options.get("ray_address"), shared_dir=ray_options.get("shared_dir"),
                          max_retries=max_retries)
    bench_on = ray_options.get("bench_on")
    placements: Counter[str] = Counter()
    try:
        ray = cluster.connect()
        remote = ray.remote(_lighten_model)
        running: dict[Any, tuple[ModelJob, float]] = {}
        for job in jobs:
            files = path_values(job.options)
            inputs = {key: cluster._input(path) for key, path in files.items()}   # noqa: SLF001 - one owner
            sizes = sum(os.path.getsize(p) for p in files.values() if os.path.isfile(p))
            options = {"num_cpus": cpus, "memory": _memory_for(sizes), "max_retries": max_retries,
                       "retry_exceptions": False}
            ref = remote.options(**options).remote(job.name, dict(job.options), files, inputs, cpus, bench_on,
                                                   max_retries)
            running[ref] = (job, time.monotonic())
            emit("model_start", {"name": job.name})
        try:
            while running:
                ready, _ = ray.wait(list(running), num_returns=1, timeout=POLL_SECONDS)
                for ref in ready:
                    job, began = running.pop(ref)
                    try:
                        reply = ray.get(ref)
                    except ray.exceptions.RayError as exc:
                        finished(ModelOutcome(job.name, job.source, status="failed",
                                              message=cluster._fault_message(exc),   # noqa: SLF001
                                              seconds=round(time.monotonic() - began, 1)))
                        continue
                    outcome = ModelOutcome.from_dict(reply["outcome"])
                    if reply.get("outdir") is not None:
                        staged = staging_dir(root, job.name)
                        try:
                            produced = unpack(reply["outdir"], staged)
                            replace_dir(produced, root / job.name)
                        finally:
                            import shutil

                            shutil.rmtree(staged, ignore_errors=True)
                        outcome.output_dir = str(root / job.name)
                    placements[(outcome.ran_on or {}).get("node_id", "?")[:12]] += 1
                    finished(outcome)
        finally:
            for ref in running:
                ray.cancel(ref, recursive=True)
        info = cluster.describe()
        info["models_per_node"] = dict(placements)
        info["cpus_per_model"] = cpus
        return info
    finally:
        cluster.close()


def _memory_for(source_bytes: int) -> int:
    """A model's lighten holds a few copies of it at once (as a candidate task does), plus the runtime."""
    from .one_model import BASE_MEMORY

    return int(BASE_MEMORY + 8 * source_bytes)


def _lighten_model(name: str, options: dict[str, Any], files: Mapping[str, str], inputs: Mapping[str, Any],
                   cpus: float, bench_on: str | None, max_retries: int) -> dict[str, Any]:
    """On a worker: unpack the inputs, lighten with the local pool, pack OUTDIR."""
    import ray

    from ..executors.ray_tasks import materialize, node_info
    from .manifest import ModelJob
    from .one_model import relocate, run_here

    node = node_info()
    with tempfile.TemporaryDirectory(prefix=f"onnxlite-sweep-{name}-") as tmp:
        options = dict(options)
        source = options["source"]
        for index, (key, path) in enumerate(files.items()):
            value = inputs[key]
            if not isinstance(value, (str, dict)):
                value = ray.get(value)
            local = materialize(value, Path(tmp) / f"in{index}")
            relocate(options, key, path, str(local))
        options.setdefault("workers", max(1, int(cpus)))
        extra: dict[str, Any] = {}
        if bench_on:
            from ..executors.ray import RayExecutor

            # Candidates stay on this node (the local pool); only the benchmark goes to the labelled node.
            extra["executor"] = _Split(RayExecutor(bench_on=bench_on, max_retries=max_retries))
        out = Path(tmp) / "out" / name
        outcome = run_here(ModelJob(name, options), out, False, lambda _k, _i: None, **extra)
        outcome.ran_on, outcome.source = node, source
        return {"outcome": outcome.to_dict(), "outdir": pack(out) if out.is_dir() else None}


class _Split:
    """Candidates in the local pool of this node, the benchmark through a Ray executor (``bench_on``)."""

    name = "local+ray-bench"

    def __init__(self, bench: Any):
        from ..executors.local import LocalExecutor

        self.local, self.remote = LocalExecutor(), bench

    def run_tasks(self, *args: Any, **kwargs: Any) -> Any:
        return self.local.run_tasks(*args, **kwargs)

    def bench(self, models: Any, **options: Any) -> Any:
        return self.remote.bench(models, **options)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "candidates": self.local.describe(), "bench": self.remote.describe()}

    def close(self) -> None:
        self.remote.close()
