"""`compare` with a `.keras` file as the reference (regression: it was once read as an ONNX model for its size)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest

from conftest import run_cli

pytest.importorskip("tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


@pytest.fixture(scope="module")
def keras_digits(tmp_path_factory) -> dict:
    """A small Keras MLP trained on digits, saved as .keras; its verified ONNX export, dynamic int8, labelled data."""
    import keras
    from sklearn.datasets import load_digits

    import onnxlite

    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((64,), name="pixels"), keras.layers.Dense(32, activation="relu"),
                              keras.layers.Dense(10, activation="softmax", name="probabilities")])
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="sparse_categorical_crossentropy")
    model.fit(x[:1300], y[:1300], epochs=8, batch_size=64, verbose=0)
    folder = tmp_path_factory.mktemp("keras_digits")
    source = folder / "digits.keras"
    model.save(source)
    data = folder / "heldout.npz"
    np.savez(data, pixels=x[1300:], labels=y[1300:].astype(np.int64))
    fp32 = folder / "digits.onnx"
    assert onnxlite.export(str(source), str(fp32), samples=str(data)).verification.passed
    int8 = folder / "digits_int8.onnx"
    onnxlite.quantize(str(fp32), str(int8), strategy="dynamic")
    keras_accuracy = float((model.predict(x[1300:], verbose=0).argmax(axis=1) == y[1300:]).mean())
    return {"source": source, "fp32": fp32, "int8": int8, "data": data, "x": x[1300:], "y": y[1300:],
            "keras_accuracy": keras_accuracy}


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _ort_accuracy(path: Path, x: np.ndarray, y: np.ndarray, batch: int | None = None) -> float:
    """Accuracy of onnxruntime's answers, run in ``batch``-sized slices (dynamic int8 picks its activation
    scales per batch, so another slicing than compare's can differ by a flip)."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    batch = batch or len(x)
    logits = np.concatenate([session.run(None, {"pixels": x[i:i + batch]})[0] for i in range(0, len(x), batch)])
    return float((logits.argmax(axis=1) == y).mean())


def test_keras_file_reference_is_scored_not_sized(keras_digits):
    import onnxlite

    before = _digest(keras_digits["source"])
    result = onnxlite.compare(str(keras_digits["source"]), [str(keras_digits["int8"])], data=str(keras_digits["data"]),
                              metrics=["accuracy"], max_drop="1%")
    assert result.framework == "tensorflow"
    assert result.reference_size_bytes is None  # a .keras file has no ONNX size
    assert result.samples == len(keras_digits["y"])
    # The reference's accuracy is Keras's own; the candidate's is what onnxruntime gives on the int8 file.
    assert result.reference_metrics["probabilities.accuracy"] == pytest.approx(keras_digits["keras_accuracy"])
    candidate = result.candidates[0]
    assert candidate.metrics["probabilities.accuracy"] == pytest.approx(
        _ort_accuracy(keras_digits["int8"], keras_digits["x"], keras_digits["y"], result.settings["batch_size"]))
    assert candidate.size_bytes == keras_digits["int8"].stat().st_size
    # The verdict holds the drop's one-sided upper confidence bound to the budget, not the measured drop (one
    # flipped digit more or less, as between CPUs whose int8 kernels differ, moves the drop but not the rule).
    upper = candidate.intervals["probabilities.accuracy"]["upper"]
    assert upper >= candidate.drops["probabilities.accuracy"]
    assert candidate.passed is (upper <= 0.01 + 1e-12)
    assert _digest(keras_digits["source"]) == before


def test_onnx_reference_still_has_its_size(keras_digits):
    import onnxlite
    from onnxlite.modelio import model_size

    result = onnxlite.compare(str(keras_digits["fp32"]), [str(keras_digits["int8"])], data=str(keras_digits["data"]))
    assert result.framework == "onnx"
    assert result.reference_size_bytes == model_size(keras_digits["fp32"])


def test_cli_compare_with_keras_reference(keras_digits):
    proc = run_cli("compare", str(keras_digits["source"]), str(keras_digits["int8"]),
                   "--data", str(keras_digits["data"]), "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["framework"] == "tensorflow"
    assert report["reference_size_bytes"] is None
    assert report["reference_metrics"]["probabilities.accuracy"] == pytest.approx(keras_digits["keras_accuracy"])
    assert report["candidates"][0]["size_bytes"] == keras_digits["int8"].stat().st_size
