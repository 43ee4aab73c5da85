"""The example third-party package in examples/onnxlite-guard-quantizer, installed for real."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT, run_cli, save_graph
from helpers import really_quantized, write_gemm_head

EXAMPLE = ROOT / "examples" / "onnxlite-guard-quantizer"


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """pip-install the example (built by its own pyproject) into a private site dir."""
    target = tmp_path_factory.mktemp("site")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--target", str(target), str(EXAMPLE)], check=True, capture_output=True, text=True)
    return target


@pytest.fixture(scope="module")
def mlp(tmp_path_factory) -> Path:
    """A three-layer MLP (x -> fc1 -> relu -> fc2 -> relu -> fc3) with a dynamic batch axis."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = {"W1": (32, 128), "W2": (128, 128), "W3": (128, 10)}
    inits = [numpy_helper.from_array((rng.standard_normal(s) / np.sqrt(s[0])).astype(np.float32), n)
             for n, s in weights.items()]
    nodes = [
        helper.make_node("MatMul", ["x", "W1"], ["h1"], name="fc1"),
        helper.make_node("Relu", ["h1"], ["r1"], name="relu1"),
        helper.make_node("MatMul", ["r1", "W2"], ["h2"], name="fc2"),
        helper.make_node("Relu", ["h2"], ["r2"], name="relu2"),
        helper.make_node("MatMul", ["r2", "W3"], ["logits"], name="fc3"),
    ]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 32])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])], inits)
    path = tmp_path_factory.mktemp("mlp") / "mlp.onnx"
    save_graph(graph, path, ir_version=9)
    return path


@pytest.fixture(scope="module")
def gemm_head(tmp_path_factory) -> Path:
    return write_gemm_head(tmp_path_factory.mktemp("gemm") / "gemm_head.onnx")


def _run(path: Path, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def test_example_plugin_is_listed_with_distribution_and_version(site):
    result = run_cli("--list-plugins", "--json", site=site)
    assert result.returncode == 0, result.stderr
    row = next(s for s in json.loads(result.stdout)["strategies"] if s["name"] == "guarded")
    assert row["distribution"] == "onnxlite-guard-quantizer"
    assert row["version"] == "0.3.0"
    assert row["available"] is True
    assert {o["name"] for o in row["options"]} == {"keep_first", "keep_last", "exclude", "per_channel"}


def test_example_and_builtin_strategies_run_through_the_same_cli_path(site, mlp, tmp_path):
    import onnx

    x = np.random.default_rng(1).standard_normal((16, 32)).astype(np.float32)
    reference = _run(mlp, x)
    errors = {}
    for strategy in ("guarded", "dynamic"):
        out = tmp_path / f"{strategy}.onnx"
        result = run_cli("quantize", str(mlp), "-o", str(out), "--strategy", strategy, "--json", site=site)
        assert result.returncode == 0, result.stderr
        payload = json.loads(result.stdout)
        assert payload["strategy"] == strategy
        errors[strategy] = float(np.abs(_run(out, x) - reference).mean())
        ops = {n.name: n.op_type for n in onnx.load(str(out)).graph.node}
        if strategy == "guarded":
            assert sorted(payload["excluded_nodes"]) == ["fc1", "fc3"]
            assert ops["fc1"] == "MatMul" and ops["fc3"] == "MatMul"
            assert "MatMulInteger" in ops.values()
    # Keeping the first and last layers in float must cost less accuracy than quantizing them too.
    assert errors["guarded"] < errors["dynamic"]


def test_example_plugin_options_are_validated(site, mlp, tmp_path):
    result = run_cli("quantize", str(mlp), "-o", str(tmp_path / "x.onnx"), "--strategy", "guarded",
                     "--option", "keep_middle=true", site=site)
    assert result.returncode == 2
    assert "keep_first" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "x.onnx").exists()


@pytest.mark.parametrize("options",
                         [(), ("--option", "keep_first=false"),
                          ("--option", "keep_first=false", "--option", "exclude=/model/fc2/*")])
def test_example_plugin_reports_the_nodes_really_kept_in_float(site, gemm_head, tmp_path, options):
    """The Gemm head is excluded for real (onnxruntime 1.32 would quantize it), and the report says so."""
    out = tmp_path / "guarded.onnx"
    result = run_cli("quantize", str(gemm_head), "-o", str(out), "--strategy", "guarded", *options, "--json",
                     site=site)
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    kept, quantized = really_quantized(gemm_head, out)
    assert payload["excluded_nodes"] == kept
    assert "/model/head/Gemm" in kept and quantized  # the last layer stayed float, something was quantized
    x = np.random.default_rng(3).standard_normal((8, 32)).astype(np.float32)
    assert np.allclose(_run(out, x), _run(gemm_head, x), atol=0.2)
