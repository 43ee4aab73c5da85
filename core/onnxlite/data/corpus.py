"""A text corpus for a decoder language model: documents, tokenized into overlapping windows.

A corpus file is UTF-8 text.  Documents are blocks separated by blank lines;
a file with no blank line at all holds one document a line.  Each document is
tokenized with the model's tokenizer, the documents are joined into one token
stream (with the end-of-sequence token between them when the tokenizer has
one), and the stream is cut into windows of ``window`` tokens that step by
``window - stride``: the first ``stride`` tokens of a window are context only,
and each window scores its last ``window - stride`` tokens, so every scored
token is predicted from at least ``stride`` tokens before it and no token is
scored twice (the sliding-window perplexity of Hugging Face's perplexity guide).

A held-out split is made by document, before any window is cut
(:func:`split_documents`): no document lends tokens both to the part that
calibrates and to the part that judges.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import UsageError

if TYPE_CHECKING:
    import numpy as np

#: the window and the context tokens each window starts with when the user names neither (capped by the model)
DEFAULT_WINDOW = 512
#: suffixes read as a corpus of documents when the model is a decoder
CORPUS_SUFFIXES = (".txt", ".text", ".cor")

_BLANK = re.compile(r"\n[ \t\r\f\v]*\n")


def read_documents(path: str | os.PathLike[str]) -> list[str]:
    """The documents of a corpus file: blank-line-separated blocks, or one a line when it has no blank line."""
    where = Path(path)
    try:
        text = where.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{where}: cannot read the corpus ({type(exc).__name__}: {exc})") from None
    text = text.replace("\r\n", "\n").strip()
    blocks = _BLANK.split(text) if _BLANK.search(text) else text.split("\n")
    documents = [" ".join(block.split()) if "\n" in block else block.strip() for block in blocks]
    documents = [d for d in documents if d]
    if not documents:
        raise UsageError(f"{where}: the corpus is empty")
    return documents


def split_documents(documents: Sequence[str], fraction: float) -> tuple[list[str], list[str]]:
    """The first ``fraction`` of the documents and the rest (both non-empty), as :meth:`Dataset.split` cuts
    samples: the first part calibrates, the second is held out and judges."""
    if len(documents) < 2:
        raise UsageError("a corpus needs at least 2 documents to split into calibration and held-out parts")
    cut = max(1, min(len(documents) - 1, int(round(len(documents) * fraction))))
    return list(documents[:cut]), list(documents[cut:])


@dataclass(frozen=True)
class WindowPlan:
    """How a token stream is cut: ``window`` tokens each, the first ``stride`` of them context only."""

    window: int
    stride: int

    @property
    def scored(self) -> int:
        """Tokens each window scores (its last ``window - stride``)."""
        return self.window - self.stride

    def describe(self) -> str:
        return f"windows of {self.window} tokens, {self.stride} of context, {self.scored} scored"


def plan_windows(window: int | None, stride: int | None, context_length: int | None,
                 where: str = "--data-option") -> WindowPlan:
    """The window and stride to use: given, else ``DEFAULT_WINDOW`` (at most the model's context) and half of it."""
    size = int(window) if window else min(DEFAULT_WINDOW, context_length or DEFAULT_WINDOW)
    if size < 2:
        raise UsageError(f"{where} window={size}: a window needs at least 2 tokens")
    if context_length and size > context_length:
        raise UsageError(f"{where} window={size}: longer than the model's context of {context_length} tokens")
    context = size // 2 if stride is None else int(stride)
    if not 1 <= context < size:
        raise UsageError(f"{where} stride={context}: the context tokens must be at least 1 and fewer than the "
                         f"window ({size})")
    return WindowPlan(size, context)


@dataclass(frozen=True)
class CorpusWindows:
    """A corpus cut into windows (``ids``: int64 [windows, window]) and how."""

    ids: np.ndarray
    plan: WindowPlan
    source: str
    documents: int
    tokens: int

    def __len__(self) -> int:
        return int(self.ids.shape[0])

    @property
    def scored_tokens(self) -> int:
        return len(self) * self.plan.scored

    def take(self, count: int) -> CorpusWindows:
        """The first ``count`` windows."""
        from dataclasses import replace

        return replace(self, ids=self.ids[:count])

    def describe(self) -> str:
        return (f"{len(self)} windows ({self.scored_tokens} scored tokens; {self.plan.describe()}) "
                f"from {self.documents} documents of {self.source}")


def tokenize_documents(documents: Sequence[str], tokenizer: Any) -> list[list[int]]:
    """Each document's token ids, without the special tokens the tokenizer would add."""
    # verbose=False: a document longer than the model's context is expected here, it is cut into windows
    encoded = tokenizer(list(documents), add_special_tokens=False, verbose=False)["input_ids"]
    return [list(map(int, ids)) for ids in encoded]


def cut_windows(token_lists: Sequence[Sequence[int]], plan: WindowPlan, separator: int | None,
                where: str) -> np.ndarray:
    """The documents' tokens joined (``separator`` between them) and cut into windows by ``plan``."""
    import numpy as np

    stream: list[int] = []
    for i, ids in enumerate(token_lists):
        if i and separator is not None:
            stream.append(int(separator))
        stream.extend(ids)
    if len(stream) < plan.window:
        raise UsageError(f"{where}: {len(stream)} tokens, too short for one window of {plan.window} "
                         "(give more text, or a smaller --data-option window=N)")
    step = plan.scored
    starts = range(0, len(stream) - plan.window + 1, step)
    array = np.asarray(stream, dtype=np.int64)
    return np.stack([array[s:s + plan.window] for s in starts])


def corpus_windows(documents: Sequence[str], tokenizer: Any, plan: WindowPlan, source: str) -> CorpusWindows:
    """``documents`` tokenized and cut into windows by ``plan``."""
    tokens = tokenize_documents(documents, tokenizer)
    separator = getattr(tokenizer, "eos_token_id", None)
    ids = cut_windows(tokens, plan, separator, source)
    return CorpusWindows(ids, plan, source, len(documents), sum(len(t) for t in tokens))


def is_corpus(path: Any) -> bool:
    """Whether ``path`` names a text file (read as a corpus of documents when the model is a decoder)."""
    return isinstance(path, (str, os.PathLike)) and Path(path).suffix.lower() in CORPUS_SUFFIXES
