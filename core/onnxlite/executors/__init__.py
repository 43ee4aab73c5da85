"""Where ``lighten`` runs its candidate tasks and its benchmark: this machine, or a Ray cluster.

Each candidate is already an independent task (inputs -> model file +
metrics, see :mod:`onnxlite.jobs.candidate`), so an executor only decides *where*
tasks run and how their inputs and finished models travel:

- ``local`` (the default): warm worker processes on this machine (:mod:`onnxlite.executors.pool`);
- ``ray``: one Ray task per candidate with ``num_cpus`` and ``memory`` requests; the
  benchmark can be sent to a labelled node (``bench_on``).  Ray is imported only here,
  only when this executor runs (``pip install 'onnxlite[ray]'``).

Both yield the same :class:`~onnxlite.jobs.candidate.JobResult` objects and return the
same :class:`~onnxlite.benchmark.bench.BenchResult`, so the search cannot tell them apart.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ..errors import UsageError

if TYPE_CHECKING:
    from ..benchmark.bench import BenchResult
    from ..jobs.candidate import JobResult

#: the executors ``--executor`` accepts
EXECUTORS = ("local", "ray")


@runtime_checkable
class Executor(Protocol):
    """Runs candidate tasks and the interleaved benchmark somewhere."""

    name: str

    def run_tasks(self, tasks: Sequence[Mapping[str, Any]], folder: Path, workers: int | None = None,
                  on_start: Callable[[Mapping[str, Any]], None] | None = None) -> Iterator[JobResult]:
        """Run ``tasks`` (as :func:`onnxlite.jobs.candidate.run_task` takes them); yield results as they finish.

        Each task's finished model is at ``task["output"]`` on this machine when its result is yielded.
        A task that cannot run is yielded as ``status="failed"`` with its cause, never raised.
        An executor may also take ``should_start(task) -> bool`` (both built-in ones do): the search
        passes it under a time budget, and a task it refuses is never started nor yielded.
        """
        ...

    def bench(self, models: Sequence[str | os.PathLike[str]], **options: Any) -> BenchResult:
        """:func:`onnxlite.bench` wherever this executor measures; ``settings["measured_on"]`` says where."""
        ...

    # An executor may also have ``time_quickly(fp32, models, feeds, settings)`` returning
    # :class:`~onnxlite.search.quick.QuickTimes` (the built-in ones do not: the search times in this process).

    def describe(self) -> dict[str, Any]:
        """What ran where, for the report."""
        ...

    def close(self) -> None:
        ...


def get_executor(executor: str | Executor | None = "local", *, ray_address: str | None = None,
                 bench_on: str | None = None, shared_dir: str | os.PathLike[str] | None = None,
                 max_retries: int | None = None) -> Executor:
    """The executor named ``executor`` (or ``executor`` itself when it is one already)."""
    if executor is not None and not isinstance(executor, str):
        if not isinstance(executor, Executor):
            raise UsageError(f"executor: expected 'local', 'ray' or an Executor, got {type(executor).__name__}")
        return executor
    name = (executor or "local").strip().lower()
    if name not in EXECUTORS:
        raise UsageError(f"--executor: expected one of {', '.join(EXECUTORS)}, got {executor!r}")
    if name == "local":
        given = [flag for flag, value in (("--ray-address", ray_address), ("--bench-on", bench_on),
                                          ("--shared-dir", shared_dir), ("--max-retries", max_retries))
                 if value is not None]
        if given:
            raise UsageError(f"{given[0]}: needs --executor ray")
        from .local import LocalExecutor

        return LocalExecutor()
    from .ray import DEFAULT_MAX_RETRIES, RayExecutor

    return RayExecutor(address=ray_address, bench_on=bench_on, shared_dir=shared_dir,
                       max_retries=DEFAULT_MAX_RETRIES if max_retries is None else max_retries)
