"""normalize: Paddle2ONNX-style graphs (Constant weights, opset 12) made quantizable, and what was done said.

The model is built here the way Paddle2ONNX writes PP-OCR: every weight a
``Constant`` node, no initializer, opset 12.  onnxruntime's own quantizers are
the judges: they fail on the graph as written and work on the normalised one.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxlite.normalize import count_constant_tensors, default_opset, normalize

pytest.importorskip("onnx_ir")   # the lifting pass; comes with onnxscript (the torch extra)


def _constant(name, array):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(array, name))


def _paddle_style(opset: int = 12) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    nodes = [
        _constant("conv.w_0", rng.standard_normal((8, 3, 3, 3)).astype(np.float32)),
        _constant("conv.b_0", rng.standard_normal(8).astype(np.float32)),   # fewer than 16 values
        helper.make_node("Conv", ["x", "conv.w_0", "conv.b_0"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("ReduceMean", ["r"], ["pooled"], axes=[2, 3], keepdims=0),
        _constant("fc.w_0", rng.standard_normal((8, 5)).astype(np.float32)),
        helper.make_node("MatMul", ["pooled", "fc.w_0"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "paddle", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 5])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="PaddlePaddle")
    model.ir_version = 7
    onnx.checker.check_model(model)
    return model


def _run(model, x):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def _x(batch=3, seed=1):
    return np.random.default_rng(seed).standard_normal((batch, 3, 8, 8)).astype(np.float32)


def test_lifts_constants_raises_opset_and_keeps_the_numbers():
    model = _paddle_style()
    original = model.SerializeToString()
    result = normalize(model)
    assert model.SerializeToString() == original, "the input model must not be modified"
    assert result.lifted_constants == 3 and count_constant_tensors(result.model) == 0
    assert {i.name for i in result.model.graph.initializer} >= {"conv.w_0", "conv.b_0", "fc.w_0"}
    assert (result.opset_before, result.opset_after, default_opset(result.model)) == (12, 13, 13)
    assert result.per_channel_ok and result.changed
    assert "3 Constant tensor(s) lifted" in result.summary() and "opset 12 raised to 13" in result.summary()
    onnx.checker.check_model(result.model, full_check=True)
    for batch in (1, 4):
        np.testing.assert_array_equal(_run(result.model, _x(batch)), _run(model, _x(batch)))


def test_onnxruntime_quantizers_fail_on_the_paddle_graph_and_work_after(tmp_path):
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )

    model = _paddle_style()
    shipped, fixed = tmp_path / "shipped.onnx", tmp_path / "fixed.onnx"
    onnx.save(model, shipped)
    onnx.save(normalize(model).model, fixed)

    with pytest.raises(ValueError, match="to be an initializer"):   # what plain onnxruntime says on PP-OCR
        quantize_dynamic(str(shipped), str(tmp_path / "shipped_int8.onnx"), weight_type=QuantType.QInt8)
    quantize_dynamic(str(fixed), str(tmp_path / "dynamic.onnx"), weight_type=QuantType.QInt8)
    dynamic = onnx.load(str(tmp_path / "dynamic.onnx"))
    assert any(i.data_type == TensorProto.INT8 for i in dynamic.graph.initializer)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.items = iter([{"x": _x(4, seed)} for seed in range(4)])

        def get_next(self):
            return next(self.items, None)

    quantize_static(str(fixed), str(tmp_path / "qdq.onnx"), Reader(), quant_format=QuantFormat.QDQ, per_channel=True)
    qdq = onnx.load(str(tmp_path / "qdq.onnx"))
    per_channel = [n for n in qdq.graph.node if n.op_type == "DequantizeLinear"
                   and any(a.name == "axis" for a in n.attribute)]
    assert per_channel, "per-channel weights need DequantizeLinear's axis (opset 13)"
    x = _x(5, seed=9)
    reference = _run(model, x)
    for quantized in (dynamic, qdq):
        got = _run(quantized, x)
        assert np.abs(got - reference).max() < 0.1 * np.abs(reference).max()


def test_the_opset_raise_is_what_makes_per_channel_qdq_loadable(tmp_path):
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

    lifted_only = normalize(_paddle_style(), min_opset=None)
    assert lifted_only.opset_after == 12 and not lifted_only.per_channel_ok
    onnx.save(lifted_only.model, tmp_path / "opset12.onnx")

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.items = iter([{"x": _x(2, 3)}])

        def get_next(self):
            return next(self.items, None)

    quantize_static(str(tmp_path / "opset12.onnx"), str(tmp_path / "qdq12.onnx"), Reader(),
                    quant_format=QuantFormat.QDQ, per_channel=True)
    with pytest.raises(Exception, match="axis"):
        ort.InferenceSession(str(tmp_path / "qdq12.onnx"), providers=["CPUExecutionProvider"])


def test_converter_failure_keeps_the_opset_and_says_per_tensor(monkeypatch):
    # onnx's converter handles every op of these graphs; a failing adapter is simulated to test the fallback.
    from onnx import version_converter

    def refuse(model, target):
        raise RuntimeError("No Adapter For Current Version $12 for Foo")

    monkeypatch.setattr(version_converter, "convert_version", refuse)
    result = normalize(_paddle_style())
    assert result.opset_after == 12 and not result.per_channel_ok
    assert result.lifted_constants == 3       # lifting does not depend on the opset
    assert "opset 12 kept" in result.summary() and "No Adapter" in result.summary()
    assert "quantize per tensor" in result.summary()


def test_a_modern_graph_is_left_alone():
    fixed = normalize(_paddle_style(opset=17))
    again = normalize(fixed.model)
    assert not again.changed and again.summary() == "" and again.per_channel_ok
    assert again.model.SerializeToString() == fixed.model.SerializeToString()
