"""Issue 12's root causes, each on a tiny model built here that has the trait the real model had.

Paddle2ONNX writes weights as ``Constant`` nodes at opset 12; detectors need particular spatial
sizes; streaming models take a scalar and a state whose batch axis is 1.  Each test runs the real
quantizers and onnxruntime on such a graph.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import onnxlite

from conftest import save_graph
from helpers import calibration_npz, fixed_size_detector


def _const(name: str, array: np.ndarray) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(array.astype(np.float32), name))


def _paddle_like(path, opset: int = 12):
    """Conv -> Relu -> pool -> MatMul with every weight in a Constant node, as Paddle2ONNX writes them."""
    rng = np.random.default_rng(0)
    nodes = [_const("w", rng.standard_normal((8, 3, 3, 3))), _const("b", rng.standard_normal(8)),
             helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]), helper.make_node("GlobalAveragePool", ["r"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"]), _const("w2", rng.standard_normal((8, 32))),
             helper.make_node("MatMul", ["f", "w2"], ["y"])]
    graph = helper.make_graph(nodes, "paddle_like",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, "h", "w"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 32])])
    save_graph(graph, path, opset)
    return path


def test_constant_weights_are_normalised_and_quantized(tmp_path):
    model = _paddle_like(tmp_path / "m.onnx", opset=13)
    before = model.read_bytes()
    result = onnxlite.quantize(model, tmp_path / "q.onnx", "dynamic", force=True)
    # Before: "quantized ops: none" at 1.00x, silently.  The MatMul's weight is an initializer now.
    assert result.quantized_ops.get("MatMulInteger") == 1, result.quantized_ops
    assert result.details["normalized"]["lifted_constants"] == 3
    assert any("normalised first" in n and "lifted to initializers" in n for n in result.notes), result.notes
    assert model.read_bytes() == before   # the user's file is never written
    # static QDQ on the same graph: onnxruntime alone stops with "Expected w to be an initializer"
    static = onnxlite.quantize(model, tmp_path / "s.onnx", "static", force=True,
                               calibration=str(calibration_npz(tmp_path / "cal.npz")))
    assert static.quantized_ops.get("QuantizeLinear"), static.quantized_ops


def test_opset12_gets_per_channel_qdq_after_raising_the_opset(tmp_path):
    model = _paddle_like(tmp_path / "m12.onnx", opset=12)
    result = onnxlite.quantize(model, tmp_path / "q.onnx", "static", force=True, per_channel=True,
                               calibration=str(calibration_npz(tmp_path / "cal.npz")))
    normalized = result.details["normalized"]
    assert (normalized["opset_before"], normalized["opset_after"]) == (12, 13), normalized
    produced = onnx.load(str(result.path))
    axes = [a for n in produced.graph.node if n.op_type == "DequantizeLinear" for a in n.attribute if a.name == "axis"]
    assert axes, "per-channel DequantizeLinear carries an axis"
    ort.InferenceSession(str(result.path), providers=["CPUExecutionProvider"])   # loads (it did not at opset 12)
    assert result.details["check"]["ran"] and result.details["check"]["samples"] == "user data"


def test_opset12_falls_back_to_per_tensor_when_the_converter_cannot(tmp_path, monkeypatch):
    import onnxlite.normalize as normalize

    monkeypatch.setattr(normalize, "raise_opset", lambda model, target: (model, "RuntimeError: no adapter"))
    warnings: list[str] = []
    result = onnxlite.quantize(_paddle_like(tmp_path / "m12.onnx"), tmp_path / "q.onnx", "static", force=True,
                               per_channel=True, calibration=str(calibration_npz(tmp_path / "cal.npz")),
                               on_warning=warnings.append)
    assert result.options["per_channel"] is False and result.details["normalized"]["per_channel_fallback"]
    assert any("per_channel off (per tensor)" in w and "opset 12" in w for w in warnings), warnings
    assert "opset 12 kept" in result.details["normalized"]["summary"]
    produced = onnx.load(str(result.path))
    assert not [n for n in produced.graph.node if n.op_type == "DequantizeLinear"
                and any(a.name == "axis" for a in n.attribute)]
    ort.InferenceSession(str(result.path), providers=["CPUExecutionProvider"])


def test_checks_run_on_the_users_sizes(tmp_path):
    model = fixed_size_detector(tmp_path / "det.onnx")
    data = calibration_npz(tmp_path / "data.npz", (24, 3, 16, 16))
    # quantize's smoke check: on the calibration data's sizes, and never blaming the strategy for sizes it invented
    warnings: list[str] = []
    plain = onnxlite.quantize(model, tmp_path / "d.onnx", "dynamic", force=True, on_warning=warnings.append)
    assert plain.details["check"]["ran"] is False and any("generated samples" in w for w in warnings), warnings
    checked = onnxlite.quantize(model, tmp_path / "d2.onnx", "dynamic", force=True, check_data=str(data))
    assert checked.details["check"]["ran"] and checked.details["check"]["samples"] == "user data"
    # lighten: the export check and every candidate's smoke check run on the user's 16x16 samples
    result = onnxlite.lighten(str(model), tmp_path / "out", data=str(data), strategies=["dynamic", "static"],
                              max_drop="5%", runs=3, partial=False)
    assert "[2, 3, 8" not in result.message
    failed = [(r.name, r.reason) for r in result.candidates if r.status == "failed"]
    assert not failed, failed
    feed_sets = {row["feed_set"] for row in result.export["verification"]["rows"]}
    assert feed_sets and all("8, 9" not in s for s in feed_sets), feed_sets
    assert any(r.name == "static[method=MinMax,per_channel=true,format=QDQ,op_types=Conv]" for r in result.candidates)


def test_verdict_says_within_budget_but_not_lighter():
    from onnxlite.search.choose import no_winner_message
    from onnxlite.search.results import CandidateRow

    rows = [CandidateRow(name=n, strategy="dynamic", options={}, status="rejected", size_bytes=990,
                         reason="within budget but not lighter: 0.99x the float size") for n in ("a", "b")]
    message = no_winner_message(rows, 1000)
    assert "no candidate stayed within the accuracy budget" not in message
    assert "every candidate stayed within the accuracy budget, but none is lighter than fp32" in message
    assert "0.99x" in message
    over = CandidateRow(name="c", strategy="static", options={}, status="rejected", over_budget=True, size_bytes=300)
    failed = CandidateRow(name="d", strategy="int4", options={}, status="failed", reason="boom")
    mixed = no_winner_message([*rows, over, failed], 1000)
    assert "1 over the accuracy budget" in mixed and "2 within the budget but not lighter" in mixed
    assert "1 failed before they could be judged" in mixed
    assert no_winner_message([over], 1000).startswith(
        "nothing qualifies: no candidate stayed within the accuracy budget")


def test_lighten_normalises_once_and_reads_the_family_after(tmp_path):
    """The Paddle-like graph is read as conv after normalisation (static and the Conv-only grid are tried)."""
    model = _paddle_like(tmp_path / "m12.onnx", opset=12)
    data = calibration_npz(tmp_path / "data.npz", (24, 3, 16, 16))
    result = onnxlite.lighten(str(model), tmp_path / "out", data=str(data), strategies=None, max_drop="5%",
                              runs=3, partial=False)
    assert "normalised before quantizing: opset 12 raised to 13" in result.message, result.message
    tried = {r.strategy for r in result.candidates}
    assert "static" in tried and "fp16" in tried, tried
    static = [r for r in result.candidates if r.strategy == "static"]
    assert all(r.status != "failed" for r in static), [(r.name, r.reason) for r in static]
    # the candidates' own quantize runs found nothing left to normalise (it was done once, on fp32.onnx)
    assert all("normalized" not in (r.quantize.get("details") or {}) for r in result.candidates)


def _streaming_cell(path):
    """A VAD-like cell: ``input[batch, 16]``, a state ``[2, batch, 8]`` (batch on axis 1) and a scalar ``sr``."""
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32), "W"),
             numpy_helper.from_array(rng.standard_normal((8, 1)).astype(np.float32), "V")]
    nodes = [helper.make_node("MatMul", ["input", "W"], ["h"]),
             helper.make_node("Cast", ["sr"], ["srf"], to=TensorProto.FLOAT),
             helper.make_node("Div", ["h", "srf"], ["hs"]),
             helper.make_node("Add", ["state", "hs"], ["s1"]),       # [2, b, 8] + [b, 8]: only with batch on axis 1
             helper.make_node("Tanh", ["s1"], ["stateN"]),
             helper.make_node("ReduceMean", ["stateN"], ["m"], axes=[0], keepdims=0),
             helper.make_node("MatMul", ["m", "V"], ["o"]), helper.make_node("Sigmoid", ["o"], ["output"])]
    graph = helper.make_graph(
        nodes, "cell",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 16]),
         helper.make_tensor_value_info("state", TensorProto.FLOAT, [2, "batch", 8]),
         helper.make_tensor_value_info("sr", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", 1]),
         helper.make_tensor_value_info("stateN", TensorProto.FLOAT, [2, "batch", 8])], initializer=inits)
    save_graph(graph, path)
    return path


def _stream_data(path, count=40, seed=4):
    rng = np.random.default_rng(seed)
    np.savez(path, input=rng.standard_normal((count, 16)).astype(np.float32),
             state=rng.standard_normal((2, count, 8)).astype(np.float32), sr=np.array(16000, dtype=np.int64))
    return path


def test_input_specs_know_each_inputs_batch_axis():
    from onnxlite.inputs import make_feeds, parse_input_spec, specs_from_onnx

    state, sr = parse_input_spec("state:float32[2,batch,128]"), parse_input_spec("sr:int64[]=16000")
    assert (state.batch_axis, sr.batch_axis, sr.value, str(sr)) == (1, None, 16000, "sr:int64[]=16000")
    feeds = make_feeds([parse_input_spec("input:float32[batch,512]"), state, sr], batch=3, seq=8)
    assert feeds["state"].shape == (2, 3, 128) and feeds["sr"].shape == () and int(feeds["sr"]) == 16000
    # an exporter that leaves the state's batch dim unnamed ([2, ?, 128], as silero_vad.onnx): the first dynamic axis
    graph = helper.make_graph([helper.make_node("Identity", ["s"], ["o"])], "g",
                              [helper.make_tensor_value_info("s", TensorProto.FLOAT, [2, None, 128])],
                              [helper.make_tensor_value_info("o", TensorProto.FLOAT, None)])
    assert specs_from_onnx(helper.make_model(graph))[0].batch_axis == 1


def test_data_with_a_scalar_and_a_state_batched_on_axis_1(tmp_path):
    from onnxlite.data import load_data
    from onnxlite.inputs import specs_from_onnx

    specs = specs_from_onnx(_streaming_cell(tmp_path / "cell.onnx"))
    data = load_data(_stream_data(tmp_path / "d.npz", 10), specs)   # was: IndexError: tuple index out of range
    assert len(data) == 10
    batches = list(data.batches(4))
    assert [b["state"].shape for b in batches] == [(2, 4, 8), (2, 4, 8), (2, 2, 8)]
    assert all(b["sr"].shape == () for b in batches)
    part = data.slice(2, 5)
    assert len(part) == 3 and part.arrays["state"].shape == (2, 3, 8)
    # feed dicts from Python take what InferenceSession.run takes: a scalar sr is accepted
    module = tmp_path / "feeds.py"
    module.write_text("import numpy as np\n"
                      "rng = np.random.default_rng(0)\n"
                      "FEEDS = [{'input': rng.standard_normal((3, 16)).astype(np.float32),\n"
                      "          'state': np.zeros((2, 3, 8), np.float32), 'sr': np.int64(16000)} for _ in range(2)]\n")
    python = load_data(f"{module}:FEEDS", specs)
    assert len(python) == 6 and next(python.batches(5))["state"].shape == (2, 5, 8)


def test_streaming_cell_runs_through_compare_and_lighten(tmp_path):
    """compare and lighten batch the state on its axis 1 and feed sr whole; and the verdict, when every
    candidate of this 940-byte model is within budget but none is lighter, says exactly that."""
    model = _streaming_cell(tmp_path / "cell.onnx")
    data = _stream_data(tmp_path / "d.npz")
    quantized = onnxlite.quantize(model, tmp_path / "q.onnx", "dynamic", force=True, check_data=str(data))
    report = onnxlite.compare(str(model), [quantized.path], data=str(data))
    assert report.to_dict()["samples"] == 40
    result = onnxlite.lighten(str(model), tmp_path / "out", data=str(data), strategies=["dynamic", "fp16"],
                              max_drop="5%", runs=3, partial=False)
    failed = [(r.name, r.reason) for r in result.candidates if r.status == "failed"]
    assert not failed, failed
    assert all(r.status == "rejected" and not r.over_budget for r in result.candidates), \
        [(r.name, r.status, r.reason) for r in result.candidates]
    assert result.message.startswith("nothing qualifies: every candidate stayed within the accuracy budget, "
                                      "but none is lighter than fp32"), result.message


def test_static_calibration_is_bounded_by_the_memory_available(tmp_path, monkeypatch):
    import onnxlite.inputs as inputs
    from onnxlite_plugins.quantizers.static import activation_bytes

    model = _paddle_like(tmp_path / "m.onnx", opset=13)
    cal = calibration_npz(tmp_path / "cal.npz", (12, 3, 32, 32))
    per_sample = activation_bytes(onnx.load(str(model)), {"x": np.zeros((1, 3, 32, 32), np.float32)})
    # Conv, Relu (8x32x32 floats each), pool, flatten and MatMul outputs of one 32x32 sample
    assert per_sample >= 2 * 8 * 32 * 32 * 4
    # a machine with room for three samples' activations (at the 25% share, twice each)
    monkeypatch.setattr(inputs, "available_memory", lambda: int(per_sample * 2 * 3 / 0.25) + 1)
    warnings: list[str] = []
    result = onnxlite.quantize(model, tmp_path / "s.onnx", "static", force=True, calibration=str(cal),
                               on_warning=warnings.append)
    memory = result.details["calibration_memory"]
    assert memory["limited"] and memory["samples_at_once"] == 3, memory
    assert result.details["calibration_batch_size"] == 3
    assert result.details["calibration_samples"] == 12   # every sample still calibrates, three at a time
    assert any("calibration holds 3 sample(s) at once" in w for w in warnings), warnings
    # with the memory this machine has, nothing is limited for so small a model
    monkeypatch.undo()
    roomy = onnxlite.quantize(model, tmp_path / "s2.onnx", "static", force=True, calibration=str(cal))
    assert not roomy.details["calibration_memory"]["limited"]
    # MinMax ranges folded stride by stride are the ranges of all samples at once: the same scales
    def scales(path):
        return {t.name: numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer if "scale" in t.name}

    bounded, unbounded = scales(result.path), scales(roomy.path)
    assert bounded.keys() == unbounded.keys() and bounded
    assert all(np.allclose(bounded[k], unbounded[k]) for k in bounded)


def test_batch_axis_rule_keeps_a_fixed_batch_of_one_first():
    from onnxlite.inputs import InputSpec, make_feeds

    assert InputSpec("ids", "int64", (1, "dim1")).batch_axis == 0           # batch 1, dynamic sequence
    state = InputSpec("state", "float32", (2, "dim1", 128))               # silero_vad.onnx: nothing named
    assert state.batch_axis == 1
    audio = InputSpec("input", "float32", ("batch", "dim1"))
    feeds = make_feeds([audio, state], batch=3, seq=8, sizes={"batch": 3, "dim1": 8})
    assert feeds["input"].shape == (3, 8) and feeds["state"].shape == (2, 3, 128)


def test_a_fixed_batch_of_one_is_judged_and_benchmarked_one_sample_at_a_time(tmp_path):
    """An Ultralytics export takes images[1, 3, 1024, 1024]: the judge ran it in batches of 8 and failed."""
    model = fixed_size_detector(tmp_path / "one.onnx", batch=1)
    data = calibration_npz(tmp_path / "data.npz", (20, 3, 16, 16))
    result = onnxlite.lighten(str(model), tmp_path / "out", data=str(data), strategies=["static", "fp16"],
                              max_drop="5%", runs=3, partial=False)
    failed = [(r.name, r.reason) for r in result.candidates if r.status == "failed"]
    assert not failed, failed
    assert result.winner is not None, result.message   # fp16 at least: half the size, the same answers
    assert result.settings["bench_batch"] == 1 and result.settings["held_out_samples"] == 12
