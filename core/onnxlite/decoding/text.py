"""The tokenizer and generation settings saved beside an exported language model.

An exported LM's folder holds ``model.onnx``, the tokenizer files,
``generation_config.json`` and ``genai_config.json``; these read them back so
that text can become ids and ids text again.  transformers is imported only here
and only when called.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import UsageError

TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")


def model_folder(path: str | os.PathLike[str]) -> Path:
    """The folder an exported model lives in: ``path`` itself when it is a folder, else its parent."""
    path = Path(path)
    return path if path.is_dir() else path.parent


def has_tokenizer(folder: str | os.PathLike[str]) -> bool:
    """Whether ``folder`` holds a tokenizer transformers can load (a cheap look at its files)."""
    folder = Path(folder)
    return any((folder / name).is_file() for name in TOKENIZER_FILES[:3])


def load_tokenizer(path: str | os.PathLike[str]) -> Any:
    """The transformers tokenizer saved beside the model at ``path`` (a model file or its folder)."""
    folder = model_folder(path)
    if not has_tokenizer(folder):
        raise UsageError(f"{folder}: has no tokenizer (tokenizer.json, tokenizer.model or vocab.json); "
                         "export the model from a source that has one")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise UsageError(f"{folder}: reading its tokenizer needs transformers: "
                         "pip install 'onnxlite[transformers]'") from None
    try:
        return AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except Exception as exc:  # noqa: BLE001 - transformers raises many kinds for a broken folder
        raise UsageError(f"{folder}: transformers could not load its tokenizer "
                         f"({type(exc).__name__}: {' '.join(str(exc).split())[:200]})") from None


@dataclass(frozen=True)
class GenerationDefaults:
    """Token ids and the context length generation needs, from the files beside a model."""

    eos_token_id: tuple[int, ...]
    pad_token_id: int
    bos_token_id: int | None
    #: the most positions the model takes (prompt and new tokens), when a config states it
    context_length: int | None


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _ids(value: Any) -> tuple[int, ...]:
    if value is None:
        return ()
    if isinstance(value, (list, tuple)):
        return tuple(int(v) for v in value)
    return (int(value),)


def generation_defaults(path: str | os.PathLike[str], tokenizer: Any = None) -> GenerationDefaults:
    """End, pad and begin token ids and the context length, from ``generation_config.json``, ``genai_config.json``
    and ``config.json`` beside the model (in that order), then the tokenizer."""
    folder = model_folder(path)
    generation = _read(folder / "generation_config.json")
    genai = _read(folder / "genai_config.json").get("model", {})
    config = _read(folder / "config.json")
    sources = (generation, genai, config)

    def first(key: str) -> Any:
        return next((s[key] for s in sources if s.get(key) is not None), None)

    eos = _ids(first("eos_token_id"))
    if not eos and tokenizer is not None and tokenizer.eos_token_id is not None:
        eos = (int(tokenizer.eos_token_id),)
    pad = first("pad_token_id")
    if pad is None and tokenizer is not None:
        pad = tokenizer.pad_token_id
    if pad is None:
        pad = eos[0] if eos else 0
    bos = first("bos_token_id")
    context = genai.get("context_length") or config.get("max_position_embeddings") or config.get("n_positions")
    return GenerationDefaults(eos_token_id=eos, pad_token_id=int(_ids(pad)[0]),
                              bos_token_id=None if bos is None else int(_ids(bos)[0]),
                              context_length=int(context) if context else None)
