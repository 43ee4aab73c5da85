"""quantize's smoke check (quantization/smoke.py), built on export verification's comparison: what it refuses
and what it lets through, on tiny models built here."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from onnxlite.errors import VerificationError  # noqa: E402
from onnxlite.quantization.smoke import smoke_check  # noqa: E402

from conftest import save_graph  # noqa: E402

SPEC = SimpleNamespace(name="probe", gpu_only_gain=False)


def _model(path, weight, *, out_shape=("batch", 4), extra=(), outputs=("y",), log_input=False):
    """x[batch, 4] @ w -> y (and, with ``extra``, the nodes given); ``log_input`` takes Log(x) first."""
    nodes = [helper.make_node("Log", ["x"], ["lx"])] if log_input else []
    nodes += [helper.make_node("MatMul", ["lx" if log_input else "x", "w"], ["y"]), *extra]
    infos = [helper.make_tensor_value_info(name, TensorProto.FLOAT, list(out_shape)) for name in outputs]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
                              infos, [numpy_helper.from_array(weight.astype(np.float32), "w")])
    save_graph(graph, path, ir_version=onnx.IR_VERSION)
    return path


@pytest.fixture
def weight():
    return np.random.default_rng(0).standard_normal((4, 4))


def test_a_close_copy_passes_with_its_cosines(tmp_path, weight):
    source = _model(tmp_path / "a.onnx", weight)
    produced = _model(tmp_path / "b.onnx", np.round(weight, 1))   # a coarser weight, as a quantizer writes
    result = smoke_check(source, produced, SPEC, warn=print)
    assert result["ran"] and result["batch"] == 2
    cosine = result["outputs"]["y"]
    assert 0.9 < cosine["cosine_min"] <= cosine["cosine_mean"] < 1.0


def test_a_lost_output_is_refused(tmp_path, weight):
    source = _model(tmp_path / "a.onnx", weight, extra=[helper.make_node("Relu", ["y"], ["z"])], outputs=("y", "z"))
    produced = _model(tmp_path / "b.onnx", weight, extra=[helper.make_node("Relu", ["y"], ["r"])], outputs=("y", "r"))
    with pytest.raises(VerificationError, match="lost output 'z'"):
        smoke_check(source, produced, SPEC, warn=print)


def test_a_changed_shape_is_refused(tmp_path, weight):
    source = _model(tmp_path / "a.onnx", weight, extra=[helper.make_node("Relu", ["y"], ["z"])], outputs=("z",))
    flatten = [helper.make_node("Flatten", ["y"], ["z"], axis=0)]
    produced = _model(tmp_path / "b.onnx", weight, extra=flatten, outputs=("z",), out_shape=(1, "n"))
    with pytest.raises(VerificationError, match=r"broke output 'z': shape \[1, 8\], expected \[2, 4\]"):
        smoke_check(source, produced, SPEC, warn=print)


def test_nan_the_input_model_does_not_produce_is_refused_and_nan_it_does_is_not(tmp_path, weight):
    source = _model(tmp_path / "a.onnx", weight)
    broken = weight.copy()
    broken[0, 0] = np.nan
    with pytest.raises(VerificationError, match="broke output 'y': non-finite"):
        smoke_check(source, _model(tmp_path / "b.onnx", broken), SPEC, warn=print)
    # Log of the generated batch's negative values is NaN in the input model too: not the strategy's doing
    import onnxruntime as ort

    from onnxlite.quantization.smoke import sample_feeds

    log_source = _model(tmp_path / "c.onnx", weight, log_input=True)
    session = ort.InferenceSession(str(log_source), providers=["CPUExecutionProvider"])
    assert np.isnan(session.run(None, sample_feeds(onnx.load(str(log_source))))[0]).any()
    result = smoke_check(log_source, _model(tmp_path / "d.onnx", np.round(weight, 1), log_input=True), SPEC,
                         warn=print)
    assert result["ran"] and "y" in result["outputs"]
