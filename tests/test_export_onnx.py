"""ONNX passthrough, framework detection, source loading, verification and sample sets."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

import onnxlite
from onnxlite.errors import UsageError

MODELS = Path(__file__).parent / "export_models.py"


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def linear_model(rows: int = 16, cols: int = 8):
    """y = x @ W + b with a dynamic batch, and argmax ids as a second output."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((rows, cols)).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal(cols).astype(np.float32), "b")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["xw"]), helper.make_node("Add", ["xw", "b"], ["y"]),
         helper.make_node("ArgMax", ["y"], ["ids"], axis=1, keepdims=0)],
        "linear", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", rows])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", cols]),
         helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch"])], [w, b])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture
def onnx_file(tmp_path):
    import onnx

    path = tmp_path / "src" / "linear.onnx"
    path.parent.mkdir()
    onnx.save(linear_model(), str(path))
    return path


def test_passthrough_is_checked_verified_and_tagged(onnx_file, tmp_path):
    import onnx

    before = digest(onnx_file)
    result = onnxlite.export(onnx_file, tmp_path / "out.onnx")
    assert result.framework == "onnx" and result.exporter == "passthrough" and result.verified
    assert result.opset == 17 and result.inputs == ["x:float32[batch,16]"]
    rows = {r["output"]: r for r in result.rows}
    assert rows["ids"]["exact"] and rows["y"]["max_abs_diff"] == 0
    meta = {p.key: p.value for p in onnx.load(str(result.path)).metadata_props}
    assert meta["onnxlite.framework"] == "onnx" and meta["onnxlite.source"] == str(onnx_file)
    assert digest(onnx_file) == before


def test_passthrough_keeps_external_data(tmp_path):
    import onnx

    src = tmp_path / "src" / "big.onnx"
    src.parent.mkdir()
    onnx.save_model(linear_model(64, 64), str(src), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="big.weights", size_threshold=0)
    before = {p.name: digest(p) for p in src.parent.iterdir()}
    result = onnxlite.export(src, tmp_path / "out.onnx")
    assert result.verified and (tmp_path / "out.onnx.data").exists()
    assert result.size_bytes > (tmp_path / "out.onnx").stat().st_size
    assert before == {p.name: digest(p) for p in src.parent.iterdir()}


def test_corrupt_and_missing_onnx_are_usage_errors(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"this is not a protobuf at all")
    with pytest.raises(UsageError, match="bad.onnx"):
        onnxlite.export(bad, tmp_path / "out.onnx")
    with pytest.raises(UsageError, match="missing.onnx: no such file"):
        onnxlite.export(tmp_path / "missing.onnx", tmp_path / "out.onnx")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.onnx"]


def test_refuses_to_overwrite_its_source(onnx_file):
    before = digest(onnx_file)
    with pytest.raises(UsageError, match="would replace the input "):
        onnxlite.export(onnx_file, onnx_file)
    assert digest(onnx_file) == before


def test_detect_framework(onnx_file, tmp_path):
    from onnxlite.conversion.sources import detect_framework

    assert detect_framework(str(onnx_file)) == "onnx"
    weights = tmp_path / "w.pth"
    weights.write_bytes(b"")
    assert detect_framework(str(weights)) == "pytorch"
    assert detect_framework(f"{MODELS}:cnn") == "pytorch"
    assert detect_framework(f"{MODELS}:make_two_in_two_out") == "pytorch"
    other = tmp_path / "notes.txt"
    other.write_text("hello")
    with pytest.raises(UsageError, match="cannot tell which framework.*tried .*onnx.*pytorch"):
        detect_framework(str(other))
    with pytest.raises(UsageError, match="no such file"):
        detect_framework(str(tmp_path / "nope.pt"))
    with pytest.raises(UsageError, match="neither a PyTorch nor a TensorFlow"):
        detect_framework(f"{MODELS}:not_a_model")


def test_load_source_python_ref_runs_and_asks_for_inputs():
    from onnxlite.conversion.sources import load_source
    from onnxlite.inputs import parse_input_spec

    loaded = load_source(f"{MODELS}:argmax_net")
    assert loaded.framework == "pytorch"
    with pytest.raises(UsageError, match="--input"):
        _ = loaded.input_specs
    given = load_source(f"{MODELS}:argmax_net", options={"inputs": [parse_input_spec("x:float32[batch,10]")]})
    assert [str(s) for s in given.input_specs] == ["x:float32[batch,10]"]
    out = given.model.run({"x": np.ones((2, 10), np.float32)})
    assert list(out) == ["output"] and out["output"].dtype == np.int64


def test_verify_reports_per_output_and_fails_beyond_tolerance(onnx_file):
    from onnxlite.conversion.export import sample_sets
    from onnxlite.conversion.sources import load_source
    from onnxlite.conversion.verify import verify

    loaded = load_source(str(onnx_file))
    feeds = sample_sets(loaded.input_specs)
    good = verify(loaded.model, onnx_file, feeds)
    assert good.passed and len(good.rows) == 4
    # A reference that is off by a little more than atol must fail, with the numbers in the message.
    shifted = [{"y": out["y"] + 1e-3, "ids": out["ids"]} for out in (loaded.model.run(f) for f in feeds)]
    bad = verify(None, onnx_file, feeds, atol=1e-4, rtol=0, references=shifted)
    assert not bad.passed and [r.output for r in bad.failures()] == ["y", "y"]
    assert "max |diff| 0.001" in bad.message()
    wrong_ids = [{"y": out["y"], "ids": out["ids"] + 1} for out in (loaded.model.run(f) for f in feeds)]
    exact = verify(None, onnx_file, feeds, references=wrong_ids)
    assert not exact.passed and all(r.exact for r in exact.failures())
    assert exact.to_dict()["passed"] is False


def test_sample_sets_use_user_samples_and_check_them():
    from onnxlite.conversion.export import sample_sets
    from onnxlite.inputs import parse_input_spec

    specs = [parse_input_spec("x:float32[batch,16]")]
    x = np.arange(48, dtype=np.float32).reshape(3, 16)
    sets = sample_sets(specs, {"x": x})
    assert [s["x"].shape for s in sets] == [(3, 16), (1, 16)] and sets[0]["x"] is x
    with pytest.raises(UsageError, match="size 15 on axis 1"):
        sample_sets(specs, {"x": np.zeros((2, 15), np.float32)})
    synthetic = sample_sets([parse_input_spec("img:float32[batch,3,h,w]")])
    assert [s["img"].shape for s in synthetic] == [(2, 3, 8, 9), (3, 3, 5, 6)]
