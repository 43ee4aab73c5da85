"""lighten runs ``qat`` as its last resort: only when no post-training candidate at >= 3x meets the budget and the
source is PyTorch; its task loads the source module, and the verdict says that QAT ran and why."""

from __future__ import annotations

import numpy as np
import pytest

from onnxlite.search.last_resort import RATIO, LastResort, light_enough, wanted
from onnxlite.search.results import CandidateRow


def _row(name, size, status="rejected"):
    return CandidateRow(name=name, strategy=name, options={}, status=status, size_bytes=size, drops={"m": 0.0})


@pytest.mark.unit
def test_the_last_resort_runs_only_when_post_training_lost_at_3x():
    pytest.importorskip("torch")
    lost = [_row("static", 300), _row("fp16", 600, "ok")]        # within budget only at 2x
    names, why = wanted("pytorch", True, lost, 1200, None)
    assert names == ["qat"] and f">= {RATIO:g}x" in why and "pytorch" in why
    assert light_enough([_row("static", 400, "ok")], 1200) is not None       # exactly 3x counts
    names, why = wanted("pytorch", True, lost + [_row("static2", 350, "ok")], 1200, None)
    assert names == [] and "static2" in why and "not needed" in why
    assert wanted("onnx", True, lost, 1200, None)[0] == []                  # nothing to train
    assert wanted("pytorch", True, lost, 1200, ["static"]) == (
        [], "--strategies names no strategy that trains a pytorch source")
    assert "calibration" in wanted("pytorch", False, lost, 1200, None)[1]
    # the record the report and the verdict read
    ran = LastResort(why, ("qat",), (_row("qat", 250, "ok"),))
    assert ran.tried and ran.to_dict()["rows"][0]["status"] == "ok" and "qat within budget" in (ran.note() or "")
    assert LastResort("not needed").note() is None and "rows" not in LastResort("not needed").to_dict()


@pytest.mark.slow
def test_lighten_runs_qat_when_static_loses(tmp_path):
    """The fragile digits CNN (helpers.fragile_digits): static int8 loses answers, so QAT runs, trained from the
    PyTorch source its task loaded, and judged on held-out digits like any candidate."""
    pytest.importorskip("torch")
    pytest.importorskip("sklearn")
    import onnxlite

    from conftest import ROOT
    from helpers import fragile_digits

    _net, _onnx, calibration, test, weights = fragile_digits(tmp_path)
    data = tmp_path / "heldout.npz"
    np.savez(data, x=test[:200])
    source_class = f"{ROOT / 'tests' / 'export_models.py'}:DigitsNet"
    result = onnxlite.lighten(str(weights), tmp_path / "out", model_class=source_class,
                              inputs=["x:float32[batch,1,8,8]"], data=str(data), calibration=str(calibration),
                              strategies=["static", "qat"], metric="top1_agreement", max_drop="10%", runs=2,
                              partial=False)
    record = result.evidence["last_resort"]
    assert record["tried"] and "no post-training candidate" in record["reason"], record
    static = [r for r in result.candidates if r.strategy == "static"]
    qat = [r for r in result.candidates if r.strategy == "qat"]
    assert static and all(r.status == "rejected" for r in static)
    assert len(qat) == 1 and qat[0].status in ("ok", "winner", "rejected"), qat
    primary = result.primary_metric
    # trained from the source the task loaded: fewer answers lost than the best static candidate
    assert qat[0].drops[primary] < min(r.drops[primary] for r in static), [r.drops for r in result.candidates]
    assert "qat ran as the last resort because no post-training candidate" in result.message, result.message
    assert not [s for s in result.skipped if s["strategy"] == "qat"]
