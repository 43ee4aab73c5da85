"""``MANIFEST.toml`` for ``onnxlite sweep``: the models to lighten, each with its data, metric and budget.

::

    [sweep]                       # optional: how to run (command-line flags win)
    output = "zoo.sweep"          # one OUTDIR per model under it (default: MANIFEST-stem.sweep)
    executor = "ray"              # local (default) or ray
    ray_address = "auto"
    cpus_per_model = 2            # with ray: CPUs each model's lighten holds

    [defaults]                    # any lighten option, for every model
    max_drop = "1%"
    runs = 10

    [[models]]
    name = "intent"               # its OUTDIR's name (default: the source's stem)
    source = "intent.onnx"
    data = "intent-heldout.npz"
    metric = "accuracy"
    max_drop = "2%"               # overrides the default
    target_cpu = "avx2"           # the CPU kind it will run on (lighten --target-cpu); checked before any work

Relative paths are taken from the manifest's folder, not the current one.
"""

from __future__ import annotations

import difflib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UsageError

#: lighten keyword arguments a model entry (or [defaults]) may set, with the types TOML gives them
LIGHTEN_KEYS: dict[str, tuple[type, ...]] = {
    "source": (str,), "framework": (str,), "inputs": (list,), "model_class": (str,), "opset": (int,),
    "exporter": (str,), "max_drop": (str, float, int, dict), "metric": (str, list), "data": (str,),
    "data_options": (dict,), "calibration": (str,), "calibration_options": (dict,), "strategies": (list, str),
    "recipe": (str,), "objective": (str,), "batch": (int,), "runs": (int,), "workers": (int,), "partial": (bool,),
    "max_float_nodes": (int,), "split": (float,), "target_cpu": (str,),
    # the session, as lighten's --provider/--threads/... flags
    "provider": (str,), "threads": (int,), "graph_optimization": (str,), "execution_mode": (str,),
}
SESSION_KEYS = ("provider", "threads", "graph_optimization", "execution_mode")
#: values that name files: resolved against the manifest's folder
PATH_KEYS = ("source", "data", "calibration", "model_class", "recipe")
#: [sweep] keys
SWEEP_KEYS: dict[str, tuple[type, ...]] = {"output": (str,), "executor": (str,), "ray_address": (str,),
                                           "bench_on": (str,), "cpus_per_model": (int, float),
                                           "max_retries": (int,), "shared_dir": (str,)}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass(frozen=True)
class ModelJob:
    """One model of the sweep: its OUTDIR name and the keyword arguments for :func:`onnxlite.lighten`."""

    name: str
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def source(self) -> str:
        return self.options["source"]


@dataclass(frozen=True)
class Manifest:
    path: Path
    models: tuple[ModelJob, ...]
    sweep: dict[str, Any] = field(default_factory=dict)
    defaults: dict[str, Any] = field(default_factory=dict)


def read_manifest(path: str | os.PathLike[str]) -> Manifest:
    """Parse and check ``path``; every mistake is one UsageError naming the file, the model and the key."""
    path = Path(path)
    try:
        import tomllib
    except ModuleNotFoundError:   # Python 3.10
        import tomli as tomllib
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"{path}: no such manifest") from None
    except IsADirectoryError:
        raise UsageError(f"{path}: is a folder, not a manifest") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: not valid TOML ({' '.join(str(exc).split())})") from None
    return parse_manifest(doc, path)


def parse_manifest(doc: dict[str, Any], path: Path) -> Manifest:
    base = path.resolve().parent
    unknown = set(doc) - {"sweep", "defaults", "models"}
    if unknown:
        _unknown(path, "the top level", sorted(unknown)[0], ["sweep", "defaults", "models"])
    sweep = _table(doc, "sweep", path)
    for key, value in sweep.items():
        _check(path, "[sweep]", key, value, SWEEP_KEYS)
    if "executor" in sweep and sweep["executor"] not in {"local", "ray"}:
        raise UsageError(f"{path}: [sweep] executor: expected local or ray, got {sweep['executor']!r}")
    if "output" in sweep:
        sweep["output"] = str(base / sweep["output"])
    defaults = _table(doc, "defaults", path)
    for key, value in defaults.items():
        if key == "source":
            raise UsageError(f"{path}: [defaults] cannot set source; each [[models]] entry names its own")
        _check(path, "[defaults]", key, value, LIGHTEN_KEYS)
    entries = doc.get("models")
    if not isinstance(entries, list) or not entries or not all(isinstance(e, dict) for e in entries):
        raise UsageError(f"{path}: needs at least one [[models]] entry with a source")
    jobs: list[ModelJob] = []
    names: set[str] = set()
    for index, entry in enumerate(entries, 1):
        job = _model_job(path, base, index, dict(entry), defaults)
        if job.name in names:
            raise UsageError(f"{path}: two models are named {job.name!r}; give one a different name")
        names.add(job.name)
        jobs.append(job)
    return Manifest(path=path, models=tuple(jobs), sweep=sweep, defaults=defaults)


def override(plan: Manifest, option: str, value: Any) -> Manifest:
    """``plan`` with lighten option ``option`` set to ``value`` for every model, over what the manifest says
    (a command-line flag such as ``sweep --target-cpu``); checked as a manifest value is."""
    from dataclasses import replace

    _check(plan.path, "the command line", option, value, LIGHTEN_KEYS)
    return replace(plan, models=tuple(replace(job, options=job.options | {option: value}) for job in plan.models))


def _model_job(path: Path, base: Path, index: int, entry: dict[str, Any], defaults: dict[str, Any]) -> ModelJob:
    """One [[models]] entry, checked, with [defaults] under it and its paths taken from the manifest's folder."""
    where = f"[[models]] #{index}"
    name = entry.pop("name", None)
    if "source" not in entry:
        raise UsageError(f"{path}: {where}: needs a source")
    if name is None:
        name = Path(str(entry["source"]).split(":")[0].rstrip("/")).stem or f"model{index}"
    for key, value in entry.items():
        _check(path, f"model {name!r}", key, value, LIGHTEN_KEYS)
    if not isinstance(name, str) or not _NAME.match(name):
        raise UsageError(f"{path}: {where}: name {name!r} must be letters, digits, '.', '_' or '-' "
                         "(it names the model's OUTDIR)")
    options = {**defaults, **entry}
    for key in PATH_KEYS:
        if key in options:
            options[key] = _resolve(options[key], base, must_exist=key == "source")
    for key in ("data_options", "calibration_options"):
        if key in options:
            options[key] = {k: _resolve(v, base, must_exist=True) for k, v in options[key].items()}
    if isinstance(options.get("strategies"), str):
        options["strategies"] = [s.strip() for s in options["strategies"].split(",") if s.strip()]
    return ModelJob(name, options)


def _table(doc: dict[str, Any], key: str, path: Path) -> dict[str, Any]:
    value = doc.get(key, {})
    if not isinstance(value, dict):
        raise UsageError(f"{path}: [{key}] must be a table")
    return dict(value)


def _check(path: Path, where: str, key: str, value: Any, allowed: dict[str, tuple[type, ...]]) -> None:
    if key not in allowed:
        _unknown(path, where, key, list(allowed))
    types = allowed[key]
    ok = isinstance(value, types) and not (isinstance(value, bool) and bool not in types)
    if float in types and isinstance(value, int) and not isinstance(value, bool):
        ok = True
    if not ok:
        names = " or ".join({str: "a string", int: "an integer", float: "a number", bool: "true/false",
                             list: "a list", dict: "a table"}[t] for t in types)
        raise UsageError(f"{path}: {where}: {key} must be {names}, got {value!r}")
    if isinstance(value, list) and not all(isinstance(v, str) for v in value):
        raise UsageError(f"{path}: {where}: {key} must be a list of strings, got {value!r}")
    if isinstance(value, int) and not isinstance(value, bool) and key not in {"opset"} and value < 1:
        raise UsageError(f"{path}: {where}: {key} must be at least 1, got {value}")
    if key == "target_cpu":
        from ..hardware import parse_target_cpu

        parse_target_cpu(value, f"{path}: {where}: target_cpu")   # an unknown kind fails before any model runs


def _unknown(path: Path, where: str, key: str, allowed: list[str]) -> None:
    close = difflib.get_close_matches(key, allowed, n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    raise UsageError(f"{path}: {where}: unknown key {key!r}{hint}")


def _resolve(value: Any, base: Path, must_exist: bool = False) -> Any:
    """A relative path (or the file part of ``file.py:name``) taken from the manifest's folder.

    With ``must_exist`` (sources, which may be hub ids; option values such as
    ``max_length=64``) only when the manifest's folder has it; else always, so
    an error names the path the manifest meant.
    """
    if not isinstance(value, str) or not value:
        return value
    head, sep, tail = value.rpartition(":")
    if not sep or not head or "/" in tail or "\\" in tail:
        head, sep, tail = value, "", ""
    if Path(head).is_absolute() or (must_exist and not (base / head).exists()):
        return value
    return str(base / head) + sep + tail
