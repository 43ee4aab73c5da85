"""The PP-OCR direction classifier example: a Paddle2ONNX CNN from rapidocr-onnxruntime's wheel, judged by the
classifier-budget rule (``top1_agreement_confident``) on rendered text lines."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
FONTS = Path("/usr/share/fonts/truetype/dejavu")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cls():
    for module in ("rapidocr_onnxruntime", "PIL"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed: pip install --no-deps rapidocr-onnxruntime==1.4.4")
    if not (FONTS / "DejaVuSans.ttf").is_file():
        pytest.skip("the DejaVu fonts the lines are rendered in are not installed (fonts-dejavu-core)")
    spec = importlib.util.spec_from_file_location("ppocr_cls_example", EXAMPLES / "ppocr_cls" / "ppocr_cls.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def parts(cls):
    return cls.parts()


def _probabilities(path: str | Path, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def test_lines_are_preprocessed_as_rapidocr_and_the_shipped_model_reads_them(cls, parts):
    assert {k: v.shape for k, v in parts.items()} == {k: (n, 3, 48, 192) for k, n in cls.COUNTS.items()}
    for array in parts.values():
        assert array.dtype == np.float32 and array.min() >= -1 and array.max() <= 1
    # calibration lines are drawn apart from the others
    assert not np.array_equal(parts["calibration"][:32], parts["heldout"])
    probs = _probabilities(cls.source(), parts["evaluation"])
    assert probs.shape == (128, 2) and np.allclose(probs.sum(1), 1, atol=1e-4)
    # odd lines are turned 180 degrees: class 1 in PP-OCR's labels ("0", "180")
    assert (probs.argmax(1) == np.arange(128) % 2).mean() >= 0.95


def test_lighten_under_the_confident_budget_keeps_the_shipped_models_answers(cls, tmp_path):
    import onnxlite

    source = Path(cls.source())
    before = source.read_bytes()
    siblings = sorted(p.name for p in source.parent.iterdir())
    paths = cls.write(tmp_path / "data")
    result = onnxlite.lighten(str(source), tmp_path / "out", calibration=str(paths["calibration"]),
                              data=str(paths["heldout"]), metric="top1_agreement_confident", max_drop="3%",
                              strategies=["static", "fp16"], runs=3)
    assert source.read_bytes() == before and sorted(p.name for p in source.parent.iterdir()) == siblings
    assert (tmp_path / "out" / "report.json").is_file()
    assert result.winner is not None, result.message
    x = np.load(paths["evaluation"])["x"]
    ref, got = _probabilities(source, x), _probabilities(result.model_path, x)
    confident = np.sort(ref, 1)[:, -1] - np.sort(ref, 1)[:, -2] >= 0.1
    kept = (ref.argmax(1) == got.argmax(1))[confident]
    # the budget is 3% on lines the judge saw; on lines nothing saw, at most 3 of the confident ones may flip
    assert confident.sum() >= 100 and (~kept).sum() <= 3
