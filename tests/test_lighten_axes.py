"""lighten with data whose sample axis only the user's --input names (not the model's own dims)."""

import numpy as np

# x[batch, 16] and a state ["layers", "frames", 8] whose samples only --input state:float32[2,batch,8] puts
# on axis 1 (the model's own dims read as axis 0); the state's update only runs on a consistent cut
from helpers import state_on_axis_one_by_the_users_word


def test_candidates_calibrate_on_the_users_sample_axes(tmp_path):
    """Each candidate's quantize re-read the calibration file on the model's own axes (state axis 0: 2
    samples against x's 16) and every candidate failed with 'inputs disagree on the number of samples'."""
    import onnxlite
    from onnxlite.inputs import batch_axes, parse_input_spec, specs_from_onnx

    model = state_on_axis_one_by_the_users_word(tmp_path / "stream.onnx")
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
