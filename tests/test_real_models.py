"""A real Paddle2ONNX model from a PyPI wheel: the data generator reads, and normalize makes onnxruntime's
quantizer work.

The PP-OCRv4 recognizer ships in ``rapidocr-onnxruntime`` 1.4.4; the file is
fetched with ``pip download --no-deps`` (about 15 MB, no dependency installed)
by ``benchmarks/real_models/models.py``, which the benchmark uses too.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "real_models"))

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def rec():
    import models

    try:
        return models, models.model_path("ppocr_rec")
    except Exception as exc:   # no route to PyPI: say so rather than fail on someone else's network
        pytest.skip(f"could not fetch {models.RAPIDOCR.requirement}: {exc}")


def _session(model):
    import onnxruntime as ort

    source = model if isinstance(model, (str, Path)) else model.SerializeToString()
    return ort.InferenceSession(str(source) if isinstance(source, Path) else source,
                                providers=["CPUExecutionProvider"])


def test_generated_text_lines_are_deterministic_and_read_by_the_shipped_model(rec):
    models, path = rec
    x, texts = models.ocr_rec_data("heldout", 12)
    again, texts_again = models.ocr_rec_data("heldout", 12)
    np.testing.assert_array_equal(x, again)
    assert texts == texts_again and x.shape == (12, 3, 48, 320)
    calibration, calibration_texts = models.ocr_rec_data("calibration", 12)
    assert not set(" ".join(texts).split()) & set(" ".join(calibration_texts).split())   # no shared word
    decoded = models.ctc_greedy(_session(path).run(None, {"x": x})[0], models.ctc_characters(path))
    assert models.string_agreement(texts, decoded) >= 0.75   # the fp32 model reads what we render


def test_normalize_lets_quantize_dynamic_work_on_the_paddle_graph(rec, tmp_path):
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from onnxlite.normalize import count_constant_tensors, normalize

    models, path = rec
    shipped = onnx.load(str(path))
    assert len(shipped.graph.initializer) == 0 and count_constant_tensors(shipped) > 100
    with pytest.raises(ValueError, match="to be an initializer"):
        quantize_dynamic(str(path), str(tmp_path / "as_shipped.onnx"), weight_type=QuantType.QInt8)

    result = normalize(shipped)
    assert result.opset_before == 12 and result.opset_after == 13 and result.lifted_constants > 100
    x, _ = models.ocr_rec_data("heldout", 4)
    np.testing.assert_array_equal(_session(result.model).run(None, {"x": x})[0], _session(path).run(None, {"x": x})[0])
    fixed = tmp_path / "normalized.onnx"
    onnx.save(result.model, fixed)
    quantize_dynamic(str(fixed), str(tmp_path / "int8.onnx"), weight_type=QuantType.QInt8)
    assert (tmp_path / "int8.onnx").stat().st_size < 0.4 * path.stat().st_size
