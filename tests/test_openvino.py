"""The OpenVINO execution provider, for real (skipped unless this onnxruntime build offers it).

CI's second-provider job runs this file in a venv with ``onnxruntime-openvino``
(see .ci/run).  Tiny models built here: a CNN and an MLP, in fp32, QDQ and
QOperator int8.  On OpenVINO the fp32 and QDQ models run as one compiled
subgraph; QOperator nodes (QLinearConv, QLinearMatMul...) fall back to the CPU,
which is what the fallback report must name, node for node, with its time.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from conftest import run_cli, save_graph

ort = pytest.importorskip("onnxruntime")
needs_openvino = pytest.mark.skipif("OpenVINOExecutionProvider" not in ort.get_available_providers(),
                                    reason="this onnxruntime build has no OpenVINO EP (pip install "
                                           "'onnxlite[openvino]')")
OV = "OpenVINOExecutionProvider"
CPU = "CPUExecutionProvider"


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    """fp32 / QDQ / QOperator versions of a small CNN and an MLP, quantized by onnxlite's static strategy."""
    from onnx import TensorProto, helper, numpy_helper

    import onnxlite

    rng = np.random.default_rng(0)
    folder = tmp_path_factory.mktemp("openvino")

    def weight(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)

    cnn = helper.make_graph(
        [helper.make_node("Conv", ["x", "c1", "b1"], ["h1"], name="conv1", pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["h1"], ["r1"], name="relu1"),
         helper.make_node("Conv", ["r1", "c2", "b2"], ["h2"], name="conv2", pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["h2"], ["r2"], name="relu2"),
         helper.make_node("GlobalAveragePool", ["r2"], ["p"], name="pool"),
         helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
         helper.make_node("MatMul", ["f", "fw"], ["m"], name="fc"),
         helper.make_node("Add", ["m", "fb"], ["y"], name="fc_bias")],
        "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 10])],
        [weight("c1", 8, 3, 3, 3), weight("b1", 8), weight("c2", 16, 8, 3, 3), weight("b2", 16),
         weight("fw", 16, 10), weight("fb", 10)])
    mlp = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W1"], ["h1"], name="fc1"),
         helper.make_node("Add", ["h1", "b1"], ["a1"], name="fc1_bias"),
         helper.make_node("Relu", ["a1"], ["r1"], name="relu1"),
         helper.make_node("MatMul", ["r1", "W2"], ["h2"], name="fc2"),
         helper.make_node("Add", ["h2", "b2"], ["y"], name="fc2_bias")],
        "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 16])],
        [weight("W1", 32, 64), weight("b1", 64), weight("W2", 64, 16), weight("b2", 16)])
    out = {"cnn": save_graph(cnn, folder / "cnn.onnx", ir_version=9),
           "mlp": save_graph(mlp, folder / "mlp.onnx", ir_version=9)}
    calibration = {"cnn": rng.random((16, 3, 16, 16), dtype=np.float32),
                   "mlp": rng.standard_normal((64, 32)).astype(np.float32)}
    for name, data in calibration.items():
        np.savez(folder / f"{name}_data.npz", x=data)
        out[f"{name}_data"] = folder / f"{name}_data.npz"
        for fmt in ("QDQ", "QOperator"):
            target = folder / f"{name}_{fmt.lower()}.onnx"
            onnxlite.quantize(out[name], target, strategy="static", calibration=out[f"{name}_data"], format=fmt)
            out[f"{name}_{fmt.lower()}"] = target
    return out


def _settings():
    from onnxlite.runtime import SessionSettings

    return SessionSettings(provider="openvino", threads=2)


def _subgraphs(names) -> list[int]:
    found = [re.fullmatch(r"OpenVINOExecutionProvider_OpenVINO-EP-subgraph_\d+_(\d+)", n) for n in names]
    assert all(found), names
    return sorted(int(m.group(1)) for m in found)


def _profile_vs_log(path: Path):
    """The placement as the profiler saw it run, and as the session's partitioner logged it."""
    from onnxlite.placement import logged_placement, placement_report

    report = placement_report(path, _settings(), runs=3)
    logged = logged_placement(path, _settings())
    return report, logged


@needs_openvino
@pytest.mark.parametrize("name", ["cnn_qoperator", "mlp_qoperator"])
def test_fallback_report_agrees_with_the_partitioner_node_for_node(models, name):
    report, logged = _profile_vs_log(models[name])
    # The partitioner's log lists every node it put on the CPU, by op and name ...
    assert logged.get(CPU), f"expected QOperator nodes on the CPU, the log says {logged}"
    logged_cpu = {node: op for op, node in logged[CPU]}
    # ... and the profile, run three times, saw exactly those nodes run there.
    assert {n.name: n.op for n in report.fallback} == logged_cpu
    # Whatever OpenVINO took, it ran as its compiled subgraphs, again the same ones (their first number
    # counts subgraphs across the process's sessions, the second is their place in this one).
    assert _subgraphs(n.name for n in report.nodes if n.provider == OV) == _subgraphs(n for _, n in logged[OV])
    assert {n.provider for n in report.nodes} == {OV, CPU}
    assert any(op.startswith(("QLinear", "QGemm")) for op in logged_cpu.values()), logged_cpu
    # Its time is measured, and part of the run.
    assert report.runs == 3 and report.run_ms and 0 < report.fallback_ms < report.run_ms
    summary = report.summary()
    assert summary and f"{len(report.fallback)} node(s) ran on the CPU instead of {OV}" in summary and " ms" in summary
    assert report.to_dict()["fallback"] == logged_cpu


@needs_openvino
@pytest.mark.parametrize("name", ["cnn", "cnn_qdq", "mlp", "mlp_qdq"])
def test_fp32_and_qdq_models_run_entirely_on_openvino(models, name):
    from onnxlite.placement import cpu_fallback_nodes

    report, logged = _profile_vs_log(models[name])
    assert report.fallback == () and report.summary() is None
    assert logged == {OV: None}  # "All nodes placed on [OpenVINOExecutionProvider]"
    assert {n.provider for n in report.nodes} == {OV}
    assert cpu_fallback_nodes(models[name], _settings()) == {}


@needs_openvino
def test_compare_and_bench_run_on_openvino_and_show_the_fallback(models):
    result = run_cli("compare", str(models["cnn"]), str(models["cnn_qoperator"]), str(models["cnn_qdq"]),
                     "--provider", "openvino", "--data", str(models["cnn_data"]), "--json")
    assert result.returncode == 0, result.stderr
    candidates = {Path(c["path"]).stem if "path" in c else c["name"]: c
                  for c in json.loads(result.stdout)["candidates"]}
    qop = next(c for n, c in candidates.items() if "qoperator" in n)
    qdq = next(c for n, c in candidates.items() if "qdq" in n)
    assert qop["format"] == "qoperator" and qop["cpu_fallback"]
    assert any(op == "QLinearConv" for op in qop["cpu_fallback"].values())
    assert qdq["format"] == "qdq" and qdq["cpu_fallback"] == {}

    result = run_cli("bench", str(models["cnn"]), str(models["cnn_qdq"]), "--provider", "openvino",
                     "--batch", "4", "--runs", "5", "--json")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)["models"]
    assert [r["status"] for r in rows] == ["ok", "ok"]
    assert all(r["providers"][0] == OV for r in rows)


@needs_openvino
def test_lighten_judges_and_benchmarks_on_openvino_and_keeps_to_its_runtime(models, tmp_path):
    import onnx

    from onnxlite.runtime_compat import METADATA_KEY, installed_limits

    version, max_ir, _ = installed_limits()
    out = tmp_path / "light"
    result = run_cli("lighten", str(models["mlp"]), "-o", str(out), "--data", str(models["mlp_data"]),
                     "--provider", "openvino", "--threads", "2", "--max-drop", "cosine_mean=1%",
                     "--target-runtime", f"onnxruntime=={version}", "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["settings"]["provider"] == "openvino"
    # The grid followed OpenVINO's fast formats: MatMulInteger was not tried, and the report says why.
    skipped = {s["strategy"]: s["reason"] for s in summary["skipped"]}
    assert "does not run fast" in skipped["dynamic"]
    assert all(c["strategy"] != "dynamic" for c in summary["candidates"])
    measured = [c for c in summary["candidates"] if c.get("latency_ms")]
    assert measured, summary["candidates"]
    # model.onnx loads in this very build and says what it needs.
    model = onnx.load(str(out / "model.onnx"))
    assert model.ir_version <= max_ir
    assert {p.key: p.value for p in model.metadata_props}[METADATA_KEY].startswith("onnxruntime>=")


@needs_openvino
def test_lighten_rows_get_the_fallback_and_its_time(models):
    """What lighten shows for a candidate whose nodes fell back (record_fallback, then its reason)."""
    from types import SimpleNamespace

    from onnxlite.placement import record_fallback

    rows = [SimpleNamespace(name=n, path=str(models[n]), latency_ms={"p50": 1.0}) for n in ("cnn_qoperator", "cnn_qdq")]
    found = record_fallback(rows, _settings(), None)
    assert set(found) == {"cnn_qoperator"}   # the QDQ model ran wholly on OpenVINO
    entry = found["cnn_qoperator"]
    assert entry["nodes"] > 0 and entry["ms"] > 0 and "QLinearConv" in entry["ops"]
    assert entry["summary"].startswith(f"{entry['nodes']} node(s) ran on the CPU instead of {OV}")
    from onnxlite.runtime import SessionSettings

    assert record_fallback(rows, SessionSettings(provider="cpu"), None) == {}


@needs_openvino
def test_a_default_ir_model_fails_here_and_fitting_to_this_build_makes_it_load(models, tmp_path):
    """onnx 1.23 stamps IR 14; onnxruntime-openvino 1.24 loads IR <= 13 (the issue's trap), --target-runtime fixes
    it."""
    import onnx

    from onnxlite import UsageError
    from onnxlite.runtime import create_session
    from onnxlite.runtime_compat import fit_to_target, installed_limits, parse_target, problems

    version, max_ir, _ = installed_limits()
    model = onnx.load(str(models["cnn_qdq"]))
    model.ir_version = max_ir + 1
    too_new = tmp_path / "too_new.onnx"
    onnx.save(model, str(too_new))
    with pytest.raises(UsageError, match="cannot load it"):
        create_session(too_new, _settings())
    target = parse_target(f"onnxruntime=={version}")
    assert problems(model, target)
    fit_to_target(model, target)
    fitted = tmp_path / "fitted.onnx"
    onnx.save(model, str(fitted))
    session = create_session(fitted, _settings())
    assert session.get_providers()[0] == OV


def test_the_grid_follows_the_providers_fast_formats(models):
    """On OpenVINO, lighten does not try formats the spec says it runs slowly (no OpenVINO EP needed to plan)."""
    import onnx

    from onnxlite.search.candidates import build_candidates

    model = onnx.load(str(models["mlp"]))
    cpu, cpu_skipped = build_candidates(model, has_calibration=True, provider="cpu")
    ov, ov_skipped = build_candidates(model, has_calibration=True, provider="openvino")
    reasons = {s.strategy: s.reason for s in ov_skipped}
    # dynamic (MatMulInteger) runs but is slower than fp32 there: not in the grid, with the reason
    assert "dynamic" in {c.strategy for c in cpu} and "dynamic" not in {c.strategy for c in ov}
    assert "writes qoperator models, which openvino does not run fast" in reasons["dynamic"]
    # static keeps its QDQ candidates and loses the QOperator ones
    assert {c.options.get("format", "QDQ") for c in ov if c.strategy == "static"} == {"QDQ"}
    assert any(c.strategy == "static" and c.options.get("format") == "QOperator" for c in cpu)
    # weight-only MatMulNBits is one of OpenVINO's fast formats
    assert {c.name for c in cpu if c.strategy == "weightonly"} == {c.name for c in ov if c.strategy == "weightonly"}
    # naming a strategy still tries it, whatever the provider runs fast
    named, _ = build_candidates(model, strategies=["dynamic"], has_calibration=True, provider="openvino")
    assert [c.strategy for c in named] and {c.strategy for c in named} == {"dynamic"}
    # and the CPU's grid is what it was: nothing there is skipped for its format
    assert not any("does not run fast" in s.reason for s in cpu_skipped)
