"""Builders several test modules share (no test module imports another): tiny ONNX graphs with one trait
each, the data they need, and the browser the HTML report is rendered in.

``tests/export_models.py`` is a helper module too, not a test module: it holds the tiny PyTorch models the
export tests name as ``file.py:name`` sources, so it must stay a plain file that a subprocess can load.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxlite.report.model import ModelRow, Report

from conftest import ROOT, save_graph

#: the width of fragile_model's square layers
FRAGILE_WIDTH = 128
#: make_mlp's input width
MLP_WIDTH = 32


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


REPORT_PRIMARY = "last_hidden_state.cosine_mean"


RESULT_KEYS = ("last_hidden_state.pooled_cosine_mean", "last_hidden_state.pooled_cosine_min")


def make_mlp(path: Path, external: bool = False, op: str = "MatMul") -> Path:
    """x:float32[batch,32] -> MatMul -> Relu -> MatMul -> y:float32[batch,8] (``op`` replaces the first MatMul)."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((MLP_WIDTH, MLP_WIDTH)) * 0.2).astype(np.float32), "w1"),
             numpy_helper.from_array((rng.standard_normal((MLP_WIDTH, 8)) * 0.2).astype(np.float32), "w2")]
    nodes = [helper.make_node(op, ["x", "w1"], ["h"], name="fc1"),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("MatMul", ["r", "w2"], ["y"], name="fc2")]
    graph = helper.make_graph(nodes, "mlp",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", MLP_WIDTH])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])], inits)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_graph(graph, path, external=external)
    return path


def tree(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (hidden ones too) with a digest of its bytes."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def sample_report(kind: str = "lighten", latency: bool = True) -> Report:
    """A report of five rows (reference, winner, ok, rejected, failed) with the metrics a MiniLM run has."""
    def lat(p50):
        return {"p50": p50, "p90": p50 * 1.1, "p99": p50 * 1.3, "mean": p50 * 1.05} if latency else None

    rows = [
        ModelRow("fp32", "/models/fp32.onnx", size_bytes=90_000_000, latency_ms=lat(12.0), throughput=80.0,
                 load_seconds=0.4, peak_rss_bytes=400_000_000, op_count=410, metrics={REPORT_PRIMARY: 1.0},
                 status="reference"),
        ModelRow("dynamic <int8>", "/models/int8.onnx", size_bytes=23_000_000, latency_ms=lat(5.0), throughput=190.0,
                 load_seconds=0.2, peak_rss_bytes=200_000_000, op_count=520,
                 metrics={REPORT_PRIMARY: 0.992, "logits.top1_agreement": 0.97}, status="winner", note="per-channel"),
        ModelRow("fp16", "/models/fp16.onnx", size_bytes=45_000_000, latency_ms=lat(14.0),
                 metrics={REPORT_PRIMARY: 0.9999}),
        ModelRow("int4", "/models/int4.onnx", size_bytes=15_000_000, latency_ms=lat(9.0),
                 metrics={REPORT_PRIMARY: 0.95},
                 status="rejected", note="below the 0.98 budget"),
        ModelRow("static", "/models/static.onnx", status="failed", note="calibration data missing"),
    ]
    return Report(title="MiniLM, lightened", kind=kind, rows=rows, primary_metric=REPORT_PRIMARY,
                  settings={"provider": "cpu", "batch": 4, "seq_len": 128},
                  sections=[("Why these won", "- `dynamic` kept **0.992** cosine\n- int4 lost too much\n\nDone.")])


def sample_lighten_result() -> Any:
    """A MiniLM lighten result as the report page shows it: a winner, two within budget, four over, one failed."""
    from onnxlite.search.results import CandidateRow, LightenResult

    def lat(p50):
        return {"p50": p50, "p90": p50 * 1.1, "p99": p50 * 1.2, "mean": p50}

    def interval(estimate, upper):
        return {"estimate": estimate, "low": estimate * 0.6, "high": upper * 1.05, "upper": upper}

    def row(name, strategy, status, size, p50, drops, reason, ops=None, excluded=()):
        return CandidateRow(name=name, strategy=strategy, options={"op_types": ["MatMul", "Gemm"]}, status=status,
                            size_bytes=size, latency_ms=lat(p50) if p50 else None, reason=reason,
                            drops=dict(zip(RESULT_KEYS, drops)),
                            intervals={k: interval(d, d * 1.3 + 1e-4) for k, d in zip(RESULT_KEYS, drops)},
                            quantize={"quantized_ops": ops or {"MatMul": 36, "Gather": 1},
                                      "excluded_nodes": list(excluded), "notes": ["per-channel int8 weights"]})

    base = CandidateRow(name="fp32", strategy="fp32", options={}, status="reference", size_bytes=90_958_582,
                        latency_ms=lat(1295.4), drops=dict(zip(RESULT_KEYS, (0.0, 0.0))), reason="the exported model")
    rows = [
        row("smoothquant[alpha=0.8]", "smoothquant", "winner", 23_189_921, 627.6, (0.00198, 0.00397),
            "fastest within budget: 3.92x smaller and 2.06x faster than fp32"),
        row("weightonly[gather=int4]", "weightonly", "ok", 19_470_000, 835.4, (0.0026, 0.0051),
            "within budget, but against the winner: 1.33x slower, 1.19x smaller"),
        row("weightonly[gather=int8]", "weightonly", "ok", 23_380_000, 1012.8, (0.0012, 0.0030),
            "within budget, but against the winner: 1.61x slower, 1.01x larger"),
        row("dynamic[op_types=MatMul,Gemm,Gather]", "dynamic", "rejected", 23_060_000, None, (0.0067, 0.0140),
            "over budget: last_hidden_state.pooled_cosine_mean: drop 0.006713, 95% bound 0.007052 > max 0.005; "
            "last_hidden_state.pooled_cosine_min: drop 0.014 > max 0.01"),
        row("dynamic", "dynamic", "rejected", 58_800_000, None, (0.0062, 0.0120), "over budget: ..."),
        row("int4[block_size=128]", "int4", "rejected", 54_100_000, None, (0.0461, 0.0900), "over budget: ..."),
        row("weightonly[bits=4,block_size=32,gather=int4]+float16", "weightonly", "rejected", 61_700_000, None,
            (0.0133, 0.0250), "over budget: ...", excluded=[f"/encoder/layer.{i}/MatMul" for i in range(16)]),
        CandidateRow(name="brokenplugin", strategy="broken", options={}, status="failed",
                     reason="quantize failed: /tmp/onnxlite-x/scratch/fp32.onnx: NameError: name 'g' is not defined"),
    ]
    verification = {"atol": 1e-4, "rtol": 1e-3, "rows": [
        {"output": out, "feed_set": fs, "passed": True, "exact": False, "max_abs_diff": 2.4e-6, "cosine_min": 0.9999999}
        for out in ("last_hidden_state", "pooler_output") for fs in ("batch=2", "batch=3 padded")]}
    return LightenResult(output_dir=Path("out"), winner=rows[0], baseline=base, candidates=rows, skipped=[],
                         primary_metric=RESULT_KEYS[0], budgets=dict(zip(RESULT_KEYS, (0.005, 0.01))),
                         objective="latency",
                         message="winner: smoothquant[alpha=0.8]: 3.92x smaller, 2.06x faster than fp32, "
                                 "last_hidden_state.pooled_cosine_mean drop 0.00198 (budget 0.005)",
                         export={"framework": "pytorch", "verification": verification},
                         settings={"provider": "cpu", "threads": 2}, data="95 held-out sentences",
                         evidence={"metric_why": {RESULT_KEYS[0]: "last_hidden_state is token embeddings ([batch, seq, "
                                                           "hidden] with an attention mask: mean-pooled)"}})


def conv_chain(path: Path, layers: list[tuple[np.ndarray, np.ndarray, str | None, int]],
               head: np.ndarray | None = None, size: int = 8) -> Path:
    """(recover, per-node) Convs in a row (weight, bias, activation "Relu"/"Relu6"/None, group), then a global
    pool and a Gemm head.

    The input is ``x`` [N, C, size, size]; the output ``logits``.
    """
    nodes, inits = [], []
    prev = "x"
    for i, (w, b, act, group) in enumerate(layers, 1):
        inits += [numpy_helper.from_array(w.astype(np.float32), f"w{i}"),
                  numpy_helper.from_array(b.astype(np.float32), f"b{i}")]
        k = w.shape[-1]
        nodes.append(helper.make_node("Conv", [prev, f"w{i}", f"b{i}"], [f"c{i}"], name=f"conv{i}", group=group,
                                      pads=[k // 2] * 4))
        prev = f"c{i}"
        if act == "Relu":
            nodes.append(helper.make_node("Relu", [prev], [f"a{i}"], name=f"relu{i}"))
            prev = f"a{i}"
        elif act == "Relu6":
            inits += [numpy_helper.from_array(np.array(0, np.float32), f"lo{i}"),
                      numpy_helper.from_array(np.array(6, np.float32), f"hi{i}")]
            nodes.append(helper.make_node("Clip", [prev, f"lo{i}", f"hi{i}"], [f"a{i}"], name=f"clip{i}"))
            prev = f"a{i}"
    channels = layers[-1][0].shape[0]
    nodes += [helper.make_node("GlobalAveragePool", [prev], ["pooled"], name="pool"),
              helper.make_node("Flatten", ["pooled"], ["flat"], name="flatten")]
    if head is None:
        head = np.random.default_rng(1).normal(size=(10, channels))
    inits += [numpy_helper.from_array(head.astype(np.float32), "head_w"),
              numpy_helper.from_array(np.zeros(head.shape[0], np.float32), "head_b")]
    nodes.append(helper.make_node("Gemm", ["flat", "head_w", "head_b"], ["logits"], name="head", transB=1))
    inputs = layers[0][0].shape[1] * layers[0][3]
    graph = helper.make_graph(nodes, "chain",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", inputs, size, size])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", head.shape[0]])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    from onnx import save as onnx_save

    onnx_save(model, str(path))
    return path


SVG = "{http://www.w3.org/2000/svg}"


def assert_no_markdown(text: str) -> None:
    """No Markdown syntax is left in a page's text: no table rules, bold markers, backticks, list bullets or
    pipe rows."""
    import re

    assert not re.search(r"\|\s*-{3,}|\*\*|`", text), re.search(r".{0,40}(\|\s*-{3,}|\*\*|`).{0,40}", text)
    assert not re.search(r"(^|\n)\s*[-*] ", text), re.search(r"(^|\n)\s*[-*] .{0,60}", text)
    assert not re.search(r"(^|\n)\s*\|.*\|\s*($|\n)", text)


def check_report_page(page: Path, tmp: Path, unit: str) -> None:
    """A lighten report page as issue 25 wants it: well-formed XML; in headless Chromium, two trade-off charts
    whose axes have at least 3 tick labels, a 0 on y and a zero line, sizes in ``unit``; no Markdown left in the
    text, no figure with 7+ significant digits, no JSON in the settings."""
    import re
    import subprocess
    import xml.etree.ElementTree as ET
    from html import unescape

    ET.fromstring(page.read_text().replace("<!DOCTYPE html>", "", 1))      # the page itself is well-formed
    dom = subprocess.run([chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={tmp / 'profile'}",
                          "--window-size=1280,2400", "--dump-dom", page.resolve().as_uri()],
                         capture_output=True, text=True, timeout=180)
    assert dom.returncode == 0, dom.stderr[-2000:]
    svgs = re.findall(r"<svg.*?</svg>", dom.stdout, re.S)
    assert len(svgs) == 2, len(svgs)                              # drop against size, drop against latency
    for svg in svgs:
        root = ET.fromstring(svg)
        for axis in ("x", "y"):
            ticks = [t.text for t in root.iter(f"{SVG}text") if t.get("class") == f"tick {axis}"]
            assert len(ticks) >= 3 and all(ticks), (axis, ticks)
        y_ticks = [t.text for t in root.iter(f"{SVG}text") if t.get("class") == "tick y"]
        assert "0" in y_ticks and [e for e in root.iter(f"{SVG}line") if e.get("class") == "zero"]
    assert f"size on disk ({unit})" in svgs[0]
    body = dom.stdout[dom.stdout.index("<body"):]
    text = unescape(re.sub(r"<[^>]+>", "\n", re.sub(r"<(style|svg)\b.*?</\1>", "", body, flags=re.S)))
    assert_no_markdown(text)
    unrounded = re.search(r".{0,40}\d\.0*[1-9]\d{6,}.{0,20}", text)          # 7+ significant digits
    assert not unrounded, unrounded.group(0)
    assert "{&quot;" not in dom.stdout and '{"' not in text and "recipe\nFalse" not in text   # no JSON settings


class RecordingExecutor:
    """The local executor, noting every task it ran, and reporting another CPU's speeds when given them.

    ``speeds`` maps a candidate name prefix to its p50 over fp32's as recorded on that CPU (the longest
    prefix that matches applies; a name matching none is timed for real).  The quick timing then says
    those ratios, at ``fp32_ms`` per batch, and the final benchmark's latencies are fp32's, measured
    here, times the ratio: the search decides as it would on that CPU, on this one's real accuracy.
    """

    name = "recording"

    def __init__(self, speeds: dict[str, float] | None = None, fp32_ms: float = 40.0) -> None:
        from onnxlite.executors.local import LocalExecutor

        self.local = LocalExecutor()
        self.speeds, self.fp32_ms = dict(speeds or {}), fp32_ms
        self.ran: list[str] = []        # every task's candidate name, as it finished
        self.timed: list[str] = []      # what the quick timing was asked about

    def ratio(self, name: str) -> float | None:
        found = [p for p in self.speeds if name.startswith(p)]
        return self.speeds[max(found, key=len)] if found else None

    def run_tasks(self, tasks, folder, workers=None, on_start=None, should_start=None):
        for result in self.local.run_tasks(tasks, folder, workers, on_start=on_start, should_start=should_start):
            self.ran.append(result.name)
            yield result

    def time_quickly(self, fp32, models, feeds, settings):
        from onnxlite.search.quick import QuickTimes, time_quickly

        self.timed += list(models)
        real = {n: p for n, p in models.items() if self.ratio(n) is None}
        found = time_quickly(fp32, real, feeds, settings) if real else QuickTimes()
        recorded = {n: r for n in models if (r := self.ratio(n)) is not None}
        return QuickTimes(dict(found.ratios) | recorded, self.fp32_ms if recorded else found.fp32_ms)

    def bench(self, models, **options):
        result = self.local.bench(models, **options)
        base = result.rows[0]
        for row in result.rows[1:]:
            ratio = self.ratio(row.name)
            if ratio is not None and row.status == "ok" and base.latency_ms:
                row.latency_ms = {k: v * ratio for k, v in base.latency_ms.items()}
                row.latencies_ms = [v * ratio for v in base.latencies_ms]
                row.throughput = base.throughput / ratio if base.throughput else None
        return result

    def describe(self) -> dict[str, Any]:
        return self.local.describe() | {"name": self.name, "recorded_speeds": self.speeds}

    def close(self) -> None:
        self.local.close()


def SeenExecutor():  # noqa: N802 - builds an executor; a class in the body keeps onnxlite's executors lazy
    """The local executor (warm workers), noting in ``.names`` the name of every task that reached it."""
    from onnxlite.executors.local import LocalExecutor

    class Seen(LocalExecutor):
        def __init__(self) -> None:
            super().__init__()
            self.names: list[str] = []

        def run_tasks(self, tasks, folder, workers=None, on_start=None, should_start=None):
            self.names += [t["candidate"]["name"] for t in tasks]
            return super().run_tasks(tasks, folder, workers, on_start, should_start)

    return Seen()


def fragile_digits(folder: Path) -> tuple[Any, Path, Path, np.ndarray, Path]:
    """(net, its ONNX export, calibration npz, test images, its state dict file) of a digits CNN
    (``export_models.py:DigitsNet``) trained a few seconds, then made fragile: each of c2's output channels gets
    one weight of +-50 on an input it never sees lit (a corner), so per-channel int8 rounds the weights that
    matter to a grid of 0.39 and static int8 loses answers.  Calibration: digits 1200-1399; test: the last
    397, never calibrated, trained or checked on."""
    import torch
    from sklearn import datasets

    export_models = load_script("tests/export_models.py")
    digits = datasets.load_digits()
    images = (digits.images / 16.0).astype(np.float32)[:, None]
    torch.manual_seed(0)
    net = export_models.DigitsNet()
    optim = torch.optim.Adam(net.parameters(), lr=3e-3)
    x, y = torch.from_numpy(images[:1200]), torch.from_numpy(digits.target[:1200])
    for _ in range(6):
        for start in range(0, 1200, 64):
            optim.zero_grad()
            torch.nn.functional.cross_entropy(net(x[start:start + 64]), y[start:start + 64]).backward()
            optim.step()
    net.eval()
    with torch.no_grad():
        net.c2.weight[:, :, 0, 0] = 0
        net.c2.weight[:, 0, 0, 0] = 50.0 * torch.sign(torch.randn(16))
    path = folder / "digits.onnx"
    torch.onnx.export(net, (x[:2],), str(path), input_names=["x"], output_names=["logits"],
                      dynamic_axes={"x": {0: "b"}, "logits": {0: "b"}}, opset_version=17, dynamo=False)
    calibration = folder / "calibration.npz"
    np.savez(calibration, x=images[1200:1400])
    weights = folder / "digits.pt"
    torch.save(net.state_dict(), weights)
    return net, path, calibration, images[1400:], weights


def one_error_line(err: str, needle: str | None = None) -> str:
    """The last stderr line is the error; no traceback anywhere."""
    assert "Traceback" not in err, err
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert lines, "no error message"
    last = lines[-1]
    assert last.startswith("Error:"), err
    if needle is not None:
        assert needle in last, err
    return last
