"""onnxlite.claims' rule for onnxruntime's WeightBiasQuantization, checked against onnxruntime itself.

Each branch of one hand-built QDQ graph feeds a float Conv / ConvTranspose / Gemm in a different way;
onnxruntime (basic level, the optimised model saved) says which ones it gave int8 weights, and the
rule must name exactly those.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxlite.claims import check_claims, node_states, weight_bias_quantization_inputs

from conftest import basic_optimized, save_graph

ort = pytest.importorskip("onnxruntime")
C = 4


def _branches() -> onnx.GraphProto:
    """x -> one branch per case; names say what each float node's neighbourhood is."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(np.float32(0.05), "s"), numpy_helper.from_array(np.uint8(128), "z"),
             numpy_helper.from_array(np.full(C, 0.05, np.float32), "s_axis"),
             numpy_helper.from_array(np.full(C, 128, np.uint8), "z_axis")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"], name="q_in")]
    outputs: list[str] = []

    def weight(name, shape):
        inits.append(numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name))
        return name

    def dq(tag, axis=False):
        out = f"{tag}_in"
        if axis:
            nodes.append(helper.make_node("DequantizeLinear", ["xq", "s_axis", "z_axis"], [out], name=f"{tag}_dq",
                                          axis=1))
        else:
            nodes.append(helper.make_node("DequantizeLinear", ["xq", "s", "z"], [out], name=f"{tag}_dq"))
        return out

    def to_q(tag, tensor):
        nodes.append(helper.make_node("QuantizeLinear", [tensor, "s", "z"], [f"{tag}_q"], name=f"{tag}_oq"))
        nodes.append(helper.make_node("DequantizeLinear", [f"{tag}_q", "s", "z"], [f"{tag}_y"], name=f"{tag}_odq"))
        outputs.append(f"{tag}_y")

    def conv(tag, source, op="Conv", bias=True):
        shape = (C, C, 3, 3)
        ins = [source, weight(f"{tag}_w", shape)] + ([weight(f"{tag}_b", (C,))] if bias else [])
        nodes.append(helper.make_node(op, ins, [f"{tag}_c"], name=tag, pads=[1, 1, 1, 1]))
        return f"{tag}_c"

    to_q("plain", conv("plain", dq("plain")))                       # DQ -> Conv -> Q: re-quantized
    to_q("nobias", conv("nobias", dq("nobias"), bias=False))        # no bias: still re-quantized
    to_q("convt", conv("convt", dq("convt"), op="ConvTranspose"))   # ConvTranspose too
    nodes.append(helper.make_node("Clip", [conv("clip", dq("clip"))], ["clip_r"], name="clip_act"))
    to_q("clip", "clip_r")                                          # Relu / Clip before the Q: still
    nodes.append(helper.make_node("Identity", [dq("ident")], ["ident_i"], name="ident_id"))
    to_q("ident", conv("ident", "ident_i"))                         # an Identity in between does not stop it
    to_q("axis", conv("axis", dq("axis", axis=True)))               # per-axis input scale: left alone
    to_q("floatin", conv("floatin", "x"))                           # float graph input: left alone
    nodes.append(helper.make_node("Relu", [conv("noq", dq("noq"))], ["noq_y"], name="noq_act"))
    outputs.append("noq_y")                                         # no Q after it: left alone
    branch = conv("branch", dq("branch"))
    to_q("branch", branch)
    nodes.append(helper.make_node("Relu", [branch], ["branch_r"], name="branch_act"))
    outputs.append("branch_r")                                      # output branches: left alone
    # Gemm on the flattened input: 2-D bias (legal for Gemm) makes onnxruntime skip it, 1-D does not
    for tag, bias_shape in (("gemm", (C,)), ("gemm2d", (1, C))):
        nodes.append(helper.make_node("DequantizeLinear", ["xq", "s", "z"], [f"{tag}_x4"], name=f"{tag}_dq"))
        nodes.append(helper.make_node("ReduceMean", [f"{tag}_x4"], [f"{tag}_in"], name=f"{tag}_pool",
                                      axes=[2, 3], keepdims=0))
        nodes.append(helper.make_node("QuantizeLinear", [f"{tag}_in", "s", "z"], [f"{tag}_pq"], name=f"{tag}_pq"))
        nodes.append(helper.make_node("DequantizeLinear", [f"{tag}_pq", "s", "z"], [f"{tag}_pd"], name=f"{tag}_pdq"))
        nodes.append(helper.make_node("Gemm", [f"{tag}_pd", weight(f"{tag}_w", (C, C)), weight(f"{tag}_b", bias_shape)],
                                      [f"{tag}_c"], name=tag, transB=1))
        to_q(tag, f"{tag}_c")
    return helper.make_graph(nodes, "branches", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", C, 6, 6])],
                             [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs], inits)


def _given_int8_weights(path, tmp_path) -> set[str]:
    """The float nodes whose weight onnxruntime (basic level) put behind a DequantizeLinear."""
    _, optimized = basic_optimized(path, tmp_path)
    produced_by = {o: n for n in optimized.graph.node for o in n.output}
    return {n.name for n in optimized.graph.node if n.op_type in ("Conv", "ConvTranspose", "Gemm")
            and getattr(produced_by.get(n.input[1]), "op_type", None) == "DequantizeLinear"}


def test_the_rule_names_what_onnxruntime_requantizes(tmp_path):
    path = save_graph(_branches(), tmp_path / "branches.onnx")
    model = onnx.load(path)
    named = set(weight_bias_quantization_inputs(model))
    assert named == _given_int8_weights(path, tmp_path)
    # and the graph covers both answers, so neither "all" nor "none" would pass
    assert named == {"plain", "nobias", "convt", "clip", "ident", "gemm"}


def test_a_claimed_float_node_that_onnxruntime_requantizes_is_a_mismatch(tmp_path):
    model = onnx.load(save_graph(_branches(), tmp_path / "branches.onnx"))
    # the file itself holds every conv in float
    assert not any(node_states(model, model).values())
    assert node_states(model, model, at_runtime=True)["plain"] is True
    check = check_claims(model, model, claimed_float=["plain", "axis"], requested_float=["clip"])
    assert not check.ok
    assert check.claimed_float_but_quantized == ("plain",) and check.requested_float_but_quantized == ("clip",)
    assert set(check.requantized) == {"plain", "nobias", "convt", "clip", "ident", "gemm"}
    assert "axis" in check.kept_float and "plain" not in check.kept_float
    message = check.message("static")
    assert "re-quantizes them at session start" in message and "plain" in message
    assert "written model has them quantized" not in message
    assert check.to_dict()["requantized"] == list(check.requantized)


NAIVE = '''
    from onnxlite import Option, QuantizeOutcome, QuantizerSpec, hookimpl

    class Naive:
        """quantize_static with nodes_to_exclude, trusting the file: what a third-party plugin would write."""

        def quantize(self, model, output, options, context):
            import numpy as np
            from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

            rng = np.random.default_rng(0)

            class Reader(CalibrationDataReader):
                def __init__(self):
                    self.items = iter([{"x": rng.random((1, 4, 6, 6), dtype=np.float32)} for _ in range(8)])

                def get_next(self):
                    return next(self.items, None)

            quantize_static(str(model), str(output), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                            nodes_to_exclude=["middle"])
            return QuantizeOutcome(excluded_nodes=["middle"])

    @hookimpl
    def register_quantizers():
        return [QuantizerSpec(name="naive", description="trusts nodes_to_exclude", factory=Naive,
                              applies_to=("conv",))]
'''


def _three_convs() -> onnx.GraphProto:
    rng = np.random.default_rng(3)
    inits, nodes, last = [], [], "x"
    for i, name in enumerate(("first", "middle", "last")):
        inits += [numpy_helper.from_array(rng.standard_normal((C, C, 3, 3)).astype(np.float32) * 0.3, f"w{i}"),
                  numpy_helper.from_array(rng.standard_normal(C).astype(np.float32), f"b{i}")]
        nodes += [helper.make_node("Conv", [last, f"w{i}", f"b{i}"], [f"c{i}"], name=name, pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"{name}_relu")]
        last = f"r{i}"
    return helper.make_graph(nodes, "three", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", C, 6, 6])],
                             [helper.make_tensor_value_info(last, TensorProto.FLOAT, ["b", C, 6, 6])], inits)


def test_quantize_warns_when_a_plugins_float_node_is_requantized_at_session_start(tmp_path):
    import json

    from conftest import make_plugin_dist, run_cli

    site = make_plugin_dist(tmp_path / "site", "onnxlite-naive", "0.1", "onnxlite_naive", NAIVE)
    model = save_graph(_three_convs(), tmp_path / "three.onnx")
    done = run_cli("quantize", str(model), "-o", str(tmp_path / "q.onnx"), "-s", "naive", "--json", site=site)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    claims = result["details"]["claims"]
    assert claims["requantized"] == ["middle"] and claims["claimed_float_but_quantized"] == ["middle"]
    (warning,) = [w for w in result["warnings"] if "re-quantizes" in w]
    assert "(middle)" in warning and "WeightBiasQuantization" in warning
    # and onnxruntime does give it int8 weights
    assert "middle" in _given_int8_weights(tmp_path / "q.onnx", tmp_path)
    # the built-in static with the same exclusion keeps it float where it runs, and says nothing
    np.savez(tmp_path / "calib.npz", x=np.random.default_rng(4).random((8, C, 6, 6), dtype=np.float32))
    honest = run_cli("quantize", str(model), "-o", str(tmp_path / "s.onnx"), "-s", "static", "--option",
                     "exclude=middle", "--calibration", str(tmp_path / "calib.npz"), "--json")
    assert honest.returncode == 0, honest.stderr
    result = json.loads(honest.stdout)
    assert result["details"]["claims"]["message"] == "" and result["excluded_nodes"] == ["middle"]
    assert "middle" not in _given_int8_weights(tmp_path / "s.onnx", tmp_path)


def test_statics_rewrite_keeps_every_kind_of_node_float(tmp_path):
    """Conv, ConvTranspose, Gemm, behind an Identity: each gets a per-axis input DequantizeLinear, onnxruntime
    then leaves all of them float, and the outputs are those of the unchanged file without the pass."""
    from onnxlite_plugins.quantizers.static import keep_excluded_float

    original = save_graph(_branches(), tmp_path / "original.onnx")
    path = save_graph(_branches(), tmp_path / "branches.onnx")
    names = sorted(weight_bias_quantization_inputs(onnx.load(path)))
    rewritten, left = keep_excluded_float(path, [*names, "axis"])
    assert sorted(rewritten) == names and left == []
    assert _given_int8_weights(path, tmp_path) == set()
    feed = {"x": np.random.default_rng(5).standard_normal((3, C, 6, 6)).astype(np.float32)}
    plain = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    # the unchanged file in a session without the pass: what the float nodes mean
    off = ort.InferenceSession(str(original), providers=["CPUExecutionProvider"],
                               disabled_optimizers=["WeightBiasQuantization"])
    for got, want in zip(plain.run(None, feed), off.run(None, feed)):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
