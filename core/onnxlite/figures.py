"""One model's figures: the record every row type holds.

``compare``'s :class:`~onnxlite.evaluation.judge.CandidateResult`, a
``lighten`` task's :class:`~onnxlite.jobs.candidate.JobResult` and its
:class:`~onnxlite.search.results.CandidateRow`, ``bench``'s
:class:`~onnxlite.benchmark.bench.BenchRow` and the report's
:class:`~onnxlite.report.model.ModelRow` all describe "a model and its
figures".  They inherit :class:`Figures`, so a figure has one name and one
meaning everywhere, and passing figures from one row to the next is one call
(:func:`figures_of` or :func:`copy_figures`), never a list of fields that can
miss the one added last.

Anything not measured stays ``None`` or empty (shown as a dash, never as 0).
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, field, fields
from typing import Any


@dataclass(kw_only=True)
class Figures:
    """What was measured about one model file."""

    size_bytes: int | None = None                 # the model file and its external data
    #: metric values (``OUTPUT.METRIC`` -> value), e.g. ``{"last_hidden_state.cosine_mean": 0.99}``
    metrics: dict[str, float] = field(default_factory=dict)
    #: how far each metric falls from the reference's own score (positive is worse)
    drops: dict[str, float] = field(default_factory=dict)
    #: the drops' confidence intervals on the confirm part (``Interval.to_dict()`` per metric key)
    intervals: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: drops on the select part of the held-out data, where option grids are decided
    select_drops: dict[str, float] = field(default_factory=dict)
    #: changed top-1 answers per classifier output on the confirm part, near-ties and confident samples apart
    #: (``Changes.to_dict()`` of :mod:`onnxlite.evaluation.margins` per output name)
    changes: dict[str, dict[str, Any]] = field(default_factory=dict)
    latency_ms: dict[str, float] | None = None    # per batch: p50, p90, p99, mean
    throughput: float | None = None               # samples/s
    load_seconds: float | None = None             # creating the session
    peak_rss_bytes: int | None = None             # the measuring process's peak resident memory


#: every figure, in the record's order
FIGURES: tuple[str, ...] = tuple(f.name for f in fields(Figures))
#: what judging a model against its reference finds
JUDGED: tuple[str, ...] = ("metrics", "drops", "intervals", "select_drops", "changes")
#: what benchmarking a model finds
MEASURED: tuple[str, ...] = ("latency_ms", "throughput", "load_seconds", "peak_rss_bytes")


def figures_of(source: Figures, *names: str) -> dict[str, Any]:
    """The figures of ``source`` (all of them, or only ``names``) as keyword arguments for another row.

    Dicts are copied, so the new row never shares a mutable figure with the old one.
    """
    return {name: copy.deepcopy(getattr(source, name)) for name in (names or FIGURES)}


def copy_figures(source: Figures, target: Figures, *names: str) -> None:
    """Set the figures of ``target`` (all of them, or only ``names``) to those of ``source``."""
    for name, value in figures_of(source, *names).items():
        setattr(target, name, value)


def row_dict(row: Figures) -> dict[str, Any]:
    """``asdict(row)`` with the row's own fields first and its figures after (as JSON readers expect a name first)."""
    data = asdict(row)
    return {k: v for k, v in data.items() if k not in FIGURES} | {k: data[k] for k in FIGURES}
