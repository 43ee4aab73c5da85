"""The Ray executor: each candidate is a Ray task; the benchmark can run on a labelled node.

- A candidate task asks for ``num_cpus`` (the session's threads, else 1) and
  ``memory`` (the same estimate the local pool sizes itself by: a few copies of
  the model).  Inside the task the candidate runs exactly as it does locally,
  in its own subprocess (:func:`onnxlite.jobs.candidate.run_tasks`), so a candidate that
  crashes onnxruntime is a *failed candidate*, as on one machine, while a Ray
  worker or node that dies under it is a *fault*: Ray retries the task
  ``max_retries`` times, then it is recorded as failed with the cause.
- Inputs (the float model, the judge, the calibration data) go into the object
  store once per run; finished models come back as the task's return value and
  are written where the local pool would have left them.  With ``shared_dir``
  (a folder every node sees at the same path) files travel through it instead.
- ``bench_on`` (``key=value[,key=value]`` node labels, or the name of a custom
  resource) sends the interleaved benchmark to such a node.  Ray's resources
  only schedule, they do not confine CPU use, so the benchmark task reserves
  every CPU of the node it lands on and nothing else runs there meanwhile.
- Ctrl-C (or an error) cancels every task still on the cluster; Ray raises
  KeyboardInterrupt inside a running one, and the local pool there kills its
  candidate's process.

``import ray`` costs 0.5-0.8 s, so it happens only when this executor connects.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import OnnxliteError, UsageError
from .machine import describe_machine, record_machine
from .ray_tasks import run_bench, run_candidate
from .transfer import pack, unpack

if TYPE_CHECKING:
    from ..benchmark.bench import BenchResult
    from ..jobs.candidate import JobResult

#: times Ray re-runs a task whose worker or node died, before it counts as failed
DEFAULT_MAX_RETRIES = 2
#: fixed part of a candidate's memory request, on top of a few copies of the model (as tasks.default_workers)
BASE_MEMORY = 512 * 1024**2
#: how long the driver waits on the cluster between checks (Ctrl-C is seen at least this often)
POLL_SECONDS = 0.5


def parse_bench_on(value: str) -> tuple[dict[str, str], str | None]:
    """``key=value[,key=value]`` -> (labels, None); a bare ``NAME`` -> ({}, NAME), a custom resource."""
    value = (value or "").strip()
    if not value:
        raise UsageError("--bench-on: expected key=value (a node label) or the name of a custom resource")
    if "=" not in value:
        if "," in value or any(c.isspace() for c in value):
            raise UsageError(f"--bench-on {value!r}: expected key=value[,key=value] or one resource name")
        return {}, value
    labels = {}
    for item in value.split(","):
        key, sep, wanted = item.partition("=")
        if not sep or not key.strip() or not wanted.strip():
            raise UsageError(f"--bench-on {value!r}: {item!r} is not key=value")
        labels[key.strip()] = wanted.strip()
    return labels, None


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise UsageError("--executor ray: Ray is not installed: pip install 'onnxlite[ray]'") from None
    return ray


class RayExecutor:
    name = "ray"

    def __init__(self, address: str | None = None, bench_on: str | None = None,
                 shared_dir: str | os.PathLike[str] | None = None, max_retries: int = DEFAULT_MAX_RETRIES,
                 num_cpus: float | None = None):
        if max_retries < 0:
            raise UsageError(f"--max-retries: must be 0 or more, got {max_retries}")
        self.address = address
        self.bench_on = bench_on
        self.bench_labels, self.bench_resource = parse_bench_on(bench_on) if bench_on else ({}, None)
        self.shared_dir = Path(shared_dir) if shared_dir is not None else None
        if self.shared_dir is not None and not self.shared_dir.is_dir():
            raise UsageError(f"--shared-dir {self.shared_dir}: not a folder")
        self.max_retries = max_retries
        self.num_cpus = num_cpus
        self._ray: Any = None
        self._started = False
        self._inputs: dict[tuple[str, int, int], Any] = {}   # (path, size, mtime) -> ObjectRef or shared path
        self._run_dir: Path | None = None
        self.placements: Counter[str] = Counter()
        self.failures = 0
        self.bench_node: dict[str, Any] | None = None
        # Mistakes surface now, before lighten exports anything: an address nobody answers on,
        # and a --bench-on label no node of the cluster carries.
        _check_reachable(address)
        if bench_on:
            self.connect()
            self._bench_node()

    # -- the cluster ------------------------------------------------------------------------------------------

    def connect(self) -> Any:
        if self._ray is not None:
            return self._ray
        ray = _import_ray()
        if not ray.is_initialized():
            import logging

            try:
                ray.init(address=self.address, include_dashboard=False, log_to_driver=False,
                         logging_level=logging.ERROR)   # its start-up notices would break the progress lines
            except (ConnectionError, RuntimeError, ValueError) as exc:
                where = f"--ray-address {self.address}" if self.address else "--executor ray"
                raise OnnxliteError(f"{where}: cannot connect to or start a Ray cluster: "
                                    f"{' '.join(str(exc).split())[:300]}") from None
            self._started = True
        self._ray = ray
        return ray

    def close(self) -> None:
        if self._run_dir is not None:
            shutil.rmtree(self._run_dir, ignore_errors=True)
            self._run_dir = None
        self._inputs.clear()
        if self._started and self._ray is not None:
            self._ray.shutdown()
        self._ray, self._started = None, False

    def describe(self) -> dict[str, Any]:
        info: dict[str, Any] = {"name": self.name, "tasks_per_node": dict(self.placements),
                                "max_retries": self.max_retries, "failed_by_faults": self.failures}
        if self._ray is not None:
            nodes = [n for n in self._ray.nodes() if n.get("Alive")]
            info["nodes"] = len(nodes)
            info["cluster_cpus"] = sum(n["Resources"].get("CPU", 0) for n in nodes)
            info["address"] = self.address or self._ray.get_runtime_context().gcs_address
        if self.bench_on:
            info["bench_on"] = self.bench_on
        return info

    # -- moving files -----------------------------------------------------------------------------------------

    def _input(self, path: str | None) -> Any:
        """The object store reference (or shared path) for an input file or folder, put there once per run."""
        if path is None:
            return None
        stat = os.stat(path)
        key = (str(path), stat.st_size, stat.st_mtime_ns)
        if key not in self._inputs:
            if self.shared_dir is not None:
                folder = self._shared_run() / "inputs" / uuid.uuid4().hex[:8]
                folder.mkdir(parents=True)
                self._inputs[key] = str(unpack(pack(path), folder))
            else:
                self._inputs[key] = self._ray.put(pack(path))
        return self._inputs[key]

    def _shared_run(self) -> Path:
        if self._run_dir is None:
            assert self.shared_dir is not None
            self._run_dir = Path(tempfile.mkdtemp(prefix=".onnxlite-ray-", dir=self.shared_dir))
        return self._run_dir

    # -- candidates -------------------------------------------------------------------------------------------

    def _resources(self, task: Mapping[str, Any]) -> dict[str, Any]:
        threads = (task.get("settings") or {}).get("threads")
        from ..modelio import model_size

        model_bytes = model_size(task["model"]) if os.path.exists(task["model"]) else 0   # external data included
        memory = 8 * model_bytes + BASE_MEMORY
        cpus = self.num_cpus or threads or 1
        # A request no node can meet would wait forever: ask for at most what the largest node has.
        nodes = [n["Resources"] for n in self._ray.nodes() if n.get("Alive")]
        most_memory = max((n.get("memory", 0) for n in nodes), default=0)
        most_cpus = max((n.get("CPU", 0) for n in nodes), default=0)
        if most_memory:
            memory = min(memory, int(most_memory))
        if most_cpus:
            cpus = min(cpus, most_cpus)
        return {"num_cpus": cpus, "memory": int(memory)}

    def run_tasks(self, tasks: Sequence[Mapping[str, Any]], folder: Path, workers: int | None = None,
                  on_start: Callable[[Mapping[str, Any]], None] | None = None,
                  should_start: Callable[[Mapping[str, Any]], bool] | None = None) -> Iterator[JobResult]:
        """Submit the tasks (at most ``workers`` at once, if given; else the cluster's resources decide).

        A task ``should_start`` refuses (the search's time budget is spent) is never submitted.
        """
        from ..jobs.candidate import JobResult

        ray = self.connect()
        folder.mkdir(parents=True, exist_ok=True)
        remote = ray.remote(run_candidate)
        pending = list(tasks)
        running: dict[Any, Mapping[str, Any]] = {}
        started: dict[Any, float] = {}
        try:
            while pending or running:
                while pending and (workers is None or len(running) < workers):
                    task = pending.pop(0)
                    if should_start is not None and not should_start(task):
                        continue
                    options = self._resources(task) | {"max_retries": self.max_retries, "retry_exceptions": False}
                    output = self._shared_run() / "out" / uuid.uuid4().hex[:8] if self.shared_dir else None
                    ref = remote.options(**options).remote(
                        dict(task), self._input(task["model"]), self._input(task.get("judge")),
                        self._input(task.get("calibration")), str(output) if output else None)
                    running[ref], started[ref] = task, time.monotonic()
                    if on_start:
                        on_start(task)
                ready, _ = ray.wait(list(running), num_returns=1, timeout=POLL_SECONDS)
                for ref in ready:
                    task = running.pop(ref)
                    seconds = round(time.monotonic() - started.pop(ref), 2)
                    try:
                        reply = ray.get(ref)
                    except ray.exceptions.RayError as exc:
                        self.failures += 1
                        candidate = task["candidate"]
                        yield JobResult(name=candidate["name"], strategy=candidate["strategy"],
                                         options=dict(candidate["options"]),
                                         keep_float=list(candidate.get("keep_float", ())), status="failed",
                                         error=self._fault_message(exc), seconds=seconds)
                        continue
                    yield self._bring_back(reply, task)
        finally:
            for ref in running:   # Ctrl-C, an error, or the caller stopped early: nothing keeps running there
                ray.cancel(ref, recursive=True)

    def _fault_message(self, exc: Exception) -> str:
        cause = getattr(exc, "cause", None)
        if cause is not None:   # RayTaskError: our own code raised; Ray does not retry those
            return f"{type(cause).__name__}: {' '.join(str(cause).split())[:300]}"
        kind = type(exc).__name__
        text = " ".join(str(exc).split())
        first = text.split(". ")[0][:240]
        attempts = self.max_retries + 1
        return (f"the Ray task failed {attempts} time{'s' if attempts > 1 else ''} "
                f"({self.max_retries} retr{'ies' if self.max_retries != 1 else 'y'}): {kind}: {first}")

    def _bring_back(self, reply: Mapping[str, Any], task: Mapping[str, Any]) -> JobResult:
        """The finished model goes where the local pool would have written it: ``task["output"]``."""
        from ..jobs.candidate import JobResult

        result = JobResult.from_dict(reply["result"])
        self.placements[reply["node"]] += 1
        if result.status == "ok" and reply.get("model") is not None:
            output = Path(task["output"])
            output.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(reply["model"], str):   # shared folder: move it out of the run's scratch
                produced = Path(reply["model"])
                from ..modelio import external_data_files

                for path in [produced, *external_data_files(produced)]:
                    shutil.move(path, output.parent / (output.name if path == produced else path.name))
            else:
                produced = unpack(reply["model"], output.parent)
                if produced != output:
                    os.replace(produced, output)
            result.path = str(output)
        return result

    # -- the benchmark ----------------------------------------------------------------------------------------

    def bench(self, models: Sequence[str | os.PathLike[str]], **options: Any) -> BenchResult:
        """Benchmark here, or with ``bench_on`` on a matching node, holding all of its CPUs."""
        progress = options.pop("progress", None)
        if not self.bench_on:
            from ..benchmark.bench import bench

            result = bench(models, progress=progress, **options)
            record_machine(result, describe_machine())
            return result
        ray = self.connect()
        node = self._bench_node()
        cpus = node["Resources"].get("CPU", 1)
        placement: dict[str, Any] = {"num_cpus": cpus, "max_retries": self.max_retries, "retry_exceptions": False}
        if self.bench_labels:
            # The user's labels choose; the node id pins the node whose CPUs were counted.
            placement["label_selector"] = {**self.bench_labels, "ray.io/node-id": node["NodeID"]}
        else:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            placement["resources"] = {self.bench_resource: node["Resources"][self.bench_resource]}
            placement["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)
        if progress:
            progress(0.0, f"on Ray node {node['NodeID'][:12]} ({node.get('NodeManagerAddress', '?')}, "
                          f"{cpus:g} CPUs reserved)")
        paths = [str(m) for m in models]
        names = options.pop("names", None)
        packed = [self._input(p) for p in paths]
        ref = ray.remote(run_bench).options(**placement).remote(packed, names, options)
        try:
            result, where = _wait(ray, ref)
        except ray.exceptions.RayError as exc:
            if isinstance(getattr(exc, "cause", None), OnnxliteError):
                raise exc.cause from None   # the same one-line error the local benchmark gives
            raise OnnxliteError(f"--bench-on {self.bench_on}: the benchmark could not run: "
                                f"{self._fault_message(exc)}") from None
        for row, path in zip(result.rows, paths):
            row.path = path   # the driver's files, not the node's scratch copies
        record_machine(result, where)
        self.bench_node = where
        return result

    def _bench_node(self) -> dict[str, Any]:
        nodes = [n for n in self._ray.nodes() if n.get("Alive")]
        if self.bench_labels:
            matching = [n for n in nodes if all((n.get("Labels") or {}).get(k) == v
                                                for k, v in self.bench_labels.items())]
        else:
            matching = [n for n in nodes if n["Resources"].get(self.bench_resource, 0) > 0]
        if not matching:
            seen = sorted({f"{k}={v}" for n in nodes for k, v in (n.get("Labels") or {}).items()
                           if not k.startswith("ray.io/")})
            raise UsageError(f"--bench-on {self.bench_on}: no live node of the Ray cluster "
                             f"{'carries that label' if self.bench_labels else 'has that resource'}"
                             f" (labels seen: {', '.join(seen) or 'none'})")
        return max(matching, key=lambda n: n["Resources"].get("CPU", 0))


def _check_reachable(address: str | None, timeout: float = 5.0) -> None:
    """A HOST:PORT nobody answers on fails in seconds (``ray.init`` would keep retrying for minutes)."""
    import socket

    if not address or "://" in address or address == "auto":
        return
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise UsageError(f"--ray-address {address}: expected HOST:PORT (or auto, or ray://HOST:PORT)")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as exc:
        raise OnnxliteError(f"--ray-address {address}: no Ray cluster answers there "
                            f"({exc.strerror or type(exc).__name__})") from None


def _wait(ray: Any, ref: Any) -> Any:
    """``ray.get`` that cancels the task on Ctrl-C."""
    try:
        while True:
            ready, _ = ray.wait([ref], timeout=POLL_SECONDS)
            if ready:
                return ray.get(ref)
    except BaseException:
        ray.cancel(ref, recursive=True)
        raise
