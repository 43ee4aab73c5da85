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
Models with external data are not cached (their data file's name is written inside them).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .tasks import TaskResult

#: bump when what an entry holds changes meaning: older entries are then simply never found
CACHE_VERSION = "1"


def default_cache_dir() -> Path:
    """``$ONNXLITE_CACHE_DIR``, else ``$XDG_CACHE_HOME/onnxlite``, else ``~/.cache/onnxlite``."""
    if os.environ.get("ONNXLITE_CACHE_DIR"):
        return Path(os.environ["ONNXLITE_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "onnxlite"


def isa_name() -> str:
    """The CPU's instruction set as the integer kernels see it: ``x86_64-avx512vnni``, ``x86_64-avx2``, ``aarch64``.

    ``onnxlite.hardware`` names it when that module is present; otherwise numpy's view of the CPU's
    features (which, unlike /proc/cpuinfo, is right under an emulated CPU too).
    """
    try:
        from .. import hardware

        probe = getattr(hardware, "detect", None) or getattr(hardware, "this_machine", None)
        if probe is not None:
            found = probe()
            name = getattr(found, "isa", None)
            if isinstance(name, str) and name:
                return name
    except ImportError:
        pass
    machine = platform.machine().lower()
    try:
        from numpy._core._multiarray_umath import __cpu_features__ as features
    except ImportError:
        return machine
    for flag in ("AVX512VNNI", "AVXVNNI", "AVX2", "ASIMDDP"):
        if features.get(flag):
            return f"{machine}-{flag.lower()}"
    return machine


def file_hash(*paths: str | os.PathLike[str] | None) -> str:
    """SHA-256 over the files' bytes, in order (a missing or absent path hashes as its absence)."""
    digest = hashlib.sha256()
    for path in paths:
        if path is None or not os.path.exists(path):
            digest.update(b"<none>")
            continue
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
        digest.update(b"<end>")
    return digest.hexdigest()


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

    return CacheContext(file_hash(model), file_hash(calibration),
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

    def get(self, key: str, output: str | os.PathLike[str]) -> TaskResult | None:
        """The cached result, its model copied to ``output``; None on a miss or an entry that cannot be read whole."""
        from .tasks import TaskResult

        entry = self._entry(key)
        try:
            record = json.loads((entry / "result.json").read_text())
            model = entry / "model.onnx"
            if file_hash(model) != record["model_sha256"]:
                raise ValueError("the cached model differs from the one recorded")
            result = TaskResult.from_dict(record["result"])
            Path(output).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(model, output)
        except (OSError, ValueError, KeyError, TypeError):
            self.misses += 1
            return None
        result.path = str(output)
        self.hits.append(result.name)
        return result

    def put(self, key: str, result: TaskResult) -> bool:
        """Store an ``ok`` result and its model (atomically); False when it cannot or should not be cached."""
        if result.status != "ok" or not result.path or not os.path.exists(result.path) or _external(result.path):
            return False
        entry = self._entry(key)
        if entry.exists():
            return False
        scratch = self.folder / f"v{CACHE_VERSION}" / f".tmp-{uuid.uuid4().hex}"
        try:
            scratch.mkdir(parents=True)
            shutil.copyfile(result.path, scratch / "model.onnx")
            data = result.to_dict() | {"path": None}
            record = {"model_sha256": file_hash(scratch / "model.onnx"), "result": data}
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


def _external(path: str | os.PathLike[str]) -> bool:
    """Whether the model keeps tensors in an external data file (such entries are not cached)."""
    import onnx

    from ..modelio import read_header

    try:
        model = read_header(path)   # shared: the benchmark reads the same header
    except Exception:  # noqa: BLE001 - unreadable: not worth caching
        return True
    return any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer)
