"""`onnxlite lighten` end to end on a Keras source: the examples/keras_mlp digits classifier, judged by accuracy."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT

pytest.importorskip("tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def lightened(tmp_path_factory) -> dict:
    """Train the example's MLP (a few seconds), then lighten its .keras file within 1 point of accuracy."""
    import onnxlite
    from onnxlite.pyref import load_python_ref

    folder = load_python_ref(str(ROOT / "examples" / "keras_mlp" / "train.py") + ":main")(
        str(tmp_path_factory.mktemp("keras_mlp")))
    source = folder / "digits_mlp.keras"
    before = _digest(source)
    out = folder / "lightened"
    result = onnxlite.lighten(str(source), out, data=str(folder / "digits_test.npz"),
                              calibration=str(folder / "digits_calibration.npz"),
                              metric="accuracy", max_drop="1%", runs=5)
    return {"folder": folder, "source": source, "out": out, "result": result, "digest": before}


def test_outdir_holds_model_recipe_and_reports(lightened):
    out = lightened["out"]
    for name in ("model.onnx", "recipe.toml", "report.html", "report.json", "report.md"):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    result = lightened["result"]
    assert result.model_path == out / "model.onnx" and result.recipe_path == out / "recipe.toml"
    assert _digest(lightened["source"]) == lightened["digest"]  # the source was only read


def test_winner_is_quantized_and_within_budget(lightened):
    from onnxlite.modelio import is_quantized, load_model

    result = lightened["result"]
    winner = result.winner
    assert winner is not None, result.message
    assert winner.status == "winner"
    assert result.primary_metric.endswith(".accuracy")
    assert result.budgets[result.primary_metric] == pytest.approx(0.01)
    assert winner.drops[result.primary_metric] <= 0.01 + 1e-12
    assert is_quantized(load_model(lightened["out"] / "model.onnx"))
    assert winner.size_bytes < result.baseline.size_bytes
    # Every held-out sample judged (calibration came separately), and the recorded choice is the written one.
    report = json.loads((lightened["out"] / "report.json").read_text())
    assert report["settings"]["held_out_samples"] == len(np.load(lightened["folder"] / "digits_test.npz")["labels"])
    assert report["primary_metric"] == result.primary_metric
    recipe = (lightened["out"] / "recipe.toml").read_text()
    assert f'name = "{winner.strategy}"' in recipe


def test_winner_accuracy_recomputed_with_onnxruntime_is_within_a_point_of_keras(lightened):
    import keras
    import onnxruntime as ort

    from onnxlite.evaluation.intervals import split_parts
    from onnxlite.evaluation.judge import DEFAULT_BATCH

    data = np.load(lightened["folder"] / "digits_test.npz")
    pixels, labels = data["pixels"], data["labels"]
    keras_hits = keras.models.load_model(lightened["source"]).predict(pixels, verbose=0).argmax(axis=1) == labels
    session = ort.InferenceSession(str(lightened["out"] / "model.onnx"), providers=["CPUExecutionProvider"])
    # in the judge's batches: dynamic int8 takes its activation scales from each batch, so they matter
    logits = [session.run(None, {"pixels": pixels[i:i + DEFAULT_BATCH]})[0]
              for i in range(0, len(pixels), DEFAULT_BATCH)]
    onnx_hits = np.concatenate(logits).argmax(axis=1) == labels
    assert keras_hits.mean() > 0.8  # the model learnt something, so the comparison means something
    assert onnx_hits.mean() >= keras_hits.mean() - 0.01
    result = lightened["result"]
    key = result.primary_metric
    # lighten reports the confirm part's figures (the select part only picks among option grids): the same
    # seeded split of the held-out samples, recomputed here.
    parts = result.evidence["parts"]
    confirm = list(split_parts(len(labels)).confirm) if parts.get("select") else list(range(len(labels)))
    assert len(confirm) == parts["confirm"]
    keras_accuracy, onnx_accuracy = float(keras_hits[confirm].mean()), float(onnx_hits[confirm].mean())
    # lighten's own figures are these: the winner scored by onnxruntime, its drop measured from Keras's score.
    assert result.winner.metrics[key] == pytest.approx(onnx_accuracy)
    assert result.winner.metrics[key] + result.winner.drops[key] == pytest.approx(keras_accuracy)
