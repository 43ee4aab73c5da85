"""Order statistics: what the worst of n samples promises about new ones, and low-quantile bounds.

Distribution-free: the share of new samples below the minimum of n is Beta(1, n), and the k-th lowest of n
samples lies below the true q-quantile with probability P(Binomial(n, q) >= k).  The tail metrics
(``cosine_p05``...) get their intervals here; docs/metrics.md, "Worst cases and tails", explains both.
numpy only (imported inside functions), like :mod:`onnxlite.stats`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from .stats import DEFAULT_CONFIDENCE, Interval, Resolution, zero_failure_samples

if TYPE_CHECKING:
    import numpy as np


def _check_confidence(confidence: float) -> float:
    confidence = float(confidence)
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie strictly between 0 and 1, not {confidence}")
    return confidence


@dataclass(frozen=True)
class WorstPromise:
    """What the worst of ``samples`` values says about new samples from the same source.

    Whatever the distribution, a new sample falls below the minimum of ``samples`` with probability
    1 / (samples + 1); the share of new samples below it is Beta(1, samples), so it stays under ``upper`` at
    ``confidence``.
    """

    samples: int
    one_in: int
    upper: float
    confidence: float

    def text(self, what: str = "sample") -> str:
        return (f"worst of {self.samples}; about 1 in {self.one_in} new {what}s may score lower "
                f"(up to {self.upper:.1%} of them at {self.confidence:.0%} confidence)")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def worst_promise(samples: int, confidence: float = DEFAULT_CONFIDENCE) -> WorstPromise:
    """The share of new samples expected below the minimum of ``samples`` (see :class:`WorstPromise`)."""
    confidence = _check_confidence(confidence)
    samples = int(samples)
    if samples <= 0:
        raise ValueError("a minimum needs at least one sample")
    return WorstPromise(samples, samples + 1, 1.0 - (1.0 - confidence) ** (1.0 / samples), confidence)


def _binomial_cdf_all(n: int, q: float) -> np.ndarray:
    """``P(Binomial(n, q) <= j)`` for j = 0..n, from log-space probabilities (no overflow for large n)."""
    import numpy as np

    j = np.arange(n + 1, dtype=np.float64)
    log_coef = np.array([math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) for k in range(n + 1)])
    logs = log_coef + j * math.log(q) + (n - j) * math.log1p(-q)
    top = float(np.max(logs))
    pmf = np.exp(logs - top)
    return np.minimum(1.0, np.cumsum(pmf / pmf.sum()))


def quantile_lower_rank(n: int, q: float, confidence: float = DEFAULT_CONFIDENCE) -> int:
    """The rank k (1-based) of the order statistic ``X_(k)`` of ``n`` samples that is a one-sided lower bound on
    the ``q``-quantile at ``confidence``, for any continuous distribution; 0 when ``n`` is too few for any.

    ``X_(k) <= quantile`` exactly when at least k samples fall at or below the quantile, which happens with
    probability ``P(Binomial(n, q) >= k)``: the largest k for which that is still >= ``confidence``.
    """
    confidence = _check_confidence(confidence)
    if not 0.0 < q < 1.0:
        raise ValueError(f"a quantile must lie strictly between 0 and 1, not {q}")
    n = int(n)
    if n <= 0:
        return 0
    cdf = _binomial_cdf_all(n, q)
    # P(Bin >= k) = 1 - cdf[k - 1] >= confidence  <=>  cdf[k - 1] <= 1 - confidence
    fits = [k for k in range(1, n + 1) if cdf[k - 1] <= 1.0 - confidence + 1e-15]
    return fits[-1] if fits else 0


def quantile_upper_rank(n: int, q: float, confidence: float = DEFAULT_CONFIDENCE) -> int:
    """The rank k of the order statistic that is a one-sided *upper* bound on the ``q``-quantile at
    ``confidence`` (the smallest k with ``P(Binomial(n, q) <= k - 1) >= confidence``); ``n + 1`` when none is."""
    confidence = _check_confidence(confidence)
    n = int(n)
    if n <= 0:
        return 1
    cdf = _binomial_cdf_all(n, q)
    fits = [k for k in range(1, n + 1) if cdf[k - 1] >= confidence - 1e-15]
    return fits[0] if fits else n + 1


def quantile_samples(q: float, confidence: float = DEFAULT_CONFIDENCE) -> int | None:
    """The fewest samples whose minimum is already a lower bound on the ``q``-quantile at ``confidence``
    (``(1 - q) ** n <= 1 - confidence``: 299 for the 1st percentile at 95%, 59 for the 5th, 29 for the 10th)."""
    return zero_failure_samples(q, confidence)


def quantile_interval(estimate: float, reference_score: float, values: Sequence[float] | np.ndarray, q: float,
                      confidence: float = DEFAULT_CONFIDENCE, higher_is_better: bool = True) -> Interval:
    """The drop of a ``q``-quantile metric with distribution-free order-statistic bounds.

    ``values`` are the candidate's per-sample scores and ``reference_score`` the reference's own; the drop's
    one-sided upper bound is ``reference_score`` minus the lower confidence bound on the candidate's quantile
    (:func:`quantile_lower_rank`), infinite when the samples are too few to bound it at all.
    """
    import numpy as np

    confidence = _check_confidence(confidence)
    data = np.sort(np.asarray(values, dtype=np.float64).reshape(-1))
    n = int(data.size)
    sign = 1.0 if higher_is_better else -1.0
    if not higher_is_better:   # the bad tail of a lower-is-better score is its high end
        data, q = np.sort(-data), 1.0 - q
    inf = math.inf

    def below(k: int) -> float:    # a lower bound on the quantile, as a drop bound
        return sign * reference_score - data[k - 1] if 1 <= k <= n else inf

    def above(k: int) -> float:
        return sign * reference_score - data[k - 1] if 1 <= k <= n else -inf

    tail = 1.0 - (1.0 - confidence) / 2
    upper = below(quantile_lower_rank(n, q, confidence))
    high = below(quantile_lower_rank(n, q, tail))
    low = above(quantile_upper_rank(n, q, tail))
    return Interval(float(estimate), float(min(low, estimate)), float(max(high, estimate)), float(max(upper, estimate)),
                    confidence, "order statistic", n)


def quantile_resolution(samples: int, q: float, budget: float, confidence: float = DEFAULT_CONFIDENCE,
                        what: str = "sample") -> Resolution:
    """Whether ``samples`` can bound a ``q``-quantile at ``confidence`` at all (known from the count alone)."""
    needed = quantile_samples(q, confidence)
    if needed is not None and samples >= needed:
        return Resolution(True, samples, budget, confidence, None, needed)
    return Resolution(False, samples, budget, confidence, None, needed,
                      f"{samples} {what}s cannot bound the {_ordinal(q)} percentile at {confidence:.0%} confidence "
                      f"(even their worst is above it too often); that needs >= {needed} {what}s")


def _ordinal(q: float) -> str:
    value = round(100 * q, 3)
    text = f"{value:g}"
    if value != int(value):
        return text
    tail = {1: "st", 2: "nd", 3: "rd"}.get(int(value) % 10 if int(value) % 100 not in (11, 12, 13) else 0, "th")
    return text + tail
