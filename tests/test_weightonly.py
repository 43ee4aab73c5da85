"""The ``weightonly`` / ``gptq`` / ``int4`` strategies: onnxruntime's MatMulNBits, composed.

A tiny embedding model is built with onnx.helper in the test: ids -> Gather of
a constant table -> MatMul -> Relu -> MatMul.  Every quantized model is run
against the float one on a batch of several rows.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxlite
from onnxlite.errors import UsageError
from onnxlite.modelio import external_data_files

from conftest import run_cli, save_graph

VOCAB, HIDDEN, INNER = 256, 64, 128


def make_embedder(path: Path, seed: int = 0, external: bool = False) -> Path:
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(rng.standard_normal((VOCAB, HIDDEN)).astype(np.float32), "table"),
             numpy_helper.from_array((rng.standard_normal((HIDDEN, INNER)) * 0.2).astype(np.float32), "w1"),
             numpy_helper.from_array((rng.standard_normal((INNER, HIDDEN)) * 0.2).astype(np.float32), "w2")]
    nodes = [helper.make_node("Gather", ["table", "ids"], ["e"], name="embed"),
             helper.make_node("MatMul", ["e", "w1"], ["h"], name="fc1"),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("MatMul", ["r", "w2"], ["y"], name="fc2")]
    graph = helper.make_graph(nodes, "embedder",
                              [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", HIDDEN])],
                              inits)
    save_graph(graph, path, external=external)
    return path


@pytest.fixture(scope="module")
def embedder(tmp_path_factory) -> Path:
    return make_embedder(tmp_path_factory.mktemp("weightonly") / "embedder.onnx")


IDS = np.random.default_rng(3).integers(0, VOCAB, size=(4, 9)).astype(np.int64)


def run(path: Path, ids: np.ndarray = IDS) -> np.ndarray:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"ids": ids})[0]


def min_cosine(ref: np.ndarray, got: np.ndarray) -> float:
    a, b = ref.reshape(-1, ref.shape[-1]), got.reshape(-1, got.shape[-1])
    return float(((a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)).min())


def node_attrs(path: Path, op_type: str) -> list[dict]:
    return [{a.name: helper.get_attribute_value(a) for a in n.attribute}
            for n in onnx.load(str(path)).graph.node if n.op_type == op_type]


HAS_TORCH = importlib.util.find_spec("torch") is not None


@pytest.mark.parametrize("bits,algorithm,floor", [
    (8, "rtn", 0.999), (4, "rtn", 0.98), (8, "kquant", 0.999),
    pytest.param(4, "hqq", 0.98, marks=pytest.mark.skipif(not HAS_TORCH, reason="onnxruntime's HQQ runs on torch")),
])
def test_bits_and_algorithms(embedder, tmp_path, bits, algorithm, floor):
    ref = run(embedder)
    result = onnxlite.quantize(embedder, tmp_path / "q.onnx", strategy="weightonly", bits=bits, algorithm=algorithm,
                               block_size=32)
    assert result.quantized_ops == {"MatMulNBits": 2}
    assert {a["bits"] for a in node_attrs(result.path, "MatMulNBits")} == {bits}
    assert {a["block_size"] for a in node_attrs(result.path, "MatMulNBits")} == {32}
    assert result.details["algorithm"] == algorithm and result.details["bits"] == bits
    assert result.details["quantized_matmuls"] == 2 and result.details["gather"] == "float"
    assert min_cosine(ref, run(result.path)) > floor
    assert result.details["check"]["ran"]


def test_four_bits_are_smaller_and_less_exact_than_eight(embedder, tmp_path):
    ref = run(embedder)
    eight = onnxlite.quantize(embedder, tmp_path / "8.onnx", strategy="weightonly", bits=8, accuracy_level=0)
    four = onnxlite.quantize(embedder, tmp_path / "4.onnx", strategy="weightonly", bits=4, accuracy_level=0)
    assert four.size_after < eight.size_after < eight.size_before
    assert min_cosine(ref, run(four.path)) < min_cosine(ref, run(eight.path))


@pytest.mark.parametrize("gather,op", [("int8", "DequantizeLinear"), ("int4", "GatherBlockQuantized")])
def test_gather_quantization_shrinks_the_embedding_table(embedder, tmp_path, gather, op):
    ref = run(embedder)
    plain = onnxlite.quantize(embedder, tmp_path / "plain.onnx", strategy="weightonly")
    packed = onnxlite.quantize(embedder, tmp_path / "packed.onnx", strategy="weightonly", gather=gather)
    assert packed.quantized_ops.get(op) == 1 and packed.quantized_ops["MatMulNBits"] == 2
    assert not any(n.op_type == "Gather" for n in onnx.load(str(packed.path)).graph.node
                   if n.input[0] == "table")   # the float table is gone
    table_bytes = VOCAB * HIDDEN * 4
    # int8 keeps a quarter of the table's bytes, int4 an eighth plus its block scales
    assert plain.size_after - packed.size_after > table_bytes * (0.7 if gather == "int8" else 0.8)
    assert packed.details["gather"] == gather and packed.details["quantized_tables"] == 1
    assert min_cosine(ref, run(packed.path)) > 0.99
    # the table could be kept float by name like any other node
    kept = onnxlite.quantize(embedder, tmp_path / "kept.onnx", strategy="weightonly", gather=gather, exclude="embed")
    assert kept.quantized_ops.get(op, 0) == 0
    assert kept.excluded_nodes == ["embed"] and kept.details["quantized_tables"] == 0


def test_external_data_in_external_data_out(tmp_path):
    (tmp_path / "in").mkdir()
    source = make_embedder(tmp_path / "in" / "ext.onnx", external=True)
    before = {p.name: p.stat().st_mtime_ns for p in source.parent.iterdir()}
    ref = run(source)
    result = onnxlite.quantize(source, tmp_path / "out" / "q.onnx", strategy="weightonly", gather="int8")
    assert external_data_files(result.path) and result.quantized_ops["MatMulNBits"] == 2
    assert min_cosine(ref, run(result.path)) > 0.99
    assert {p.name: p.stat().st_mtime_ns for p in source.parent.iterdir()} == before   # nothing written beside it


def test_accuracy_level_is_recorded(embedder, tmp_path):
    fast = onnxlite.quantize(embedder, tmp_path / "a4.onnx", strategy="weightonly")
    assert fast.options["accuracy_level"] == 4 and fast.details["accuracy_level"] == 4
    assert [a["accuracy_level"] for a in node_attrs(fast.path, "MatMulNBits")] == [4, 4]
    assert any("accuracy_level 4" in n for n in fast.notes)
    unset = onnxlite.quantize(embedder, tmp_path / "a0.onnx", strategy="weightonly", accuracy_level=0)
    assert unset.details["accuracy_level"] == 0
    assert all("accuracy_level" not in a for a in node_attrs(unset.path, "MatMulNBits"))


def test_exclude_keeps_a_matmul_float(embedder, tmp_path):
    result = onnxlite.quantize(embedder, tmp_path / "x.onnx", strategy="weightonly", exclude="fc2")
    assert result.quantized_ops == {"MatMulNBits": 1} and result.excluded_nodes == ["fc2"]
    assert any(n.op_type == "MatMul" and n.name == "fc2" for n in onnx.load(str(result.path)).graph.node)
    with pytest.raises(UsageError, match="exclude=fc9: matches no MatMul"):
        onnxlite.quantize(embedder, tmp_path / "y.onnx", strategy="weightonly", exclude="fc9")


@pytest.mark.parametrize("options,message", [
    ({"bits": 3}, "bits=3: expected 4 or 8"),
    ({"block_size": 48}, "block_size=48: must be a power of two"),
    ({"accuracy_level": 7}, "accuracy_level=7: expected 0"),
    ({"gather": "int2"}, "gather=int2: expected one of float, int8, int4"),
    ({"bits": 8, "algorithm": "hqq"}, "HQQ stores float zero points"),
])
def test_bad_options_are_one_usage_error(embedder, tmp_path, options, message):
    with pytest.raises(UsageError, match=message):
        onnxlite.quantize(embedder, tmp_path / "bad.onnx", strategy="weightonly", **options)
    assert not (tmp_path / "bad.onnx").exists()


def test_bad_bits_on_the_command_line(embedder, tmp_path):
    proc = run_cli("quantize", str(embedder), "-o", str(tmp_path / "o.onnx"), "--strategy", "weightonly",
                   "--option", "bits=3")
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "bits=3: expected 4 or 8" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "o.onnx").exists()


def test_gptq_uses_the_calibration_data(embedder, tmp_path):
    ref = run(embedder)
    rng = np.random.default_rng(7)
    feeds = [{"ids": rng.integers(0, VOCAB, size=(1, 9)).astype(np.int64)} for _ in range(6)]
    with pytest.raises(UsageError, match="gptq needs calibration data"):
        onnxlite.quantize(embedder, tmp_path / "none.onnx", strategy="gptq")
    result = onnxlite.quantize(embedder, tmp_path / "g.onnx", strategy="gptq", calibration=feeds, block_size=32,
                               calibration_samples=4)
    assert result.quantized_ops == {"MatMulNBits": 2}
    assert {a["bits"] for a in node_attrs(result.path, "MatMulNBits")} == {4}
    assert result.details["algorithm"] == "gptq" and result.details["calibration_samples"] == 4
    assert min_cosine(ref, run(result.path)) > 0.98
    spec = onnxlite.get_registry().get("quantizer", "gptq").spec
    assert spec.needs_calibration and not onnxlite.get_registry().get("quantizer", "weightonly").spec.needs_calibration


def test_int4_is_the_four_bit_preset(embedder, tmp_path):
    spec = onnxlite.get_registry().get("quantizer", "int4").spec
    assert spec.option("bits") is None and spec.option("block_size").default == 32
    result = onnxlite.quantize(embedder, tmp_path / "i4.onnx", strategy="int4")
    assert {a["bits"] for a in node_attrs(result.path, "MatMulNBits")} == {4}
    assert result.details["symmetric"] is True


def test_search_grid_and_skip_reason(embedder, tmp_path):
    from onnxlite.search.candidates import build_candidates

    found, _ = build_candidates(embedder, strategies=["weightonly"], has_calibration=False)
    grid = [c.options for c in found]
    assert {} in grid and {"gather": "int8"} in grid and any(o.get("bits") == 4 for o in grid)
    # gptq is slow: a search tries it only when named
    found, skipped = build_candidates(embedder, has_calibration=True)
    assert "gptq" not in {c.strategy for c in found} and "weightonly" in {c.strategy for c in found}
    assert "name it in --strategies" in {s.strategy: s.reason for s in skipped}["gptq"]
    found, _ = build_candidates(embedder, strategies=["gptq"], has_calibration=True)
    assert [c.strategy for c in found] == ["gptq"]
    # a model whose only linear layer is a Gemm gives MatMulNBits nothing: skipped with the reason
    w = numpy_helper.from_array(np.ones((64, 64), np.float32), "w")
    graph = helper.make_graph([helper.make_node("Gemm", ["x", "w"], ["y"], name="linear")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 64])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    _, skipped = build_candidates(model, has_calibration=True)
    reasons = {s.strategy: s.reason for s in skipped}
    assert reasons["weightonly"].startswith("nothing to quantize: 1 Gemm node(s)")
    assert reasons["gptq"].startswith("nothing to quantize")


def _feeds(count: int = 6) -> list[dict]:
    rng = np.random.default_rng(7)
    return [{"ids": rng.integers(0, VOCAB, size=(1, 9)).astype(np.int64)} for _ in range(count)]


def test_gptq_exclude_and_keep8_keep_their_nodes_out_of_gptq(embedder, tmp_path):
    # onnxruntime's MatMulNBitsQuantizer drops nodes_to_exclude on its GPTQ path: both came out 4-bit GPTQ
    weight = onnx.numpy_helper.to_array(next(i for i in onnx.load(str(embedder)).graph.initializer if i.name == "w2"))
    result = onnxlite.quantize(embedder, tmp_path / "x.onnx", strategy="gptq", calibration=_feeds(), exclude="fc2",
                               calibration_samples=4)
    assert result.quantized_ops == {"MatMulNBits": 1} and result.excluded_nodes == ["fc2"]
    out = onnx.load(str(result.path))
    kept = next(n for n in out.graph.node if n.name == "fc2")
    assert kept.op_type == "MatMul"
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in out.graph.initializer}
    np.testing.assert_array_equal(inits[kept.input[1]], weight)
    result = onnxlite.quantize(embedder, tmp_path / "k.onnx", strategy="gptq", calibration=_feeds(), keep8="fc2",
                               calibration_samples=4)
    bits = {n.name: {a.name: helper.get_attribute_value(a) for a in n.attribute}["bits"]
            for n in onnx.load(str(result.path)).graph.node if n.op_type == "MatMulNBits"}
    assert sorted(bits.values()) == [4, 8] and bits[next(n for n in bits if n.startswith("fc2"))] == 8


def test_gptq_names_unnamed_nodes_so_exclusions_find_them(tmp_path):
    model = onnx.load(str(make_embedder(tmp_path / "named.onnx")))
    for node in model.graph.node:
        node.name = ""
    onnx.save(model, str(tmp_path / "unnamed.onnx"))
    ref = run(tmp_path / "unnamed.onnx")
    done = onnxlite.quantize(tmp_path / "unnamed.onnx", tmp_path / "all.onnx", strategy="gptq",
                             calibration=_feeds(), calibration_samples=4)
    assert done.quantized_ops == {"MatMulNBits": 2} and min_cosine(ref, run(done.path)) > 0.98
    # the second MatMul is the graph's fourth node
    done = onnxlite.quantize(tmp_path / "unnamed.onnx", tmp_path / "one.onnx", strategy="gptq",
                             calibration=_feeds(), calibration_samples=4, exclude="MatMul_3")
    nodes = onnx.load(str(done.path)).graph.node
    assert done.quantized_ops == {"MatMulNBits": 1} and [n.op_type for n in nodes].count("MatMul") == 1
    assert next(n for n in nodes if n.op_type == "MatMul").name == "MatMul_3"
    assert min_cosine(ref, run(done.path)) > 0.98
