"""The local executor: candidates in a pool of subprocesses, the benchmark on this machine."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .machine import describe_machine, record_machine

if TYPE_CHECKING:
    from ..benchmark.bench import BenchResult
    from ..search.tasks import TaskResult


class LocalExecutor:
    name = "local"

    def __init__(self) -> None:
        self.tasks = 0

    def run_tasks(self, tasks: Sequence[Mapping[str, Any]], folder: Path, workers: int | None = None,
                  on_start: Callable[[Mapping[str, Any]], None] | None = None) -> Iterator[TaskResult]:
        from ..search.tasks import default_workers, run_tasks

        if workers is None:
            from ..modelio import model_size

            sizes = [model_size(t["model"]) for t in tasks if os.path.exists(t["model"])]
            workers = default_workers(max(sizes, default=0))   # the fp32 model's size, external data included
        self.tasks += len(tasks)
        yield from run_tasks(tasks, folder, workers, on_start=on_start)

    def bench(self, models: Sequence[str | os.PathLike[str]], **options: Any) -> BenchResult:
        from ..benchmark.bench import bench

        result = bench(models, **options)
        record_machine(result, describe_machine())
        return result

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "tasks": self.tasks}

    def close(self) -> None:
        pass
