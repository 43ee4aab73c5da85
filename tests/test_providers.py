"""Provider plugins, session creation without silent fallback, and node placement from onnxruntime's profiler."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import run_cli, save_graph
from helpers import state_on_axis_one_by_the_users_word, streaming_model


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    """A small named MLP (Gemm, Relu, MatMul, Add) and its dynamic int8 (QOperator) version."""
    from onnx import TensorProto, helper, numpy_helper
    from onnxruntime.quantization import QuantType, quantize_dynamic

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
             for n, s in {"W1": (16, 64), "b1": (64,), "W2": (64, 64), "b2": (64,)}.items()]
    nodes = [
        helper.make_node("Gemm", ["x", "W1", "b1"], ["h1"], name="fc1"),
        helper.make_node("Relu", ["h1"], ["r1"], name="relu1"),
        helper.make_node("MatMul", ["r1", "W2"], ["h2"], name="fc2"),
        helper.make_node("Add", ["h2", "b2"], ["y"], name="bias2"),
    ]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 64])], inits)
    folder = tmp_path_factory.mktemp("providers")
    fp32 = folder / "mlp.onnx"
    save_graph(graph, fp32, ir_version=9)
    int8 = folder / "mlp_int8.onnx"
    quantize_dynamic(str(fp32), str(int8), weight_type=QuantType.QInt8)
    return {"fp32": fp32, "int8": int8}


def _graph_nodes(path: Path) -> dict[str, str]:
    import onnx

    return {n.name: n.op_type for n in onnx.load(str(path)).graph.node}


def test_every_node_runs_on_the_cpu_provider_when_cpu_is_asked_for(models):
    from onnxlite.placement import cpu_fallback_nodes, node_placement, profile_nodes
    from onnxlite.runtime import SessionSettings

    # Without graph optimization the profile names exactly the graph's nodes, so we can check them one by one.
    settings = SessionSettings(provider="cpu", graph_optimization="disable")
    for path in models.values():
        placement = node_placement(path, settings)
        assert set(placement) == set(_graph_nodes(path))
        assert set(placement.values()) == {"CPUExecutionProvider"}
        nodes = profile_nodes(path, settings)
        assert {n: i["op"] for n, i in nodes.items()} == _graph_nodes(path)
        # Nothing can fall back to the CPU when the CPU is what was asked for.
        assert cpu_fallback_nodes(path, settings) == {}


def test_placement_follows_graph_optimization(models):
    """With optimizations on, onnxruntime fuses nodes; the placement reports what really ran."""
    from onnxlite.placement import node_placement
    from onnxlite.runtime import SessionSettings

    optimized = node_placement(models["fp32"], SessionSettings(graph_optimization="all"))
    assert optimized and set(optimized.values()) == {"CPUExecutionProvider"}
    assert len(optimized) <= len(_graph_nodes(models["fp32"]))


def test_parse_profile_reads_a_real_profile_and_picks_out_other_providers(models, tmp_path):
    import onnxruntime as ort

    from onnxlite.placement import parse_profile, read_profile

    options = ort.SessionOptions()
    options.enable_profiling = True
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.profile_file_prefix = str(tmp_path / "prof")
    session = ort.InferenceSession(str(models["int8"]), options, providers=["CPUExecutionProvider"])
    for _ in range(3):  # a node run several times is reported once
        session.run(None, {"x": np.ones((2, 16), np.float32)})
    path = session.end_profiling()
    events = json.loads(Path(path).read_text())
    placement = read_profile(path)
    assert {n: i["op"] for n, i in placement.items()} == _graph_nodes(models["int8"])
    # Same events as an accelerator would write them: the provider field is what counts.
    first = next(iter(placement))
    relabelled = [dict(e, args=dict(e.get("args", {}), provider="CUDAExecutionProvider"))
                  if e.get("name") == f"{first}_kernel_time" else e for e in events]
    assert parse_profile(relabelled)[first]["provider"] == "CUDAExecutionProvider"
    assert all(i["provider"] == "CPUExecutionProvider" for n, i in parse_profile(relabelled).items() if n != first)
    # Session events (model_run, ...) are not nodes.
    assert not any(name in placement for name in ("model_run", "session_initialization"))


def test_model_format_and_provider_advice(models):
    from onnxlite.placement import format_advice, model_format

    assert model_format(models["fp32"]) == "fp32"
    assert model_format(models["int8"]) == "qoperator"
    assert format_advice("cpu", "qoperator") is None
    advice = format_advice("cuda", "qoperator")
    assert advice and "CUDAExecutionProvider" in advice and "qoperator" in advice
    assert "qdq" in format_advice("tensorrt", "qoperator")


def test_unavailable_provider_is_a_clear_error_not_a_silent_cpu_run(models):
    import onnxruntime as ort

    from onnxlite import UsageError
    from onnxlite.runtime import SessionSettings, create_session

    assert "CUDAExecutionProvider" not in ort.get_available_providers()  # this machine has no GPU build
    with pytest.raises(UsageError, match="onnxruntime-gpu"):
        create_session(models["fp32"], SessionSettings(provider="cuda"))
    result = run_cli("compare", str(models["fp32"]), str(models["int8"]), "--provider", "cuda")
    assert result.returncode == 2
    assert "pip install onnxruntime-gpu" in result.stderr
    assert "Traceback" not in result.stderr
    result = run_cli("compare", str(models["fp32"]), str(models["int8"]), "--provider", "tensorrtt")
    assert result.returncode == 2 and "did you mean 'tensorrt'" in result.stderr


def test_live_check_explains_a_missing_provider_and_cpu_options_are_passed_through():
    from onnxlite import get_registry

    registry = get_registry()
    cpu = registry.get("provider", "cpu").create()
    assert cpu.check() is None
    assert cpu.session_providers({}) == [("CPUExecutionProvider", {})]
    # The live check (not only the cheap distribution check) names the package to install.
    from onnxlite_plugins.providers.onnxruntime_eps import OrtProvider

    cuda = OrtProvider(registry.get("provider", "cuda").spec)
    reason = cuda.check()
    assert reason and "pip install onnxruntime-gpu" in reason
    providers = cuda.session_providers({"device_id": "1"})
    assert providers == [("CUDAExecutionProvider", {"device_id": 1}), ("CPUExecutionProvider", {})]
    from onnxlite import UsageError

    with pytest.raises(UsageError, match="valid: .*device_id"):
        cuda.session_providers({"devcie_id": "1"})


def test_list_plugins_reports_provider_availability():
    result = run_cli("--list-plugins", "--json")
    assert result.returncode == 0, result.stderr
    rows = {r["name"]: r for r in json.loads(result.stdout)["providers"]}
    assert rows["cpu"]["available"] is True
    assert rows["cuda"]["available"] is False and "onnxruntime-gpu" in rows["cuda"]["reason"]
    assert {"device_id", "gpu_mem_limit"} <= {o["name"] for o in rows["cuda"]["options"]}


def test_compare_reports_fallback_per_candidate(models):
    import onnxlite

    result = onnxlite.compare(models["fp32"], [models["int8"]], placement=True, samples=4, batch_size=2)
    candidate = result.candidates[0]
    assert candidate.format == "qoperator"
    assert candidate.cpu_fallback == {}  # asked for the CPU: nothing fell back
    assert result.to_dict()["candidates"][0]["cpu_fallback"] == {}


def _fixed_size_model(path: Path) -> Path:
    """x[batch, 3, h, w] plus a [1, 3, 16, 16] constant: like a detector, it runs only at the size it was built for."""
    from onnx import TensorProto, helper, numpy_helper

    bias = numpy_helper.from_array(np.ones((1, 3, 16, 16), np.float32), "bias")
    graph = helper.make_graph([helper.make_node("Add", ["x", "bias"], ["a"], name="add"),
                               helper.make_node("Relu", ["a"], ["y"], name="relu")], "fixed",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, "h", "w"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3, "h", "w"])], [bias])
    return save_graph(graph, path, ir_version=9)


def test_placement_profiles_on_the_users_data_not_invented_sizes(tmp_path):
    """Issue 12, cause 1, for placement: generated 8x8 images break a graph built for 16x16; the user's do not."""
    from onnxlite.data import load_data
    from onnxlite.errors import UsageError
    from onnxlite.inputs import specs_from_onnx
    from onnxlite.placement import placement_report, sample_feeds
    from onnxlite.runtime import SessionSettings

    model = _fixed_size_model(tmp_path / "fixed.onnx")
    data = tmp_path / "images.npz"
    np.savez(data, x=np.random.default_rng(0).standard_normal((5, 3, 16, 16)).astype(np.float32))
    settings = SessionSettings(provider="cpu", graph_optimization="disable")
    with pytest.raises(UsageError, match=r"generated samples x\[2, 3, 8, 8\].*give data of the sizes it takes"):
        placement_report(model, settings, runs=1)
    for given in (data, load_data(data, specs_from_onnx(model))):   # a data path or a Dataset
        feeds, generated = sample_feeds(model, given)
        assert not generated and feeds["x"].shape == (2, 3, 16, 16)
        report = placement_report(model, settings, feeds=given, runs=1)
        assert {n.name for n in report.nodes} == {"add", "relu"} and report.fallback == ()


def test_placement_cuts_the_users_batch_on_each_inputs_sample_axis(tmp_path):
    """lighten's fallback report sliced v[:batch]: a state [2, batch, 8] kept every sample and a scalar raised."""

    from onnxlite.placement import first_samples, placement_report
    from onnxlite.runtime import SessionSettings

    model = streaming_model(tmp_path / "stream.onnx")
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((12, 16)).astype(np.float32),
             "state": rng.standard_normal((2, 12, 8)).astype(np.float32), "sr": np.array(16000, np.int64)}
    first = first_samples(feeds, 4, model_path=model)   # the sample axes read from the model's inputs
    assert first["x"].shape == (4, 16) and first["state"].shape == (2, 4, 8) and first["sr"].shape == ()
    np.testing.assert_array_equal(first["state"], feeds["state"][:, :4])
    # the model adds a projection of x to the state, so only a consistent cut runs
    report = placement_report(model, SessionSettings(provider="cpu"), feeds=first, runs=1)
    assert report.nodes and report.fallback == ()
    assert first_samples(feeds, 4, {"state": 1, "sr": None})["state"].shape == (2, 4, 8)


needs_openvino = pytest.mark.skipif(
    "OpenVINOExecutionProvider" not in __import__("onnxruntime").get_available_providers(),
    reason="this onnxruntime build has no OpenVINO EP (CI's second-provider job runs this file with it)")


@needs_openvino
def test_lighten_profiles_the_fallback_on_the_judges_sample_axes(tmp_path):
    """lighten's fallback report cut the judge's samples on the model's own axes (state axis 0, by its dims),
    not on the judge's (axis 1, from --input): the profile failed and no row said what fell back."""
    import onnxlite
    from onnxlite.inputs import batch_axes, parse_input_spec, specs_from_onnx
    from onnxlite.runtime import SessionSettings

    model = state_on_axis_one_by_the_users_word(tmp_path / "stream.onnx")
    assert batch_axes(specs_from_onnx(model))["state"] == 0   # what the report fell back to
    inputs = [parse_input_spec("x:float32[batch,16]"), parse_input_spec("state:float32[2,batch,8]")]
    result = onnxlite.lighten(model, tmp_path / "out", inputs=inputs, settings=SessionSettings(provider="openvino"),
                              strategies=["dynamic"], max_drop="50%", batch=4, runs=3, partial=False)
    benchmarked = [r for r in result.candidates if r.latency_ms is not None]
    assert benchmarked, [(r.name, r.status, r.reason) for r in result.candidates]
    for row in benchmarked:
        assert "ran on the CPU instead of OpenVINOExecutionProvider" in row.reason, (row.name, row.reason)
