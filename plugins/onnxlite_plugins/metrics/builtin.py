"""Built-in metrics: differences, cosine similarity, classifier agreement, accuracy, pooled cosine.

Every metric scores one output of a candidate against the same output of the
reference.  ``applies`` picks the defaults from the output's shape:

* ``[B, C]`` floats (classifier logits): cosine, top-1/top-5 agreement, and
  accuracy when the data has labels;
* ``[B, T, H]`` floats with a ``[B, T]`` attention-mask input (token
  embeddings): cosine of the mask-aware mean-pooled vectors;
* any other float output: cosine and absolute differences.

docs/metrics.md explains each one and how ``--max-drop`` reads them.
"""

from __future__ import annotations

from typing import Any

from onnxlite import MetricSpec, hookimpl

TOP_K = 5
#: the probability lead of the reference's top-1 over its runner-up below which a sample is a near-tie
#: (onnxlite.evaluation.margins.DEFAULT_MARGIN; repeated so that registering the metrics imports nothing)
CONFIDENT_MARGIN = 0.1


def _np():
    import numpy as np

    return np


def _is_float(array: Any) -> bool:
    from onnxlite.numerics import is_floating  # numpy only once a metric runs

    return is_floating(array)


def _is_logits(reference: Any) -> bool:
    return _is_float(reference) and reference.ndim == 2 and reference.shape[1] >= 2


def _is_tokens(reference: Any, context: Any) -> bool:
    return (_is_float(reference) and reference.ndim == 3
            and context.attention_mask(reference.shape[:2]) is not None)


def _finite(candidate: Any) -> bool:
    return bool(_np().all(_np().isfinite(candidate)))


def _cosines(reference: Any, candidate: Any) -> Any:
    from onnxlite.numerics import cosine_per_sample

    return cosine_per_sample(reference, candidate)


def _pooled(array: Any, mask: Any) -> Any:
    """Mean over real tokens only (what sentence-transformers does), one vector per sample."""
    np = _np()
    weights = np.asarray(mask, dtype=np.float64)[..., None]
    summed = np.sum(np.asarray(array, dtype=np.float64) * weights, axis=1)
    return summed / np.maximum(weights.sum(axis=1), 1e-9)


class Cosine:
    def __init__(self, reduce: str):
        self.reduce = reduce

    def applies(self, reference: Any, context: Any) -> bool:
        return _is_float(reference) and reference.ndim >= 1 and not _is_tokens(reference, context)

    def compute(self, reference: Any, candidate: Any, context: Any) -> float:
        if not _finite(candidate):
            return float("nan")
        values = _cosines(reference, candidate)
        return float(values.min() if self.reduce == "min" else values.mean())


class PooledCosine:
    def __init__(self, reduce: str):
        self.reduce = reduce

    def applies(self, reference: Any, context: Any) -> bool:
        return _is_tokens(reference, context)

    def compute(self, reference: Any, candidate: Any, context: Any) -> float:
        if not _finite(candidate):
            return float("nan")
        mask = context.attention_mask(reference.shape[:2])
        if mask is None:
            raise ValueError(f"output {context.output!r}: pooled cosine needs a [batch, tokens] attention mask input")
        values = _cosines(_pooled(reference, mask), _pooled(candidate, mask))
        return float(values.min() if self.reduce == "min" else values.mean())


class CosineQuantile:
    """The ``quantile``-th quantile of the per-sample cosines (plain or mask-pooled): a tail that holds on new data.

    ``quantile`` tells the host's intervals to bound it with order statistics
    (:func:`onnxlite.order_stats.quantile_interval`), not a bootstrap.
    """

    def __init__(self, quantile: float, pooled: bool):
        self.quantile, self.pooled = quantile, pooled

    def applies(self, reference: Any, context: Any) -> bool:
        if self.pooled:
            return _is_tokens(reference, context)
        return _is_float(reference) and reference.ndim >= 1 and not _is_tokens(reference, context)

    def compute(self, reference: Any, candidate: Any, context: Any) -> float:
        if not _finite(candidate):
            return float("nan")
        if self.pooled:
            mask = context.attention_mask(reference.shape[:2])
            if mask is None:
                raise ValueError(f"output {context.output!r}: pooled cosine needs a [batch, tokens] attention mask")
            reference, candidate = _pooled(reference, mask), _pooled(candidate, mask)
        return float(_np().quantile(_cosines(reference, candidate), self.quantile))


class AbsDiff:
    def __init__(self, reduce: str):
        self.reduce = reduce

    def applies(self, reference: Any, context: Any) -> bool:
        return _is_float(reference) and not _is_logits(reference) and not _is_tokens(reference, context)

    def compute(self, reference: Any, candidate: Any, context: Any) -> float:
        from onnxlite.numerics import max_abs_diff, mean_abs_diff

        if not _finite(candidate):
            return float("nan")
        return max_abs_diff(reference, candidate) if self.reduce == "max" else mean_abs_diff(reference, candidate)


class TopKAgreement:
    """Share of samples whose reference top-1 class is among the candidate's top ``k``."""

    def __init__(self, k: int):
        self.k = k

    def applies(self, reference: Any, context: Any) -> bool:
        return _is_logits(reference) and reference.shape[1] > (self.k if self.k > 1 else 1)

    def compute(self, reference: Any, candidate: Any, context: Any) -> float:
        np = _np()
        if not _finite(candidate):
            return float("nan")
        reference = reference.reshape(reference.shape[0], -1)
        candidate = candidate.reshape(reference.shape)
        truth = np.argmax(reference, axis=1)
        k = min(self.k, reference.shape[1])
        top = np.argpartition(-candidate, k - 1, axis=1)[:, :k] if k > 1 else np.argmax(candidate, axis=1)[:, None]
        return float(np.mean(np.any(top == truth[:, None], axis=1)))


def _class_labels(labels: Any, count: int, classes: int) -> Any:
    """Labels as class indices, or None when they do not fit this output."""
    np = _np()
    if labels is None:
        return None
    labels = np.asarray(labels)
    if labels.shape[:1] != (count,):
        return None
    if labels.ndim == 2 and labels.shape[1] == classes:  # one-hot
        labels = np.argmax(labels, axis=1)
    labels = labels.reshape(count, -1)
    if labels.shape[1] != 1 or not np.issubdtype(labels.dtype, np.integer):
        return None
    labels = labels[:, 0]
    if labels.min() < 0 or labels.max() >= classes:
        return None
    return labels


class ConfidentAgreement:
    """Top-1 agreement on the samples where the reference is confident: its top-1 probability leads the
    runner-up's by at least ``margin``.  Near-ties, whose answer any rounding may flip, are not judged.

    ``judged`` tells the host's intervals which samples count (exact bounds on those alone).
    """

    def __init__(self, margin: float):
        self.margin = margin

    def applies(self, reference: Any, context: Any) -> bool:
        return _is_logits(reference)

    def judged(self, reference: Any, context: Any) -> Any:
        from onnxlite.numerics import top1_lead

        return top1_lead(reference) >= self.margin

    def compute(self, reference: Any, candidate: Any, context: Any) -> float:
        np = _np()
        if not _finite(candidate):
            return float("nan")
        keep = self.judged(reference, context)
        if not np.any(keep):
            return 1.0       # no confident answer to change
        reference = reference.reshape(reference.shape[0], -1)[keep]
        candidate = candidate.reshape(candidate.shape[0], -1)[keep]
        return float(np.mean(np.argmax(candidate, axis=1) == np.argmax(reference, axis=1)))


class TopKOverlap:
    """Share of the reference's top ``k`` classes that are also in the candidate's top ``k``, mean over samples."""

    def __init__(self, k: int):
        self.k = k

    def applies(self, reference: Any, context: Any) -> bool:
        return _is_logits(reference) and reference.shape[1] > self.k

    def compute(self, reference: Any, candidate: Any, context: Any) -> float:
        np = _np()
        if not _finite(candidate):
            return float("nan")
        reference = reference.reshape(reference.shape[0], -1)
        candidate = candidate.reshape(reference.shape)
        ref_top = np.argpartition(-reference, self.k - 1, axis=1)[:, :self.k]
        cand_top = np.argpartition(-candidate, self.k - 1, axis=1)[:, :self.k]
        shared = [len(set(a.tolist()) & set(b.tolist())) for a, b in zip(ref_top, cand_top)]
        return float(np.mean(shared) / self.k)


class Accuracy:
    """Top-1 accuracy against the data's labels; the reference scores its own accuracy."""

    def applies(self, reference: Any, context: Any) -> bool:
        return (_is_logits(reference)
                and _class_labels(context.labels, reference.shape[0], reference.shape[1]) is not None)

    def compute(self, reference: Any, candidate: Any, context: Any) -> float:
        np = _np()
        labels = _class_labels(context.labels, reference.shape[0], reference.shape[1])
        if labels is None:
            raise ValueError(f"output {context.output!r}: accuracy needs integer labels in [0, {reference.shape[1]}) "
                             f"for each of the {reference.shape[0]} samples")
        if not _finite(candidate):
            return float("nan")
        return float(np.mean(np.argmax(candidate.reshape(reference.shape), axis=1) == labels))


def _metric(name: str, description: str, factory, higher_is_better: bool = True, default: bool = True) -> MetricSpec:
    return MetricSpec(name=name, description=description, factory=factory, requires=("numpy",),
                      install="numpy", higher_is_better=higher_is_better, default=default)


#: the low percentiles offered as tail metrics (``cosine_p05`` is the 5th percentile of per-sample cosines)
TAIL_PERCENTILES = (1, 5, 10)


def _tail_metrics() -> list[MetricSpec]:
    specs = []
    for pct in TAIL_PERCENTILES:
        for pooled, base, what in ((False, "cosine", "Cosine similarity per sample"),
                                   (True, "pooled_cosine", "Cosine of attention-mask mean-pooled token embeddings")):
            specs.append(_metric(
                f"{base}_p{pct:02d}", f"{what}, its {pct}th percentile over samples, with a distribution-free "
                f"order-statistic bound (a tail budget that holds on new samples); drop = 1 - value.",
                lambda q=pct / 100, p=pooled: CosineQuantile(q, p), default=False))
    return specs


@hookimpl
def register_metrics() -> list[MetricSpec]:
    return [
        _metric("cosine_mean", "Cosine similarity per sample (output flattened), mean over samples; drop = 1 - value.",
                lambda: Cosine("mean")),
        _metric("cosine_min", "Cosine similarity per sample, worst sample; drop = 1 - value.", lambda: Cosine("min")),
        _metric("max_abs_diff", "Largest absolute difference over all elements; drop = value.",
                lambda: AbsDiff("max"), higher_is_better=False),
        _metric("mean_abs_diff", "Mean absolute difference over all elements; drop = value.",
                lambda: AbsDiff("mean"), higher_is_better=False),
        _metric("top1_agreement", "Share of samples where the candidate's top class is the reference's; "
                "drop = 1 - value.", lambda: TopKAgreement(1)),
        _metric("top5_agreement", "Share of samples where the reference's top class is in the candidate's top 5; "
                "drop = 1 - value.", lambda: TopKAgreement(TOP_K)),
        _metric("accuracy", "Top-1 accuracy against the data's labels; drop = reference accuracy - candidate "
                "accuracy.", Accuracy),
        _metric("pooled_cosine_mean", "Cosine of attention-mask mean-pooled token embeddings, mean over samples; "
                "drop = 1 - value.", lambda: PooledCosine("mean")),
        _metric("pooled_cosine_min", "Cosine of attention-mask mean-pooled token embeddings, worst sample; "
                "drop = 1 - value.", lambda: PooledCosine("min")),
        _metric("top1_agreement_confident", f"Top-1 agreement on the samples where the reference's top-1 "
                f"probability leads the runner-up by >= {CONFIDENT_MARGIN:g} (near-ties are not judged); "
                "drop = 1 - value.", lambda: ConfidentAgreement(CONFIDENT_MARGIN), default=False),
        _metric("top5_overlap", "Share of the reference's top 5 classes also in the candidate's top 5, mean over "
                "samples; drop = 1 - value.", lambda: TopKOverlap(TOP_K), default=False),
        *_tail_metrics(),
    ]
