"""Intervals of real metric drops (onnxlite.confidence) equal the reference computation on the per-sample values."""

from __future__ import annotations

import numpy as np
import pytest

from onnxlite import stats
from onnxlite.evaluation import intervals as confidence
from onnxlite.evaluation.metrics import resolve_metrics
from onnxlite.numerics import cosine_per_sample
from onnxlite.protocols import MetricContext

from conftest import save_graph


def _logits(n=60, classes=10, noise=0.3, seed=0):
    rng = np.random.default_rng(seed)
    ref = rng.normal(size=(n, classes)).astype(np.float32)
    return ref, (ref + rng.normal(scale=noise, size=ref.shape)).astype(np.float32)


def _metric(metrics, name):
    return next(m for m in metrics if m.name == name)


def _context(ref):
    return lambda output: MetricContext(output=output, feeds={"x": np.zeros((ref.shape[0], 2), np.float32)},
                                        reference_outputs={"logits": ref})


@pytest.mark.unit
def test_agreement_drop_gets_the_exact_binomial_bound():
    ref, cand = _logits()
    metrics = resolve_metrics({"logits": ref}, {}, None, ["top1_agreement", "cosine_mean", "cosine_min"])
    got = confidence.intervals_for(metrics, {"logits": ref}, {"logits": cand}, _context(ref), seed=4)
    flips = int(np.sum(ref.argmax(1) != cand.argmax(1)))
    assert 0 < flips < 60
    expected = stats.rate_interval(flips, 60)
    interval = got["logits.top1_agreement"]
    assert interval.method == "exact"
    assert (interval.estimate, interval.upper, interval.high) == pytest.approx(
        (expected.estimate, expected.upper, expected.high))


@pytest.mark.unit
def test_cosine_drops_bootstrap_the_per_sample_cosines():
    ref, cand = _logits(noise=0.1)
    metrics = resolve_metrics({"logits": ref}, {}, None, ["cosine_mean", "cosine_min"])
    got = confidence.intervals_for(metrics, {"logits": ref}, {"logits": cand}, _context(ref), seed=4)
    drops = 1.0 - cosine_per_sample(ref, cand)
    mean = stats.bootstrap_mean_interval(drops, seed=4)
    assert got["logits.cosine_mean"].method == "bootstrap"
    assert (got["logits.cosine_mean"].low, got["logits.cosine_mean"].upper) == pytest.approx((mean.low, mean.upper))
    # the min is resampled as a min: its drop is the worst sample's
    draws = stats.resample_indices(60, stats.DEFAULT_RESAMPLES, 4)
    worst = np.max(drops[draws], axis=-1)
    assert got["logits.cosine_min"].estimate == pytest.approx(drops.max())
    assert got["logits.cosine_min"].upper == pytest.approx(np.quantile(worst, 0.95))


@pytest.mark.unit
def test_accuracy_counts_only_samples_the_candidate_lost():
    ref, cand = _logits(noise=0.8, seed=2)
    labels = ref.argmax(1).copy()
    labels[:10] = (labels[:10] + 1) % 10      # the reference gets 10 wrong
    metrics = resolve_metrics({"logits": ref}, {}, labels, ["accuracy"])
    context = lambda output: MetricContext(output=output, feeds={}, labels=labels,  # noqa: E731
                                           reference_outputs={"logits": ref})
    interval = confidence.intervals_for(metrics, {"logits": ref}, {"logits": cand}, context)["logits.accuracy"]
    right_ref, right_cand = ref.argmax(1) == labels, cand.argmax(1) == labels
    lost, gained = int(np.sum(right_ref & ~right_cand)), int(np.sum(~right_ref & right_cand))
    assert interval.estimate == pytest.approx((lost - gained) / 60)
    assert interval.upper == pytest.approx(stats.rate_interval(lost, 60).upper)


@pytest.mark.unit
def test_a_part_of_the_samples_is_scored_alone():
    ref, cand = _logits()
    metrics = resolve_metrics({"logits": ref}, {}, None, ["top1_agreement"])
    part = list(range(0, 60, 2))
    interval = confidence.intervals_for(metrics, {"logits": ref}, {"logits": cand}, _context(ref),
                                        index=part)["logits.top1_agreement"]
    flips = int(np.sum(ref[part].argmax(1) != cand[part].argmax(1)))
    assert interval.samples == 30 and interval.estimate == pytest.approx(flips / 30)


@pytest.mark.unit
def test_select_and_confirm_parts_are_disjoint_and_cover_everything():
    for n in (2, 3, 17, 100):
        parts = confidence.split_parts(n, seed=3)
        assert parts.select and parts.confirm
        assert not set(parts.select) & set(parts.confirm)
        assert sorted(parts.select + parts.confirm) == list(range(n))
    assert confidence.split_parts(50, seed=3) == confidence.split_parts(50, seed=3)
    with pytest.raises(ValueError):
        confidence.split_parts(1)


@pytest.mark.unit
def test_rate_metric_resolution_and_its_companion():
    ref, _ = _logits(n=24)
    metrics = resolve_metrics({"logits": ref}, {}, None, ["top1_agreement", "cosine_mean"])
    agreement, cosine = _metric(metrics, "top1_agreement"), _metric(metrics, "cosine_mean")
    ctx = _context(ref)("logits")
    res = confidence.resolution(agreement, ref, ctx, 0.03, 24)
    assert res is not None and not res.resolvable and res.samples_needed == 99
    assert confidence.resolution(cosine, ref, ctx, 0.03, 24) is None   # continuous: judged by its interval
    assert confidence.companion(metrics, "logits.top1_agreement") == "logits.cosine_mean"


def _judge_with_candidate(tmp_path, noise=0.3, n=80):
    from onnx import TensorProto, helper, numpy_helper

    from onnxlite.evaluation.judge import Judge

    rng = np.random.default_rng(7)
    weight = rng.normal(size=(6, 10)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["logits"], name="mm")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 6])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["b", 10])],
                              [numpy_helper.from_array(weight, "w")])
    path = tmp_path / "cand.onnx"
    save_graph(graph, path)
    x = rng.normal(size=(n, 6)).astype(np.float32)
    # the "reference" is the same matmul plus noise, so the candidate really disagrees on some samples
    reference = x @ weight + rng.normal(scale=noise, size=(n, 10)).astype(np.float32)
    judge = Judge({"logits": reference}, {"x": x}, metrics=["top1_agreement", "cosine_mean"], max_drop="10%")
    return judge, path, x @ weight, reference


def test_the_judge_confirms_on_its_confirm_part_and_selects_on_the_other(tmp_path):
    judge, path, candidate, reference = _judge_with_candidate(tmp_path)
    judge.confidence = 0.95
    judge.parts = confidence.split_parts(judge.samples, seed=1)
    judge.extra_intervals = ("logits.cosine_mean",)
    result = judge.evaluate(path)
    confirm, select = list(judge.parts.confirm), list(judge.parts.select)
    flips = lambda idx: int(np.sum(reference[idx].argmax(1) != candidate[idx].argmax(1)))  # noqa: E731
    assert result.drops["logits.top1_agreement"] == pytest.approx(flips(confirm) / len(confirm))
    assert result.select_drops["logits.top1_agreement"] == pytest.approx(flips(select) / len(select))
    bound = stats.rate_interval(flips(confirm), len(confirm)).upper
    assert result.intervals["logits.top1_agreement"]["upper"] == pytest.approx(bound)
    assert set(result.intervals) == {"logits.top1_agreement", "logits.cosine_mean"}
    assert result.passed == (bound <= 0.10)


def test_an_estimate_within_budget_fails_when_its_bound_is_not(tmp_path):
    judge, path, candidate, reference = _judge_with_candidate(tmp_path, noise=0.15)
    flips = int(np.sum(reference.argmax(1) != candidate.argmax(1)))
    assert 0 < flips < 20
    # a budget above the measured drop but below its exact upper bound
    budget = (flips / 80 + stats.rate_interval(flips, 80).upper) / 2
    judge.budgets = {"logits.top1_agreement": budget}
    plain = judge.evaluate(path)
    judge.confidence = 0.95
    bounded = judge.evaluate(path)
    assert plain.drops == pytest.approx(bounded.drops)
    assert plain.drops["logits.top1_agreement"] <= budget
    assert plain.passed and not bounded.passed
    assert "95% bound" in bounded.failures[0]
    # a budget the data cannot resolve is held to the estimate instead, as the search announces
    judge.estimate_only = ("logits.top1_agreement",)
    assert judge.evaluate(path).passed
