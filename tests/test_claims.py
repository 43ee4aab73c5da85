"""The host reads what a quantizer really wrote and compares it with what the plugin said (onnxlite.claims)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxlite.claims import check_claims, node_states


def _mlp() -> onnx.ModelProto:
    """MatMul -> Relu -> Gemm: the Gemm is the node onnxruntime's quantize_dynamic will not leave alone."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((16, 32)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.standard_normal((32, 8)).astype(np.float32), "w2"),
             numpy_helper.from_array(np.zeros(8, np.float32), "b2")]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="mm"),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("Gemm", ["r", "w2", "b2"], ["y"], name="head")]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 8])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _dynamic(model: onnx.ModelProto, tmp_path, exclude=()) -> onnx.ModelProto:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    src, out = tmp_path / "m.onnx", tmp_path / "m.q.onnx"
    onnx.save(model, src)
    quantize_dynamic(str(src), str(out), weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul", "Gemm"],
                     nodes_to_exclude=list(exclude))
    return onnx.load(out)


def test_dynamic_states_follow_the_written_model(tmp_path):
    model = _mlp()
    assert node_states(model, _dynamic(model, tmp_path)) == {"mm": True, "head": True}
    assert node_states(model, _dynamic(model, tmp_path, ["mm"])) == {"mm": False, "head": True}
    assert node_states(model, model) == {"mm": False, "head": False}


def test_excluded_gemm_that_onnxruntime_quantized_is_caught(tmp_path):
    """quantize_dynamic (onnxruntime 1.32) ignores nodes_to_exclude for a Gemm: a claim of 'float' is false."""
    model = _mlp()
    written = _dynamic(model, tmp_path, ["head"])
    check = check_claims(model, written, claimed_float=["head"])
    assert not check.ok
    assert check.claimed_float_but_quantized == ("head",)
    assert "head" in check.message("dynamic") and "quantized" in check.message("dynamic")
    # a truthful claim about the MatMul passes
    honest = check_claims(model, _dynamic(model, tmp_path, ["mm"]), claimed_float=["mm"], requested_float=["mm"])
    assert honest.ok and honest.message("dynamic") == ""
    assert honest.to_dict()["quantized"] == 1 and honest.to_dict()["kept_float"] == 1


def test_a_requested_exclusion_that_did_not_happen_is_caught(tmp_path):
    model = _mlp()
    check = check_claims(model, _dynamic(model, tmp_path, ["head"]), claimed_float=[], requested_float=["head"])
    assert check.requested_float_but_quantized == ("head",)
    assert "asked to keep" in check.message("dynamic")


@pytest.mark.parametrize("fmt", ["QDQ", "QOperator"])
def test_static_qdq_and_qoperator(tmp_path, fmt):
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

    model = _mlp()
    src, out = tmp_path / "m.onnx", tmp_path / "m.s.onnx"
    onnx.save(model, src)
    rng = np.random.default_rng(1)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.items = iter([{"x": rng.standard_normal((1, 16)).astype(np.float32)} for _ in range(8)])

        def get_next(self):
            return next(self.items, None)

    quantize_static(str(src), str(out), Reader(), quant_format=getattr(QuantFormat, fmt), nodes_to_exclude=["mm"])
    assert node_states(model, onnx.load(out)) == {"mm": False, "head": True}


def test_an_excluded_node_between_quantized_ones_stays_float_in_qdq(tmp_path):
    """QDQ puts Q/DQ on the excluded node's output (its consumer is quantized), named after that tensor:
    that is not the excluded node being quantized."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

    rng = np.random.default_rng(2)
    inits = [numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), f"w{i}") for i in range(3)]
    nodes = [helper.make_node("MatMul", ["x", "w0"], ["a"], name="first"),
             # named as torch.onnx names outputs: "<node>_output_0"
             helper.make_node("MatMul", ["a", "w1"], ["first_mid_output_0"], name="first_mid"),
             helper.make_node("MatMul", ["first_mid_output_0", "w2"], ["y"], name="last")]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 8])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    src, out = tmp_path / "chain.onnx", tmp_path / "chain.qdq.onnx"
    onnx.save(model, src)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.items = iter([{"x": rng.standard_normal((1, 8)).astype(np.float32)} for _ in range(8)])

        def get_next(self):
            return next(self.items, None)

    quantize_static(str(src), str(out), Reader(), quant_format=QuantFormat.QDQ, nodes_to_exclude=["first_mid"])
    written = onnx.load(out)
    assert any(n.op_type == "QuantizeLinear" and n.name.startswith("first_mid_") for n in written.graph.node)
    assert node_states(model, written) == {"first": True, "first_mid": False, "last": True}
    assert check_claims(model, written, claimed_float=["first_mid"], requested_float=["first_mid"]).ok


def test_fp16_conversion_counts_as_converted_and_a_blocked_node_as_float():
    from onnxruntime.transformers.float16 import convert_float_to_float16

    model = _mlp()
    converted = convert_float_to_float16(model, keep_io_types=True, node_block_list=["head"])
    assert node_states(model, converted) == {"mm": True, "head": False}


def test_a_fused_node_is_unknown_never_a_lie():
    model = _mlp()
    fused = onnx.ModelProto()
    fused.CopyFrom(model)
    head = next(n for n in fused.graph.node if n.name == "head")
    head.name = "fused_head_and_friends"
    check = check_claims(model, fused, claimed_float=["head"])
    assert check.unknown == ("head",) and check.ok


LIAR = '''
    from onnxlite import Option, QuantizeOutcome, QuantizerSpec, hookimpl

    class Liar:
        """Quantizes every MatMul and Gemm, then says the Gemm stayed float."""

        def quantize(self, model, output, options, context):
            from onnxruntime.quantization import QuantType, quantize_dynamic

            quantize_dynamic(str(model), str(output), weight_type=QuantType.QInt8,
                             op_types_to_quantize=["MatMul", "Gemm"])
            return QuantizeOutcome(excluded_nodes=["head"], notes=["kept the head in float"])

    @hookimpl
    def register_quantizers():
        return [QuantizerSpec(name="liar", description="claims a float head it quantized", factory=Liar,
                              applies_to=("matmul",), options=(Option("exclude", str, (), "ignored", multiple=True),))]
'''


@pytest.fixture
def liar_site(tmp_path):
    from conftest import make_plugin_dist

    return make_plugin_dist(tmp_path / "site", "onnxlite-liar", "0.1", "onnxlite_liar", LIAR)


def test_quantize_warns_when_a_plugin_lies(tmp_path, liar_site):
    import json

    from conftest import run_cli

    model = tmp_path / "mlp.onnx"
    onnx.save(_mlp(), model)
    done = run_cli("quantize", str(model), "-o", str(tmp_path / "q.onnx"), "-s", "liar", "--json", site=liar_site)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert any("reported 1 node(s) (head) as kept in float" in w for w in result["warnings"]), result["warnings"]
    assert result["details"]["claims"]["claimed_float_but_quantized"] == ["head"]
    # the honest built-in with the same exclusion: no warning (it lists the Gemm's MatMul half as well)
    honest = run_cli("quantize", str(model), "-o", str(tmp_path / "d.onnx"), "-s", "dynamic", "--option",
                     "exclude=head", "--json")
    assert honest.returncode == 0, honest.stderr
    assert json.loads(honest.stdout)["details"]["claims"]["message"] == ""


def test_lighten_fails_the_candidate_of_a_lying_plugin(tmp_path, liar_site, fresh_plugins):
    import sys

    import onnxlite

    fresh_plugins.syspath_prepend(str(liar_site))
    fresh_plugins.setenv("PYTHONPATH", str(liar_site))
    model = tmp_path / "mlp.onnx"
    onnx.save(_mlp(), model)
    assert str(liar_site) in sys.path
    result = onnxlite.lighten(str(model), tmp_path / "out", strategies=["liar"], max_drop="50%", runs=2,
                              partial=False)
    assert result.winner is None
    row = next(r for r in result.candidates if r.strategy == "liar")
    assert row.status == "failed"
    assert "reported 1 node(s) (head) as kept in float" in row.reason
