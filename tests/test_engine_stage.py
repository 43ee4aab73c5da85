"""A stage added to the search engine in one place: the engine runs it after the built-in stages, the rows
it judges join the candidates table, its record reaches the report, and the one stop rule keeps it from
starting once the time budget is spent (the verdict names it)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from helpers import make_mlp, sample_lighten_result


@dataclass(frozen=True)
class Extra:
    """What the test stage saw and did."""

    rows_before: int
    read: tuple[str, ...]
    judged: str
    status: str

    def to_dict(self) -> dict[str, Any]:
        return {"rows_before": self.rows_before, "read": list(self.read), "judged": self.judged,
                "status": self.status}


class ExtraStage:
    """Judges one more candidate like any other, through the engine's table API."""

    name = "extra"
    title = "the extra stage"

    def applies(self, ctx):
        return ctx.searching

    def run(self, ctx, table):
        from onnxlite.search.candidates import Candidate, candidate_name
        from onnxlite.search.stages import Outcome

        before = len(table)
        options = {"weight_type": "quint8", "op_types": ("MatMul",)}
        row = ctx.search.run(ctx.config.workers, [Candidate(candidate_name("dynamic", options), "dynamic",
                                                            options)])[0]
        return Outcome(Extra(before, tuple(sorted(ctx.records)), row.name, row.status), notes=("extra stage ran",))

    def not_started(self, ctx, table):
        from onnxlite.search.stages import Outcome

        return Outcome(None, not_started=True)


def _search(tmp_path: Path, out: str, **options: Any):
    from onnxlite.search.config import LightenConfig
    from onnxlite.search.engine import STAGES
    from onnxlite.search.lighten import run

    model = make_mlp(tmp_path / "mlp.onnx")
    data = tmp_path / "held.npz"
    if not data.exists():
        np.savez(data, x=np.random.default_rng(0).standard_normal((96, 32)).astype(np.float32))
    config = LightenConfig.build(None, data=str(data), strategies=["dynamic"], max_drop="5%", metric="cosine_mean",
                                 runs=2, partial=False, cache=False, **options)
    return run(str(model), tmp_path / out, config, stages=(*STAGES, ExtraStage()))


def test_an_added_stage_runs_after_the_others_and_is_reported(tmp_path):
    result = _search(tmp_path, "a")
    record = result.evidence["extra"]
    # it ran after every built-in stage that applies, and read their records
    assert {"grids", "quick", "mixed", "last_resort"} <= set(record["read"])
    names = [row.name for row in result.candidates]
    assert record["rows_before"] >= 1 and record["judged"] in names
    assert names.index(record["judged"]) >= record["rows_before"]   # appended, after the rows before it
    assert record["status"] in {"ok", "rejected"}
    assert "extra stage ran" in result.message
    assert "stages not started" not in result.message


def test_a_spent_time_budget_keeps_an_added_stage_from_starting(tmp_path):
    result = _search(tmp_path, "b", time_budget="0.001")
    assert "extra" not in result.evidence
    assert "stages not started: " in result.message and "the extra stage" in result.message
    assert "the extra stage" in result.settings["cut_short"]["stages"]


@pytest.mark.unit
def test_a_result_is_final_once_made():
    result = sample_lighten_result()
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.message = result.message + "; more"


@pytest.mark.unit
def test_the_verdict_is_its_head_then_its_notes_in_order():
    from onnxlite.report.verdict import Verdict, WinnerFigures, winner_head

    result = sample_lighten_result()
    winner, base = result.winner, result.baseline
    head = winner_head(winner, base, WinnerFigures("cosine", 0.00412, 0.01, quick_ratio=0.5))
    assert head.startswith(f"winner: {winner.name}: ")
    assert f"{base.size_bytes / winner.size_bytes:.2f}x smaller" in head
    assert f"{base.p50 / winner.p50:.2f}x faster than fp32" in head
    assert "(2.00x in the quick timing)" in head and head.endswith("cosine drop 0.00412 (budget 0.01)")
    text = Verdict(head, ("judged on avx2",)).with_notes(["reused 2 from the cache"]).text()
    assert text == f"{head}; judged on avx2; reused 2 from the cache"
