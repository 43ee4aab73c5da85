"""One model of a sweep: its lighten arguments, its run in this process, and moving its files.

Both ways of running a sweep use it: ``run`` (one model after another here)
and ``on_ray`` (each model a task on a worker, its files shipped there and its
OUTDIR back).
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import OnnxliteError
from ..events import Event
from .manifest import PATH_KEYS, SESSION_KEYS, ModelJob
from .outcome import ModelOutcome, from_lighten

#: a model's task asks for this much memory on top of a few copies of its source
BASE_MEMORY = 1024**3


def lighten_arguments(job: ModelJob) -> tuple[str, dict[str, Any]]:
    """The source and keyword arguments of :func:`onnxlite.lighten` for ``job``."""
    from ..runtime import SessionSettings

    options = dict(job.options)
    source = options.pop("source")
    session = {k: options.pop(k) for k in SESSION_KEYS if k in options}
    if session:
        options["settings"] = SessionSettings(**session)
    return source, options


def run_here(job: ModelJob, out: Path, force: bool, emit: Event, **extra: Any) -> ModelOutcome:
    """One model's lighten in this process; its errors become a failed record, Ctrl-C stops the sweep."""
    from ..executors.machine import describe_machine
    from ..search.lighten import lighten

    started = time.perf_counter()
    source, options = lighten_arguments(job)
    options.update(extra)

    def forward(kind: str, info: Mapping[str, Any]) -> None:
        if kind == "stage":
            emit("model_stage", {"name": job.name, "message": info["message"]})

    try:
        result = lighten(source, out, force=force, on_event=forward, **options)
    except OnnxliteError as exc:
        return ModelOutcome(job.name, job.source, status="failed", message=str(exc),
                            seconds=round(time.perf_counter() - started, 1), ran_on=describe_machine())
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception as exc:  # noqa: BLE001 - one model's bug must not stop the others
        return ModelOutcome(job.name, job.source, status="failed",
                            message=f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}",
                            seconds=round(time.perf_counter() - started, 1), ran_on=describe_machine())
    return from_lighten(job.name, job.source, result, time.perf_counter() - started, describe_machine())


def path_values(options: Mapping[str, Any]) -> dict[str, str]:
    """``{"key": local path}`` for every option naming a file or folder here (``key`` is ``data_options.tokenizer``
    for option tables); ``file.py:name`` references travel as their file."""
    found = {}
    for key in PATH_KEYS:
        value = options.get(key)
        if isinstance(value, str):
            head = _path_part(value)
            if os.path.exists(head):
                found[key] = head
    for table in ("data_options", "calibration_options"):
        for key, value in (options.get(table) or {}).items():
            if isinstance(value, str) and os.path.isabs(value) and os.path.exists(value):
                found[f"{table}.{key}"] = value
    return found


def _path_part(value: str) -> str:
    head, sep, tail = value.rpartition(":")
    return head if sep and head and "/" not in tail and os.path.exists(head) else value


def relocate(options: dict[str, Any], key: str, old: str, new: str) -> None:
    """Point option ``key`` (or ``table.key``) from path ``old`` to ``new``, keeping any ``:name``."""
    table, _, sub = key.partition(".")
    if sub:
        options[table] = dict(options[table]) | {sub: new}
        return
    options[key] = new + options[key][len(old):]




def staging_dir(root: Path, name: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=f".{name}.", suffix=".incoming", dir=root))
