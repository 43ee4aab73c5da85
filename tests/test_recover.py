"""Post-training recovery (strategy ``recover``): cross-layer equalization, AdaRound, bias correction."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from helpers import conv_chain

ort = pytest.importorskip("onnxruntime")


def _run(model, x, optimize=True):
    """Outputs on ``x``; ``optimize=False`` runs a QDQ model as written (DequantizeLinear, then float ops), so the
    figures do not depend on which int8 kernels this CPU has (AVX2's u8s8 saturates where VNNI does not)."""
    options = ort.SessionOptions()
    if not optimize:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model),
                                options, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def _channel_ranges(model, name):
    from onnx import numpy_helper

    weight = numpy_helper.to_array(next(i for i in model.graph.initializer if i.name == name))
    return np.abs(weight).reshape(weight.shape[0], -1).max(axis=1)


@pytest.fixture
def two_convs(tmp_path):
    """conv (8 channels, ranges spread 1000x) -> Relu -> depthwise conv -> Relu -> pointwise conv."""
    rng = np.random.default_rng(0)
    w1 = rng.normal(size=(8, 3, 3, 3)) * np.logspace(-3, 0, 8).reshape(-1, 1, 1, 1)
    w2 = rng.normal(size=(8, 1, 3, 3))
    w3 = rng.normal(size=(6, 8, 1, 1))
    return conv_chain(tmp_path / "two_convs.onnx", [(w1, rng.normal(size=8) * 0.1, "Relu", 1),
                                                    (w2, rng.normal(size=8) * 0.1, "Relu", 8),
                                                    (w3, np.zeros(6), None, 1)])


@pytest.mark.unit
def test_cle_keeps_float_outputs_and_narrows_channel_ranges(two_convs):
    from onnxlite_plugins.quantizers.equalize import equalize

    model = onnx.load(str(two_convs))
    x = np.random.default_rng(1).normal(size=(4, 3, 8, 8)).astype(np.float32)
    before = _run(model, x)
    spread = _channel_ranges(model, "w1")
    pairs = equalize(model, clip6="relu")
    assert [(p.first, p.second) for p in pairs] == [("conv1", "conv2"), ("conv2", "conv3")]
    np.testing.assert_allclose(_run(model, x), before, atol=1e-5, rtol=1e-5)
    after = _channel_ranges(model, "w1")
    assert after.max() / after.min() < (spread.max() / spread.min()) / 10
    assert pairs[0].spread_after < pairs[0].spread_before


@pytest.mark.unit
def test_cle_through_relu6_replaces_it_or_skips(tmp_path):
    from onnxlite_plugins.quantizers.equalize import equalize

    rng = np.random.default_rng(0)
    path = conv_chain(tmp_path / "relu6.onnx", [(rng.normal(size=(4, 3, 3, 3)), np.zeros(4), "Relu6", 1),
                                                (rng.normal(size=(4, 4, 3, 3)), np.zeros(4), None, 1)])
    skipped = onnx.load(str(path))
    assert equalize(skipped, clip6="skip") == []
    replaced = onnx.load(str(path))
    pairs = equalize(replaced, clip6="relu")
    assert [p.through for p in pairs] == ["Clip"]
    assert "Clip" not in {n.op_type for n in replaced.graph.node}


@pytest.mark.unit
def test_bounded_cle_through_relu6_keeps_the_calibration_outputs(tmp_path):
    """clip6=bounded scales a Relu6 pair's channels only as far as the calibration data stays under the bound,
    so the float model's outputs on that data do not change, and the spread still narrows."""
    from onnxlite_plugins.quantizers.equalize import clip_inputs, equalize
    from onnxlite_plugins.quantizers.rounding import collect

    rng = np.random.default_rng(0)
    w1 = rng.normal(size=(8, 3, 3, 3)) * np.logspace(-2, 0, 8).reshape(-1, 1, 1, 1) * 0.3
    path = conv_chain(tmp_path / "relu6.onnx", [(w1, np.zeros(8), "Relu6", 1),
                                                (rng.normal(size=(8, 8, 3, 3)), np.zeros(8), None, 1)])
    model = onnx.load(str(path))
    x = rng.normal(size=(16, 3, 8, 8)).astype(np.float32)
    before = _run(model, x)
    found = collect(model, clip_inputs(model), [{"x": x[i:i + 1]} for i in range(16)])
    maxima = {k: v.max(axis=(0, 2, 3)) for k, v in found.items()}
    pairs = equalize(model, maxima=maxima)
    assert [p.through for p in pairs] == ["Clip"] and "Clip" in {n.op_type for n in model.graph.node}
    np.testing.assert_allclose(_run(model, x), before, atol=1e-5, rtol=1e-5)
    assert pairs[0].spread_after < pairs[0].spread_before


@pytest.mark.unit
def test_fold_batchnorm_keeps_outputs(tmp_path):
    from onnx import helper, numpy_helper

    from onnxlite_plugins.quantizers.equalize import fold_batchnorm

    rng = np.random.default_rng(0)
    path = conv_chain(tmp_path / "bn.onnx", [(rng.normal(size=(4, 3, 3, 3)), rng.normal(size=4), None, 1)])
    model = onnx.load(str(path))
    conv = model.graph.node[0]
    conv.output[0] = "pre_bn"
    stats = {"s": rng.uniform(0.5, 2, 4), "t": rng.normal(size=4), "m": rng.normal(size=4), "v": rng.uniform(0.5, 2, 4)}
    model.graph.initializer.extend(numpy_helper.from_array(v.astype(np.float32), k) for k, v in stats.items())
    model.graph.node.insert(1, helper.make_node("BatchNormalization", ["pre_bn", "s", "t", "m", "v"], ["c1"],
                                                name="bn"))
    x = rng.normal(size=(2, 3, 8, 8)).astype(np.float32)
    before = _run(model, x)
    assert fold_batchnorm(model) == 1
    assert "BatchNormalization" not in {n.op_type for n in model.graph.node}
    np.testing.assert_allclose(_run(model, x), before, atol=1e-4, rtol=1e-4)


def test_adaround_lowers_a_fragile_layers_error():
    """A layer with one large weight per channel has a coarse int8 grid; on correlated (image-like) inputs the
    learned rounding lets neighbouring weights' errors cancel, which round-to-nearest cannot."""
    pytest.importorskip("torch")
    from onnxlite_plugins.quantizers.rounding import adaround, layer_error, nearest, weight_scale

    rng = np.random.default_rng(0)
    latent = rng.normal(size=(16, 3, 4, 4))
    x = np.einsum("nlhw,cl->nchw", latent, rng.normal(size=(16, 3))).repeat(2, 2).repeat(2, 3)
    x = (x + 0.05 * rng.normal(size=x.shape)).astype(np.float32)
    w = rng.normal(size=(16, 16, 3, 3)) * 0.05
    w[:, 0, 0, 0] = 0.5                                   # the fragile part: scale set by one weight
    args = {"stride": (1, 1), "padding": (1, 1), "dilation": (1, 1), "groups": 1}
    scale = weight_scale(w)
    learned = adaround(x, w, args, steps=150)
    assert np.all(np.abs(learned) <= 127) and np.all(learned == np.round(learned))
    np.testing.assert_allclose(weight_scale(learned * scale), scale)    # onnxruntime will pick the same scale
    assert np.all(np.abs(learned - w / scale) < 1 + 1e-9)              # only ever the floor or the ceiling
    assert layer_error(x, w, learned * scale, args) < 0.8 * layer_error(x, w, nearest(w) * scale, args)


def test_recover_strategy_end_to_end(two_convs, tmp_path):
    """recover writes a QDQ model whose int8 weights are the ones it chose, and it stays close to the float model."""
    pytest.importorskip("torch")
    import onnxlite

    rng = np.random.default_rng(2)
    data = tmp_path / "calib.npz"
    np.savez(data, x=rng.normal(size=(24, 3, 8, 8)).astype(np.float32))
    out = tmp_path / "rec.onnx"
    result = onnxlite.quantize(two_convs, out, strategy="recover", calibration=str(data), cle=True, adaround=True,
                               adaround_steps=20)
    assert result.details["recovery"]["cle_pairs"] and result.details["recovery"]["adaround"]
    ops = {n.op_type for n in onnx.load(str(out)).graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops
    x = rng.normal(size=(8, 3, 8, 8)).astype(np.float32)
    want, got = _run(two_convs, x), _run(out, x, optimize=False)
    cos = np.sum(want * got) / np.linalg.norm(want) / np.linalg.norm(got)
    assert cos > 0.98


def test_float_depthwise_with_16bit_activations(two_convs, tmp_path):
    """The accuracy point (recover's third grid point): the depthwise conv keeps its float weights, the others get
    int8 weights, activations 16-bit."""
    from onnx import numpy_helper

    import onnxlite

    rng = np.random.default_rng(3)
    data = tmp_path / "calib.npz"
    np.savez(data, x=rng.normal(size=(24, 3, 8, 8)).astype(np.float32))
    accurate = tmp_path / "accurate.onnx"
    result = onnxlite.quantize(two_convs, accurate, strategy="recover", calibration=str(data),
                               activation_type="uint16", float_depthwise=True)
    assert "1 depthwise conv(s) kept float" in result.notes
    model = onnx.load(str(accurate))
    conv2 = next(n for n in model.graph.node if n.name == "conv2")
    inits = {i.name: i for i in model.graph.initializer}
    assert conv2.input[1] in inits and numpy_helper.to_array(inits[conv2.input[1]]).dtype == np.float32
    activations = {numpy_helper.to_array(inits[n.input[2]]).dtype for n in model.graph.node
                   if n.op_type == "QuantizeLinear" and n.input[0] not in inits and len(n.input) > 2}
    assert activations == {np.dtype(np.uint16)}
    others = [n for n in model.graph.node if n.op_type == "Conv" and n.name != "conv2"]
    assert all(n.input[1] not in inits for n in others)       # their weights come out of a DequantizeLinear
