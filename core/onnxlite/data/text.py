"""A text file (one sentence a line) tokenized for a transformer model.

The tokenizer comes from a local folder (``tokenizer=FOLDER``, loaded with
``transformers.AutoTokenizer`` offline).  Its outputs are matched to the
model's inputs by name or by role (token ids, attention mask, token type ids)
and cast to the model's dtypes.  The whole file is tokenized at once, so with
``padding=longest`` every sample shares the longest line's length (real
padding, real masks); a model with a fixed sequence length gets exactly that.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import UsageError, one_line

if TYPE_CHECKING:
    from ..inputs import InputSpec

#: tokenizer output for each input role
ROLE_KEYS = {"ids": "input_ids", "mask": "attention_mask", "type_ids": "token_type_ids"}


def load_tokenizer(folder: str | Path, where: str) -> Any:
    folder = Path(folder)
    if not folder.is_dir():
        raise UsageError(f"{where}: tokenizer folder {folder} does not exist")
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise UsageError(f"{where}: text data needs transformers: pip install 'onnxlite[transformers]'") from None
    try:
        return AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except Exception as exc:
        raise UsageError(f"{where}: cannot load a tokenizer from {folder} "
                         f"({one_line(exc, 200, kind=True)})") from None


def load_text(path: Path, inputs: Sequence[InputSpec] | None, options: dict[str, Any]):
    """An in-memory :class:`~onnxlite.data.Dataset` of the tokenized lines of ``path``."""
    import numpy as np

    from ..inputs import guess_role
    from .dataset import Dataset

    where = str(path)
    if not options.get("tokenizer"):
        raise UsageError(f"{where}: text data needs a tokenizer folder: data option tokenizer=FOLDER")
    try:
        lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{where}: cannot read the text file ({type(exc).__name__}: {exc})") from None
    lines = [line for line in lines if line]
    if not lines:
        raise UsageError(f"{where}: no sentences (the file is empty)")

    max_length = int(options.get("max_length") or 128)
    padding = options.get("padding") or "longest"
    fixed = {s.shape[1] for s in inputs or () if len(s.shape) >= 2 and isinstance(s.shape[1], int)}
    if len(fixed) == 1:
        # A model traced at a fixed sequence length accepts nothing else.
        max_length, padding = fixed.pop(), "max_length"
    tokenizer = load_tokenizer(options["tokenizer"], where)
    try:
        encoded = tokenizer(lines, padding=padding, truncation=True, max_length=max_length, return_tensors="np")
    except Exception as exc:
        raise UsageError(f"{where}: tokenizing failed ({type(exc).__name__}: {exc})") from None
    encoded = {k: np.asarray(v) for k, v in encoded.items()}

    if inputs is None:
        return Dataset({k: v.astype(np.int64) for k, v in encoded.items()}, None, where)
    arrays = {}
    for spec in inputs:
        key = spec.name if spec.name in encoded else ROLE_KEYS.get(spec.role or guess_role(spec.name) or "")
        if key == "token_type_ids" and key not in encoded:
            arrays[spec.name] = np.zeros_like(encoded["input_ids"], dtype=spec.dtype)
            continue
        if key not in encoded:
            raise UsageError(f"{where}: the tokenizer gives {', '.join(encoded)}; "
                             f"input {spec.name!r} of the model is none of these")
        arrays[spec.name] = encoded[key].astype(spec.dtype)
    return Dataset(arrays, None, where)
