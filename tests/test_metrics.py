"""Metric selection, drops and budgets (fast: numpy arrays, no models)."""

from __future__ import annotations

import numpy as np
import pytest

from onnxlite import UsageError
from onnxlite.evaluation.metrics import choose_primary, drop, parse_budget, parse_budgets, resolve_metrics


def _names(resolved):
    return {m.key for m in resolved}


def test_defaults_follow_output_shapes():
    rng = np.random.default_rng(0)
    feeds = {"input_ids": rng.integers(0, 50, (4, 6)), "attention_mask": np.ones((4, 6), np.int64)}
    outputs = {
        "logits": rng.standard_normal((4, 10)).astype(np.float32),
        "tokens": rng.standard_normal((4, 6, 8)).astype(np.float32),
        "boxes": rng.standard_normal((4, 3, 2, 2)).astype(np.float32),
        "ids": rng.integers(0, 3, (4, 2)),
    }
    keys = _names(resolve_metrics(outputs, feeds))
    assert {"logits.cosine_mean", "logits.top1_agreement", "logits.top5_agreement"} <= keys
    assert "logits.accuracy" not in keys and "logits.max_abs_diff" not in keys
    assert {"tokens.pooled_cosine_mean", "tokens.pooled_cosine_min"} <= keys and "tokens.cosine_mean" not in keys
    assert {"boxes.cosine_mean", "boxes.max_abs_diff", "boxes.mean_abs_diff"} <= keys
    assert not any(k.startswith("ids.") for k in keys)  # integer outputs get no float metric
    labelled = _names(resolve_metrics(outputs, feeds, labels=rng.integers(0, 10, 4)))
    assert "logits.accuracy" in labelled
    assert choose_primary(resolve_metrics(outputs, feeds, labels=rng.integers(0, 10, 4))) == "logits.accuracy"
    # Labels that do not fit the output (wrong count or out of range) do not switch accuracy on.
    assert "logits.accuracy" not in _names(resolve_metrics(outputs, feeds, labels=np.arange(3)))
    assert "logits.accuracy" not in _names(resolve_metrics(outputs, feeds, labels=np.full(4, 12)))


def test_values_and_drops_on_a_real_perturbation():
    from onnxlite.protocols import MetricContext

    rng = np.random.default_rng(1)
    reference = rng.standard_normal((64, 10))
    candidate = reference + rng.standard_normal(reference.shape) * 0.5
    labels = reference.argmax(1)
    labels[:8] = (labels[:8] + 1) % 10  # the reference itself is wrong on 8 of 64
    outputs = {"logits": reference}
    resolved = {m.name: m for m in resolve_metrics(outputs, {}, labels)}
    context = MetricContext("logits", {}, labels, outputs)

    def score(name, cand):
        return float(resolved[name].metric.compute(reference, cand, context))

    assert score("accuracy", reference) == pytest.approx(56 / 64)
    expected = float(np.mean(candidate.argmax(1) == labels))
    assert score("accuracy", candidate) == pytest.approx(expected)
    assert drop(resolved["accuracy"], 56 / 64, expected) == pytest.approx(56 / 64 - expected)
    agreement = float(np.mean(candidate.argmax(1) == reference.argmax(1)))
    assert score("top1_agreement", candidate) == pytest.approx(agreement) and agreement < 1
    top5 = np.argsort(-candidate, axis=1)[:, :5]
    expected = float(np.mean((top5 == reference.argmax(1)[:, None]).any(1)))
    assert score("top5_agreement", candidate) == pytest.approx(expected)
    cos = (reference * candidate).sum(1) / np.linalg.norm(reference, axis=1) / np.linalg.norm(candidate, axis=1)
    assert score("cosine_mean", candidate) == pytest.approx(cos.mean())
    assert score("cosine_min", candidate) == pytest.approx(cos.min())
    assert drop(resolved["cosine_min"], score("cosine_min", reference), cos.min()) == pytest.approx(1 - cos.min())
    # Non-finite candidates score NaN rather than something that could pass.
    broken = candidate.copy()
    broken[3, 2] = np.nan
    assert np.isnan(score("cosine_mean", broken)) and np.isnan(score("top1_agreement", broken))


def test_named_metrics_and_forced_outputs():
    outputs = {"logits": np.eye(6, dtype=np.float32), "score": np.ones((6, 1), np.float32)}
    assert _names(resolve_metrics(outputs, {}, requested=["max_abs_diff"])) == {"score.max_abs_diff"}
    assert _names(resolve_metrics(outputs, {}, requested=["logits.max_abs_diff"])) == {"logits.max_abs_diff"}
    with pytest.raises(UsageError, match="did you mean 'cosine_min'"):
        resolve_metrics(outputs, {}, requested=["cosine_mni"])
    with pytest.raises(UsageError, match="does not apply"):
        resolve_metrics(outputs, {}, requested=["pooled_cosine_mean"])


def test_budgets():
    assert parse_budget("1%") == pytest.approx(0.01) and parse_budget("0.01") == pytest.approx(0.01)
    assert parse_budget(0.5) == 0.5
    for bad in ("-1", "abc", "nan", ""):
        with pytest.raises(UsageError, match="--max-drop"):
            parse_budget(bad)
    outputs = {"a": np.ones((2, 4), np.float32), "b": np.ones((2, 4), np.float32)}
    resolved = resolve_metrics(outputs, {})
    primary = choose_primary(resolved)
    assert primary == "a.top1_agreement"
    budgets = parse_budgets(["0.5%", "cosine_min=2%", "b.cosine_mean=0.1"], resolved, primary)
    assert budgets == pytest.approx({"a.top1_agreement": 0.005, "a.cosine_min": 0.02, "b.cosine_min": 0.02,
                                     "b.cosine_mean": 0.1})
    with pytest.raises(UsageError, match="no metric 'accuracy'"):
        parse_budgets(["accuracy=1%"], resolved, primary)
