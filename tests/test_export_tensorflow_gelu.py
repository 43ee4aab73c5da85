"""Keras GELU exports: TensorFlow's exact GELU uses ``Erfc``, which tf2onnx 1.17 cannot convert by itself.

The plugin maps ``Erfc`` to ``1 - Erf``; these tests check the mapping against
TensorFlow on inputs wide enough to reach GELU's tails, where ``erfc`` and
``1 - erf`` differ most, and through the CLI's own export check.
"""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

pytest.importorskip("tensorflow")
pytest.importorskip("tf2onnx")

from conftest import run_cli  # noqa: E402

GELU_PY = '''
import keras


def build():
    keras.utils.set_random_seed(0)
    inputs = keras.Input((16,), name="x")
    hidden = keras.layers.Dense(32, activation="gelu")(inputs)
    return keras.Model(inputs, keras.layers.Dense(4, name="scores")(hidden))


net = build()
'''


@pytest.fixture(scope="module")
def gelu_source(tmp_path_factory):
    root = tmp_path_factory.mktemp("gelu")
    (root / "gelu.py").write_text(textwrap.dedent(GELU_PY))
    return root / "gelu.py"


def _exporter():
    from onnxlite import get_registry

    return get_registry().get("framework", "tensorflow").create()


def test_keras_gelu_uses_erfc_and_exports_as_erf(gelu_source, tmp_path):
    import onnx
    import onnxruntime as ort
    import tensorflow as tf

    from onnxlite.pyref import load_python_ref

    ref = f"{gelu_source}:net"
    model = _exporter().load(ref, {"python_object": load_python_ref(ref)})
    # The failure this guards against: Keras' GELU really lowers to Erfc in TensorFlow's graph.
    graph_fn = tf.function(lambda x: tf.nn.gelu(x, approximate=False),
                           input_signature=[tf.TensorSpec([None, 4], tf.float32)])
    ops = {op.type for op in graph_fn.get_concrete_function().graph.get_operations()}
    assert "Erfc" in ops, f"TensorFlow's GELU no longer uses Erfc ({sorted(ops)}); this test guards nothing"

    specs = model.input_specs()
    path = tmp_path / "gelu.onnx"
    from onnxlite.inputs import make_feeds

    model.export(path, specs, make_feeds(specs, batch=2), 17, {})
    types = {node.op_type for node in onnx.load(str(path)).graph.node}
    assert "Erf" in types and "Erfc" not in types
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(3)
    for batch, scale in ((1, 1.0), (5, 8.0), (7, 30.0)):   # 30: deep in both tails of GELU
        x = (rng.standard_normal((batch, 16)) * scale).astype(np.float32)
        expected = model.run({"x": x})["scores"]
        (got,) = session.run(None, {"x": x})
        assert got.shape == (batch, 4)
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * scale)


def test_tf_nn_gelu_exact_matches_tensorflow_elementwise(tmp_path):
    """The activation alone, so a mismatch cannot hide behind a Dense layer's averaging."""
    import onnxruntime as ort
    import tensorflow as tf

    from onnxlite_plugins.frameworks.tensorflow import convert_function

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.float32, name="x")])
    def gelu(x):
        return {"y": tf.identity(tf.nn.gelu(x, approximate=False))}

    model = convert_function(gelu, 1, 17)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.linspace(-12.0, 12.0, 2 * 241, dtype=np.float32).reshape(2, 241)
    (got,) = session.run(None, {"x": x})
    expected = gelu(tf.constant(x))["y"].numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    assert np.all(got[x < -8] <= 0) and np.allclose(got[x > 8], x[x > 8])


def test_cli_export_verifies_keras_gelu(gelu_source, tmp_path):
    out = tmp_path / "gelu.onnx"
    result = run_cli("export", f"{gelu_source}:net", "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert out.is_file()
    verification = result.stdout.split("Verification", 1)[1]
    assert "scores" in verification and "ok" in verification and "FAIL" not in verification.upper()
