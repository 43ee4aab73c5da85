"""Confidence intervals of a candidate's metric drops, and the held-out parts that select and confirm.

Any metric plugin returns one number for a whole set of samples.  To put an
interval on its drop, the metric is also computed on each sample alone; when
the whole-set value is the mean (or the min, or the max) of those per-sample
values, the interval comes from them:

- per-sample values that are all 0 or 1 (agreements, accuracy) make the drop a
  rate of lost samples: exact Clopper-Pearson bounds (:func:`stats.paired_rate_interval`);
- other per-sample values: a paired, seeded percentile bootstrap of the
  reduced drop (:mod:`onnxlite.stats`);
- a metric that is none of these gets a bootstrap that recomputes it on each
  resample (fewer resamples: it is slower).

:func:`split_parts` cuts the held-out samples into a ``select`` part (which
option of a grid wins) and a disjoint ``confirm`` part (the figures reported
and the verdict), with a seeded permutation so reruns agree.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..stats import (
    DEFAULT_CONFIDENCE,
    DEFAULT_RESAMPLES,
    Interval,
    Resolution,
    bootstrap_interval,
    paired_rate_interval,
    point_interval,
    rate_resolution,
    resample_indices,
)

if TYPE_CHECKING:
    import numpy as np

    from .metrics import ResolvedMetric

#: resamples when the metric must be recomputed on each one (no per-sample decomposition)
SLOW_RESAMPLES = 200
#: the fraction of held-out samples that select among an option grid (the rest confirm)
SELECT_FRACTION = 0.5
#: names of built-in metrics that are continuous and make a companion for a rate metric, best first
COMPANIONS = ("cosine_mean", "pooled_cosine_mean")


@dataclass(frozen=True)
class Parts:
    """Disjoint index sets of the held-out samples."""

    select: tuple[int, ...]
    confirm: tuple[int, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"select": len(self.select), "confirm": len(self.confirm)}


def split_parts(samples: int, fraction: float = SELECT_FRACTION, seed: int = 0) -> Parts:
    """A seeded permutation of ``range(samples)`` cut into select and confirm parts (both non-empty when samples >=
    2)."""
    import numpy as np

    if samples < 2:
        raise ValueError("select and confirm parts need at least 2 held-out samples")
    order = np.random.default_rng(seed).permutation(samples)
    cut = min(samples - 1, max(1, int(round(samples * fraction))))
    return Parts(tuple(sorted(int(i) for i in order[:cut])), tuple(sorted(int(i) for i in order[cut:])))


def _take(value: Any, index: np.ndarray, count: int) -> Any:
    shape = getattr(value, "shape", None)
    if shape and shape[0] == count:
        return value[index]
    return value


def subset_context(context: Any, index: np.ndarray, count: int) -> Any:
    """A metric context restricted to the samples ``index`` (arrays with ``count`` rows are sliced)."""
    from dataclasses import replace

    return replace(context,
                   feeds={k: _take(v, index, count) for k, v in context.feeds.items()},
                   labels=_take(context.labels, index, count) if context.labels is not None else None,
                   reference_outputs={k: _take(v, index, count) for k, v in context.reference_outputs.items()})


def per_sample_scores(metric: ResolvedMetric, reference: np.ndarray, candidate: np.ndarray,
                      context: Any) -> np.ndarray | None:
    """The metric on each sample alone (None when it cannot be computed one sample at a time)."""
    import numpy as np

    from .metrics import compute

    count = reference.shape[0]
    values = np.empty(count, dtype=np.float64)
    try:
        for i in range(count):
            index = np.array([i])
            values[i] = compute(metric, reference[index], candidate[index], subset_context(context, index, count))
    except Exception:  # noqa: BLE001 - a metric that needs several samples just has no per-sample form
        return None
    return values


def _reducer(whole: float, values: np.ndarray) -> str | None:
    import numpy as np

    if values is None or not np.all(np.isfinite(values)) or not math.isfinite(whole):
        return None
    for name, reduced in (("mean", float(np.mean(values))), ("min", float(np.min(values))),
                          ("max", float(np.max(values)))):
        if abs(reduced - whole) <= 1e-9 * max(1.0, abs(whole)):
            return name
    return None


def metric_interval(metric: ResolvedMetric, reference: np.ndarray, candidate: np.ndarray, context: Any,
                    *, confidence: float = DEFAULT_CONFIDENCE, resamples: int = DEFAULT_RESAMPLES,
                    seed: int = 0, index: Sequence[int] | np.ndarray | None = None) -> Interval:
    """The interval of ``metric``'s drop for one candidate, on the samples ``index`` (default: all)."""
    import numpy as np

    from .metrics import compute, drop

    count = reference.shape[0]
    chosen = np.arange(count) if index is None else np.asarray(index, dtype=np.int64)
    ref, cand, ctx = reference[chosen], candidate[chosen], subset_context(context, chosen, count)
    n = int(chosen.size)
    whole_ref = compute(metric, ref, ref, ctx)
    whole_cand = compute(metric, ref, cand, ctx)
    estimate = drop(metric, whole_ref, whole_cand)
    if not math.isfinite(estimate):
        return point_interval(estimate, n, confidence)
    ref_values = per_sample_scores(metric, ref, ref, ctx)
    cand_values = per_sample_scores(metric, ref, cand, ctx)
    if ref_values is None or cand_values is None:
        how = None
    else:
        how = _reducer(whole_cand, cand_values)
        if how is not None and _reducer(whole_ref, ref_values) != how and not np.allclose(ref_values, ref_values[0]):
            how = None
    sign = 1.0 if metric.higher_is_better else -1.0
    binary = (metric.rate is not False and ref_values is not None and cand_values is not None
              and np.all(np.isin(cand_values, (0.0, 1.0))) and np.all(np.isin(ref_values, (0.0, 1.0))))
    if how == "mean" and binary:
        good = sign > 0
        lost = int(np.sum((ref_values == (1.0 if good else 0.0)) & (cand_values == (0.0 if good else 1.0))))
        gained = int(np.sum((ref_values == (0.0 if good else 1.0)) & (cand_values == (1.0 if good else 0.0))))
        return paired_rate_interval(lost, gained, n, confidence)
    if how is not None and ref_values is not None and cand_values is not None:
        reduce: Any = {"mean": np.mean, "min": np.min, "max": np.max}[how]
        draws = resample_indices(n, resamples, seed)
        values = np.asarray(drop(metric, reduce(ref_values[draws], axis=-1), reduce(cand_values[draws], axis=-1)))
        from ..stats import percentile_interval

        return percentile_interval(estimate, values, confidence, n)

    def statistic(rows: np.ndarray) -> float:
        sub = subset_context(ctx, rows, n)
        return drop(metric, compute(metric, ref[rows], ref[rows], sub), compute(metric, ref[rows], cand[rows], sub))

    interval = bootstrap_interval(statistic, n, confidence=confidence, resamples=min(resamples, SLOW_RESAMPLES),
                                  seed=seed)
    return Interval(estimate, interval.low, interval.high, interval.upper, confidence, interval.method, n)


def is_rate_metric(metric: ResolvedMetric, reference: np.ndarray, context: Any) -> bool:
    """Whether the metric's drop is a rate of samples (per-sample scores of 0 or 1), known before any candidate."""
    import numpy as np

    if metric.rate is False:
        return False
    values = per_sample_scores(metric, reference, reference, context)
    return values is not None and bool(np.all(np.isin(values, (0.0, 1.0))))


def resolution(metric: ResolvedMetric, reference: np.ndarray, context: Any, budget: float, samples: int,
               confidence: float = DEFAULT_CONFIDENCE) -> Resolution | None:
    """For a rate metric, whether ``samples`` held-out samples can prove ``budget`` (None for continuous metrics)."""
    if not is_rate_metric(metric, reference, context):
        return None
    return rate_resolution(samples, budget, confidence)


def companion(metrics: Sequence[ResolvedMetric], primary: str) -> str | None:
    """A continuous metric on the primary metric's output, to rank by when the primary cannot be resolved."""
    by_key = {m.key: m for m in metrics}
    main = by_key.get(primary)
    if main is None:
        return None
    for name in COMPANIONS:
        for m in metrics:
            if m.output == main.output and m.name == name and m.key != primary:
                return m.key
    return None


def intervals_for(metrics: Sequence[ResolvedMetric], reference: Mapping[str, np.ndarray],
                  candidate: Mapping[str, np.ndarray], context_for: Any, *,
                  confidence: float = DEFAULT_CONFIDENCE, seed: int = 0,
                  index: Sequence[int] | np.ndarray | None = None,
                  keys: Sequence[str] | None = None) -> dict[str, Interval]:
    """Intervals of every metric's drop (or only ``keys``), one candidate, on the samples ``index``."""
    out = {}
    for m in metrics:
        if keys is not None and m.key not in keys:
            continue
        out[m.key] = metric_interval(m, reference[m.output], candidate[m.output], context_for(m.output),
                                     confidence=confidence, seed=seed, index=index)
    return out


# -- the verdict on held-out parts ------------------------------------------------------------------------

@dataclass
class Verdict:
    """A candidate judged on the confirm part, with intervals, and its drops on the select part."""

    metrics: dict[str, float]
    drops: dict[str, float]
    intervals: dict[str, Interval]
    select_drops: dict[str, float]
    passed: bool | None
    failures: list[str]
    samples: dict[str, int]


def _scores_on(judge: Any, outputs: Mapping[str, np.ndarray], index: np.ndarray) -> tuple[dict, dict]:
    from .metrics import compute, drop

    scores, drops = {}, {}
    count = judge.samples
    for m in judge.metrics:
        ref = judge.reference_outputs[m.output]
        ctx = subset_context(judge.context(m.output), index, count)
        own = compute(m, ref[index], ref[index], ctx)
        scores[m.key] = compute(m, ref[index], outputs[m.output][index], ctx)
        drops[m.key] = drop(m, own, scores[m.key])
    return scores, drops


def judge_outputs(judge: Any, outputs: Mapping[str, np.ndarray], *, confidence: float = DEFAULT_CONFIDENCE,
                  parts: Parts | None = None, estimate_only: Sequence[str] = (), extra: Sequence[str] = (),
                  seed: int = 0) -> Verdict:
    """Score ``outputs`` on the confirm part (all samples without ``parts``) and decide pass/fail.

    A budgeted metric passes when the one-sided upper bound of its drop at
    ``confidence`` is within the budget, except the keys in ``estimate_only``
    (budgets the data cannot resolve), which are held to their measured drop.
    Intervals are computed for every budgeted metric and the ``extra`` keys.
    """
    import numpy as np

    confirm = np.asarray(parts.confirm if parts else range(judge.samples), dtype=np.int64)
    scores, drops = _scores_on(judge, outputs, confirm)
    select_drops: dict[str, float] = {}
    if parts is not None:
        _, select_drops = _scores_on(judge, outputs, np.asarray(parts.select, dtype=np.int64))
    wanted = list(dict.fromkeys([*judge.budgets, *extra]))
    found = intervals_for(judge.metrics, judge.reference_outputs, outputs, judge.context, confidence=confidence,
                          seed=seed, index=confirm, keys=wanted)
    failures = []
    for key, budget in judge.budgets.items():
        value, interval = drops[key], found.get(key)
        if math.isnan(value):
            failures.append(f"{key}: not finite (NaN/inf outputs)")
        elif key in estimate_only or interval is None or not math.isfinite(interval.upper):
            if value > budget + 1e-12:
                failures.append(f"{key}: drop {value:.4g} > max {budget:.4g}")
        elif not interval.within(budget):
            failures.append(f"{key}: drop {value:.4g}, {confidence:.0%} bound {interval.upper:.4g} > max {budget:.4g}")
    passed = None if not judge.budgets else not failures
    samples = {"confirm": int(confirm.size)} | ({"select": len(parts.select)} if parts else {})
    return Verdict(scores, drops, found, select_drops, passed, failures, samples)
