"""One record of a model's figures (onnxlite.figures): every row type holds it, and every copy site carries
each figure from one row to the next, across the task's JSON and the report's JSON."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import pytest

from onnxlite.benchmark.bench import BenchResult, BenchRow
from onnxlite.evaluation.judge import CandidateResult
from onnxlite.figures import FIGURES, JUDGED, MEASURED, Figures, copy_figures, figures_of
from onnxlite.jobs.candidate import JobResult
from onnxlite.report.model import ModelRow
from onnxlite.search.results import CandidateRow, LightenResult, candidate_row

pytestmark = pytest.mark.unit

ROW_TYPES = (CandidateResult, JobResult, CandidateRow, BenchRow, ModelRow)


def _figures(seed: int) -> dict:
    """A distinct, non-default value for every figure (so a figure left behind shows)."""
    return {"size_bytes": 1000 + seed, "metrics": {"y.cosine_mean": 0.9 + seed / 1000},
            "drops": {"y.cosine_mean": 0.01 + seed / 1000},
            "intervals": {"y.cosine_mean": {"estimate": 0.01, "low": 0.0, "high": 0.02, "upper": 0.02}},
            "select_drops": {"y.cosine_mean": 0.012 + seed / 1000},
            "changes": {"y": {"margin": 0.1, "near_ties": 3, "near_tie_changes": seed, "confident": 9,
                              "confident_changes": 0}},
            "latency_ms": {"p50": 2.0 + seed, "p90": 3.0, "p99": 4.0, "mean": 2.5},
            "throughput": 400.0 + seed, "load_seconds": 0.25 + seed, "peak_rss_bytes": 10**8 + seed}


def test_every_figure_has_a_test_value():
    assert set(_figures(0)) == set(FIGURES) and set(JUDGED + MEASURED) < set(FIGURES)


@pytest.mark.parametrize("row_type", ROW_TYPES, ids=lambda t: t.__name__)
def test_every_row_type_holds_the_one_record(row_type):
    assert issubclass(row_type, Figures)
    assert set(FIGURES) <= {f.name for f in fields(row_type)}
    # none redeclares a figure of its own (a second meaning under the same name)
    assert set(row_type.__dict__.get("__annotations__", {})) & set(FIGURES) == set()


def test_a_candidate_carries_every_figure_from_its_task_to_the_report_json():
    task = JobResult(name="dynamic", strategy="dynamic", options={}, **_figures(1))
    # the task's result crosses a process boundary as JSON
    task = JobResult.from_dict(json.loads(json.dumps(task.to_dict())))
    row = candidate_row(task)
    assert figures_of(row) == _figures(1)
    base = CandidateRow(name="fp32", strategy="none", options={}, status="reference", **_figures(2))
    result = LightenResult(output_dir=Path("out"), winner=None, baseline=base, candidates=[row], skipped=[],
                           primary_metric="y.cosine_mean", budgets={"y.cosine_mean": 0.05}, objective="size",
                           message="", export={}, settings={}, data="generated")
    report = json.loads(json.dumps(result.to_report().to_dict()))
    assert [figures_of(ModelRow.from_dict(r)) for r in report["rows"]] == [_figures(2), _figures(1)]
    # the lighten --json row keeps its keys, name first
    data = row.to_dict()
    assert next(iter(data)) == "name" and set(FIGURES) | {"strategy", "options", "status"} <= set(data)


def test_a_benchmarked_row_carries_every_figure_into_the_report():
    bench = BenchRow(name="m", path="m.onnx", op_count=7, **_figures(3))
    result = BenchResult(rows=[bench], schedule=[(0, 1)], batch=1, seq_len=8)
    (row,) = result.to_report().rows
    assert figures_of(row) == _figures(3) and row.op_count == 7
    assert result.to_dict()["models"][0]["model_rss_bytes"] is None   # bench's own keys stay


def test_copy_figures_takes_only_the_names_given_and_shares_no_dict():
    judged = CandidateResult(name="c", path="c.onnx", **_figures(4))
    measured = BenchRow(name="c", path="c.onnx", **_figures(5))
    target = CandidateRow(name="c", strategy="s", options={})
    copy_figures(judged, target)
    copy_figures(measured, target, *MEASURED)
    expected = {**_figures(4), **{k: _figures(5)[k] for k in MEASURED}}
    assert figures_of(target) == expected
    target.metrics["y.cosine_mean"] = 0.0
    assert judged.metrics == _figures(4)["metrics"]
