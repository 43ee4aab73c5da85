"""The local executor: candidates in warm worker processes (or a process each), the benchmark on this machine."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .machine import describe_machine, record_machine

if TYPE_CHECKING:
    from ..benchmark.bench import BenchResult
    from ..jobs.candidate import JobResult
    from .pool import WorkerPool


class LocalExecutor:
    """``warm=True`` (the default): a :class:`~onnxlite.executors.pool.WorkerPool` kept for the whole search;
    ``warm=False``: a fresh process per candidate, as before the pool (``benchmarks/lighten_cost.py`` compares them).
    """

    name = "local"

    def __init__(self, warm: bool = True) -> None:
        self.tasks = 0
        self.warm = warm
        self.pool: WorkerPool | None = None
        self._pool_dir: tempfile.TemporaryDirectory[str] | None = None

    def run_tasks(self, tasks: Sequence[Mapping[str, Any]], folder: Path, workers: int | None = None,
                  on_start: Callable[[Mapping[str, Any]], None] | None = None,
                  should_start: Callable[[Mapping[str, Any]], bool] | None = None) -> Iterator[JobResult]:
        from ..jobs.candidate import default_workers, run_tasks

        if workers is None:
            from ..modelio import model_size

            sizes = [model_size(t["model"]) for t in tasks if os.path.exists(t["model"])]
            workers = default_workers(max(sizes, default=0))   # the fp32 model's size, external data included
        if not self.warm:
            if should_start is not None:
                tasks = [t for t in tasks if should_start(t)]   # checked once, up front: run_tasks takes no hook
            self.tasks += len(tasks)
            yield from run_tasks(tasks, folder, workers, on_start=on_start)
            return
        if self.pool is None:
            from .pool import WorkerPool

            # the workers' logs outlive any one batch's folder, and go with the executor
            self._pool_dir = tempfile.TemporaryDirectory(prefix="onnxlite-workers-")
            self.pool = WorkerPool(Path(self._pool_dir.name), workers)

        def counted(task: Mapping[str, Any]) -> None:
            self.tasks += 1
            if on_start:
                on_start(task)

        yield from self.pool.run(tasks, folder, workers, on_start=counted, should_start=should_start)

    def bench(self, models: Sequence[str | os.PathLike[str]], **options: Any) -> BenchResult:
        from ..benchmark.bench import bench

        result = bench(models, **options)
        record_machine(result, describe_machine())
        return result

    def describe(self) -> dict[str, Any]:
        info: dict[str, Any] = {"name": self.name, "tasks": self.tasks, "warm_workers": self.warm}
        if self.pool is not None:
            info |= {"workers_started": self.pool.started, "workers_replaced": self.pool.replaced}
        return info

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
            self.pool = None
        if self._pool_dir is not None:
            self._pool_dir.cleanup()
            self._pool_dir = None
