"""Confidence intervals of drops (onnxlite.stats) against reference computations from scipy."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from onnxlite import stats

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("k,n", [(0, 1), (0, 24), (1, 8), (3, 24), (24, 24), (7, 100), (500, 10000)])
@pytest.mark.parametrize("confidence", [0.9, 0.95, 0.99])
def test_clopper_pearson_matches_scipy_exact(k, n, confidence):
    for alternative in ("two-sided", "less", "greater"):
        ours = stats.clopper_pearson(k, n, confidence, alternative)
        ref = sps.binomtest(k, n, alternative=alternative).proportion_ci(confidence, method="exact")
        assert ours == pytest.approx((ref.low, ref.high), abs=1e-10), alternative


def test_rate_interval_upper_is_the_one_sided_bound():
    interval = stats.rate_interval(2, 40, 0.95)
    assert interval.estimate == pytest.approx(0.05)
    assert interval.upper == pytest.approx(sps.binomtest(2, 40, alternative="less").proportion_ci(0.95).high)
    # the one-sided bound is tighter than the two-sided upper end
    assert interval.low < interval.estimate < interval.upper < interval.high


def test_paired_rate_interval_bounds_the_drop_by_the_lost_samples():
    interval = stats.paired_rate_interval(lost=3, gained=1, n=50, confidence=0.95)
    assert interval.estimate == pytest.approx(2 / 50)
    assert interval.upper == pytest.approx(stats.rate_interval(3, 50).upper)


@pytest.mark.parametrize("budget", [0.005, 0.01, 0.03, 0.1, 0.5])
def test_zero_failure_samples_is_the_smallest_sufficient_count(budget):
    n = stats.zero_failure_samples(budget, 0.95)
    bound = lambda m: sps.binomtest(0, m, alternative="less").proportion_ci(0.95, method="exact").high  # noqa: E731
    assert bound(n) <= budget + 1e-12
    assert n == 1 or bound(n - 1) > budget


def test_zero_budget_has_no_finite_sample():
    assert stats.zero_failure_samples(0.0) is None
    assert not stats.rate_resolution(1000, 0.0).resolvable


def _per_sample_drops(n: int, seed: int = 3) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.abs(rng.normal(0.002, 0.004, n))


@pytest.mark.parametrize("confidence", [0.9, 0.95])
def test_bootstrap_mean_matches_scipy_percentile_on_the_same_seed(confidence):
    values = _per_sample_drops(60)
    ours = stats.bootstrap_mean_interval(values, confidence=confidence, resamples=999, seed=11)
    two = sps.bootstrap((values,), np.mean, confidence_level=confidence, n_resamples=999, method="percentile",
                        rng=np.random.default_rng(11))
    one = sps.bootstrap((values,), np.mean, confidence_level=confidence, n_resamples=999, method="percentile",
                        alternative="less", rng=np.random.default_rng(11))
    assert ours.estimate == pytest.approx(values.mean())
    assert (ours.low, ours.high) == pytest.approx(tuple(two.confidence_interval), rel=1e-12)
    assert ours.upper == pytest.approx(one.confidence_interval.high, rel=1e-12)


def test_paired_bootstrap_of_a_drop_matches_scipy_paired():
    """Reference and candidate resampled by the same indices: the interval of a non-linear paired score."""
    rng = np.random.default_rng(5)
    reference = rng.normal(size=40)
    candidate = reference + rng.normal(scale=0.2, size=40)

    def cosine(a, b, axis=-1):
        return np.sum(a * b, axis) / np.linalg.norm(a, axis=axis) / np.linalg.norm(b, axis=axis)

    def drop(index):      # the reference scores 1 against itself
        return 1.0 - float(cosine(reference[index], candidate[index]))

    ours = stats.bootstrap_interval(drop, 40, confidence=0.95, resamples=500, seed=2)
    ref = sps.bootstrap((reference, candidate), lambda a, b, axis=-1: 1.0 - cosine(a, b, axis), paired=True,
                        vectorized=True, n_resamples=500, method="percentile", rng=np.random.default_rng(2))
    assert (ours.low, ours.high) == pytest.approx(tuple(ref.confidence_interval), rel=1e-9)
    assert ours.estimate == pytest.approx(drop(np.arange(40)))
    assert ours.low < ours.estimate < ours.upper < ours.high


def test_same_seed_same_interval_and_different_seed_close():
    values = _per_sample_drops(200)
    a = stats.bootstrap_mean_interval(values, seed=0)
    assert a == stats.bootstrap_mean_interval(values, seed=0)
    b = stats.bootstrap_mean_interval(values, seed=1)
    se = values.std() / math.sqrt(values.size)
    assert abs(a.upper - b.upper) < 0.25 * se


def test_rate_resolution_says_what_the_data_would_need():
    small = stats.rate_resolution(24, 0.03, 0.95, what="view")
    assert not small.resolvable
    assert small.sample_worth == pytest.approx(1 / 24)
    assert small.samples_needed == stats.zero_failure_samples(0.03, 0.95) == 99
    assert "99 views" in small.reason and "4.17%" in small.reason
    # enough samples: a perfect candidate can prove the budget
    assert stats.rate_resolution(99, 0.03, 0.95).resolvable
    # one sample is worth less than the budget, yet a perfect candidate still could not prove it
    mid = stats.rate_resolution(50, 0.03, 0.95)
    assert not mid.resolvable and mid.sample_worth < 0.03 and "even with no sample changed" in mid.reason


def test_interval_resolution_scales_with_the_square_of_the_width():
    values = _per_sample_drops(30)
    interval = stats.bootstrap_mean_interval(values)
    width = interval.upper - interval.estimate
    wide = stats.interval_resolution(interval, width / 2)
    assert not wide.resolvable
    assert wide.samples_needed == math.ceil(30 * 4)
    assert stats.interval_resolution(interval, width * 1.01).resolvable


def test_intervals_that_overlap_tie_and_disjoint_ones_do_not():
    a = stats.rate_interval(1, 200)
    b = stats.rate_interval(3, 200)
    c = stats.rate_interval(60, 200)
    assert stats.tied(a, b) and stats.tied(b, a)
    assert not stats.tied(a, c)
    assert stats.accuracy_ties([a, b, c], best=0) == [0, 1]
    assert not stats.tied(a, None)


def test_within_uses_the_upper_bound_not_the_estimate():
    interval = stats.rate_interval(0, 24)     # no flips in 24 views
    assert interval.estimate == 0.0
    assert not interval.within(0.03)          # a 3% budget is not proven by 24 views
    assert stats.rate_interval(0, 120).within(0.03)


def test_interval_round_trips_through_json_form():
    interval = stats.bootstrap_mean_interval(_per_sample_drops(20))
    assert stats.Interval.from_dict(interval.to_dict()) == interval
