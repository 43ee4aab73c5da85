"""``pack_qkv``: the MatMuls that read one activation become one wider MatMul, same outputs, fewer int8 nodes;
and benchmarks/int8_profile.py, which times such graphs per op type."""

from __future__ import annotations

import collections
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxlite

from conftest import U8U8, save_graph
from helpers import load_script

HIDDEN = 16


def attention_like(path: Path) -> Path:
    """x -> LayerNorm -> Q, K, V (MatMul + bias each) -> q*k + v, plus the residual x: the activation the
    three projections share is also read by an op that is not a MatMul."""
    rng = np.random.default_rng(0)

    def init(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array((rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32), name)

    inits = [numpy_helper.from_array(np.ones(HIDDEN, np.float32), "g"),
             numpy_helper.from_array(np.zeros(HIDDEN, np.float32), "b")]
    nodes = [helper.make_node("LayerNormalization", ["x", "g", "b"], ["h"], name="ln", axis=-1)]
    for p in "qkv":
        inits += [init(f"{p}_w", HIDDEN, HIDDEN), init(f"{p}_b", HIDDEN)]
        nodes += [helper.make_node("MatMul", ["h", f"{p}_w"], [f"{p}_mm"], name=f"{p}_proj"),
                  helper.make_node("Add", [f"{p}_mm", f"{p}_b"], [p], name=f"{p}_bias")]
    inits.append(init("o_w", HIDDEN, HIDDEN))
    nodes += [helper.make_node("Mul", ["q", "k"], ["qk"], name="mix"),
              helper.make_node("Add", ["qk", "v"], ["a"], name="add_v"),
              helper.make_node("MatMul", ["a", "o_w"], ["o"], name="out_proj"),
              helper.make_node("Add", ["o", "x"], ["y"], name="residual")]
    dims = ["batch", "sequence", HIDDEN]
    graph = helper.make_graph(nodes, "attention_like", [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)], inits)
    return save_graph(graph, path)


def run(path: Path, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def ops_run(path: Path, folder: Path) -> collections.Counter[str]:
    """The op types onnxruntime runs for ``path`` at its default optimisation (after its int8 fusions)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.optimized_model_filepath = str(folder / f"{path.stem}.optimized.onnx")
    ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return collections.Counter(n.op_type for n in onnx.load(options.optimized_model_filepath).graph.node)


def ops_in(path: Path) -> collections.Counter[str]:
    return collections.Counter(n.op_type for n in onnx.load(str(path)).graph.node)


X = np.random.default_rng(1).standard_normal((3, 5, HIDDEN)).astype(np.float32)   # batch 3


@pytest.mark.unit
def test_packing_the_float_graph_keeps_its_outputs(tmp_path):
    from onnxlite_plugins.quantizers.packing import pack_groups

    model = attention_like(tmp_path / "a.onnx")
    proto = onnx.load(str(model))
    assert pack_groups(proto) == [["q_proj", "k_proj", "v_proj"]]
    packed = tmp_path / "packed.onnx"
    onnx.save(proto, str(packed))
    onnx.checker.check_model(proto)
    counts = ops_in(packed)
    assert (counts["MatMul"], counts["Split"], counts["Add"]) == (2, 1, 3)   # QKV + out_proj; one bias Add
    np.testing.assert_allclose(run(packed, X), run(model, X), rtol=1e-5, atol=1e-5)
    # a member kept in float leaves its group as it was
    again = onnx.load(str(model))
    assert pack_groups(again, keep_float={"k_proj"}) == [["q_proj", "v_proj"]]
    assert collections.Counter(n.op_type for n in again.graph.node)["MatMul"] == 3   # q+v packed, k, out_proj


@pytest.mark.unit
def test_pack_qkv_is_one_int8_matmul_with_the_same_answers(tmp_path):
    """U8U8 (saturation-free) dynamic int8 with and without pack_qkv: per-channel weight scales and the one
    activation scale are the same either way, so the answers match; the packed one runs one quantize+MatMul
    (fused into DynamicQuantizeMatMul) where the plain one runs a shared DynamicQuantizeLinear and three."""
    model = attention_like(tmp_path / "a.onnx")
    before = model.read_bytes()
    plain = onnxlite.quantize(model, tmp_path / "plain.onnx", "dynamic", **U8U8).path
    packed = onnxlite.quantize(model, tmp_path / "packed.onnx", "dynamic", pack_qkv=True, **U8U8).path
    assert model.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == [
        "a.onnx", "packed.onnx", "plain.onnx"]   # the packed copy lived in a scratch folder, now gone
    in_plain, in_packed = ops_in(Path(plain)), ops_in(Path(packed))
    assert (in_plain["DynamicQuantizeLinear"], in_plain["MatMulInteger"]) == (2, 4)
    assert (in_packed["DynamicQuantizeLinear"], in_packed["MatMulInteger"], in_packed["Split"]) == (2, 2, 1)
    ran_plain, ran_packed = ops_run(Path(plain), tmp_path), ops_run(Path(packed), tmp_path)
    assert (ran_plain["DynamicQuantizeLinear"], ran_plain["MatMulIntegerToFloat"],
            ran_plain["DynamicQuantizeMatMul"]) == (1, 3, 1)
    assert (ran_packed["DynamicQuantizeLinear"], ran_packed["MatMulIntegerToFloat"],
            ran_packed["DynamicQuantizeMatMul"], ran_packed["MatMul"]) == (0, 0, 2, 0)
    np.testing.assert_allclose(run(Path(packed), X), run(Path(plain), X), rtol=1e-4, atol=1e-4)


@pytest.mark.unit
def test_the_int8_profile_splits_each_models_time_by_op_type(tmp_path):
    profile = load_script("benchmarks/int8_profile.py")
    model = attention_like(tmp_path / "a.onnx")
    found = profile.profile(str(model), ["u8u8", "u8u8_packed"], batch=4, seq=8, threads=1, runs=3,
                            work=tmp_path)
    assert set(found["ops_ms"]) == set(found["wall_ms"]) == {"fp32", "u8u8", "u8u8_packed"}
    for name, ops in found["ops_ms"].items():
        share = profile.shares(ops)
        assert sum(share.values()) == pytest.approx(1.0) and all(v > 0 for v in share.values()), (name, ops)
        assert sum(ops.values()) < 3 * found["wall_ms"][name] + 1.0   # per run, not summed over the runs
    assert "MatMul" in found["ops_ms"]["fp32"] and "DynamicQuantizeMatMul" in found["ops_ms"]["u8u8_packed"]
    assert "MatMulIntegerToFloat" in found["ops_ms"]["u8u8"]
    # the model's own shapes (4 of 16 x 16), then the packed QKV's that u8u8_packed runs
    assert [(m["m"], m["k"], m["n"], m["count"]) for m in found["matmuls"]] == [(32, HIDDEN, HIDDEN, 4),
                                                                                (32, HIDDEN, 3 * HIDDEN, 1)]
    assert set(found["matmuls"][0]["ratio"]) == {"u8u8", "u8u8_packed"} and found["ratio"]["u8u8"] > 0
