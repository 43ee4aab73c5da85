"""Cache keys for a decoder's trials that a re-run finds again: the *input* model and the corpus, not the export.

The result cache (:mod:`onnxlite.search.cache`) keys every candidate on the float ONNX model's bytes and on the
judge's files, reference outputs included. A decoder's float model is an export written afresh on every run
(through the model builder or the torch exporter, from a temporary folder), and its reference records are
float32 sums over a 49,152-token vocabulary: neither is promised to be the same bytes twice, and one differing
byte would make every candidate of a re-run a miss, each quantized and judged again for minutes.

So a decoder's trials are keyed on what decides their figures and is stable:

- **the input model**: the bytes of the source as given (a transformers folder's files, a GGUF file, an
  exported decoder's ``model.onnx`` and data), with the export's settings (engine, opset) and onnxlite's version;
- **the corpus**: the judge's token windows (the ids of every window, which the corpus, the split, the
  tokenizer and the window plan decide) and its settings (metrics, budgets, parts, greedy plan), without the
  reference's float records;
- the strategy with its normalised options, the calibration windows, the session settings, the onnxruntime
  version and the ISA, as for every candidate (:func:`onnxlite.search.cache.candidate_key`).

An entry still holds the quantized model beside the figures, so a cached winner is benchmarked and published
as if it had just been written.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .config import LightenConfig
    from .trials import TrialContext


def source_files(source: str | os.PathLike[str]) -> list[Path] | None:
    """The files whose bytes make the input model: a folder's files (sorted, recursively, hidden ones left
    out), else the file itself, with an ONNX file's external data; None for a source that is not files alone
    (a Python reference such as ``model.py:lm`` builds its model in code that may import anything)."""
    path = Path(source)
    if not path.exists():
        return None
    if path.is_dir():
        return sorted(p for p in path.rglob("*") if p.is_file()
                      and not any(part.startswith(".") for part in p.relative_to(path).parts))
    if path.suffix == ".onnx" and path.is_file():
        from ..modelio import external_data_files

        return [path, *(Path(p) for p in external_data_files(path))]
    return [path]


def source_hash(source: str | os.PathLike[str], config: LightenConfig) -> str | None:
    """SHA-256 over the input model's files (names and bytes) and what the export does with them (None: not
    a source of files, :func:`source_files`)."""
    from .. import __version__
    from ..modelio import file_hash

    files = source_files(source)
    if files is None:
        return None
    digest = hashlib.sha256()
    root = Path(source)
    for path in files:
        name = path.relative_to(root).as_posix() if root.is_dir() else path.name
        digest.update(name.encode() + b"\0" + file_hash(path).encode())
    export = {"exporter": config.exporter, "opset": config.opset, "framework": config.framework,
              "model_class": config.model_class, "onnxlite": __version__}
    digest.update(json.dumps(export, sort_keys=True, default=str).encode())
    return "decoder-source:" + digest.hexdigest()


def corpus_hash(judge_dir: str | os.PathLike[str]) -> str:
    """SHA-256 over the judge's settings and its windows' token ids (not the reference's float records)."""
    import numpy as np

    folder = Path(judge_dir)
    config = json.loads((folder / "judge.json").read_text())
    digest = hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode())
    with np.load(folder / "judge.npz", allow_pickle=False) as npz:
        for i, name in enumerate(config["inputs"]):
            if name == "input_ids":
                ids = np.ascontiguousarray(npz[f"in_{i}"])
                digest.update(str(ids.shape).encode() + ids.tobytes())
    return "decoder-corpus:" + digest.hexdigest()


def use_stable_keys(trials: TrialContext, source: str | os.PathLike[str], judge_dir: str | os.PathLike[str],
                    config: LightenConfig) -> dict[str, Any] | None:
    """Key ``trials``' cache entries on the input model and the corpus (see the module's docstring); what they
    are keyed on, or None when they keep the export's keys (no cache, or a source that is not files alone)."""
    if trials.cache is None or trials.cache_context is None:
        return None
    model = source_hash(source, config)
    if model is None:
        return None
    corpus = corpus_hash(judge_dir)
    trials.cache_context = replace(trials.cache_context, model=model)
    trials.judge_hashes[str(judge_dir)] = corpus
    return {"model": model, "corpus": corpus}
