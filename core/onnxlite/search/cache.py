"""The result cache: a candidate's quantized model and judgement, reused when nothing they depend on changed.

The key is a hash of everything that decides the model and its figures: the float model's bytes,
the strategy with its normalised options and float nodes, the calibration file's bytes, the
judge's files (reference outputs, inputs, metrics, budgets and parts), the session settings,
the onnxruntime version and the CPU's instruction set (integer kernels round differently on
AVX2 and VNNI).  A cached entry carries everything but timing: ``lighten`` still benchmarks,
because timings belong to the moment.

Entries are written to a scratch folder and renamed into place, so a crash or a second
process never leaves half an entry; an entry that cannot be read back whole (a missing file,
broken JSON, a model whose hash differs from the one recorded) is a miss, never an error.
Models with external data (weights in a side file, as ``save_as_external_data`` writes them) are keyed
on every byte they read, the .onnx file and each data file it names, and an entry holds both; a restored
copy's data file is renamed after the copy (``<output>.data``), its references rewritten to match, so it
never lands on another model's data file.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..modelio import file_hash, model_hash

if TYPE_CHECKING:
    from ..jobs.candidate import JobResult

#: bump when what an entry holds changes meaning: older entries are then simply never found
#: (2: quantized models lost the shape annotations that made onnxruntime run a slower kernel, slow_fusions)
CACHE_VERSION = "2"


def default_cache_dir() -> Path:
    """``$ONNXLITE_CACHE_DIR``, else ``$XDG_CACHE_HOME/onnxlite``, else ``~/.cache/onnxlite``."""
    if os.environ.get("ONNXLITE_CACHE_DIR"):
        return Path(os.environ["ONNXLITE_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "onnxlite"


def isa_name() -> str:
    """The CPU's instruction set as onnxruntime's integer kernels see it (:func:`onnxlite.hardware.detect`,
    right under an emulated CPU too): a judgement made on one ISA is not reused on another, whose int8
    answers may differ."""
    from .. import hardware

    return hardware.detect().isa


@dataclass(frozen=True)
class CacheContext:
    """What every candidate of one search shares in its key (hashed once per search)."""

    model: str          # the float model's hash
    calibration: str    # the calibration file's hash
    settings: str       # the session settings, as JSON
    runtime: str        # the onnxruntime version
    isa: str


def context(model: str | os.PathLike[str], calibration: str | os.PathLike[str] | None,
            settings: Mapping[str, Any], runtime: str | None = None, isa: str | None = None) -> CacheContext:
    import onnxruntime

    return CacheContext(model_hash(model), file_hash(calibration),
                        json.dumps(dict(settings), sort_keys=True, default=str),
                        runtime or onnxruntime.__version__, isa or isa_name())


def candidate_key(ctx: CacheContext, strategy: str, options: Mapping[str, Any], keep_float: Sequence[str],
                  judge_hash: str, uses_calibration: bool) -> str:
    """The entry's key: the context, the candidate after option normalisation, and the judge it got."""
    parts = {"version": CACHE_VERSION, "model": ctx.model, "settings": ctx.settings, "runtime": ctx.runtime,
             "isa": ctx.isa, "strategy": strategy, "options": dict(options), "keep_float": list(keep_float),
             "calibration": ctx.calibration if uses_calibration else None, "judge": judge_hash}
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def judge_hash(folder: str | os.PathLike[str]) -> str:
    return file_hash(Path(folder) / "judge.npz", Path(folder) / "judge.json")


@dataclass
class ResultCache:
    """Entries under ``folder``; counts what it found, missed and stored for the report."""

    folder: Path
    hits: list[str] = field(default_factory=list)
    misses: int = 0
    stored: int = 0

    def _entry(self, key: str) -> Path:
        return self.folder / f"v{CACHE_VERSION}" / key[:2] / key

    def get(self, key: str, output: str | os.PathLike[str]) -> JobResult | None:
        """The cached result, its model copied to ``output``; None on a miss or an entry that cannot be read whole."""
        from ..jobs.candidate import JobResult

        entry = self._entry(key)
        try:
            record = json.loads((entry / "result.json").read_text())
            model = entry / "model.onnx"
            if model_hash(model) != record["model_sha256"]:
                raise ValueError("the cached model (or its external data) differs from the one recorded")
            result = JobResult.from_dict(record["result"])
            Path(output).parent.mkdir(parents=True, exist_ok=True)
            _restore(model, Path(output))
        except (OSError, ValueError, KeyError, TypeError):
            self.misses += 1
            return None
        result.path = str(output)
        self.hits.append(result.name)
        return result

    def put(self, key: str, result: JobResult) -> bool:
        """Store an ``ok`` result and its model (atomically); False when it cannot or should not be cached."""
        if result.status != "ok" or not result.path or not os.path.exists(result.path):
            return False
        data = _external(result.path)
        if data is None:
            return False
        entry = self._entry(key)
        if entry.exists():
            return False
        scratch = self.folder / f"v{CACHE_VERSION}" / f".tmp-{uuid.uuid4().hex}"
        try:
            scratch.mkdir(parents=True)
            shutil.copyfile(result.path, scratch / "model.onnx")
            for location in data:   # beside it under the names it refers to, so model_hash reads the same bytes
                shutil.copyfile(Path(result.path).parent / location, scratch / location)
            record = {"model_sha256": model_hash(scratch / "model.onnx"), "external_data": data,
                      "result": result.to_dict() | {"path": None}}
            (scratch / "result.json").write_text(json.dumps(record, default=str))
            entry.parent.mkdir(parents=True, exist_ok=True)
            os.rename(scratch, entry)   # atomic: another process's entry for the same key wins the race
        except OSError:
            shutil.rmtree(scratch, ignore_errors=True)
            return False
        self.stored += 1
        return True

    def describe(self) -> dict[str, Any]:
        return {"dir": str(self.folder), "hits": len(self.hits), "misses": self.misses, "stored": self.stored,
                "reused": list(self.hits)}


def _external(path: str | os.PathLike[str]) -> list[str] | None:
    """The external-data files the model names, relative to it ([] for none); None when it cannot be cached:
    unreadable, a data file missing, or one that is not a plain name beside it (an entry holds flat files)."""
    from ..modelio import external_locations, read_header

    try:
        model = read_header(path)   # shared: the benchmark reads the same header
    except Exception:  # noqa: BLE001 - unreadable: not worth caching
        return None
    found = external_locations(model)
    folder = Path(path).parent
    if any(Path(n).name != n or n in {"model.onnx", "result.json"} or not (folder / n).is_file() for n in found):
        return None
    return found


def _restore(model: Path, output: Path) -> None:
    """Copy a cached model to ``output``; its external data to ``<output>.data`` (``.data1``... for more files),
    the references rewritten, so the copy never takes another model's data file name in that folder."""
    import onnx

    from ..modelio import external_locations, rename_external_data

    proto = onnx.load(str(model), load_external_data=False)
    names = external_locations(proto)
    if not names:
        shutil.copyfile(model, output)
        return
    renamed = {n: f"{output.name}.data{i or ''}" for i, n in enumerate(names)}
    rename_external_data(proto, renamed)
    for old, new in renamed.items():   # the data before the model that names it, as save_model does
        shutil.copyfile(model.parent / old, output.parent / new)
    scratch = output.with_name(f".{output.name}.{uuid.uuid4().hex[:8]}")
    onnx.save(proto, str(scratch))
    os.replace(scratch, output)
