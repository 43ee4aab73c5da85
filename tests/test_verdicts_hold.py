"""Verdicts that hold on new data: what a worst case promises, tail bounds that cover, near-ties set apart,
and the float model's own noise as a yardstick."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

import onnxlite
from onnxlite import order_stats
from onnxlite.evaluation.intervals import judge_outputs
from onnxlite.evaluation.judge import Judge
from onnxlite.evaluation.margins import changed_answers

from helpers import MLP_WIDTH, make_mlp

CONFIDENCE = 0.95


@pytest.mark.unit
@pytest.mark.parametrize("n", [10, 47, 95])
def test_the_worst_case_statement_matches_a_simulation(n):
    # Draw n samples, then m new ones from the same distribution: the share of the new ones below the n's
    # minimum is what "about 1 in n+1 new samples may score lower (up to U at 95%)" states.
    promise = order_stats.worst_promise(n, CONFIDENCE)
    assert promise.one_in == n + 1
    rng = np.random.default_rng(n)
    trials, m = 600, 4000
    shares = np.empty(trials)
    for t in range(trials):
        seen = rng.gamma(2.0, size=n)        # any continuous distribution: the statement is distribution-free
        new = rng.gamma(2.0, size=m)
        shares[t] = np.mean(new < seen.min())
    # the expected share is 1 / (n + 1): the mean of 600 trials lands within 4 of its standard errors
    sd = np.sqrt(n / ((n + 1) ** 2 * (n + 2)))   # Beta(1, n)'s standard deviation
    assert abs(shares.mean() - 1 / (n + 1)) < 4 * sd / np.sqrt(trials) + 1 / m
    # and the share stays under the stated upper bound in about 95% of the trials
    covered = np.mean(shares <= promise.upper)
    assert 0.92 <= covered <= 0.98, covered
    assert f"worst of {n}; about 1 in {n + 1} new" in promise.text()


@pytest.mark.unit
@pytest.mark.parametrize("q,n", [(0.01, 400), (0.05, 80), (0.05, 300), (0.10, 40)])
def test_the_quantile_bound_covers_the_true_quantile_at_its_stated_rate(q, n):
    # The order statistic the metric's interval uses is a lower bound on the true q-quantile in at least 95%
    # of seeded draws, and not wastefully more (a looser rank would show as coverage near 1).
    rank = order_stats.quantile_lower_rank(n, q, CONFIDENCE)
    assert rank >= 1
    rng = np.random.default_rng(int(q * 1000) + n)
    trials = 2000
    draws = np.sort(rng.uniform(size=(trials, n)), axis=1)     # uniform: the true q-quantile is q
    covered = np.mean(draws[:, rank - 1] <= q)
    exact = sps.binom.sf(rank - 1, n, q)         # P(Binomial(n, q) >= rank), from scipy: an independent check
    assert exact >= CONFIDENCE
    assert abs(covered - exact) < 4 * np.sqrt(exact * (1 - exact) / trials) + 1e-3
    # one rank higher would not hold at 95%: the bound is the tightest the samples allow
    assert sps.binom.sf(rank, n, q) < CONFIDENCE
    # as the metric's interval: the drop's upper bound is 1 minus that order statistic of the cosines
    cosines = 1 - draws[0] * 0.02
    found = order_stats.quantile_interval(0.0, 1.0, cosines, q, CONFIDENCE)
    assert found.upper == pytest.approx(1 - np.sort(cosines)[rank - 1])
    assert found.method == "order statistic"


@pytest.mark.unit
def test_too_few_samples_cannot_bound_a_tail_and_say_how_many_would():
    needed = order_stats.quantile_samples(0.01, CONFIDENCE)
    assert needed == 299 and order_stats.quantile_lower_rank(needed - 1, 0.01) == 0
    assert order_stats.quantile_lower_rank(needed, 0.01) == 1
    found = order_stats.quantile_resolution(47, 0.01, 0.01, CONFIDENCE)
    assert not found.resolvable and "299" in found.reason
    assert order_stats.quantile_resolution(300, 0.01, 0.01, CONFIDENCE).resolvable
    interval = order_stats.quantile_interval(0.0, 1.0, np.ones(47), 0.01, CONFIDENCE)
    assert interval.upper == float("inf")
    # 64 samples bound the 5th percentile one-sided (59 needed), not two-sided at 97.5% (72): the report says "-"
    found = order_stats.quantile_interval(0.0, 1.0, np.linspace(0.98, 1, 64), 0.05, CONFIDENCE).to_dict()
    assert found["upper"] is not None and found["high"] is None
    from onnxlite.report.lighten_table import bound_text

    assert bound_text(found["high"]) == "-" and bound_text(found["upper"]) == f"{found['upper']:.4g}"


def _near_tie_logits(rng: np.random.Generator, count: int, ties: int) -> np.ndarray:
    """Logits whose first ``ties`` rows are near-ties (classes 0 and 1 within 0.05 in probability) and the
    rest confident (class 0 far ahead)."""
    logits = rng.normal(0, 0.1, (count, 6)).astype(np.float32)
    logits[:ties, 0] = 2.0
    logits[:ties, 1] = 2.0 - 0.05      # a lead of ~0.02 in probability
    logits[ties:, 0] = 6.0
    return logits


@pytest.mark.unit
def test_near_tie_flips_do_not_consume_a_confident_budget_but_a_confident_flip_does():
    rng = np.random.default_rng(0)
    count, ties = 200, 80
    reference = _near_tie_logits(rng, count, ties)
    feeds = {"x": np.zeros((count, 4), np.float32)}
    judge = Judge({"logits": reference}, feeds, metrics=["top1_agreement_confident", "top1_agreement"],
                  max_drop={"top1_agreement_confident": "3%"})
    judge.set_confidence(CONFIDENCE)
    key = "logits.top1_agreement_confident"
    # 40 of the 80 near-ties flip to their runner-up: the plain agreement loses 20 points, the confident none
    flipped = reference.copy()
    flipped[:40, 1] = reference[:40, 0] + 0.01
    verdict = judge_outputs(judge, {"logits": flipped}, confidence=CONFIDENCE)
    assert verdict.passed, verdict.failures
    assert verdict.drops[key] == 0 and verdict.drops["logits.top1_agreement"] == pytest.approx(40 / count)
    assert verdict.intervals[key].samples == count - ties      # the bound is on the confident samples alone
    assert verdict.changes["logits"] == {"margin": 0.1, "near_ties": ties, "near_tie_changes": 40,
                                         "confident": count - ties, "confident_changes": 0}
    # one confident sample changes its answer as well: 1 of 120 is over what a 3% budget proves at 95%
    broken = flipped.copy()
    broken[ties, 3] = 10.0
    verdict = judge_outputs(judge, {"logits": broken}, confidence=CONFIDENCE)
    assert verdict.drops[key] == pytest.approx(1 / (count - ties))
    assert not verdict.passed and key in verdict.failures[0]
    assert changed_answers(reference, broken).confident_changes == 1


@pytest.mark.unit
def test_top5_overlap_counts_shared_classes():
    rng = np.random.default_rng(1)
    reference = rng.normal(size=(30, 12)).astype(np.float32)
    candidate = reference.copy()
    top = np.argsort(-reference, axis=1)
    rows = np.arange(10)
    candidate[rows, top[rows, 4]] = -100.0        # ten samples lose one of their five top classes
    judge = Judge({"logits": reference}, {"x": np.zeros((30, 2), np.float32)}, metrics=["top5_overlap"],
                  max_drop="10%")
    judge.set_confidence(CONFIDENCE)
    verdict = judge_outputs(judge, {"logits": candidate}, confidence=CONFIDENCE)
    assert verdict.drops["logits.top5_overlap"] == pytest.approx(10 / 30 / 5)
    assert verdict.intervals["logits.top5_overlap"].method == "bootstrap"


@pytest.mark.unit
def test_a_tail_metric_is_bounded_by_order_statistics_in_a_verdict():
    rng = np.random.default_rng(2)
    count = 120
    reference = rng.normal(size=(count, 16)).astype(np.float32)
    candidate = reference + rng.normal(0, 0.05, reference.shape).astype(np.float32)
    judge = Judge({"embedding": reference}, {"x": np.zeros((count, 2), np.float32)},
                  metrics=["cosine_p05", "cosine_min"], max_drop={"cosine_p05": "1%"})
    unresolved = judge.set_confidence(CONFIDENCE)
    assert not unresolved          # 120 >= 59 samples bound the 5th percentile
    verdict = judge_outputs(judge, {"embedding": candidate}, confidence=CONFIDENCE)
    interval = verdict.intervals["embedding.cosine_p05"]
    assert interval.method == "order statistic"
    cosines = np.sum(reference * candidate, 1) / np.linalg.norm(reference, axis=1) / np.linalg.norm(candidate, axis=1)
    rank = order_stats.quantile_lower_rank(count, 0.05, CONFIDENCE)
    assert interval.upper == pytest.approx(1 - np.sort(cosines)[rank - 1], abs=1e-6)
    # on 40 samples the 5th percentile cannot be bounded: announced before any candidate, held to its measure
    small = Judge({"embedding": reference[:40]}, {"x": np.zeros((40, 2), np.float32)}, metrics=["cosine_p05"],
                  max_drop="1%")
    assert "embedding.cosine_p05" in small.set_confidence(CONFIDENCE)
    # a budget on a tail brings the metric in beside the defaults (no --metric needed)
    budgeted = Judge({"embedding": reference}, {"x": np.zeros((count, 2), np.float32)},
                     max_drop=["1%", "cosine_p05=2%"])
    assert "embedding.cosine_p05" in {m.key for m in budgeted.metrics} and "embedding.cosine_mean" in budgeted.budgets
    assert budgeted.budgets["embedding.cosine_p05"] == pytest.approx(0.02)


def test_lighten_judges_the_float_noise_row_and_states_its_promises(tmp_path):
    model = make_mlp(tmp_path / "mlp.onnx")
    rng = np.random.default_rng(3)
    data = tmp_path / "data.npz"
    np.savez(data, x=rng.standard_normal((120, MLP_WIDTH)).astype(np.float32))
    result = onnxlite.lighten(str(model), tmp_path / "out", data=str(data), strategies=["dynamic"], runs=3,
                              partial=False, cache=False, max_drop=["1%", "cosine_min=5%"])
    noise = result.float_noise
    assert noise is not None and noise.name == "float noise"
    # fp16-rounded weights move the outputs a little, and change few (or no) answers
    assert 0 < noise.drops["y.cosine_mean"] < 1e-4
    changes = noise.changes["y"]
    assert changes["near_ties"] + changes["confident"] == result.evidence["parts"]["confirm"]
    assert all(row.changes["y"]["margin"] == 0.1 for row in result.candidates if row.status != "failed")
    # shown: in the report's table and in the JSON result
    report = result.to_report()
    assert [r.name for r in report.rows][:2] == ["fp32", "float noise"]
    from onnxlite.report.text import render_markdown

    markdown = render_markdown(report)
    assert "| float noise |" in markdown and "worst of" in markdown
    assert result.to_dict()["float_noise"]["name"] == "float noise"
    from rich.console import Console

    from onnxlite.cli.lighten import lighten_table

    console = Console(width=80, record=True)
    console.print(lighten_table(result, 80))
    text = console.export_text()
    assert "float noise" in text
    # the worst-case budget says how many samples its minimum was taken over and what that promises
    confirm = result.evidence["parts"]["confirm"]
    assert f"worst of {confirm}, ~1 in {confirm + 1} new may score lower" in " ".join(text.split())
    if result.winner is not None:
        assert f"worst of {confirm}; about 1 in {confirm + 1} new samples may score lower" in result.message
    # no --metric named: beside cosine_min, the lowest tail the judging samples can bound, said in a note
    from onnxlite.search.confidence import supported_tail

    q = supported_tail(confirm, CONFIDENCE)
    assert q is not None and result.evidence["tails"] == [f"y.cosine_p{round(q * 100):02d}"]
    assert any(m.startswith(f"tail: y.cosine_p{round(q * 100):02d} beside y.cosine_min")
               for m in result.evidence["messages"])
    assert noise.intervals[result.evidence["tails"][0]]["method"] == "order statistic"
    # the verdict says how many judging samples are near-ties
    assert any("judging samples are near-ties" in m for m in result.evidence["messages"])


@pytest.mark.unit
@pytest.mark.parametrize("count,bounded", [(40, False), (120, True)])
def test_a_tail_budget_says_whether_its_samples_bound_it(count, bounded):
    from onnxlite.report.text import allowance_note
    from onnxlite.search.confidence import configure_judge

    rng = np.random.default_rng(4)
    reference = rng.normal(size=(count, 16)).astype(np.float32)
    judge = Judge({"embedding": reference}, {"x": np.zeros((count, 2), np.float32)},
                  metrics=["cosine_mean", "cosine_min"], max_drop=["1%", "cosine_p05=2%", "cosine_min=5%"])
    setup = configure_judge(judge, CONFIDENCE)
    samples = setup.parts["confirm"]
    tail = setup.allowances["embedding.cosine_p05"]
    assert tail["kind"] == "tail" and tail["bounded"] is bounded and tail["needed"] == 59
    note = allowance_note(tail)
    expected = f": bounded on {samples} for new samples" if bounded else f": measured on {samples} (a bound needs 59)"
    assert note == expected
    worst = setup.allowances["embedding.cosine_min"]
    assert allowance_note(worst) == f": worst of {samples}, ~1 in {samples + 1} new may score lower"
