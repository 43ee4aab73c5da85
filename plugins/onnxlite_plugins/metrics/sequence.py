"""Built-in metrics that see damage whole-output cosine hides: sequences, per-channel error, scalar outputs.

Whole-output cosine is dominated by the largest values.  On a YOLO head that
concatenates box pixels (0-1024) with class scores (0-1), an int8 scale that
zeroes every class score still leaves cosine at 0.999; on a ``[batch, 1]``
output cosine compares one number with one number and is 1 whenever both are
positive; and an argmax over a flattened ``[frames x classes]`` CTC output
means nothing.  These metrics look where the damage is:

* ``[B, T, C]`` float outputs (per-frame class scores, CTC): ``frame_agreement``
  (per-frame argmax) and ``ctc_agreement`` (greedy CTC decode, sequences
  compared whole).  Frames whose ``[B, T]`` attention mask is 0 are ignored;
* every float output with a channel axis: ``slice_rel_error_max`` /
  ``slice_rel_error_mean``, the relative error ``||cand - ref|| / ||ref||`` of
  each slice along axis 1 (a channel of NCHW, a row of a YOLO head, a frame of
  a sequence, a column of ``[B, C]``), so that every slice weighs the same
  whatever its scale.  ``20 * log10(1 / value)`` is that slice's SQNR in dB;
* one value per sample (``[B]``, ``[B, 1]``): ``scalar_abs_error`` and,
  for values in [0, 1], ``threshold_agreement`` (same side of 0.5: speech or
  not, object or not).

They are off by default (``default=False``): name them with ``--metric``
(``--metric output0.slice_rel_error_max``); ``--list-plugins`` describes each
one.  Choosing them per output by default is the host's job (metrics.py): on
an output whose slices differ in range more than 10x (a detector head), the host
brings in ``slice_rel_error_max`` with a budget of its own (docs/metrics.md).
"""

from __future__ import annotations

from typing import Any

from onnxlite import MetricSpec, hookimpl

#: the CTC blank class (PaddleOCR, torchaudio, onnxruntime's CTC decoders)
CTC_BLANK = 0
THRESHOLD = 0.5


def _np():
    import numpy as np

    return np


def _is_float(array: Any) -> bool:
    from onnxlite.numerics import is_floating  # numpy only once a metric runs

    return is_floating(array)


def _finite(candidate: Any) -> bool:
    np = _np()
    return bool(np.all(np.isfinite(candidate)))


def _is_sequence(reference: Any) -> bool:
    return _is_float(reference) and reference.ndim == 3 and reference.shape[2] >= 2


def _per_sample_size(reference: Any) -> int:
    return int(_np().prod(reference.shape[1:])) if reference.ndim else 1


def _is_scalar(reference: Any) -> bool:
    return _is_float(reference) and reference.ndim in (1, 2) and _per_sample_size(reference) == 1


def _frame_mask(reference: Any, context: Any) -> Any:
    """``[B, T]`` booleans: the frames that count (all of them without an attention mask of that shape)."""
    np = _np()
    mask = context.attention_mask(reference.shape[:2])
    if mask is None:
        return np.ones(reference.shape[:2], dtype=bool)
    return np.asarray(mask) != 0


class _SequenceMetric:
    """A ``[B, T, C]`` float output: the shared opening of the sequence metrics.

    NaN for a candidate that is not finite; otherwise :meth:`score` gets the
    candidate in the reference's shape and the ``[B, T]`` frames that count.
    """

    def applies(self, reference: Any, context: Any) -> bool:
        return _is_sequence(reference)

    def compute(self, reference: Any, candidate: Any, context: Any) -> float:
        if not _finite(candidate):
            return float("nan")
        return self.score(reference, candidate.reshape(reference.shape), _frame_mask(reference, context))

    def score(self, reference: Any, candidate: Any, mask: Any) -> float:
        raise NotImplementedError


class FrameAgreement(_SequenceMetric):
    """Share of (unmasked) frames whose top class is the reference's."""

    def score(self, reference: Any, candidate: Any, mask: Any) -> float:
        np = _np()
        same = np.argmax(reference, axis=2) == np.argmax(candidate, axis=2)
        return float(same[mask].mean()) if mask.any() else 1.0


def ctc_greedy(scores: Any, mask: Any, blank: int = CTC_BLANK) -> list[tuple[int, ...]]:
    """Greedy CTC decoding of ``[B, T, C]`` scores: argmax per frame, merge repeats, drop blanks."""
    np = _np()
    best = np.argmax(scores, axis=2)
    decoded = []
    for row, keep_frames in zip(best, mask):
        row = row[keep_frames]
        keep = np.ones(len(row), dtype=bool)
        keep[1:] = row[1:] != row[:-1]
        keep &= row != blank
        decoded.append(tuple(int(i) for i in row[keep]))
    return decoded


class CtcAgreement(_SequenceMetric):
    """Share of samples whose greedy CTC decoding is the reference's, label for label."""

    def score(self, reference: Any, candidate: Any, mask: Any) -> float:
        ours, theirs = ctc_greedy(reference, mask), ctc_greedy(candidate, mask)
        return float(_np().mean([a == b for a, b in zip(ours, theirs)]))


def slice_relative_errors(reference: Any, candidate: Any) -> Any:
    """``||cand - ref|| / ||ref||`` of each slice along axis 1, pooled over the batch and the other axes.

    A slice whose reference is (almost) all zeros is measured against a
    millionth of the largest slice norm, so float noise on it stays small and
    real values on it do not.
    """
    np = _np()
    ref = np.asarray(reference, dtype=np.float64)
    cand = np.asarray(candidate, dtype=np.float64).reshape(ref.shape)
    if ref.ndim == 1:
        ref, cand = ref[:, None], cand[:, None]
    ref = np.moveaxis(ref, 1, 0).reshape(ref.shape[1], -1)
    cand = np.moveaxis(cand, 1, 0).reshape(ref.shape)
    norms = np.linalg.norm(ref, axis=1)
    floor = max(float(norms.max()) * 1e-6, np.finfo(np.float64).tiny)
    return np.linalg.norm(cand - ref, axis=1) / np.maximum(norms, floor)


class SliceRelativeError:
    def __init__(self, reduce: str):
        self.reduce = reduce

    def applies(self, reference: Any, context: Any) -> bool:
        return _is_float(reference) and reference.ndim >= 2 and reference.shape[1] >= 2

    def compute(self, reference: Any, candidate: Any, context: Any) -> float:
        if not _finite(candidate):
            return float("nan")
        errors = slice_relative_errors(reference, candidate)
        return float(errors.max() if self.reduce == "max" else errors.mean())


class ScalarAbsError:
    """Largest absolute difference on an output with one value per sample."""

    def applies(self, reference: Any, context: Any) -> bool:
        return _is_scalar(reference)

    def compute(self, reference: Any, candidate: Any, context: Any) -> float:
        np = _np()
        if not _finite(candidate):
            return float("nan")
        ref = np.asarray(reference, dtype=np.float64).reshape(-1)
        return float(np.max(np.abs(np.asarray(candidate, dtype=np.float64).reshape(ref.shape) - ref)))


class ThresholdAgreement:
    """Share of samples on the same side of 0.5 as the reference (a probability's yes/no decision)."""

    def applies(self, reference: Any, context: Any) -> bool:
        np = _np()
        return _is_scalar(reference) and bool(np.all((reference >= 0) & (reference <= 1)))

    def compute(self, reference: Any, candidate: Any, context: Any) -> float:
        np = _np()
        if not _finite(candidate):
            return float("nan")
        ref = np.asarray(reference).reshape(-1) >= THRESHOLD
        return float(np.mean(ref == (np.asarray(candidate).reshape(-1) >= THRESHOLD)))


def _metric(name: str, description: str, factory, higher_is_better: bool = True) -> MetricSpec:
    return MetricSpec(name=name, description=description, factory=factory, requires=("numpy",),
                      install="numpy", higher_is_better=higher_is_better, default=False)


@hookimpl
def register_metrics() -> list[MetricSpec]:
    return [
        _metric("frame_agreement", "[batch, frames, classes] outputs: share of frames (attention mask 1) whose "
                "top class is the reference's; drop = 1 - value.", FrameAgreement),
        _metric("ctc_agreement", f"[batch, frames, classes] outputs: share of samples whose greedy CTC decoding "
                f"(blank = class {CTC_BLANK}) equals the reference's; drop = 1 - value.", CtcAgreement),
        _metric("slice_rel_error_max", "Relative error ||cand - ref|| / ||ref|| of each slice along axis 1 "
                "(channel, row, frame), worst slice; drop = value.", lambda: SliceRelativeError("max"),
                higher_is_better=False),
        _metric("slice_rel_error_mean", "Relative error of each slice along axis 1, mean over slices; "
                "drop = value.", lambda: SliceRelativeError("mean"), higher_is_better=False),
        _metric("scalar_abs_error", "Outputs with one value per sample: largest absolute difference; drop = value.",
                ScalarAbsError, higher_is_better=False),
        _metric("threshold_agreement", f"Outputs with one value in [0, 1] per sample: share of samples on the same "
                f"side of {THRESHOLD} as the reference; drop = 1 - value.", ThresholdAgreement),
    ]
