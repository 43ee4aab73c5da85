"""slow_fusions: a quantized transformer block keeps Add + LayerNormalization apart, as its float source does.

onnxruntime is the judge: the optimized graph it would run (``optimized_model_filepath``) is read back
and its operators counted.  The block is a residual ``MatMul -> Add(bias) -> Add(x) -> LayerNormalization``,
the shape every BERT layer ends with.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxlite
from onnxlite import quantize
from onnxlite.slow_fusions import unblock

WIDTH = 64


def _block(layers: int = 2) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    nodes, inits, prev = [], [], "x"
    for i in range(layers):
        inits += [numpy_helper.from_array((rng.standard_normal((WIDTH, WIDTH)) * 0.2).astype(np.float32), f"w{i}"),
                  numpy_helper.from_array(rng.standard_normal(WIDTH).astype(np.float32), f"b{i}"),
                  numpy_helper.from_array((1 + 0.1 * rng.standard_normal(WIDTH)).astype(np.float32), f"g{i}"),
                  numpy_helper.from_array((0.1 * rng.standard_normal(WIDTH)).astype(np.float32), f"beta{i}")]
        nodes += [helper.make_node("MatMul", [prev, f"w{i}"], [f"mm{i}"]),
                  helper.make_node("Add", [f"mm{i}", f"b{i}"], [f"biased{i}"]),
                  helper.make_node("Add", [f"biased{i}", prev], [f"res{i}"]),
                  helper.make_node("LayerNormalization", [f"res{i}", f"g{i}", f"beta{i}"], [f"ln{i}"], axis=-1)]
        prev = f"ln{i}"
    graph = helper.make_graph(nodes, "block",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, None, WIDTH])],
                              [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [None, None, WIDTH])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _fused_ops(path, tmp_path) -> Counter:
    options = ort.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return Counter(node.op_type for node in onnx.load(str(tmp_path / "optimized.onnx")).graph.node)


def _run(path, x, level=ort.GraphOptimizationLevel.ORT_DISABLE_ALL):
    options = ort.SessionOptions()
    options.graph_optimization_level = level
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def test_quantized_block_runs_unfused_like_its_float_source_with_the_same_answers(tmp_path):
    from onnxruntime.quantization import QuantType, quantize_dynamic

    source = tmp_path / "block.onnx"
    onnx.save(_block(), str(source))
    assert _fused_ops(source, tmp_path)["SkipLayerNormalization"] == 0   # nothing proves the Add's shapes alike

    # onnxruntime's quantizer as it comes: its shape inference lets onnxruntime fuse the residual Adds
    raw = tmp_path / "raw.onnx"
    quantize_dynamic(str(source), str(raw), weight_type=QuantType.QInt8, per_channel=True)
    assert _fused_ops(raw, tmp_path)["SkipLayerNormalization"] > 0, "the cause this module exists for"

    result = quantize(source, tmp_path / "dynamic.onnx", "dynamic", per_channel=True)
    ops = _fused_ops(result.path, tmp_path)
    assert ops["SkipLayerNormalization"] == 0 and ops["LayerNormalization"] == 2
    assert result.details["dropped_value_info"] > 0
    # the same graph, only fewer annotations: identical answers where nothing is fused, at a batch above 1
    x = np.random.default_rng(1).standard_normal((5, 7, WIDTH)).astype(np.float32)
    np.testing.assert_array_equal(_run(result.path, x), _run(raw, x))
    fused = _run(raw, x, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    np.testing.assert_allclose(_run(result.path, x, ort.GraphOptimizationLevel.ORT_ENABLE_ALL), fused, atol=1e-4)


@pytest.mark.unit
def test_only_graphs_with_a_residual_norm_lose_their_annotations():
    block = onnx.shape_inference.infer_shapes(_block(1))
    assert len(block.graph.value_info) == 3
    assert unblock(block) == 3 and len(block.graph.value_info) == 0
    assert unblock(block) == 0

    # a conv net has no Add before a norm: its annotations stay
    conv = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Relu", ["c"], ["r"]),
         helper.make_node("Add", ["r", "x"], ["y"])], "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4, 6, 6])],
        [numpy_helper.from_array(np.ones((4, 4, 1, 1), np.float32), "w")])
    model = onnx.shape_inference.infer_shapes(helper.make_model(conv, opset_imports=[helper.make_opsetid("", 17)]))
    before = len(model.graph.value_info)
    assert before == 2 and unblock(model) == 0 and len(model.graph.value_info) == before


def test_export_drops_the_annotations_an_exporter_left(tmp_path):
    # what the dynamo and tf2onnx exporters write: every intermediate tensor annotated, with shared symbols
    model = _block()
    model.graph.value_info.extend(helper.make_tensor_value_info(name, TensorProto.FLOAT, ["b", "s", WIDTH])
                                  for node in model.graph.node for name in node.output)
    annotated = tmp_path / "annotated.onnx"
    onnx.save(model, str(annotated))
    assert _fused_ops(annotated, tmp_path)["SkipLayerNormalization"] > 0

    result = onnxlite.export(str(annotated), tmp_path / "exported.onnx")
    assert result.verified and any("SkipLayerNormalization" in note for note in result.notes)
    assert _fused_ops(result.path, tmp_path)["SkipLayerNormalization"] == 0
    assert onnx.load(str(annotated)).SerializeToString() == model.SerializeToString(), "the input is untouched"
