"""runtime_compat: the oldest onnxruntime a model needs, and fitting a model to a --target-runtime.

Pure onnx plus the installed onnxruntime (whatever build it is): tiny models built here.
"""

from __future__ import annotations

import numpy as np
import pytest


def _mlp(opset: int = 17, ir: int | None = None):
    """MatMul -> Add -> Relu, stamped by onnx's helpers (IR 14 with onnx 1.23 unless ``ir`` is given)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"),
         helper.make_node("Add", ["h", "b"], ["z"], name="add"),
         helper.make_node("Relu", ["z"], ["y"], name="relu")],
        "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
        [numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), "W"),
         numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    if ir is not None:
        model.ir_version = ir
    return model


def _run(model, x):
    import onnxruntime as ort

    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def test_needs_of_a_default_onnx_helper_model_and_its_lowest_valid_ir():
    import onnx

    from onnxlite.runtime_compat import runtime_needs

    model = _mlp()
    needs = runtime_needs(model)
    assert needs.ir_version == onnx.IR_VERSION  # what onnx's helpers stamp by default
    assert needs.opsets == {"": 17} and needs.contrib_ops == ()
    # Nothing in an opset-17 float model needs more than IR 8 (onnx's own opset table).
    assert needs.lowest_ir == onnx.helper.find_min_ir_version_for(model.opset_import) == 8
    if onnx.IR_VERSION == 14:
        assert needs.min_onnxruntime == "1.32" and needs.reasons == ("IR 14",)
    old = runtime_needs(_mlp(ir=9))
    assert old.min_onnxruntime == "1.18" and old.reasons == ()
    assert "onnxruntime>=1.18" in old.summary() and "ai.onnx 17" in old.summary()


def test_fit_to_onnxruntime_1_24_lowers_the_ir_and_keeps_the_answers():
    import onnx

    from onnxlite.runtime_compat import fit_to_target, parse_target, problems

    target = parse_target("onnxruntime==1.24")
    assert (target.max_ir, target.max_opset) == (13, 25)
    model = _mlp()
    x = np.random.default_rng(1).standard_normal((3, 8)).astype(np.float32)
    before = _run(_mlp(ir=9), x)  # the same graph stamped with an IR every onnxruntime loads
    if model.ir_version > 13:
        assert problems(model, target) == [f"IR {model.ir_version} (loads IR <= 13)"]
    changes = fit_to_target(model, target)
    assert model.ir_version <= 13 and problems(model, target) == []
    assert changes == ([f"IR {onnx.IR_VERSION} -> 13"] if onnx.IR_VERSION > 13 else [])
    onnx.checker.check_model(model)
    np.testing.assert_array_equal(_run(model, x), before)
    # Already fitting: nothing changes.
    assert fit_to_target(model, target) == []


def test_an_opset_above_the_target_is_converted_down_with_onnx():
    import onnx

    from onnxlite.runtime_compat import fit_to_target, parse_target, runtime_needs

    model = _mlp(opset=26, ir=13)
    assert runtime_needs(model).reasons == ("ai.onnx opset 26",)
    target = parse_target("onnxruntime-openvino==1.24.1")
    changes = fit_to_target(model, target)
    assert changes == ["ai.onnx opset 26 -> 25"]
    assert [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")] == [25]
    assert model.ir_version <= 13
    onnx.checker.check_model(model)
    x = np.ones((2, 8), np.float32)
    np.testing.assert_allclose(_run(model, x), _run(_mlp(opset=17, ir=9), x), rtol=1e-6)


def test_data_types_set_the_lowest_ir_and_a_model_that_cannot_fit_is_refused():
    from onnx import TensorProto, helper

    from onnxlite import OnnxliteError
    from onnxlite.runtime_compat import fit_to_target, lowest_ir, parse_target, problems

    # int4 weights (DequantizeLinear, opset 21) need IR 10: fine for every supported onnxruntime.
    w = helper.make_tensor("W", TensorProto.INT4, [8, 4], np.zeros(32, np.int8).tolist())
    graph = helper.make_graph(
        [helper.make_node("DequantizeLinear", ["W", "s"], ["Wf"]), helper.make_node("MatMul", ["x", "Wf"], ["y"])],
        "int4", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
        [w, helper.make_tensor("s", TensorProto.FLOAT, [], [0.5])])
    int4 = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    assert lowest_ir(int4)[0] == 10
    fit_to_target(int4, parse_target("1.18"))
    assert int4.ir_version == 10

    # An FP4 Cast needs IR 11, which onnxruntime 1.22 cannot load: refused, naming the reason.
    graph = helper.make_graph([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT4E2M1)], "fp4",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT4E2M1, [2])])
    fp4 = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
    assert lowest_ir(fp4)[0] == 11
    target = parse_target("onnxruntime==1.22")
    assert problems(fp4, target) == [f"IR {fp4.ir_version} (loads IR <= 10)"]
    with pytest.raises(OnnxliteError, match=r"loads IR <= 10 but this model needs IR 11 \(FLOAT4E2M1 needs IR 11\)"):
        fit_to_target(fp4, target)


def test_contrib_ops_name_the_release_that_first_has_them():
    from onnx import TensorProto, helper

    from onnxlite.runtime_compat import parse_target, problems, runtime_needs

    def contrib(op: str):
        graph = helper.make_graph([helper.make_node(op, ["x"], ["y"], domain="com.microsoft")], "c",
                                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                        helper.make_opsetid("com.microsoft", 1)])
        model.ir_version = 8
        return model

    nbits = runtime_needs(contrib("MatMulNBits"))
    assert nbits.contrib_ops == ("MatMulNBits",) and nbits.min_onnxruntime == "1.18"
    gather = contrib("GatherBlockQuantized")
    assert runtime_needs(gather).min_onnxruntime == "1.20"
    assert runtime_needs(gather).reasons == ("GatherBlockQuantized (com.microsoft)",)
    assert problems(gather, parse_target("1.19")) == ["com.microsoft GatherBlockQuantized (needs onnxruntime 1.20)"]
    assert problems(gather, parse_target("1.20")) == []


@pytest.mark.parametrize("text", ["onnxruntime", "1", "onnxruntime>=1.24", "torch==2.1", "1.17"])
def test_a_bad_target_is_a_usage_error_naming_the_option(text):
    from onnxlite import UsageError
    from onnxlite.runtime_compat import parse_target

    with pytest.raises(UsageError, match="--target-runtime"):
        parse_target(text)


def test_a_release_between_measured_rows_gets_the_older_rows_limits():
    from onnxlite.runtime_compat import RUNTIMES, parse_target

    newest = max(RUNTIMES)
    later = parse_target(f"{newest[0]}.{newest[1] + 5}")
    assert (later.max_ir, later.max_opset) == RUNTIMES[newest]
    assert parse_target("onnxruntime-gpu==1.31.1").max_ir == 13


def test_the_table_matches_the_installed_onnxruntime():
    """The row for the build installed here is what loading probes in that build really find."""
    from onnxlite.runtime_compat import RUNTIMES, installed_limits

    version, max_ir, max_opset = installed_limits()
    key = tuple(int(p) for p in version.split(".")[:2])
    if key not in RUNTIMES:
        pytest.skip(f"onnxruntime {version} is not in the table")
    assert RUNTIMES[key] == (max_ir, max_opset)


def test_stamp_records_the_minimum_in_the_model():
    from onnxlite.modelio import get_metadata
    from onnxlite.runtime_compat import METADATA_KEY, stamp

    model = _mlp(ir=9)
    needs = stamp(model)
    assert get_metadata(model)[METADATA_KEY] == needs.summary()
    assert needs.summary().startswith("onnxruntime>=1.18 (IR 9; ai.onnx 17)")


def test_quantize_target_runtime_writes_a_model_that_release_loads(tmp_path):
    import json
    import subprocess
    import sys

    import onnx

    from onnxlite.runtime_compat import METADATA_KEY, installed_limits

    source = tmp_path / "mlp.onnx"
    onnx.save(_mlp(ir=installed_limits()[1]), str(source))   # the newest IR the installed build loads
    out = tmp_path / "mlp.int8.onnx"
    cmd = [sys.executable, "-m", "onnxlite", "quantize", str(source), "-o", str(out), "--strategy", "dynamic"]
    result = subprocess.run(cmd + ["--target-runtime", "onnxruntime==1.22", "--json"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    model = onnx.load(str(out))
    assert model.ir_version <= 10   # what onnxruntime 1.22 loads
    meta = {p.key: p.value for p in model.metadata_props}
    assert meta[METADATA_KEY] == json.loads(result.stdout)["details"]["runtime"]
    assert meta[METADATA_KEY].startswith("onnxruntime>=1.")
    bad = subprocess.run(cmd + ["--target-runtime", "onnxruntime>=1.24", "--force"], capture_output=True, text=True)
    assert bad.returncode == 2 and "--target-runtime" in bad.stderr and "Traceback" not in bad.stderr


def test_without_any_onnxruntime_build_commands_say_which_extra_to_install(tmp_path):
    import subprocess
    import sys

    # sys.modules[name] = None makes importlib.util.find_spec report the module as absent.
    hide = "import sys; sys.modules['onnxruntime'] = None; from onnxlite.cli import main; main(sys.argv[1:])"
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", hide, *args], capture_output=True, text=True)

    result = run("quantize", str(tmp_path / "model.onnx"))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "Error: no onnxruntime build is installed: pip install 'onnxlite[cpu]' "
        "(or onnxlite[gpu], onnxlite[openvino], onnxlite[directml] for that build)"]
    assert run("quantize", "--help").returncode == 0   # help needs no runtime
    assert run("--version").returncode == 0
