"""lighten weighs its evidence: unresolvable budgets announced first, the fallback when it pays, mixed precision."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import onnxlite
from onnxlite.search.fallback_rule import fallback_base
from onnxlite.search.grids import select_on_grids
from onnxlite.search.results import CandidateRow

from conftest import save_graph
from helpers import fragile_model, misleading_model


def _classifier(path: Path) -> Path:
    """x[16] -> MatMul -> Relu -> MatMul -> logits[10]: agreement is a rate metric, cosine its companion."""
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array((rng.standard_normal((16, 32)) / 4).astype(np.float32), "w1"),
             numpy_helper.from_array((rng.standard_normal((32, 10)) / 4).astype(np.float32), "w2")]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("MatMul", ["r", "w2"], ["logits"], name="fc2")]
    graph = helper.make_graph(nodes, "clf", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])], inits)
    return save_graph(graph, path)


def test_an_unresolvable_budget_is_announced_before_any_work(tmp_path):
    model = _classifier(tmp_path / "clf.onnx")
    data = tmp_path / "held.npz"
    np.savez(data, x=np.random.default_rng(0).standard_normal((24, 16)).astype(np.float32))
    events = []
    result = onnxlite.lighten(str(model), tmp_path / "out", data=str(data), metric="top1_agreement",
                              max_drop="3%", strategies=["dynamic"], runs=2, partial=False,
                              on_event=lambda kind, info: events.append((kind, info.get("message", ""))))
    kinds = [k for k, _ in events]
    note = next(i for i, (k, m) in enumerate(events) if k == "note" and "cannot resolve" in m)
    assert note < kinds.index("candidates"), "announced after the quantizing began"
    message = events[note][1]
    # 60% of 24 samples judge: 14 cannot resolve 3% (at 95% it needs 99 with none lost), split or not
    assert "logits.top1_agreement" in message and "one of the 14 held-out samples" in message
    assert ">= 99 held-out samples" in message
    assert result.evidence["parts"] == {"confirm": 14} and result.evidence["split_notes"]
    assert result.evidence["unresolved"] and result.evidence["rank_metric"] == "logits.cosine_mean"
    assert "cannot resolve the budget" in result.message and "ranked by logits.cosine_mean" in result.message
    report = (tmp_path / "out" / "report.md").read_text()
    assert "## Confidence" in report and "cannot resolve" in report


def test_the_fallback_also_runs_when_a_weak_candidate_passes(tmp_path):
    """fp16 passes at 2x smaller; int8 (4x smaller) breaks the fragile layer: it is repaired, not dropped."""
    model = fragile_model(tmp_path / "fragile.onnx", tiny_b=False)
    result = onnxlite.lighten(str(model), tmp_path / "out", strategies=["fp16", "dynamic"], metric="cosine_mean",
                              max_drop="1%", runs=2)
    fp16 = next(r for r in result.candidates if r.strategy == "fp16")
    assert fp16.status in {"ok", "winner"}, fp16.reason
    assert result.partial and result.partial["tried"], result.partial
    assert "lighter than" in result.partial["why"]
    repaired = [r for r in result.candidates if r.strategy == "dynamic" and r.keep_float]
    assert repaired and repaired[-1].status in {"ok", "winner"}, [(r.name, r.reason) for r in repaired]
    assert "F" in repaired[-1].keep_float
    base = next(r for r in result.candidates if r.name == result.partial["base"])
    assert base.over_budget and base.size_bytes <= 0.8 * fp16.size_bytes
    assert repaired[-1].size_bytes < 0.95 * result.baseline.size_bytes


def test_mixed_precision_wins_where_every_uniform_scheme_misses(tmp_path):
    model = fragile_model(tmp_path / "fragile.onnx")
    result = onnxlite.lighten(str(model), tmp_path / "out", strategies=["dynamic", "weightonly", "mixed"],
                              metric="cosine_mean", max_drop="1%", runs=2, partial=False)
    uniform = [r for r in result.candidates if not r.name.startswith("mixed[default=") or r.name == "mixed"]
    assert uniform and all(r.status in {"rejected", "failed"} for r in uniform), [(r.name, r.status) for r in uniform]
    assert result.winner is not None and result.winner.strategy == "mixed", result.message
    plan = result.evidence["mixed"]["rounds"][-1]["plan"]
    assert plan["F"] == "fp16" and plan["B"] != "fp16", plan   # F's spike fits float16, B's tiny weights do not
    assert result.winner.size_bytes < 0.6 * result.baseline.size_bytes
    # its recipe replays the same assignment
    replay = onnxlite.lighten(str(model), tmp_path / "again", recipe=result.recipe_path, runs=2)
    assert replay.winner is not None and replay.winner.options["assign"] == result.winner.options["assign"]


def _row(name, strategy, size, status="ok", select=0.0, drop=0.0, over=False):
    return CandidateRow(name=name, strategy=strategy, options={}, status=status, size_bytes=size,
                        drops={"m": drop}, select_drops={"m": select}, over_budget=over, path=f"{name}.onnx")


def test_option_grids_are_decided_on_the_select_part_alone():
    rows = [_row("sq[a=0.5]", "smoothquant", 1000, select=0.004, drop=0.001),
            _row("sq[a=0.8]", "smoothquant", 1002, select=0.002, drop=0.003),
            _row("dynamic", "dynamic", 1001, select=0.009, drop=0.002)]
    notes = select_on_grids(rows, "m")
    # the select part's best stays even though its confirm drop is worse; another strategy is not a grid point
    # issue 25 §2: its own status, not "rejected" (which means over budget or no lighter than fp32)
    assert rows[1].status == "ok" and rows[0].status == "lost its grid" and "select part" in rows[0].reason
    assert rows[2].status == "ok" and len(notes) == 1


def test_fallback_base_rule():
    passing = _row("fp16", "fp16", 1000)
    light = _row("int8", "dynamic", 500, status="rejected", drop=0.02, over=True)
    close_but_heavy = _row("int8b", "dynamic", 900, status="rejected", drop=0.011, over=True)
    base, why = fallback_base([passing, light, close_but_heavy], "m", 0.01, lambda s: True)
    assert base is light and "2.00x lighter" in why
    base, why = fallback_base([passing, close_but_heavy], "m", 0.01, lambda s: True)
    assert base is None and "clearly lighter" in why
    base, _ = fallback_base([light, close_but_heavy], "m", 0.01, lambda s: True)
    assert base is light     # nothing passes: the lightest within 3x of the budget


def test_a_direct_sweep_ranks_nodes_where_activation_matching_misleads(tmp_path):
    model = misleading_model(tmp_path / "misleading.onnx")
    result = onnxlite.lighten(str(model), tmp_path / "out", strategies=["dynamic"], metric="cosine_mean",
                              max_drop="1%", runs=2, max_float_nodes=1)
    partial = result.partial
    assert partial["tried"] and partial["ranking"][0]["node"] == "F1", partial["ranking"][:2]
    assert partial["ranked_by"].startswith("direct sweep"), partial
    assert partial["sweep"][0]["node"] == "F2", partial["sweep"]
    assert result.winner is not None and result.winner.keep_float == ["F2"], result.message
