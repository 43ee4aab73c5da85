"""Early pruning: a candidate judged first on a few confirm samples, and dropped only when it is clearly over budget.

"Clearly" is the drop's interval on those samples: the candidate is dropped when the interval's *lower*
bound, at :data:`PRUNE_CONFIDENCE` (two-sided, so 0.05% of the bootstrap's mass lies below it), is
already over a budget.  A candidate whose drop is near the budget, or whose few samples are noisy, has a
wide interval whose lower bound stays under the budget: it is judged on every sample as before.  Budgets
the held-out data cannot resolve (held to their measured drop) never prune, and neither does a judge
without a confidence rule or with too few confirm samples for a subset to save anything.

A pruned candidate is recorded over budget, its drops and intervals those of the subset, and the
reason says on how many samples it was dropped.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: confirm samples a candidate is judged on first
PRUNE_SAMPLES = 32
#: a decoder's confirm windows a candidate is judged on first: each window is hundreds of scored tokens, and a
#: 4-bit point that misses a perplexity budget by a third misses it on any eight of them
DECODER_PRUNE_WINDOWS = 8
#: the two-sided confidence of the interval whose lower bound must clear the budget
PRUNE_CONFIDENCE = 0.999


@dataclass(frozen=True)
class Pruned:
    """A candidate dropped on a subset: its figures there, and why."""

    samples: int
    of: int
    drops: Mapping[str, float]
    intervals: Mapping[str, dict[str, Any]]
    failures: tuple[str, ...]


def clearly_over(interval: Any, budget: float) -> bool:
    """The interval's lower bound is over the budget: more samples could not bring the drop within it."""
    low = getattr(interval, "low", float("nan"))
    return math.isfinite(low) and low > budget


def subset_interval(metric: Any, reference: Any, candidate: Any, context: Any,
                    confidence: float = PRUNE_CONFIDENCE) -> Any:
    """The drop's interval on the samples given, at the pruning confidence (what :func:`prune` decides on)."""
    from ..evaluation.intervals import metric_interval

    return metric_interval(metric, reference, candidate, context, confidence=confidence)


def prune(judge: Any, model: str | Path, samples: int = PRUNE_SAMPLES,
          confidence: float = PRUNE_CONFIDENCE) -> Pruned | None:
    """Judge ``model`` on ``samples`` confirm samples; the figures when it is clearly over budget, else None."""
    import numpy as np

    from ..evaluation.judge import Judge

    parts = getattr(judge, "parts", None)
    if judge.confidence is None or parts is None or len(parts.confirm) < 2 * samples:
        return None
    budgets = {k: v for k, v in judge.budgets.items() if k not in judge.estimate_only}
    if not budgets:
        return None
    # a seeded random subset of the confirm part: its indices are sorted, and data files are often ordered
    index = np.sort(np.random.default_rng(0).permutation(np.asarray(parts.confirm, dtype=np.int64))[:samples])
    reference, feeds, labels = judge_subset(judge, index)
    from .decoder_judge import decoder_subset

    # a decoder's judge scores windows: its subset is a decoder judge on those windows' records
    sub = decoder_subset(judge, reference, feeds) or Judge(
        reference, feeds, labels, [m.key for m in judge.metrics], max_drop=judge.budgets or None,
        primary=judge.primary, settings=judge.settings, batch_size=judge.batch_size)
    sub.batch_axes = dict(getattr(judge, "batch_axes", None) or {})
    sub.output_axes = dict(getattr(judge, "output_axes", None) or {})
    outputs = sub.run_candidate(model)
    drops: dict[str, float] = {}
    intervals: dict[str, dict[str, Any]] = {}
    failures = []
    for metric in sub.metrics:
        found = subset_interval(metric, sub.reference_outputs[metric.output], outputs[metric.output],
                                sub.context(metric.output), confidence)
        drops[metric.key], intervals[metric.key] = found.estimate, found.to_dict()
        budget = budgets.get(metric.key)
        if budget is not None and clearly_over(found, budget):
            failures.append(f"{metric.key}: drop {found.estimate:.4g}, at least {found.low:.4g} at "
                            f"{confidence:.1%} on {samples} of the {len(parts.confirm)} confirm samples "
                            f"> max {budget:.4g} (pruned early)")
    if not failures:
        return None
    return Pruned(samples, len(parts.confirm), drops, intervals, tuple(failures))


def judge_subset(judge: Any, index: Any) -> tuple[dict[str, Any], dict[str, Any], Any]:
    """The judge's reference outputs (batch first), inputs (each on its sample axis) and labels at ``index``."""
    import numpy as np

    from ..data.dataset import pick_rows

    count = judge.samples

    def rows(value: Any) -> Any:
        shape = getattr(value, "shape", ())
        return np.take(value, index, axis=0) if shape and shape[0] == count else value

    reference = {n: rows(v) for n, v in judge.reference_outputs.items()}
    feeds = pick_rows(judge.feeds, index, judge.batch_axes)
    labels = None if judge.labels is None else rows(np.asarray(judge.labels))
    return reference, feeds, labels
