"""The ``smoothquant`` strategy on small graphs built here, with outlier channels like a transformer's."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxlite
from onnxlite_plugins.quantizers.smoothquant import activation_maxima, smooth, smoothing_targets

from conftest import run_cli, save_graph

rng = np.random.default_rng(0)
#: A few input channels 40x larger than the rest, as in BERT's LayerNorm and FFN outputs.
GAIN = np.ones(64, np.float32)
GAIN[[3, 17, 42]] = 40.0


def outlier_model(path: Path, shared_weight: bool = False) -> Path:
    """h = x * GAIN; y = Gemm(Relu(h @ W1), W2, transB=1); z = h + h @ W3 (a residual reads h too)."""
    w1 = rng.standard_normal((64, 128)).astype(np.float32) * 0.1
    w2 = rng.standard_normal((16, 128)).astype(np.float32) * 0.1
    w3 = rng.standard_normal((64, 64)).astype(np.float32) * 0.1
    inits = [numpy_helper.from_array(GAIN, "gain"), numpy_helper.from_array(w1, "W1"),
             numpy_helper.from_array(w2, "W2"), numpy_helper.from_array(w3, "W3")]
    nodes = [
        helper.make_node("Mul", ["x", "gain"], ["h"], name="scale"),
        helper.make_node("MatMul", ["h", "W1"], ["a"], name="mm1"),
        helper.make_node("Relu", ["a"], ["r"], name="relu"),
        helper.make_node("Gemm", ["r", "W2"], ["y"], name="gemm2", transB=1),
        helper.make_node("MatMul", ["h", "W1" if shared_weight else "W3"], ["b"], name="mm3"),
    ]
    if shared_weight:
        nodes.append(helper.make_node("Slice", ["b", "zero", "sixty_four", "one"], ["b64"], name="slice"))
        inits += [numpy_helper.from_array(np.array([0], np.int64), "zero"),
                  numpy_helper.from_array(np.array([64], np.int64), "sixty_four"),
                  numpy_helper.from_array(np.array([1], np.int64), "one")]
    nodes.append(helper.make_node("Add", ["h", "b64" if shared_weight else "b"], ["z"], name="residual"))
    graph = helper.make_graph(nodes, "outliers", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 16]),
                               helper.make_tensor_value_info("z", TensorProto.FLOAT, ["batch", 64])], inits)
    onnx.checker.check_model(str(save_graph(graph, path, ir_version=9)))
    return path


def feeds(n: int, batch: int = 16, seed: int = 1) -> list[dict[str, np.ndarray]]:
    gen = np.random.default_rng(seed)
    return [{"x": gen.standard_normal((batch, 64)).astype(np.float32)} for _ in range(n)]


def run(path_or_proto, batches) -> list[list[np.ndarray]]:
    model = path_or_proto if isinstance(path_or_proto, (str, Path)) else path_or_proto.SerializeToString()
    session = ort.InferenceSession(str(model) if isinstance(model, Path) else model, providers=["CPUExecutionProvider"])
    return [session.run(None, f) for f in batches]


def relative_error(reference, candidate) -> float:
    num = sum(float(np.sum((r - c) ** 2)) for rs, cs in zip(reference, candidate) for r, c in zip(rs, cs))
    den = sum(float(np.sum(r ** 2)) for rs in reference for r in rs)
    return (num / den) ** 0.5


def test_smoothing_leaves_float_outputs_unchanged(tmp_path):
    path = outlier_model(tmp_path / "m.onnx")
    model = onnx.load(str(path))
    groups = smoothing_targets(model, ["MatMul", "Gemm"], exclude=[])
    assert {a: sorted(t.node.name for t in ts) for a, ts in groups.items()} == {"h": ["mm1", "mm3"], "r": ["gemm2"]}
    maxima, seen = activation_maxima(model, list(groups), feeds(4), batch_size=8, limit=0)
    assert seen == 64
    assert maxima["h"][[3, 17, 42]].min() > 10 * np.median(maxima["h"])   # the outliers were seen
    smoothed = smooth(model, groups, maxima, alpha=0.5)
    assert sorted(smoothed) == ["h", "r"]
    onnx.checker.check_model(model)
    by_name = {n.name: n for n in model.graph.node}
    assert by_name["mm1"].input[0] == by_name["mm3"].input[0] != "h"
    assert by_name["residual"].input[0] == "h"   # the residual still reads the unscaled tensor
    held = feeds(3, seed=5)
    for before, after in zip(run(path, held), run(model, held)):
        for b, a in zip(before, after):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


def test_smoothquant_beats_dynamic_int8_on_outlier_channels(tmp_path):
    path = outlier_model(tmp_path / "m.onnx")
    held = feeds(4, seed=9)
    reference = run(path, held)
    dynamic = onnxlite.quantize(path, tmp_path / "dyn.onnx", strategy="dynamic")
    smoothq = onnxlite.quantize(path, tmp_path / "sq.onnx", strategy="smoothquant", calibration=feeds(8), alpha=0.5)
    assert smoothq.details["smoothed_activations"] == 2 and smoothq.details["calibration_samples"] == 128
    assert smoothq.quantized_ops.get("MatMulInteger", 0) == 3   # mm1, mm3, and the Gemm's MatMul half
    err_dynamic = relative_error(reference, run(dynamic.path, held))
    err_smooth = relative_error(reference, run(smoothq.path, held))
    assert err_smooth < 0.5 * err_dynamic, (err_smooth, err_dynamic)
    # alpha 0 moves nothing out of the activations, so it cannot do better than plain dynamic int8 here.
    flat = onnxlite.quantize(path, tmp_path / "a0.onnx", strategy="smoothquant", calibration=feeds(8), alpha=0.0)
    assert relative_error(reference, run(flat.path, held)) > err_smooth


def test_excluded_and_shared_weight_nodes_are_not_smoothed(tmp_path):
    path = outlier_model(tmp_path / "m.onnx")
    result = onnxlite.quantize(path, tmp_path / "ex.onnx", strategy="smoothquant", calibration=feeds(2),
                               exclude=["mm3"])
    nodes = {n.name: n for n in onnx.load(str(result.path)).graph.node}
    assert result.excluded_nodes == ["mm3"]
    assert nodes["mm3"].op_type == "MatMul" and nodes["mm3"].input[0] == "h"   # float, reading the original

    shared = outlier_model(tmp_path / "shared.onnx", shared_weight=True)
    warnings: list[str] = []
    result = onnxlite.quantize(shared, tmp_path / "sh.onnx", strategy="smoothquant", calibration=feeds(2),
                               on_warning=warnings.append)
    # W1 feeds two MatMuls, so rescaling it for one would break the other: only the Gemm's input is smoothed.
    assert result.details["smoothed_activations"] == 1
    held = feeds(2, seed=3)
    assert relative_error(run(shared, held), run(result.path, held)) < 0.05


def test_bad_options_are_one_line_usage_errors(tmp_path):
    path = outlier_model(tmp_path / "m.onnx")
    before = path.read_bytes()
    with pytest.raises(onnxlite.UsageError, match="alpha=1.5: expected a number from 0 to 1"):
        onnxlite.quantize(path, tmp_path / "x.onnx", strategy="smoothquant", calibration=feeds(1), alpha=1.5)
    proc = run_cli("quantize", str(path), "-o", str(tmp_path / "y.onnx"), "--strategy", "smoothquant")
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "needs calibration data" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert path.read_bytes() == before and not (tmp_path / "x.onnx").exists() and not (tmp_path / "y.onnx").exists()


def test_models_too_big_to_serialize_go_through_external_data(tmp_path, monkeypatch):
    """Above protobuf's 2 GB cap the activations are read from a temporary copy with external data."""
    import onnxlite.activations as activations

    path = outlier_model(tmp_path / "m.onnx")
    inline = onnxlite.quantize(path, tmp_path / "inline.onnx", strategy="smoothquant", calibration=feeds(2))
    monkeypatch.setattr(activations, "INLINE_LIMIT", 0)
    scratch: list[str] = []
    real_mkdtemp = __import__("tempfile").mkdtemp

    def mkdtemp(*args, **kwargs):
        made = real_mkdtemp(*args, **kwargs)
        if kwargs.get("prefix") == "onnxlite-activations-":
            scratch.append(made)
        return made

    monkeypatch.setattr("tempfile.mkdtemp", mkdtemp)
    external = onnxlite.quantize(path, tmp_path / "external.onnx", strategy="smoothquant", calibration=feeds(2))
    assert scratch and not any(Path(s).exists() for s in scratch)   # used, then removed
    weights = lambda p: {i.name: i.raw_data for i in onnx.load(str(p)).graph.initializer}  # noqa: E731
    assert weights(inline.path) == weights(external.path)


def test_a_matmul_reading_a_graph_input_is_smoothed_too(tmp_path):
    """The activation can be the model's own input: its maxima come from the feeds, its Mul goes first."""
    w = rng.standard_normal((64, 8)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"], name="mm")], "direct",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])],
                              [numpy_helper.from_array(w, "W")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    path = tmp_path / "direct.onnx"
    onnx.save(model, str(path))
    batches = [{"x": f["x"] * GAIN} for f in feeds(3)]   # outlier channels straight in the input
    groups = smoothing_targets(model, ["MatMul"], exclude=[])
    maxima, _ = activation_maxima(model, list(groups), batches, batch_size=16, limit=0)
    np.testing.assert_allclose(maxima["x"], np.abs(np.concatenate([b["x"] for b in batches])).max(0))
    assert smooth(model, groups, maxima, alpha=0.5) == ["x"]
    assert [n.op_type for n in model.graph.node] == ["Mul", "MatMul"]
    onnx.checker.check_model(model)
    held = [{"x": f["x"] * GAIN} for f in feeds(2, seed=4)]
    np.testing.assert_allclose(run(model, held)[0][0], run(path, held)[0][0], rtol=1e-4, atol=1e-4)


def test_external_data_in_gives_the_same_model_out(tmp_path):
    path = outlier_model(tmp_path / "m.onnx")
    external = tmp_path / "ext" / "m.onnx"
    external.parent.mkdir()
    onnx.save_model(onnx.load(str(path)), str(external), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="m.onnx.data", size_threshold=0)
    inline = onnxlite.quantize(path, tmp_path / "inline.onnx", strategy="smoothquant", calibration=feeds(2))
    split = onnxlite.quantize(external, tmp_path / "ext" / "out.onnx", strategy="smoothquant", calibration=feeds(2))
    assert split.details["smoothed_activations"] == inline.details["smoothed_activations"] == 2
    held = feeds(2, seed=6)
    for a, b in zip(run(inline.path, held), run(split.path, held)):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)


def norm_model(path: Path, decomposed: bool = False) -> Path:
    """h = LayerNorm(x) with outlier gammas; y = Gemm(Relu(h @ W1), W2): one normalization output, one other input.

    ``decomposed`` spells LayerNorm out as a pre-17 exporter does (ReduceMean, Sub, Pow, Sqrt, Div, Mul, Add).
    """
    gen = np.random.default_rng(3)
    gamma = GAIN.copy()
    inits = [numpy_helper.from_array(gamma, "gamma"), numpy_helper.from_array(np.zeros(64, np.float32), "beta"),
             numpy_helper.from_array(gen.standard_normal((64, 128)).astype(np.float32) * 0.1, "W1"),
             numpy_helper.from_array(gen.standard_normal((16, 128)).astype(np.float32) * 0.1, "W2")]
    if decomposed:
        inits += [numpy_helper.from_array(np.array(2.0, np.float32), "two"),
                  numpy_helper.from_array(np.array(1e-5, np.float32), "eps")]
        norm = [helper.make_node("ReduceMean", ["x"], ["mu"], axes=[-1], name="mean"),
                helper.make_node("Sub", ["x", "mu"], ["d"], name="sub"),
                helper.make_node("Pow", ["d", "two"], ["d2"], name="pow"),
                helper.make_node("ReduceMean", ["d2"], ["var"], axes=[-1], name="var"),
                helper.make_node("Add", ["var", "eps"], ["ve"], name="add_eps"),
                helper.make_node("Sqrt", ["ve"], ["sd"], name="sqrt"),
                helper.make_node("Div", ["d", "sd"], ["n"], name="div"),
                helper.make_node("Mul", ["n", "gamma"], ["ng"], name="mul_gamma"),
                helper.make_node("Add", ["ng", "beta"], ["h"], name="add_beta")]
    else:
        norm = [helper.make_node("LayerNormalization", ["x", "gamma", "beta"], ["h"], name="ln", axis=-1)]
    nodes = norm + [helper.make_node("MatMul", ["h", "W1"], ["a"], name="mm1"),
                    helper.make_node("Relu", ["a"], ["r"], name="relu"),
                    helper.make_node("Gemm", ["r", "W2"], ["y"], name="gemm2", transB=1)]
    graph = helper.make_graph(nodes, "normed", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 16])], inits)
    onnx.checker.check_model(str(save_graph(graph, path, ir_version=9)))
    return path


@pytest.mark.parametrize("decomposed", [False, True])
def test_only_normalization_outputs_are_smoothed_by_default(tmp_path, decomposed):
    """The paper's code smooths LayerNorm -> linear only; activations=all smooths every MatMul input."""
    path = norm_model(tmp_path / "m.onnx", decomposed)
    held = feeds(3, seed=7)
    reference = run(path, held)
    normed = onnxlite.quantize(path, tmp_path / "n.onnx", strategy="smoothquant", calibration=feeds(4), alpha=0.5)
    every = onnxlite.quantize(path, tmp_path / "a.onnx", strategy="smoothquant", calibration=feeds(4), alpha=0.5,
                              activations="all")
    assert normed.details["smoothed_activations"] == 1 and normed.details["smoothed_inputs"] == "normalization outputs"
    assert every.details["smoothed_activations"] == 2
    assert any("(normalization outputs)" in n for n in normed.notes)
    muls = [n for n in onnx.load(str(normed.path)).graph.node if n.name.endswith("SmoothQuant_Mul")]
    assert [m.input[0] for m in muls] == ["h"]
    dynamic = onnxlite.quantize(path, tmp_path / "d.onnx", strategy="dynamic")
    assert relative_error(reference, run(normed.path, held)) < 0.5 * relative_error(reference, run(dynamic.path, held))


def test_without_a_normalization_output_every_input_is_smoothed_and_said(tmp_path):
    path = outlier_model(tmp_path / "m.onnx")
    result = onnxlite.quantize(path, tmp_path / "sq.onnx", strategy="smoothquant", calibration=feeds(2))
    assert result.details["smoothed_activations"] == 2
    assert "no normalization output feeds one" in result.details["smoothed_inputs"]
