"""Builders several test modules share (no test module imports another): tiny ONNX graphs with one trait
each, the data they need, and the browser the HTML report is rendered in.

``tests/export_models.py`` is a helper module too, not a test module: it holds the tiny PyTorch models the
export tests name as ``file.py:name`` sources, so it must stay a plain file that a subprocess can load.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import ROOT, save_graph

#: the width of fragile_model's square layers
FRAGILE_WIDTH = 128


def streaming_model(path: Path) -> Path:
    """A streaming model's inputs: x[batch, 16], a state [2, batch, 8] batched on axis 1, a scalar sr.

    The state's update adds a projection of x, so the two must hold the same samples: a batch cut on
    axis 0 of the state (its 2) fails in onnxruntime instead of passing unnoticed.
    """
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((16, 4)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32), "w2"),
             numpy_helper.from_array(np.array([0], np.int64), "axis0"),
             numpy_helper.from_array(np.zeros((), np.float32), "zero")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]),
             helper.make_node("Cast", ["sr"], ["srf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["srf", "zero"], ["z"]),
             helper.make_node("Add", ["m", "z"], ["y"]),
             helper.make_node("MatMul", ["x", "w2"], ["p"]),
             helper.make_node("Unsqueeze", ["p", "axis0"], ["p1"]),
             helper.make_node("Add", ["state", "p1"], ["state_out"])]
    graph = helper.make_graph(nodes, "stream",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16]),
                               helper.make_tensor_value_info("state", TensorProto.FLOAT, [2, "batch", 8]),
                               helper.make_tensor_value_info("sr", TensorProto.INT64, [])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4]),
                               helper.make_tensor_value_info("state_out", TensorProto.FLOAT, [2, "batch", 8])],
                              inits)
    return save_graph(graph, path)



def write_gemm_head(path: Path) -> Path:
    """Two MatMuls and a Gemm head named as torch.onnx names an nn.Linear (``/model/head/Gemm``, transB=1)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(2)
    arrays = {"W1": (32, 128), "W2": (128, 128), "head.weight": (10, 128), "head.bias": (10,)}
    inits = [numpy_helper.from_array((rng.standard_normal(s) / np.sqrt(s[-1])).astype(np.float32), n)
             for n, s in arrays.items()]
    nodes = [
        helper.make_node("MatMul", ["x", "W1"], ["h1"], name="/model/fc1/MatMul"),
        helper.make_node("Relu", ["h1"], ["r1"], name="/model/relu1/Relu"),
        helper.make_node("MatMul", ["r1", "W2"], ["h2"], name="/model/fc2/MatMul"),
        helper.make_node("Relu", ["h2"], ["r2"], name="/model/relu2/Relu"),
        helper.make_node("Gemm", ["r2", "head.weight", "head.bias"], ["logits"], name="/model/head/Gemm",
                         transB=1),
    ]
    graph = helper.make_graph(nodes, "gemm_head",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 32])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])], inits)
    save_graph(graph, path, ir_version=9)
    return path



def really_quantized(original: Path, output: Path) -> tuple[list[str], list[str]]:
    """(float, quantized): the source's MatMul/Gemm nodes as the written model holds them.

    Read from the output graph, not from what the plugin says: onnxruntime's dynamic int8 replaces a
    quantized node N by an integer node "N_quant" (a Gemm is first split into "N_MatMul" + "N_Add",
    so "N_MatMul_quant"); a node kept in float is still a MatMul/Gemm called N (or "N_MatMul").
    """
    import onnx

    weighted = [n.name for n in onnx.load(str(original)).graph.node if n.op_type in ("MatMul", "Gemm")]
    ops = {n.name: n.op_type for n in onnx.load(str(output)).graph.node}
    integer = {"MatMulInteger", "DynamicQuantizeMatMul", "QLinearMatMul"}
    kept = [w for w in weighted if ops.get(w) in ("MatMul", "Gemm") or ops.get(f"{w}_MatMul") == "MatMul"]
    quantized = [w for w in weighted if ops.get(f"{w}_quant") in integer or ops.get(f"{w}_MatMul_quant") in integer]
    assert sorted(kept + quantized) == sorted(weighted), (weighted, ops)  # every layer is one or the other
    # The same count without names: one integer matmul per quantized layer.
    assert sum(op in integer for op in ops.values()) == len(quantized)
    return kept, quantized



def misleading_model(path: Path) -> Path:
    """Two fragile layers: F1's output error is the largest but a Mul by zero hides it; F2's is what hurts.

    Activation matching blames F1 first; only a direct sweep (each node quantized alone) sees that F1
    alone costs nothing and F2 alone costs the budget."""
    k = 128
    rng = np.random.default_rng(5)
    w = {n: rng.standard_normal((k, k)) / np.sqrt(k) for n in ("A", "F1", "F2", "C")}
    w["F1"][1, :] = 1e4            # every column of F1 loses its small weights
    w["F2"][1, : k // 2] = 1e3     # half of F2's columns do
    mask = np.ones(k, np.float32)
    mask[1] = 0.0
    inits = [numpy_helper.from_array(mask, "mask"), numpy_helper.from_array(np.zeros(k, np.float32), "zero")]
    inits += [numpy_helper.from_array(v.astype(np.float32), f"{n}_w") for n, v in w.items()]
    nodes = [helper.make_node("MatMul", ["x", "A_w"], ["a"], name="A"),
             helper.make_node("Mul", ["a", "mask"], ["am"], name="zero_channel"),
             helper.make_node("MatMul", ["am", "F1_w"], ["f1"], name="F1"),
             helper.make_node("Mul", ["f1", "zero"], ["hidden"], name="hide_f1"),
             helper.make_node("MatMul", ["am", "F2_w"], ["f2"], name="F2"),
             helper.make_node("Add", ["f2", "hidden"], ["s"], name="add"),
             helper.make_node("MatMul", ["s", "C_w"], ["y"], name="C")]
    graph = helper.make_graph(nodes, "misleading",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", k])], inits)
    return save_graph(graph, path)



def fragile_model(path: Path, tiny_b: bool = True) -> Path:
    """x -> A -> B -> (x 1e9, channel 1 zeroed) -> F -> C.  Two layers are fragile in different ways.

    F's row 1 is 1e4 but always multiplied by 0 in float: any weight scheme that shares a scale along K
    (int8 per channel, 8- or 4-bit blocks) flattens the rest of F's weights, while float16 holds it.
    B's weights are ~1e-10 (a gain of 1e9 follows): every integer scheme scales them per channel or
    block, but float16's smallest subnormal is 6e-8, so onnxruntime's converter turns them into signs.
    So F needs fp16 or float, and B anything but fp16; A and C are ordinary layers.  ``tiny_b=False``
    leaves B ordinary (gain 1), so uniform fp16 passes."""
    rng = np.random.default_rng(0)
    weights = {n: rng.standard_normal((FRAGILE_WIDTH, FRAGILE_WIDTH)) / np.sqrt(FRAGILE_WIDTH) for n in "ABF"}
    weights["F"][1, :] = 1e4
    gain = 1e9 if tiny_b else 1.0
    weights["B"] /= gain
    weights["C"] = rng.standard_normal((FRAGILE_WIDTH, 16)) / np.sqrt(FRAGILE_WIDTH)
    mask = np.full(FRAGILE_WIDTH, gain, np.float32)
    mask[1] = 0.0
    inits = [numpy_helper.from_array(mask, "mask")]
    inits += [numpy_helper.from_array(w.astype(np.float32), f"{n}_w") for n, w in weights.items()]
    nodes = [helper.make_node("MatMul", ["x", "A_w"], ["a"], name="A"),
             helper.make_node("MatMul", ["a", "B_w"], ["b"], name="B"),
             helper.make_node("Mul", ["b", "mask"], ["bm"], name="zero_channel"),
             helper.make_node("MatMul", ["bm", "F_w"], ["f"], name="F"),
             helper.make_node("MatMul", ["f", "C_w"], ["y"], name="C")]
    graph = helper.make_graph(nodes, "fragile",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", FRAGILE_WIDTH])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 16])], inits)
    return save_graph(graph, path)



def state_on_axis_one_by_the_users_word(path: Path) -> Path:
    """x[batch, 16] and a state whose dims say nothing of its batch (["layers", "frames", 8]: read as axis 0).

    Only the user's ``--input state:float32[2,batch,8]`` says the samples are on its axis 1; the state's
    update adds a projection of x, so a cut on axis 0 fails in onnxruntime.  OpenVINO leaves ``Hardmax`` to
    the CPU (onnxruntime-openvino 1.24), so every benchmarked row has a fallback to report.
    """
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((16, 32)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32), "w2"),
             numpy_helper.from_array(np.array([0], np.int64), "axis0")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"], name="fc"),
             helper.make_node("Hardmax", ["m"], ["y"], name="hardmax"),
             helper.make_node("MatMul", ["x", "w2"], ["p"], name="proj"),
             helper.make_node("Unsqueeze", ["p", "axis0"], ["p1"], name="lift"),
             helper.make_node("Add", ["state", "p1"], ["state_out"], name="update")]
    graph = helper.make_graph(nodes, "stream",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16]),
                               helper.make_tensor_value_info("state", TensorProto.FLOAT, ["layers", "frames", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 32]),
                               helper.make_tensor_value_info("state_out", TensorProto.FLOAT,
                                                             ["layers", "frames", 8])], inits)
    return save_graph(graph, path)



def calibration_npz(path, shape=(8, 3, 16, 16), seed=1):
    np.savez(path, x=np.random.default_rng(seed).standard_normal(shape).astype(np.float32))
    return path



def fixed_size_detector(path, size: int = 16, batch="batch"):
    """A graph that runs only at ``size`` x ``size`` (an Add with a fixed positional map, as in DBNet's FPN)."""
    rng = np.random.default_rng(2)
    weight = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    pos = numpy_helper.from_array(rng.standard_normal((1, 3, size, size)).astype(np.float32), "pos")
    head = numpy_helper.from_array(rng.standard_normal((4 * size * size, 6)).astype(np.float32), "head")
    shape = numpy_helper.from_array(np.array([0, -1], dtype=np.int64), "shape")
    nodes = [helper.make_node("Add", ["x", "pos"], ["a"]),
             helper.make_node("Conv", ["a", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Reshape", ["r", "shape"], ["flat"]),
             helper.make_node("MatMul", ["flat", "head"], ["y"])]
    graph = helper.make_graph(nodes, "fixed_size",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, "h", "w"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 6])],
                              initializer=[weight, pos, head, shape])
    save_graph(graph, path)
    return path



CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage"]



def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    if os.environ.get("CI"):
        pytest.fail("chromium is not installed (CI must have it: apt-get install -y chromium)")
    pytest.skip("chromium is not installed")


def load_script(relative: str) -> ModuleType:
    """A script of the repository (``benchmarks/layout_counts.py``) imported by path: scripts are not a package."""
    path = ROOT / relative
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
