"""How sure a measured accuracy drop is: confidence intervals, resolvable budgets, ties.

A drop measured on a few hundred held-out samples is an estimate.  ``lighten``
lets a candidate pass only when the *upper confidence bound* of its drop stays
within the budget, treats candidates whose intervals overlap as tied on
accuracy, and says before any work when the held-out data is too small to
tell a budget apart at all (one sample is worth more than the budget).

Two kinds of interval:

- **exact** (Clopper-Pearson) for a rate of samples: disagreements of top-1
  classes, or samples a candidate got wrong that the reference got right.
  Exact binomial bounds hold at any sample size, including zero failures,
  where a bootstrap would claim certainty.
- **bootstrap** (paired, percentile, seeded) for any other metric: the same
  resampled sample indices score the reference and the candidate, so the
  interval is that of the *difference*, not of two independent scores.

numpy only (imported inside functions): scipy is not a dependency of onnxlite;
the tests check these figures against scipy.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

#: the confidence ``lighten`` and ``compare`` use unless told otherwise
DEFAULT_CONFIDENCE = 0.95
#: bootstrap resamples: percentile bounds at 95% move by ~0.1 of the standard error between seeds
DEFAULT_RESAMPLES = 2000
#: floating-point slack when comparing a bound with a budget (a drop of exactly the budget passes)
_SLACK = 1e-12


@dataclass(frozen=True)
class Interval:
    """A drop with its uncertainty.

    ``low``/``high`` are the two-sided interval at ``confidence`` (used for ties);
    ``upper`` is the one-sided upper bound at ``confidence`` (used for the budget).
    """

    estimate: float
    low: float
    high: float
    upper: float
    confidence: float
    method: str          # "exact" | "bootstrap" | "order statistic" | "none"
    samples: int

    def overlaps(self, other: Interval) -> bool:
        return self.low <= other.high + _SLACK and other.low <= self.high + _SLACK

    def within(self, budget: float) -> bool:
        """The drop stays within ``budget`` at this interval's confidence."""
        return self.upper <= budget + _SLACK

    def to_dict(self) -> dict[str, Any]:
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, data: Any) -> Interval:
        nan = float("nan")
        values: dict[str, Any] = {k: (nan if data.get(k) is None and k not in {"method", "samples"} else data.get(k))
                                  for k in cls.__dataclass_fields__}
        return cls(**values)


def _check_confidence(confidence: float) -> float:
    confidence = float(confidence)
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie strictly between 0 and 1, not {confidence}")
    return confidence


# -- exact binomial bounds ---------------------------------------------------------------------------------

def _binom_cdf(k: int, n: int) -> Callable[[float], float]:
    """p -> P(X <= k) for X ~ Binomial(n, p), summed in log space (no under/overflow for large n).

    The log binomial coefficients do not depend on p, so they are computed once per bound.
    """
    import numpy as np

    if k < 0:
        return lambda p: 0.0
    if k >= n:
        return lambda p: 1.0
    j = np.arange(k + 1, dtype=np.float64)
    # log C(n, j) = sum_{i=1..j} log((n - i + 1) / i)
    log_coef = np.concatenate([[0.0], np.cumsum(np.log(n - j[1:] + 1) - np.log(j[1:]))])

    def cdf(p: float) -> float:
        if p <= 0.0:
            return 1.0
        if p >= 1.0:
            return 0.0
        logs = log_coef + j * math.log(p) + (n - j) * math.log1p(-p)
        top = float(np.max(logs))
        return float(min(1.0, math.exp(top) * float(np.sum(np.exp(logs - top)))))

    return cdf


def _solve_decreasing(f: Callable[[float], float], target: float) -> float:
    """The p in [0, 1] where the decreasing function ``f`` crosses ``target`` (bisection to machine precision)."""
    lo, hi = 0.0, 1.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        if f(mid) > target:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def clopper_pearson(k: int, n: int, confidence: float = DEFAULT_CONFIDENCE,
                    alternative: str = "two-sided") -> tuple[float, float]:
    """Exact (Clopper-Pearson) bounds for a binomial rate ``k / n``.

    ``alternative`` is ``"two-sided"``, ``"less"`` (only an upper bound: the
    lower one is 0) or ``"greater"`` (only a lower bound: the upper one is 1),
    as in ``scipy.stats.binomtest(k, n, alternative=...).proportion_ci(method="exact")``.
    """
    confidence = _check_confidence(confidence)
    k, n = int(k), int(n)
    if n <= 0 or not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n and n > 0, got k={k}, n={n}")
    if alternative not in {"two-sided", "less", "greater"}:
        raise ValueError(f"alternative must be two-sided, less or greater, not {alternative!r}")
    alpha = 1.0 - confidence
    tail = alpha / 2 if alternative == "two-sided" else alpha
    low, high = 0.0, 1.0
    if alternative != "less" and k > 0:
        # The smallest p under which k or more successes still have probability `tail`.
        low = _solve_decreasing(_binom_cdf(k - 1, n), 1.0 - tail)
    if alternative != "greater" and k < n:
        # The largest p under which k or fewer successes still have probability `tail`.
        high = _solve_decreasing(_binom_cdf(k, n), tail)
    return low, high


def rate_interval(k: int, n: int, confidence: float = DEFAULT_CONFIDENCE) -> Interval:
    """A drop that is a rate of failed samples (``k`` of ``n``), with exact bounds."""
    low, high = clopper_pearson(k, n, confidence, "two-sided")
    _, upper = clopper_pearson(k, n, confidence, "less")
    return Interval(k / n, low, high, upper, confidence, "exact", int(n))


def paired_rate_interval(lost: int, gained: int, n: int, confidence: float = DEFAULT_CONFIDENCE) -> Interval:
    """An accuracy drop: ``lost`` samples the reference got right and the candidate wrong, ``gained`` the reverse.

    The true drop is P(lost) - P(gained) <= P(lost), so the exact upper bound on
    the rate of lost samples is a conservative upper bound on the drop (it never
    credits a candidate for lucky gains); the two-sided interval is shifted by
    the observed gain rate.
    """
    base = rate_interval(lost, n, confidence)
    shift = gained / n
    return Interval((lost - gained) / n, base.low - shift, base.high, base.upper, confidence, "exact", int(n))


def zero_failure_samples(budget: float, confidence: float = DEFAULT_CONFIDENCE) -> int | None:
    """Samples needed before even a perfect candidate (no failures) proves a rate <= ``budget``.

    Exact: with no failures in n samples the one-sided upper bound is
    1 - (1 - confidence) ** (1 / n) (the "rule of three" for 95%: n ~ 3 / budget).
    None when no finite sample can (budget 0, or one so small that the count overflows).
    """
    confidence = _check_confidence(confidence)
    if budget <= 0:
        return None
    if budget >= 1:
        return 1
    ratio = math.log(1.0 - confidence) / math.log1p(-budget)
    if not math.isfinite(ratio) or ratio > 1e15:   # a budget like 1e-308: no sample count proves it
        return None
    n = math.ceil(ratio)
    # guard the ceiling against rounding either way
    while n > 1 and 1.0 - (1.0 - confidence) ** (1.0 / (n - 1)) <= budget:
        n -= 1
    while 1.0 - (1.0 - confidence) ** (1.0 / n) > budget:
        n += 1
    return n


def allowed_changes(samples: int, budget: float, confidence: float = DEFAULT_CONFIDENCE) -> int:
    """How many changed answers (of ``samples``) a rate budget allows: the largest k whose exact one-sided upper
    bound is within ``budget``; -1 when even none is (the budget cannot be proven on this many samples)."""
    samples = int(samples)
    if samples <= 0:
        return -1
    lo, hi = 0, min(samples, math.floor(budget * samples))     # k / n > budget can never pass

    def fits(k: int) -> bool:
        return clopper_pearson(k, samples, confidence, "less")[1] <= budget

    if hi < 0 or not fits(0):
        return -1
    while lo < hi:                                             # the bound grows with k: bisect for the last fit
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def samples_for_changes(changes: int, budget: float, confidence: float = DEFAULT_CONFIDENCE,
                        limit: int = 10**9) -> int | None:
    """The fewest samples on which ``changes`` changed answers still pass ``budget`` (None beyond ``limit``)."""
    if budget <= 0:
        return None
    lo, hi = max(1, changes), max(1, changes)
    while allowed_changes(hi, budget, confidence) < changes:   # the allowance grows with the sample count
        lo, hi = hi + 1, hi * 2
        if hi > limit:
            return None
    while lo < hi:
        mid = (lo + hi) // 2
        if allowed_changes(mid, budget, confidence) >= changes:
            hi = mid
        else:
            lo = mid + 1
    return lo


def allowance_text(samples: int, budget: float, confidence: float = DEFAULT_CONFIDENCE,
                   what: str = "answer") -> str:
    """``on 400 samples at 95% confidence, a 1% budget allows 0 changed answers; 1 would need >= 474``."""
    allowed = allowed_changes(samples, budget, confidence)
    more = samples_for_changes(allowed + 1, budget, confidence)
    head = f"on {samples} samples at {confidence:.0%} confidence, a {_pct(budget)} budget allows"
    if allowed < 0:
        head = f"on {samples} samples at {confidence:.0%} confidence, a {_pct(budget)} budget passes no candidate"
        return (f"{head}, not even one that changes no {what}; that needs >= {more} samples" if more
                else f"{head} on any finite sample")
    tail = f"; {allowed + 1} would need >= {more} samples" if more else ""
    return f"{head} {allowed} changed {what}{'' if allowed == 1 else 's'}{tail}"


# -- bootstrap ------------------------------------------------------------------------------------------

def resample_indices(n: int, resamples: int = DEFAULT_RESAMPLES, seed: int = 0) -> np.ndarray:
    """``resamples`` rows of ``n`` sample indices drawn with replacement (as ``scipy.stats.bootstrap`` draws them)."""
    import numpy as np

    return np.random.default_rng(seed).integers(0, n, (int(resamples), int(n)))


def bootstrap_interval(statistic: Callable[[np.ndarray], float], n: int, *,
                       confidence: float = DEFAULT_CONFIDENCE, resamples: int = DEFAULT_RESAMPLES,
                       seed: int = 0, indices: np.ndarray | None = None) -> Interval:
    """Percentile bootstrap of ``statistic(sample_indices) -> drop`` over ``n`` paired samples.

    ``statistic`` gets an index array and returns the drop computed on those
    samples (reference and candidate both indexed by it, so the pairing holds).
    The same ``seed`` draws the same resamples for every candidate, so two
    candidates' intervals differ by their answers, not by the draw.
    """
    import numpy as np

    confidence = _check_confidence(confidence)
    n = int(n)
    if n <= 0:
        raise ValueError("the bootstrap needs at least one sample")
    estimate = float(statistic(np.arange(n)))
    draws = resample_indices(n, resamples, seed) if indices is None else indices
    values = np.array([float(statistic(row)) for row in draws], dtype=np.float64)
    return percentile_interval(estimate, values, confidence, n)


def bootstrap_mean_interval(values: Sequence[float] | np.ndarray, *, confidence: float = DEFAULT_CONFIDENCE,
                            resamples: int = DEFAULT_RESAMPLES, seed: int = 0) -> Interval:
    """The bootstrap of a mean of per-sample drops (vectorized: one gather, no Python loop)."""
    import numpy as np

    confidence = _check_confidence(confidence)
    data = np.asarray(values, dtype=np.float64).reshape(-1)
    if data.size == 0:
        raise ValueError("the bootstrap needs at least one sample")
    draws = resample_indices(data.size, resamples, seed)
    return percentile_interval(float(np.mean(data)), np.mean(data[draws], axis=-1), confidence, data.size)


def percentile_interval(estimate: float, values: np.ndarray, confidence: float, n: int) -> Interval:
    import numpy as np

    values = values[np.isfinite(values)]
    if values.size == 0:
        nan = float("nan")
        return Interval(estimate, nan, nan, nan, confidence, "bootstrap", n)
    alpha = 1.0 - confidence
    low, high, upper = np.quantile(values, [alpha / 2, 1 - alpha / 2, confidence])
    return Interval(estimate, float(low), float(high), float(upper), confidence, "bootstrap", n)


def point_interval(estimate: float, samples: int, confidence: float = DEFAULT_CONFIDENCE) -> Interval:
    """No interval could be computed (a metric without per-sample meaning): the estimate alone."""
    return Interval(float(estimate), float(estimate), float(estimate), float(estimate), confidence, "none", samples)


# -- can this data resolve the budget? ---------------------------------------------------------------------

@dataclass(frozen=True)
class Resolution:
    """Whether ``samples`` held-out samples can tell a drop of ``budget`` apart at ``confidence``."""

    resolvable: bool
    samples: int
    budget: float
    confidence: float
    sample_worth: float | None = None      # the drop one changed sample causes, for rate metrics
    samples_needed: int | None = None
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _pct(value: float) -> str:
    return f"{100 * value:.3g}%"


def rate_resolution(samples: int, budget: float, confidence: float = DEFAULT_CONFIDENCE,
                    what: str = "sample") -> Resolution:
    """For a rate metric (agreement, accuracy): known from the sample count alone, before any candidate exists.

    Unresolvable when one sample is worth more than the budget, or when even a
    candidate that changes no answer could not prove the budget at ``confidence``.
    """
    confidence = _check_confidence(confidence)
    samples = int(samples)
    worth = 1.0 / samples if samples else math.inf
    needed = zero_failure_samples(budget, confidence)
    if needed is None:
        return Resolution(False, samples, budget, confidence, worth, None,
                          f"a budget of {budget:g} cannot be proven on any finite number of {what}s")
    if samples >= needed:
        return Resolution(True, samples, budget, confidence, worth, needed)
    if worth > budget:
        why = f"one {what} of {samples} is worth {_pct(worth)}, more than the {_pct(budget)} budget"
    else:
        why = (f"even with no {what} changed, {samples} {what}s bound the drop only to "
               f"{_pct(1 - (1 - confidence) ** (1 / samples))}, above the {_pct(budget)} budget")
    return Resolution(False, samples, budget, confidence, worth, needed,
                      f"{why}; at {confidence:.0%} confidence it needs >= {needed} {what}s")


def interval_resolution(interval: Interval, budget: float, what: str = "sample") -> Resolution:
    """For a continuous metric, from a measured interval: is its width (upper bound - estimate) above the budget?

    The width of a bootstrap interval shrinks as 1/sqrt(n), so the samples
    needed for the width to fit the budget are about n * (width / budget) ** 2.
    """
    n = interval.samples
    width = interval.upper - interval.estimate
    if not math.isfinite(width) or width <= budget:
        return Resolution(True, n, budget, interval.confidence)
    if budget <= 0:
        return Resolution(False, n, budget, interval.confidence, None, None,
                          "a budget of 0 cannot be proven on a finite sample")
    needed = math.ceil(n * (width / budget) ** 2)
    return Resolution(False, n, budget, interval.confidence, None, needed,
                      f"the {interval.confidence:.0%} bound on {n} {what}s is {width:.3g} above the measured drop, "
                      f"wider than the {budget:.3g} budget; about {needed} {what}s would resolve it")


# -- ranking ----------------------------------------------------------------------------------------------

def tied(a: Interval | None, b: Interval | None) -> bool:
    """Two candidates whose intervals overlap are tied on accuracy (a missing interval ties with nothing)."""
    if a is None or b is None:
        return False
    return a.overlaps(b)


def accuracy_ties(intervals: Sequence[Interval | None], best: int) -> list[int]:
    """Indices whose intervals overlap the ``best`` one's (``best`` included)."""
    return [i for i, interval in enumerate(intervals) if i == best or tied(interval, intervals[best])]
