"""``onnxlite.sweep()``: lighten every model of a manifest, here or across a Ray cluster, and resume.

Each model's lighten writes its own OUTDIR (``ROOT/NAME``) atomically, as
``lighten`` always does, so an OUTDIR that exists is a finished model: a sweep
run again skips it and keeps it (``force`` runs everything again).  A record
per model (``ROOT/.sweep/NAME.json``) feeds the summary (``summary.md``,
``summary.json``, ``summary.html``), which is rewritten after every model, so
an interrupted sweep still has a summary of what finished.

On Ray every model is one task holding ``cpus_per_model`` CPUs; its lighten
runs on that node with the local pool, its inputs arrive through the object
store (or ``shared_dir``) and its OUTDIR comes back to this machine.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from pathlib import Path

from ..errors import UsageError
from ..events import Event
from .manifest import Manifest, ModelJob, read_manifest
from .one_model import run_here
from .outcome import ModelOutcome, SweepResult, from_report

STATE = ".sweep"


def sweep(manifest: str | os.PathLike[str] | Manifest, output_dir: str | os.PathLike[str] | None = None, *,
          executor: str | None = None, ray_address: str | None = None, bench_on: str | None = None,
          cpus_per_model: float | None = None, shared_dir: str | os.PathLike[str] | None = None,
          max_retries: int | None = None, force: bool = False, on_event: Event | None = None) -> SweepResult:
    """Lighten every model in ``manifest`` into ``output_dir/NAME``; models already there are kept.

    ``executor`` is ``"local"`` (one model after another, candidates in the
    local pool) or ``"ray"`` (every model a Ray task on the cluster at
    ``ray_address``); the manifest's ``[sweep]`` table gives defaults for these.
    """
    from ..atomic import write_text

    started = time.perf_counter()
    emit = on_event or (lambda _kind, _info: None)
    plan = manifest if isinstance(manifest, Manifest) else read_manifest(manifest)
    conf = plan.sweep
    executor = executor or conf.get("executor", "local")
    if executor not in {"local", "ray"}:
        raise UsageError(f"--executor: expected local or ray, got {executor!r}")
    ray_options = {"ray_address": ray_address or conf.get("ray_address"), "bench_on": bench_on or conf.get("bench_on"),
                   "shared_dir": shared_dir or conf.get("shared_dir"),
                   "max_retries": max_retries if max_retries is not None else conf.get("max_retries")}
    if executor == "local":
        given = [k for k, v in ray_options.items() if v is not None] + (["cpus_per_model"] if cpus_per_model else [])
        if given:
            raise UsageError(f"--{given[0].replace('_', '-')}: needs --executor ray")
    root = Path(output_dir or conf.get("output") or f"{plan.path.stem}.sweep")
    if root.exists() and not root.is_dir():
        raise UsageError(f"{root}: exists and is not a folder")
    (root / STATE).mkdir(parents=True, exist_ok=True)
    outcomes: dict[str, ModelOutcome] = {}
    todo: list[ModelJob] = []
    for job in plan.models:
        out = root / job.name
        if not force and (out / "report.json").is_file():
            outcomes[job.name] = _kept(root, job)
            emit("model_kept", {"name": job.name, "status": outcomes[job.name].status})
        else:
            todo.append(job)
    emit("sweep", {"total": len(plan.models), "todo": len(todo), "kept": len(plan.models) - len(todo),
                   "executor": executor})
    result = SweepResult(output_dir=root, manifest=str(plan.path), models=[], executor={"name": executor})

    def finished(outcome: ModelOutcome) -> None:
        outcomes[outcome.name] = outcome
        write_text(root / STATE / f"{outcome.name}.json", json.dumps(outcome.to_dict(), indent=2) + "\n")
        emit("model_done", {"name": outcome.name, "status": outcome.status, "message": outcome.message})
        _summarize(result, plan, outcomes, root)

    try:
        if executor == "local":
            for job in todo:
                emit("model_start", {"name": job.name})
                finished(run_here(job, root / job.name, force, emit))
        else:
            from .on_ray import run_on_ray

            result.executor = run_on_ray(todo, root, force, ray_options, cpus_per_model or
                                         conf.get("cpus_per_model") or 1, finished, emit)
    finally:
        result.seconds = round(time.perf_counter() - started, 1)
        _summarize(result, plan, outcomes, root)
    return result


def _kept(root: Path, job: ModelJob) -> ModelOutcome:
    record = root / STATE / f"{job.name}.json"
    try:
        outcome = ModelOutcome.from_dict(json.loads(record.read_text()))
    except (OSError, ValueError, TypeError):
        outcome = from_report(job.name, job.source, root / job.name)
    outcome.kept = True
    outcome.output_dir = str(root / job.name)
    return outcome


def _summarize(result: SweepResult, plan: Manifest, outcomes: Mapping[str, ModelOutcome], root: Path) -> None:
    from .summary import write_summary

    result.models = [outcomes.get(job.name) or ModelOutcome(job.name, job.source) for job in plan.models]
    result.reports = write_summary(result, root)


