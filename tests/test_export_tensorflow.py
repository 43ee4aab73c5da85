"""TensorFlow framework plugin: every source kind exported with tf2onnx and checked against TensorFlow.

The models are tiny and built here; TensorFlow is imported once for the module.
"""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

pytest.importorskip("tensorflow")
pytest.importorskip("tf2onnx")

from onnxlite.errors import OnnxliteError, UsageError  # noqa: E402
from onnxlite.inputs import InputSpec, make_feeds  # noqa: E402
from onnxlite_plugins.frameworks import tensorflow as tf_plugin  # noqa: E402

from conftest import run_cli  # noqa: E402

VOCAB = 128
OPSET = 17

FUNCTIONS_PY = '''
import tensorflow as tf

# Captured from Python: must stay a constant in the ONNX graph, not become an input.
W = tf.constant([[1.0, -2.0], [0.5, 3.0], [2.0, 1.0]])


@tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
def affine(x):
    return tf.nn.relu(tf.matmul(x, W)) + 1.0


@tf.function(input_signature=[tf.TensorSpec([None, None], tf.float32), tf.TensorSpec([None, None], tf.float32)])
def pair(a, b):
    return {"total": tf.reduce_sum(a * b, axis=1), "gap": tf.reduce_max(a - b, axis=1)}


@tf.function
def untyped(x):
    return tf.tanh(x) * 2.0


@tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
def igamma(x):
    # No ONNX mapping in tf2onnx.
    return tf.math.igamma(x * x + 1.0, x * x + 2.0)


def plain_relu(x):
    # Not a tf.function: the plugin wraps it, given --framework tensorflow and --input.
    return tf.nn.relu(x) * 2.0


def build_mlp():
    import keras

    keras.utils.set_random_seed(1)
    return keras.Sequential([keras.Input((6,), name="pixels"), keras.layers.Dense(5, activation="relu"),
                             keras.layers.Dense(3, activation="softmax", name="probabilities")])
'''


def _text_model():
    """Token ids + attention mask -> masked mean of embeddings -> two named outputs."""
    import keras
    from keras import ops

    keras.utils.set_random_seed(0)
    ids = keras.Input((None,), dtype="int32", name="input_ids")
    mask = keras.Input((None,), dtype="int32", name="attention_mask")
    hidden = keras.layers.Embedding(VOCAB, 8)(ids)
    weights = ops.expand_dims(ops.cast(mask, "float32"), -1)
    pooled = ops.sum(hidden * weights, axis=1) / ops.maximum(ops.sum(weights, axis=1), 1.0)
    pooled = keras.layers.Dense(8, activation="tanh", name="pooled")(pooled)
    logits = keras.layers.Dense(3, name="logits")(pooled)
    return keras.Model([ids, mask], {"logits": logits, "pooled": pooled})


def _mlp():
    import keras

    keras.utils.set_random_seed(2)
    inputs = keras.Input((6,), name="features")
    x = keras.layers.Dense(16, activation="relu")(inputs)
    x = keras.layers.Dropout(0.5)(x)  # must be off when running and exporting
    return keras.Model(inputs, keras.layers.Dense(4, name="scores")(x))


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    root = tmp_path_factory.mktemp("tf_sources")
    text = _text_model()
    text.save(root / "text.keras")
    text.export(root / "text_savedmodel", verbose=False)
    mlp = _mlp()
    mlp.save(root / "mlp.h5")
    (root / "functions.py").write_text(textwrap.dedent(FUNCTIONS_PY))
    return root


@pytest.fixture(scope="module")
def exporter():
    from onnxlite import get_registry

    return get_registry().get("framework", "tensorflow").create()


def _export_and_check(model, tmp_path, specs=None, name="model.onnx", sizes=((3, 7), (5, 2))):
    """Export, then compare onnxruntime with TensorFlow on several batch sizes and lengths."""
    import onnxruntime as ort

    specs = list(specs or model.input_specs())
    path = tmp_path / name
    provenance = model.export(path, specs, make_feeds(specs, batch=2, seq=4), OPSET, {})
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == [s.name for s in specs]
    onnx_outputs = [o.name for o in session.get_outputs()]
    for batch, seq in sizes:
        feeds = make_feeds(specs, batch=batch, seq=seq, seed=batch)
        reference = model.run(feeds)
        assert sorted(reference) == sorted(onnx_outputs)
        got = dict(zip(onnx_outputs, session.run(None, feeds)))
        for out, expected in reference.items():
            assert got[out].shape == expected.shape
            assert expected.shape[0] == batch
            np.testing.assert_allclose(got[out], expected, rtol=1e-4, atol=1e-5, err_msg=f"{out} b={batch}")
    return path, provenance, session


def test_detect_by_path(sources, tmp_path):
    (tmp_path / "empty").mkdir()
    assert tf_plugin.detect(str(sources / "text_savedmodel"))
    assert tf_plugin.detect(str(sources / "text.keras"))
    assert tf_plugin.detect(str(sources / "mlp.h5"))
    assert not tf_plugin.detect(str(tmp_path / "empty"))
    assert not tf_plugin.detect(str(sources / "functions.py"))
    assert not tf_plugin.detect("model.onnx")
    assert not tf_plugin.detect("model.pt")


@pytest.mark.parametrize("kind", ["savedmodel", "keras"])
def test_text_model_with_padding_matches_tensorflow(sources, exporter, tmp_path, kind):
    source = sources / ("text_savedmodel" if kind == "savedmodel" else "text.keras")
    model = exporter.load(str(source), {})
    specs = model.input_specs()
    # A SavedModel signature takes keyword arguments, so its order is alphabetical.
    assert sorted((s.name, s.dtype, s.shape) for s in specs) == [
        ("attention_mask", "int32", ("batch", "dim1")), ("input_ids", "int32", ("batch", "dim1"))]
    feeds = make_feeds(specs, batch=4, seq=6)
    assert feeds["attention_mask"].min() == 0, "the check must cover padded rows"
    path, provenance, session = _export_and_check(model, tmp_path)
    assert sorted(o.name for o in session.get_outputs()) == ["logits", "pooled"]
    assert [i.shape for i in session.get_inputs()] == [["batch", "dim1"], ["batch", "dim1"]]
    assert [o.shape for o in session.get_outputs()] in ([["batch", 3], ["batch", 8]], [["batch", 8], ["batch", 3]])
    assert provenance["onnxlite.exporter"] == "tf2onnx"
    assert '"tensorflow"' in provenance["onnxlite.versions"]
    assert provenance["onnxlite.source_kind"] == ("saved-model" if kind == "savedmodel" else "keras-file")


def test_padding_changes_the_answer(sources, exporter):
    """The masked model really depends on the mask, so the padded check above means something."""
    model = exporter.load(str(sources / "text.keras"), {})
    feeds = make_feeds(model.input_specs(), batch=3, seq=6, pad=False)
    full = model.run(feeds)["logits"]
    feeds["attention_mask"][1:, 3:] = 0
    padded = model.run(feeds)["logits"]
    assert np.allclose(full[0], padded[0]) and not np.allclose(full[1:], padded[1:])


def test_h5_model_runs_in_inference_mode(sources, exporter, tmp_path):
    model = exporter.load(str(sources / "mlp.h5"), {})
    assert [str(s) for s in model.input_specs()] == ["features:float32[batch,6]"]
    feeds = make_feeds(model.input_specs(), batch=4)
    first, second = model.run(feeds), model.run(feeds)
    np.testing.assert_array_equal(first["scores"], second["scores"])  # dropout is off
    _export_and_check(model, tmp_path)


def test_tf_function_reference_keeps_captured_constants(sources, exporter, tmp_path):
    model = exporter.load(f"{sources / 'functions.py'}:affine", {})
    assert [str(s) for s in model.input_specs()] == ["x:float32[batch,3]"]
    _, _, session = _export_and_check(model, tmp_path)
    assert [i.name for i in session.get_inputs()] == ["x"]
    assert [o.name for o in session.get_outputs()] == ["output"]


def test_tf_function_with_dict_outputs_and_host_loaded_object(sources, exporter, tmp_path):
    from onnxlite.pyref import load_python_ref

    ref = f"{sources / 'functions.py'}:pair"
    model = exporter.load(ref, {"python_object": load_python_ref(ref)})
    specs = model.input_specs()
    assert [str(s) for s in specs] == ["a:float32[batch,dim1]", "b:float32[batch,dim1]"]
    _, _, session = _export_and_check(model, tmp_path)
    assert sorted(o.name for o in session.get_outputs()) == ["gap", "total"]


def test_keras_factory_reference(sources, exporter, tmp_path):
    model = exporter.load(f"{sources / 'functions.py'}:build_mlp", {})
    assert [str(s) for s in model.input_specs()] == ["pixels:float32[batch,6]"]
    _, _, session = _export_and_check(model, tmp_path)
    assert [o.name for o in session.get_outputs()] == ["probabilities"]  # the last layer's name


def test_function_without_signature_needs_inputs(sources, exporter, tmp_path):
    model = exporter.load(f"{sources / 'functions.py'}:untyped", {})
    with pytest.raises(UsageError, match="--input"):
        model.input_specs()
    specs = [InputSpec("x", "float32", ("batch", 5))]
    _, _, session = _export_and_check(model, tmp_path, specs=specs)
    assert session.get_inputs()[0].shape == ["batch", 5]


def test_user_inputs_can_fix_dims(sources, exporter, tmp_path):
    model = exporter.load(str(sources / "text.keras"), {})
    specs = [InputSpec("input_ids", "int32", ("batch", 6)).with_role(),
             InputSpec("attention_mask", "int32", ("batch", 6)).with_role()]
    _, _, session = _export_and_check(model, tmp_path, specs=specs, sizes=((2, 6), (3, 6)))
    assert [i.shape for i in session.get_inputs()] == [["batch", 6], ["batch", 6]]


def test_unsupported_op_is_refused_by_name(sources, exporter, tmp_path):
    model = exporter.load(f"{sources / 'functions.py'}:igamma", {})
    target = tmp_path / "igamma.onnx"
    with pytest.raises(OnnxliteError, match=r"Igamma.*opset") as info:
        model.export(target, model.input_specs(), {}, OPSET, {})
    assert "\n" not in str(info.value)
    assert not target.exists()


def test_missing_and_wrong_sources(sources, exporter, tmp_path):
    with pytest.raises(UsageError, match="no such file"):
        exporter.load(str(tmp_path / "nothing.keras"), {})
    (tmp_path / "not_a_model").mkdir()
    with pytest.raises(UsageError, match="no saved_model.pb"):
        exporter.load(str(tmp_path / "not_a_model"), {})
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(UsageError, match="not a TensorFlow source"):
        exporter.load(str(tmp_path / "notes.txt"), {})


def test_corrupt_keras_file_is_one_line(exporter, tmp_path):
    bad = tmp_path / "broken.keras"
    bad.write_bytes(b"this is not a zip archive")
    before = bad.read_bytes()
    with pytest.raises(UsageError) as info:
        exporter.load(str(bad), {})
    message = str(info.value)
    assert message.startswith(str(bad)) and "Keras" in message and "\n" not in message
    assert bad.read_bytes() == before


def test_saved_model_signatures(sources, exporter, tmp_path):
    import tensorflow as tf

    module = tf.Module()
    module.v = tf.Variable(2.0)
    tf.saved_model.save(module, str(tmp_path / "bare"))
    with pytest.raises(UsageError, match="no 'serving_default' signature.*signatures: none"):
        exporter.load(str(tmp_path / "bare"), {})
    with pytest.raises(UsageError, match="signatures: serve, serving_default"):
        exporter.load(str(sources / "text_savedmodel"), {"signature": "predict"})
    model = exporter.load(str(sources / "text_savedmodel"), {"signature": "serve"})
    assert sorted(s.name for s in model.input_specs()) == ["attention_mask", "input_ids"]


def test_high_opset_is_capped_and_recorded(sources, exporter, tmp_path):
    import onnx

    model = exporter.load(f"{sources / 'functions.py'}:affine", {})
    path = tmp_path / "capped.onnx"
    provenance = model.export(path, model.input_specs(), {}, 99, {})
    opsets = {o.domain: o.version for o in onnx.load(str(path)).opset_import}
    assert opsets[""] < 99
    assert f"converts up to {opsets['']}" in provenance["onnxlite.opset_note"]


def test_cli_exports_and_verifies_a_python_reference(sources, tmp_path):
    """The whole path through the host: detection of a tf.function reference, export, verification."""
    import json

    out = tmp_path / "pair.onnx"
    result = run_cli("export", f"{sources / 'functions.py'}:pair", "-o", str(out), "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["framework"] == "tensorflow" and report["exporter"] == "tf2onnx"
    assert report["verification"]["passed"] is True
    assert out.is_file()
    # The C++ log lines TF prints when imported by the user's file are quieted by the CLI.
    assert "oneDNN" not in result.stderr and "I0000" not in result.stderr


def test_cli_corrupt_keras_is_a_usage_error(tmp_path):
    bad = tmp_path / "broken.keras"
    bad.write_bytes(b"PK not really")
    result = run_cli("export", str(bad), "-o", str(tmp_path / "x.onnx"))
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: ") and "broken.keras" in lines[0]
    assert not (tmp_path / "x.onnx").exists()


def test_saved_model_with_wrong_input_names_is_a_usage_error(sources, exporter, tmp_path):
    model = exporter.load(str(sources / "text_savedmodel"), {})
    specs = [InputSpec("ids", "int32", ("batch", "seq")), InputSpec("mask", "int32", ("batch", "seq"))]
    with pytest.raises(UsageError, match="do not match.*attention_mask"):
        model.export(tmp_path / "wrong.onnx", specs, {}, OPSET, {})


def test_int64_feeds_reach_an_int32_model(sources, exporter):
    model = exporter.load(str(sources / "text.keras"), {})
    feeds = make_feeds(model.input_specs(), batch=2, seq=5)
    wide = {name: array.astype("int64") for name, array in feeds.items()}
    np.testing.assert_array_equal(model.run(wide)["logits"], model.run(feeds)["logits"])


def test_keras_mlp_example_trains_and_exports(tmp_path):
    """examples/keras_mlp/train.py works, and its ONNX export classifies the held-out digits as Keras does."""
    import onnxruntime as ort

    import onnxlite
    from onnxlite.conversion.sources import load_source
    from onnxlite.pyref import load_python_ref

    from conftest import ROOT

    out = load_python_ref(str(ROOT / "examples" / "keras_mlp" / "train.py") + ":main")(str(tmp_path))
    data = np.load(out / "digits_test.npz")
    result = onnxlite.export(str(out / "digits_mlp.keras"), str(tmp_path / "digits.onnx"),
                             samples=str(out / "digits_test.npz"))
    assert result.verification.passed
    session = ort.InferenceSession(str(tmp_path / "digits.onnx"), providers=["CPUExecutionProvider"])
    onnx_pred = session.run(None, {"pixels": data["pixels"]})[0].argmax(axis=1)
    keras_pred = load_source(str(out / "digits_mlp_savedmodel")).model.run(
        {"pixels": data["pixels"]})["output_0"].argmax(axis=1)
    np.testing.assert_array_equal(onnx_pred, keras_pred)
    assert (onnx_pred == data["labels"]).mean() > 0.8  # it did learn


def test_cli_option_picks_a_saved_model_signature(sources, tmp_path):
    """`--option` reaches the framework plugin's declared options, checked against its spec."""
    import json

    saved = str(sources / "text_savedmodel")
    out = tmp_path / "serve.onnx"
    result = run_cli("export", saved, "-o", str(out), "--option", "signature=serve", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["verification"]["passed"] is True
    assert sorted(i.split(":")[0] for i in report["inputs"]) == ["attention_mask", "input_ids"]

    missing = run_cli("export", saved, "-o", str(tmp_path / "x.onnx"), "--option", "signature=predict")
    assert missing.returncode == 2
    line = missing.stderr.strip()
    assert "\n" not in line and "signatures: serve, serving_default" in line and "--option signature=NAME" in line
    unknown = run_cli("export", saved, "-o", str(tmp_path / "y.onnx"), "--option", "signatur=serve")
    assert unknown.returncode == 2
    assert "--option signatur: framework 'tensorflow' has no such option (valid: signature)" in unknown.stderr
    assert not (tmp_path / "x.onnx").exists() and not (tmp_path / "y.onnx").exists()


def test_a_plain_function_of_the_inputs_reaches_the_plugin(sources, tmp_path):
    """The host must not call a function that takes the model's inputs as if it were a factory."""
    from onnxlite.conversion.sources import load_source

    loaded = load_source(f"{sources / 'functions.py'}:plain_relu", "tensorflow",
                         {"inputs": [InputSpec("x", "float32", ("batch", 4))]})
    assert loaded.framework == "tensorflow"
    _, _, session = _export_and_check(loaded.model, tmp_path, specs=loaded.input_specs)
    assert session.get_inputs()[0].shape == ["batch", 4]
    # Without --framework nothing can tell a plain function's framework: one line says what to pass.
    with pytest.raises(UsageError, match="pass --framework NAME"):
        load_source(f"{sources / 'functions.py'}:plain_relu")
