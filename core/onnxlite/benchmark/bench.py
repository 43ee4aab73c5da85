"""``onnxlite.bench``: latency, throughput, load time, memory, size and op count, measured interleaved.

Every model runs in its own worker process (:mod:`onnxlite.benchmark.worker`), so
its peak resident memory is its own.  After a warm-up the parent hands out
turns A B A B ... until each model has its runs (or its time budget): a
machine that heats up, throttles or gets busy affects all models alike
instead of whichever happened to run last.  The order of turns is kept in
``BenchResult.schedule``.  Given ``runs=(min, max)`` it stops between the two, once the p50s are
stable within half the tie margin (:mod:`onnxlite.benchmark.stability`); ``settings["stopping"]``
says how many runs were taken and why.
"""

from __future__ import annotations

import math
import os
import platform
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from ..figures import Figures, figures_of, row_dict
from ..runtime import SessionSettings
from .turns import measure_turns
from .workers import _WorkerProcess

if TYPE_CHECKING:
    import numpy as np
    import onnx

    from ..report.model import Report

#: with --data, the worker cycles through at most this many batches of real samples
MAX_DATA_BATCHES = 32

Progress = Callable[[float, str], None]


@dataclass
class BenchRow(Figures):
    """One model's measurements (its figures: :class:`~onnxlite.figures.Figures`).  Latencies are per batch,
    in milliseconds; throughput is single stream (batch / mean latency); peak memory is the worker process's."""

    name: str
    path: str
    op_count: int | None = None
    baseline_rss_bytes: int | None = None           # the worker's resident memory before the session was created
    runs: int = 0
    worker_pid: int | None = None
    providers: list[str] = field(default_factory=list)
    latencies_ms: list[float] = field(default_factory=list)
    status: str = "ok"                              # ok | failed
    note: str = ""

    @property
    def model_rss_bytes(self) -> int | None:
        """What loading and running the model added to the process (peak minus baseline)."""
        if self.peak_rss_bytes is None or self.baseline_rss_bytes is None:
            return None
        return max(0, self.peak_rss_bytes - self.baseline_rss_bytes)

    def to_dict(self, latencies: bool = True) -> dict[str, Any]:
        data = row_dict(self)
        data["model_rss_bytes"] = self.model_rss_bytes
        if not latencies:
            data.pop("latencies_ms")
        return data


@dataclass
class BenchResult:
    rows: list[BenchRow]
    schedule: list[tuple[int, int]]      # (model index, runs) per measured turn, in the order they ran
    batch: int
    seq_len: int | None                  # None: no model has a sequence axis, or the inputs were given
    settings: dict[str, Any] = field(default_factory=dict)
    #: the CPU it was measured on (onnxlite.hardware.Hardware.to_dict())
    hardware: dict[str, Any] = field(default_factory=dict)

    def ratios(self) -> list[dict[str, float | None]]:
        """Against the first model: ``size`` and ``memory`` (smaller is below 1), ``speedup`` (faster is above 1)."""
        return self.to_report().ratios()

    def to_dict(self, latencies: bool = True) -> dict[str, Any]:
        from ..report.model import jsonable

        return jsonable({
            "batch": self.batch,
            "seq_len": self.seq_len,
            "settings": self.settings,
            "hardware": self.hardware,
            "baseline": self.rows[0].name if self.rows else None,
            "models": [row.to_dict(latencies) | {"ratios": r} for row, r in zip(self.rows, self.ratios())],
            "schedule": [list(turn) for turn in self.schedule],
        })

    def to_report(self, title: str | None = None) -> Report:
        from ..report.model import ModelRow, Report

        rows = []
        for i, row in enumerate(self.rows):
            status = row.status
            if status == "ok" and i == 0 and len(self.rows) > 1:
                status = "reference"
            rows.append(ModelRow(name=row.name, path=row.path, op_count=row.op_count, status=status, note=row.note,
                                 **figures_of(row)))
        from .stability import footnote

        settings = {"batch": self.batch, **({"seq_len": self.seq_len} if self.seq_len is not None else {}),
                    **{k: v for k, v in self.settings.items() if k != "stopping"}}
        turns = len(self.schedule)
        order = " ".join(self.rows[i].name for i, _ in self.schedule[: 2 * len(self.rows)])
        notes = [
            f"Measured interleaved: {turns} turns ({order} ...), each model in its own process; "
            "the workers not taking their turn are paused (SIGSTOP), so none of their threads competes "
            "with the one being timed.",
            *([line] if (line := footnote(self.settings.get("stopping"))) else []),
            "Latency is per batch of the given size; throughput is samples per second of one stream "
            "(batch / mean latency).",
            "Peak RSS is the whole worker process (Python and onnxruntime included); "
            "the JSON also has what the model added on top of the process's baseline.",
        ]
        return Report(title=title or "onnxlite bench", kind="bench", rows=rows, settings=settings,
                      sections=[("How this was measured", "\n".join(f"- {n}" for n in notes))])


@dataclass(frozen=True)
class BenchInputs:
    """What every model is fed: ``feeds`` (one batch, used as is), else ``data`` (anything
    :func:`onnxlite.data.load_data` reads, with ``data_options``), else samples generated with ``seed``."""

    data: str | os.PathLike[str] | None = None
    data_options: Mapping[str, Any] | None = None
    feeds: Mapping[str, np.ndarray] | None = None
    seed: int = 0


def bench(models: Sequence[str | os.PathLike[str]], batch: int = 1, seq_len: int = 128,
          runs: int | tuple[int, int] | list[int] = 100,
          warmup: int = 10, seconds: float | None = None, settings: SessionSettings | None = None, *,
          names: Sequence[str] | None = None, runs_per_turn: int | None = None, progress: Progress | None = None,
          **inputs: Any) -> BenchResult:
    """Benchmark ``models`` interleaved, each in its own worker process.

    Inputs (``inputs``: the fields of :class:`BenchInputs` as keywords) come from ``feeds`` (one batch,
    used for every model as is), else from ``data`` (anything :func:`onnxlite.data.load_data` reads, with
    ``data_options``; up to 32 complete batches of ``batch`` samples, cycled),
    else they are generated from each model's input specs (``batch`` rows,
    ``seq_len`` on the other dynamic axes, later rows padded, drawn with ``seed``).
    ``seconds`` replaces ``runs``: each model is measured for about that
    much running time.  ``runs`` is a fixed count, or ``(min_runs, max_runs)`` (a two-item list too, as a
    manifest or JSON gives it): at least ``min_runs`` per model, then stop as soon as the p50s are stable
    (:mod:`onnxlite.benchmark.stability`), at ``max_runs`` at most; ``settings["stopping"]`` says how many
    were taken and why.
    ``progress(fraction, text)`` is called at each step and as turns finish.
    """
    settings = settings or SessionSettings()
    unknown = sorted(set(inputs) - {f.name for f in fields(BenchInputs)})
    if unknown:
        raise TypeError(f"bench() got unexpected keyword argument(s): {', '.join(unknown)}")
    given = BenchInputs(**inputs)
    data, data_options, feeds, seed = given.data, given.data_options, given.feeds, given.seed
    min_runs, runs = _counts(runs)
    _check_args(models, batch, seq_len, runs, warmup, seconds, names, runs_per_turn)
    from ..modelio import check_model, model_size, op_counts, read_header
    from ..runtime import resolve_providers

    paths = [Path(m) for m in models]
    labels = list(names) if names else _names(paths)
    rows, protos = [], []
    for label, path in zip(labels, paths):
        proto = read_header(path)   # unreadable files fail here, by name
        check_model(path)   # an unknown operator too, worded as quantize and export word it, before any worker
        protos.append(proto)   # the graph, for the inputs to generate or read below
        rows.append(BenchRow(name=label, path=str(path), size_bytes=model_size(path),
                             op_count=sum(op_counts(proto).values())))
    resolve_providers(settings)   # an unavailable provider is one clear error before any worker starts
    if feeds is not None:
        # given feeds are one batch, whatever --batch says: its size is read on each input's own sample axis
        # (a streaming state [2, batch, 128] batches on axis 1, a scalar sample rate on none)
        sizes = _batch_sizes(feeds, _axes(protos[0]))
        batch = sizes.pop() if len(sizes) == 1 else batch
    schedule: list[tuple[int, int]] = []
    with tempfile.TemporaryDirectory(prefix="onnxlite-bench-") as tmp:
        workers: list[_WorkerProcess] = []
        try:
            for i, proto in enumerate(protos):
                feed_file = Path(tmp) / f"feeds{i}.npz"
                _write_feeds(feed_file, proto, batch, seq_len, seed, data, data_options, feeds)
                workers.append(_WorkerProcess(Path(tmp) / f"worker{i}.log"))
            if progress:
                progress(0.0, "starting worker processes")
            for worker in workers:   # all start first so their imports overlap ...
                worker.start()
            for worker, row in zip(workers, rows):   # ... and finish before any load time is taken
                worker.request({"cmd": "ready", "settings": settings.to_dict()}, row.path)
            for i, (worker, row) in enumerate(zip(workers, rows)):
                if progress:
                    progress(0.0, f"loading {row.name}")
                reply = worker.request({"cmd": "load", "model": row.path, "feeds": str(Path(tmp) / f"feeds{i}.npz"),
                                        "settings": settings.to_dict()}, row.path)
                row.worker_pid, row.load_seconds = reply["pid"], reply["load_seconds"]
                row.baseline_rss_bytes, row.providers = reply["baseline_rss_bytes"], reply["providers"]
            stopping = measure_turns(workers, rows, (min_runs, runs), warmup, seconds, runs_per_turn, schedule,
                                     progress)
            for worker, row in zip(workers, rows):
                if worker.alive:
                    row.peak_rss_bytes = worker.request({"cmd": "stats"}, row.path)["peak_rss_bytes"]
        finally:
            for worker in workers:
                worker.close()
    for row in rows:
        _summarize(row, batch)
    from ..hardware import detect
    from ..inputs import has_sequence_axis, specs_from_onnx

    generated = data is None and feeds is None
    uses_seq = generated and any(has_sequence_axis(specs_from_onnx(p)) for p in protos)
    described = describe_settings(settings, runs, warmup, seconds, data, feeds is not None, paths)
    if stopping:
        described["stopping"] = stopping
    return BenchResult(rows=rows, schedule=schedule, batch=batch, seq_len=seq_len if uses_seq else None,
                       settings=described, hardware=detect(settings.provider).to_dict())


def _counts(runs: int | tuple[int, int] | list[int]) -> tuple[int, int]:
    """``runs`` as (min, max): an int is a fixed count; a min above the max is the max."""
    if isinstance(runs, int):
        return runs, runs
    if not (isinstance(runs, (tuple, list)) and len(runs) == 2 and all(isinstance(r, int) for r in runs)):
        raise UsageError(f"runs: expected a count or (min_runs, max_runs), got {runs!r}")
    if runs[0] < 1:
        raise UsageError(f"--min-runs: must be a positive integer, got {runs[0]!r}")
    return min(runs[0], runs[1]), runs[1]


def _check_args(models, batch, seq_len, runs, warmup, seconds, names, runs_per_turn) -> None:
    if not models:
        raise UsageError("bench: give at least one model")
    for flag, value in (("--batch", batch), ("--seq-len", seq_len), ("--runs", runs)):
        if not isinstance(value, int) or value < 1:
            raise UsageError(f"{flag}: must be a positive integer, got {value!r}")
    if not isinstance(warmup, int) or warmup < 0:
        raise UsageError(f"--warmup: must be 0 or more, got {warmup!r}")
    if seconds is not None and not (seconds > 0 and math.isfinite(seconds)):
        raise UsageError(f"--seconds: must be a positive number, got {seconds!r}")
    if runs_per_turn is not None and runs_per_turn < 1:
        raise UsageError(f"runs_per_turn: must be a positive integer, got {runs_per_turn!r}")
    if names is not None and len(names) != len(models):
        raise UsageError(f"--name: got {len(names)} names for {len(models)} models")


def _names(paths: Sequence[Path]) -> list[str]:
    """File stems; where stems clash, ``folder/stem``; where those clash too (one file twice), ``stem#2``..."""
    stems = [p.stem for p in paths]
    longer = [f"{p.parent.name}/{p.stem}" if p.parent.name else p.stem for p in paths]
    out: list[str] = []
    for i, stem in enumerate(stems):
        name = stem
        if stems.count(stem) > 1:
            name = longer[i] if longer.count(longer[i]) == 1 else stem
        if name in out:
            name = f"{name}#{sum(1 for n in out if n == name or n.startswith(name + '#')) + 1}"
        out.append(name)
    return out


def _write_feeds(target: Path, model: onnx.ModelProto, batch: int, seq_len: int, seed: int, data, data_options,
                 feeds) -> None:
    """Save the batches a worker cycles through as ``b<i>__<input name>`` arrays in one .npz."""
    import numpy as np

    from ..inputs import batch_axes, make_feeds, specs_from_onnx

    if feeds is not None:
        batches = [{k: np.asarray(v) for k, v in feeds.items()}]
    else:
        specs = specs_from_onnx(model)
        if data is not None:
            from ..data import load_data

            dataset = load_data(data, specs, data_options)
            # Complete batches only (so every run has ``batch`` samples), and a bounded number of them;
            # each input counted on its own sample axis, scalars and constants not at all.
            batches = []
            axes = batch_axes(specs)
            for chunk in dataset.batches(batch):
                if min(_batch_sizes(chunk, axes), default=batch) < batch:
                    break
                batches.append(chunk)
                if len(batches) >= MAX_DATA_BATCHES:
                    break
            if not batches:
                raise UsageError(f"--data {data}: {len(dataset)} samples, fewer than --batch {batch}")
        else:
            batches = [make_feeds(specs, batch=batch, seq=seq_len, seed=seed, pad=True)]
    arrays: dict[str, Any] = {f"b{i}__{name}": array for i, chunk in enumerate(batches)
                              for name, array in chunk.items()}
    np.savez(target, **arrays)


def _axes(model: onnx.ModelProto) -> dict[str, int | None]:
    """Each input's sample axis, from the model's input specs (None: a scalar or constant)."""
    from ..inputs import batch_axes, specs_from_onnx

    return batch_axes(specs_from_onnx(model))


def _batch_sizes(feeds: Mapping[str, Any], axes: Mapping[str, int | None]) -> set[int]:
    """The sizes of the inputs' sample axes in one feed dict (one size when the batch is consistent)."""
    from ..data.dataset import axis_of

    return {int(v.shape[axis]) for name, v in feeds.items()
            if (axis := axis_of(name, v, axes)) is not None}


def describe_settings(settings: SessionSettings, runs, warmup, seconds, data, explicit_feeds: bool,
              paths: Sequence[Path] = ()) -> dict[str, Any]:
    import onnxruntime as ort

    from ..hardware import measured_here

    return {
        "provider": settings.provider,
        "threads": settings.threads or "default",
        "graph_optimization": settings.graph_optimization,
        "execution_mode": settings.execution_mode,
        **({"provider_options": dict(settings.provider_options)} if settings.provider_options else {}),
        ("seconds" if seconds else "runs"): seconds or runs,
        "warmup": warmup,
        "inputs": str(data) if data else ("given feeds" if explicit_feeds else "generated from the input specs"),
        "onnxruntime": ort.__version__,
        "machine": f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs",
        "python": platform.python_version(),
        **measured_here(paths, settings.provider),
    }


def _summarize(row: BenchRow, batch: int) -> None:
    import numpy as np

    row.runs = len(row.latencies_ms)
    if not row.latencies_ms:
        return
    lat = np.asarray(row.latencies_ms)
    p50, p90, p99 = np.percentile(lat, [50, 90, 99])
    mean = float(lat.mean())
    row.latency_ms = {"p50": float(p50), "p90": float(p90), "p99": float(p99), "mean": mean}
    row.throughput = batch / (mean / 1e3) if mean > 0 else None


