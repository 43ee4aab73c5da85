"""One ``lighten`` candidate as an independent task: inputs -> model file + metrics.

A task is described by a JSON file (the float model, the candidate, the
calibration data file, the judge folder) and writes a JSON result, so it can
run in a warm worker here (:mod:`onnxlite.executors.pool`), in a fresh process
(:func:`run_tasks`, the behaviour before the pool) or on another machine: a
candidate that crashes, even inside onnxruntime, takes only its own process
down and is recorded as failed.

Run one by hand: ``python -m onnxlite.jobs.candidate TASK.json RESULT.json``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import one_line
from ..figures import Figures, copy_figures, row_dict

if TYPE_CHECKING:
    from ..evaluation.judge import Judge


@dataclass
class CandidateRecord(Figures):
    """A candidate and its figures (:class:`~onnxlite.figures.Figures`): what a job returns and a row of the
    search's table share."""

    name: str
    strategy: str
    options: dict[str, Any]
    keep_float: list[str] = field(default_factory=list)
    status: str = "ok"
    quantize: dict[str, Any] = field(default_factory=dict)
    path: str | None = None


@dataclass
class JobResult(CandidateRecord):
    """One candidate quantized and judged by a job: ``status`` ok or failed (``error`` says why), how long it
    took, and whether it passed every budget of the judge it got."""

    error: str = ""
    seconds: float = 0.0
    passed: bool | None = None
    failures: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return row_dict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JobResult:
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})


# -- the judge on disk ---------------------------------------------------------------------------------------

def save_judge(judge: Judge, folder: Path, samples: Sequence[int] | None = None) -> Path:
    """Reference outputs, inputs, labels and metric settings, for tasks in other processes.

    With ``samples`` (held-out sample indices) only those samples are written, judged as a whole by
    their measured drops, with no parts and no confidence: the select part's judge, which the
    fallback's probes get so that the samples confirming its choice never reach them.
    """
    import numpy as np

    folder.mkdir(parents=True, exist_ok=True)
    outputs, inputs = list(judge.reference_outputs), list(judge.feeds)
    reference, feeds, labels = judge.reference_outputs, judge.feeds, judge.labels
    if samples is not None:
        from .pruning import judge_subset

        reference, feeds, labels = judge_subset(judge, np.asarray(samples, dtype=np.int64))
    arrays = {f"ref_{i}": reference[n] for i, n in enumerate(outputs)}
    arrays |= {f"in_{i}": feeds[n] for i, n in enumerate(inputs)}
    if labels is not None:
        arrays["labels"] = np.asarray(labels)
    np.savez(folder / "judge.npz", **arrays)  # type: ignore[arg-type]  # numpy's stub: '**' read as allow_pickle
    whole = samples is None
    config = {"outputs": outputs, "inputs": inputs, "metrics": [m.key for m in judge.metrics],
              "primary": judge.primary, "budgets": judge.budgets, "batch_size": judge.batch_size,
              "confidence": judge.confidence if whole else None,
              "estimate_only": list(judge.estimate_only) if whole else [],
              "extra_intervals": list(judge.extra_intervals) if whole else [],
              "batch_axes": dict(judge.batch_axes), "output_axes": dict(judge.output_axes),
              "parts": {"select": list(judge.parts.select), "confirm": list(judge.parts.confirm)}
              if judge.parts and whole else None}
    from .decoder_judge import saved_fields

    config |= saved_fields(judge)   # a decoder's judge: what rebuilds it beside its records
    (folder / "judge.json").write_text(json.dumps(config, indent=2))
    return folder


def load_judge(folder: Path, settings: Mapping[str, Any]) -> Judge:
    import numpy as np

    from ..evaluation.judge import Judge
    from ..runtime import SessionSettings

    config = json.loads((folder / "judge.json").read_text())
    with np.load(folder / "judge.npz", allow_pickle=False) as npz:
        reference = {n: npz[f"ref_{i}"] for i, n in enumerate(config["outputs"])}
        feeds = {n: npz[f"in_{i}"] for i, n in enumerate(config["inputs"])}
        labels = npz["labels"] if "labels" in npz.files else None
    judge: Judge
    if config.get("decoder"):
        from .decoder_judge import load_decoder_judge

        judge = load_decoder_judge(config, reference, feeds, SessionSettings(**settings))
    else:
        judge = Judge(reference, feeds, labels, config["metrics"], max_drop=config["budgets"] or None,
                      primary=config["primary"], settings=SessionSettings(**settings), batch_size=config["batch_size"])
    judge.confidence = config.get("confidence")
    judge.estimate_only = tuple(config.get("estimate_only") or ())
    judge.extra_intervals = tuple(config.get("extra_intervals") or ())
    judge.batch_axes, judge.output_axes = config.get("batch_axes") or {}, config.get("output_axes") or {}
    if config.get("parts"):
        from ..evaluation.intervals import Parts

        judge.parts = Parts(tuple(config["parts"]["select"]), tuple(config["parts"]["confirm"]))
    return judge


# -- one task, in this process ---------------------------------------------------------------------------------

def _on_judge_axes(task: Mapping[str, Any], *paths: Any) -> list[Any]:
    """The task's data files, loaded on the judge's sample axes where those are not the model's own.

    quantize reads a path on the model's axes, but the user's ``--input`` may put an input's samples
    elsewhere (a state ``[2, batch, 8]`` whose dims say nothing): then every candidate failed to read
    the calibration file lighten itself wrote.
    """
    from ..inputs import batch_axes, specs_from_onnx, with_batch_axes

    judge = Path(task["judge"]) / "judge.json" if task.get("judge") else None
    axes = json.loads(judge.read_text()).get("batch_axes") if judge and judge.exists() else None
    if not axes or not any(paths):
        return list(paths)
    specs = specs_from_onnx(Path(task["model"]))
    if all(axes.get(n, a) == a for n, a in batch_axes(specs).items()):
        return list(paths)
    from ..data import load_data

    specs = with_batch_axes(specs, axes)
    loaded: dict[str, Any] = {}   # lighten gives one file as both calibration and check data: read it once
    for path in paths:
        if isinstance(path, (str, os.PathLike)) and os.fspath(path) not in loaded:
            loaded[os.fspath(path)] = load_data(path, specs)
    return [loaded.get(os.fspath(p), p) if isinstance(p, (str, os.PathLike)) else p for p in paths]


def run_task(task: Mapping[str, Any], load: Callable[[Path, Mapping[str, Any]], Judge] | None = None) -> JobResult:
    """Quantize the float model with the task's candidate, then judge the result.

    ``load`` reads the task's judge (default :func:`load_judge`; a warm worker keeps the ones it has read).
    """
    from ..errors import OnnxliteError
    from ..quantization.run import quantize

    candidate = task["candidate"]
    result = JobResult(name=candidate["name"], strategy=candidate["strategy"], options=dict(candidate["options"]),
                        keep_float=list(candidate.get("keep_float", ())))
    started = time.perf_counter()
    try:
        output = Path(task["output"])
        output.parent.mkdir(parents=True, exist_ok=True)
        # quantize gives the strategy its own copy of the model (onnxruntime writes beside its input), so
        # tasks running at once on the one float model never trample each other.
        calibration, check_data = _on_judge_axes(task, task.get("calibration"), task.get("check_data"))
        extra: dict[str, Any] = {}
        if task.get("source"):     # a training strategy (search.last_resort): the source model, loaded here
            extra["source_model"] = source_model(task["source"])
        quantized = quantize(Path(task["model"]), output, candidate["strategy"], calibration=calibration,
                             force=True, check_data=check_data, **candidate["options"], **extra)
        result.path = str(quantized.path)
        result.size_bytes = quantized.size_after   # kept when judging fails
        result.quantize = {k: v for k, v in quantized.to_dict().items() if k not in {"path", "source"}}
        claims = (quantized.details.get("claims") or {}).get("message")
        if claims:
            # the plugin's word and the written model disagree: its figures cannot be trusted as a recipe
            raise OnnxliteError(f"{claims} (the host counted the nodes in the written model)")
        judge = (load or load_judge)(Path(task["judge"]), task.get("settings", {}))
        pruned = None
        if task.get("prune"):
            from .pruning import prune

            # a few confirm samples first: a candidate clearly over budget there is not judged on the rest
            pruned = prune(judge, quantized.path, int(task["prune"]))
        if pruned is not None:
            result.drops, result.intervals = dict(pruned.drops), dict(pruned.intervals)
            result.passed, result.failures = False, list(pruned.failures)
            result.quantize["pruned_on"] = pruned.samples
        else:
            verdict = judge.evaluate(quantized.path, result.name)
            copy_figures(verdict, result)   # the judge's figures, the size of the file it judged among them
            result.passed, result.failures = verdict.passed, verdict.failures
    except OnnxliteError as exc:
        result.status, result.error = "failed", str(exc)
    except Exception as exc:  # a plugin's own bug: recorded, never fatal to the search
        result.status, result.error = "failed", f"{one_line(exc, 400, kind=True)}"
    result.seconds = round(time.perf_counter() - started, 2)
    return result


def source_model(task_source: Mapping[str, Any]) -> Any:
    """The source model a training strategy gets, loaded through its framework plugin (a torch.nn.Module)."""
    from ..conversion.export import load_for_export

    loaded = load_for_export(task_source["path"], task_source["framework"], model_class=task_source.get("model_class"),
                             framework_options=task_source.get("framework_options") or None)
    return getattr(loaded.model, "module", loaded.model)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2:
        print("usage: python -m onnxlite.jobs.candidate TASK.json RESULT.json", file=sys.stderr)
        return 2
    # A candidate dies with whatever started it (lighten, or a Ray worker that was killed):
    # an orphan would keep quantizing, holding cores and memory nobody will read.
    from ..benchmark.worker import die_with_parent

    die_with_parent()
    task = json.loads(Path(args[0]).read_text())
    result = run_task(task)
    from ..atomic import write_text

    write_text(args[1], json.dumps(result.to_dict(), indent=2, default=str))
    return 0


# -- many tasks, each in its own process -------------------------------------------------------------------------

def crash_message(returncode: int, stderr: str) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        what = f"the candidate's process crashed ({name})"
    else:
        what = f"the candidate's process exited with code {returncode}"
    tail = " | ".join(line for line in stderr.strip().splitlines()[-3:] if line.strip())
    return f"{what}{': ' + tail[-300:] if tail else ''}"


def run_tasks(tasks: Sequence[Mapping[str, Any]], folder: Path, workers: int = 1,
              on_start: Callable[[Mapping[str, Any]], None] | None = None) -> Iterator[JobResult]:
    """Run ``tasks`` in subprocesses, at most ``workers`` at a time; yield results as they finish."""
    folder.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    # The child must see the same plugins and packages as this process.
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    pending = list(enumerate(tasks))
    running: dict[int, tuple[subprocess.Popen[bytes], Mapping[str, Any], Path, Any, float]] = {}
    try:
        while pending or running:
            while pending and len(running) < max(1, workers):
                index, task = pending.pop(0)
                spec_file, result_file = folder / f"task{index}.json", folder / f"result{index}.json"
                # a later batch of probes reuses the folder: an earlier batch's result must never stand in for this one
                result_file.unlink(missing_ok=True)
                spec_file.write_text(json.dumps(task, indent=2, default=str))
                log = open(folder / f"task{index}.log", "w+")
                if on_start:
                    on_start(task)
                proc = subprocess.Popen([sys.executable, "-m", "onnxlite.jobs.candidate", str(spec_file),
                                         str(result_file)],
                                        stdout=log, stderr=subprocess.STDOUT, env=env)
                running[index] = (proc, task, result_file, log, time.monotonic())
            time.sleep(0.05)
            for index in list(running):
                proc, task, result_file, log, began = running[index]
                code = proc.poll()
                if code is None:
                    continue
                del running[index]
                log.seek(0)
                output = log.read()
                log.close()
                candidate = task["candidate"]
                if code == 0 and result_file.exists():
                    yield JobResult.from_dict(json.loads(result_file.read_text()))
                else:
                    yield JobResult(name=candidate["name"], strategy=candidate["strategy"],
                                     options=dict(candidate["options"]),
                                     keep_float=list(candidate.get("keep_float", ())),
                                     status="failed", error=crash_message(code, output),
                                     seconds=round(time.monotonic() - began, 2))
    finally:
        for proc, *_rest in running.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for _proc, _task, _result, log, _began in running.values():
            log.close()


def default_workers(model_bytes: int) -> int:
    """Candidates at once: bounded by cores and by memory (a candidate holds a few copies of the model)."""
    cores = os.cpu_count() or 1
    try:
        available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        available = 4 * 1024**3
    by_memory = max(1, int(available // max(1, 8 * model_bytes + 512 * 1024**2)))
    return max(1, min(cores, by_memory))


if __name__ == "__main__":
    sys.exit(main())
