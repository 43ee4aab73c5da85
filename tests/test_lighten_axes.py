"""lighten with data whose sample axis only the user's --input names (not the model's own dims)."""

from pathlib import Path

import numpy as np

from conftest import save_graph


def _state_model(path: Path) -> Path:
    """x[batch, 16] and a state ["layers", "frames", 8] whose dims say nothing of its batch (read as axis 0).

    Only ``--input state:float32[2,batch,8]`` says its samples lie on axis 1; the update adds a projection
    of x to the state, so feeds cut on axis 0 do not run.
    """
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((16, 32)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32), "w2"),
             numpy_helper.from_array(np.array([0], np.int64), "axis0")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="fc"),
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


def test_candidates_calibrate_on_the_users_sample_axes(tmp_path):
    """Each candidate's quantize re-read the calibration file on the model's own axes (state axis 0: 2
    samples against x's 16) and every candidate failed with 'inputs disagree on the number of samples'."""
    import onnxlite
    from onnxlite.inputs import batch_axes, parse_input_spec, specs_from_onnx

    model = _state_model(tmp_path / "stream.onnx")
    assert batch_axes(specs_from_onnx(model))["state"] == 0
    rng = np.random.default_rng(1)
    for name, count in (("calibration", 16), ("heldout", 24)):
        np.savez(tmp_path / f"{name}.npz", x=rng.standard_normal((count, 16)).astype(np.float32),
                 state=rng.standard_normal((2, count, 8)).astype(np.float32))
    inputs = [parse_input_spec("x:float32[batch,16]"), parse_input_spec("state:float32[2,batch,8]")]
    result = onnxlite.lighten(model, tmp_path / "out", inputs=inputs, data=str(tmp_path / "heldout.npz"),
                              calibration=str(tmp_path / "calibration.npz"), strategies=["dynamic", "static"],
                              max_drop="50%", batch=4, runs=2, partial=False)
    rows = {r.name: r for r in result.candidates}
    failed = {n: r.reason for n, r in rows.items() if r.status == "failed"}
    assert failed == {}, failed
    assert any(r.strategy == "static" for r in rows.values())
