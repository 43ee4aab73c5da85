"""Warm workers: long-lived processes that quantize and judge candidates one after another.

A process per candidate paid for importing onnxruntime, numpy and the plugins, and for
reading the judge's reference outputs, once per candidate (0.5-2 s each, more than the
whole quantize-and-judge of a small model).  A worker here pays it once: it imports
everything when it starts and keeps each judge it has read (keyed by its folder and file
stamps), then takes task after task on its stdin.

The task format is :mod:`onnxlite.jobs.candidate`'s (a task JSON file in, a result JSON file
out, written atomically), so the Ray executor and ``python -m onnxlite.jobs.candidate`` run
the same tasks.  A candidate that crashes (a segfault inside onnxruntime, a plugin's
``os.abort()``, the OOM killer's SIGKILL) takes only its worker down: the pool records the
candidate as failed with the cause, from the worker's exit signal and the tail of its log,
and starts a fresh worker for the next task.

Run a worker by hand: ``python -m onnxlite.executors.pool`` reads ``{"task": T, "result": R}`` lines.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..evaluation.judge import Judge
    from ..jobs.candidate import JobResult

#: a worker is replaced after this many tasks, so memory a plugin leaks cannot pile up for a whole search
MAX_TASKS_PER_WORKER = 64
#: the line a worker writes to its log before each task: a crash's cause is read from after the last one
TASK_MARK = "--- onnxlite task "
POLL_SECONDS = 0.02


@dataclass
class _Worker:
    proc: subprocess.Popen[bytes]
    log: IO[str]
    log_path: Path
    done: int = 0


@dataclass
class _Job:
    worker: _Worker
    task: Mapping[str, Any]
    result: Path
    began: float


class WorkerPool:
    """Up to ``size`` warm workers; :meth:`run` gives them tasks and yields results as they finish."""

    def __init__(self, folder: Path, size: int = 1) -> None:
        self.folder, self.size = folder, max(1, size)
        self.idle: list[_Worker] = []
        self.started = 0          # workers started, replacements included (the overhead the pool pays)
        self.replaced = 0         # workers that died under a task and were replaced
        self.folder.mkdir(parents=True, exist_ok=True)
        self.env = dict(os.environ)
        # the worker must see the same plugins and packages as this process
        self.env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)

    def _start(self) -> _Worker:
        self.started += 1
        log_path = self.folder / f"worker{self.started}.log"
        log = open(log_path, "w+")  # noqa: SIM115 - the worker writes it for its whole life; _retire closes it
        proc = subprocess.Popen([sys.executable, "-m", "onnxlite.executors.pool"], stdin=subprocess.PIPE,
                                stdout=log, stderr=subprocess.STDOUT, env=self.env)
        return _Worker(proc, log, log_path)

    def _take(self) -> _Worker:
        while self.idle:
            worker = self.idle.pop()
            if worker.proc.poll() is None:
                return worker
            self._retire(worker)
        return self._start()

    def _retire(self, worker: _Worker) -> None:
        if worker.proc.poll() is None:
            if worker.proc.stdin:
                worker.proc.stdin.close()   # a worker ends when its stdin does
            try:
                worker.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                worker.proc.kill()
                worker.proc.wait()
        worker.log.close()

    def run(self, tasks: Sequence[Mapping[str, Any]], folder: Path, workers: int | None = None,
            on_start: Callable[[Mapping[str, Any]], None] | None = None,
            should_start: Callable[[Mapping[str, Any]], bool] | None = None) -> Iterator[JobResult]:
        """Run ``tasks``, at most ``workers`` at once; a task ``should_start`` refuses is never started."""
        from ..jobs.candidate import JobResult

        folder.mkdir(parents=True, exist_ok=True)
        limit = max(1, workers or self.size)
        pending = list(enumerate(tasks))
        running: list[_Job] = []
        try:
            while pending or running:
                while pending and len(running) < limit:
                    index, task = pending.pop(0)
                    if should_start is not None and not should_start(task):
                        continue
                    running.append(self._submit(index, task, folder, on_start))
                time.sleep(POLL_SECONDS)
                for job in list(running):
                    finished = self._finished(job)
                    if finished is None:
                        continue
                    running.remove(job)
                    yield finished if isinstance(finished, JobResult) else self._failed(job, finished)
        finally:
            for job in running:   # an abandoned run (Ctrl-C, a time budget): its workers go with it
                job.worker.proc.kill()
                job.worker.proc.wait()
                job.worker.log.close()

    def _submit(self, index: int, task: Mapping[str, Any], folder: Path,
                on_start: Callable[[Mapping[str, Any]], None] | None) -> _Job:
        spec_file, result_file = folder / f"task{index}.json", folder / f"result{index}.json"
        # a later batch reuses the folder: an earlier batch's result must never stand in for this one
        result_file.unlink(missing_ok=True)
        spec_file.write_text(json.dumps(task, indent=2, default=str))
        if on_start:
            on_start(task)
        worker = self._take()
        line = json.dumps({"task": str(spec_file), "result": str(result_file)}) + "\n"
        try:
            assert worker.proc.stdin is not None
            worker.proc.stdin.write(line.encode())
            worker.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass   # it died idle; _finished sees the exit and reports it
        return _Job(worker, task, result_file, time.monotonic())

    def _finished(self, job: _Job) -> JobResult | int | None:
        """The job's result, its worker's exit code when it died first, or None while it runs."""
        from ..jobs.candidate import JobResult

        if job.result.exists():
            try:
                result = JobResult.from_dict(json.loads(job.result.read_text()))
            except (OSError, ValueError):
                return None   # not there yet on a file system without atomic rename
            job.worker.done += 1
            if job.worker.done >= MAX_TASKS_PER_WORKER:
                self._retire(job.worker)
            else:
                self.idle.append(job.worker)
            return result
        code = job.worker.proc.poll()
        if code is None:
            return None
        if job.result.exists():   # it wrote its result, then died: the result stands
            return self._finished(job)
        return code

    def _failed(self, job: _Job, code: int) -> JobResult:
        from ..jobs.candidate import JobResult, crash_message

        job.worker.log.flush()
        job.worker.log.seek(0)
        output = job.worker.log.read().rsplit(TASK_MARK, 1)[-1].split("\n", 1)[-1]
        job.worker.log.close()
        self.replaced += 1   # the next task starts a fresh worker in its place
        candidate = job.task["candidate"]
        return JobResult(name=candidate["name"], strategy=candidate["strategy"], options=dict(candidate["options"]),
                          keep_float=list(candidate.get("keep_float", ())), status="failed",
                          error=crash_message(code, output), seconds=round(time.monotonic() - job.began, 2))

    def pids(self) -> list[int]:
        """The idle workers' process ids (tests kill one to see the pool replace it)."""
        return [w.proc.pid for w in self.idle if w.proc.poll() is None]

    def close(self) -> None:
        for worker in self.idle:
            self._retire(worker)
        self.idle = []


# -- the worker ---------------------------------------------------------------------------------------------

class _Judges:
    """Judges read once per worker: a folder's judge is reused while its files are unchanged."""

    def __init__(self) -> None:
        self.loaded: dict[tuple[Any, ...], Judge] = {}

    def __call__(self, folder: Path, settings: Mapping[str, Any]) -> Judge:
        from ..jobs.candidate import load_judge

        stamps = tuple((p.stat().st_mtime_ns, p.stat().st_size) for p in (folder / "judge.npz", folder / "judge.json"))
        key = (str(folder.resolve()), stamps, json.dumps(dict(settings), sort_keys=True, default=str))
        if key not in self.loaded:
            if len(self.loaded) >= 4:   # a search holds a few judges (all, select part); older ones are done
                self.loaded.pop(next(iter(self.loaded)))
            self.loaded[key] = load_judge(folder, settings)
        return self.loaded[key]


def main() -> int:
    from ..atomic import write_text
    from ..benchmark.worker import die_with_parent

    die_with_parent()
    # everything a task needs, imported once: this is the cost the pool saves per candidate
    import numpy  # noqa: F401
    import onnxruntime  # noqa: F401

    from ..jobs.candidate import run_task
    from ..quantization.run import quantize  # noqa: F401
    from ..registry import get_registry

    get_registry()   # plugins load here, not under the first task
    judges = _Judges()
    for line in sys.stdin:
        if not line.strip():
            continue
        job = json.loads(line)
        print(f"{TASK_MARK}{job['task']}", flush=True)
        task = json.loads(Path(job["task"]).read_text())
        result = run_task(task, load=judges)
        write_text(job["result"], json.dumps(result.to_dict(), indent=2, default=str))
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
