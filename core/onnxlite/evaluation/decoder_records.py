"""What a decoder language model's judge keeps of each run: small per-window records, not logits.

A vocabulary of 49,152 makes one window's logits 100 MB; the judge keeps,
per window, only what its metrics read, so any number of candidates can be
scored against one reference run.  Two records, each one row per window (a
window is a sample, so held-out parts and intervals work as for any output):

``text`` (float64 ``[windows, scored, 3 + 2K]``), for each scored position
(the last ``window - stride`` tokens of the window, each predicted from the tokens before it):

- column 0: the model's log-probability of the token that follows;
- column 1: the model's top-1 next token;
- column 2: the log of the probability the model puts outside the support (``-inf`` when none);
- columns 3 to 3+K: its log-probabilities at the K support tokens;
- columns 3+K to 3+2K: the support's token ids.

The support is the reference's K most likely tokens at that position (all of
them when the vocabulary has at most K), and a candidate's record uses the
reference's support, so the KL divergence over the support and the rest as one
bucket is computed from the two records alone; it is the exact KL when the
vocabulary fits, and a lower bound (the rest merged) otherwise.

``greedy`` (float64 ``[windows, new_tokens]``): the greedy continuation of the
window's first ``prompt`` tokens, ``-1`` after an end-of-sequence token.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

NEXT_TOKEN = "text"
GREEDY = "greedy"
#: support tokens kept per position for the KL divergence
DEFAULT_SUPPORT = 1024
TARGET, TOP1, TAIL, SUPPORT = 0, 1, 2, 3
#: greedy records' filler after a continuation stopped
STOPPED = -1.0


@dataclass(frozen=True)
class NextTokenColumns:
    """Views of a ``text`` record's columns (any leading shape)."""

    target: np.ndarray
    top1: np.ndarray
    tail: np.ndarray
    support: np.ndarray
    ids: np.ndarray


def columns(record: np.ndarray) -> NextTokenColumns:
    """The columns of a ``text`` record."""
    k = (record.shape[-1] - SUPPORT) // 2
    if record.shape[-1] != SUPPORT + 2 * k or k < 1:
        raise ValueError(f"not a text record: its last axis has {record.shape[-1]} columns")
    return NextTokenColumns(record[..., TARGET], record[..., TOP1], record[..., TAIL],
                            record[..., SUPPORT:SUPPORT + k], record[..., SUPPORT + k:])


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """float64 log-probabilities over the last axis."""
    import numpy as np

    x = np.asarray(logits, dtype=np.float64)
    shifted = x - x.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def next_token_record(logits: np.ndarray, ids: np.ndarray, stride: int, support: int | np.ndarray) -> np.ndarray:
    """One window's ``text`` record from its logits (``[window, vocab]``) and tokens (``[window]``).

    ``support`` is K (the reference: its own top K) or the reference's record of this window, whose support
    tokens a candidate is scored on.
    """
    import numpy as np

    window = ids.shape[0]
    positions = np.arange(stride - 1, window - 1)          # position p predicts token p + 1
    logp = log_softmax(logits[positions])                   # [scored, vocab]
    vocab = logp.shape[-1]
    targets = ids[positions + 1]
    if isinstance(support, (int, np.integer)):
        k = min(int(support), vocab)
        top = np.argpartition(-logp, k - 1, axis=-1)[:, :k] if k < vocab else np.tile(np.arange(vocab),
                                                                                       (len(positions), 1))
        order = np.argsort(-np.take_along_axis(logp, top, axis=-1), axis=-1, kind="stable")
        chosen = np.take_along_axis(top, order, axis=-1)
    else:
        chosen = columns(np.asarray(support)).ids.astype(np.int64)
    held = np.take_along_axis(logp, chosen, axis=-1)
    rest = np.ones_like(logp, dtype=bool)
    np.put_along_axis(rest, chosen, False, axis=-1)
    with np.errstate(divide="ignore"):
        tail = np.log(np.where(rest, np.exp(logp), 0.0).sum(axis=-1))
    rows = np.arange(len(positions))
    out = np.empty((len(positions), SUPPORT + 2 * chosen.shape[-1]), dtype=np.float64)
    out[:, TARGET] = logp[rows, targets]
    out[:, TOP1] = np.argmax(logp, axis=-1)
    out[:, TAIL] = tail
    out[:, SUPPORT:SUPPORT + chosen.shape[-1]] = held
    out[:, SUPPORT + chosen.shape[-1]:] = chosen
    return out


def greedy_record(tokens: Any, new_tokens: int) -> np.ndarray:
    """A ``greedy`` record from the continuations (one token sequence per prompt)."""
    import numpy as np

    out = np.full((len(tokens), new_tokens), STOPPED, dtype=np.float64)
    for row, seq in enumerate(tokens):
        seq = list(seq)[:new_tokens]
        out[row, :len(seq)] = seq
    return out


def kl_per_token(reference: np.ndarray, candidate: np.ndarray) -> np.ndarray:
    """KL(reference || candidate) at each scored position, over the support and the rest as one bucket."""
    import numpy as np

    ref, cand = columns(reference), columns(candidate)
    if not np.array_equal(ref.ids, cand.ids):
        raise ValueError("the candidate's record is not on the reference's support")
    p = np.exp(ref.support)
    terms = np.sum(p * (ref.support - cand.support), axis=-1)
    tail_p = np.exp(ref.tail)
    with np.errstate(invalid="ignore"):
        tail = np.where(tail_p > 0, tail_p * (ref.tail - cand.tail), 0.0)
    return np.asarray(terms + tail)


def prefix_lengths(reference: np.ndarray, candidate: np.ndarray) -> np.ndarray:
    """Per prompt, how many generated tokens agree before the first difference (all of them when none differs)."""
    import numpy as np

    same = reference == candidate
    differs = ~same
    first = np.argmax(differs, axis=-1)
    return np.where(differs.any(axis=-1), first, reference.shape[-1]).astype(np.float64)
