"""Which strategies a search tries on a model, and why it skips the others."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from onnxlite.search.candidates import build_candidates

from conftest import make_plugin_dist, save_graph


def linear_model(path, op: str):
    """x[batch, 16] -> one linear layer, as torch exports nn.Linear (Gemm) or as a plain MatMul."""
    w = np.random.default_rng(0).standard_normal((16, 8)).astype(np.float32)
    if op == "Gemm":
        node = helper.make_node("Gemm", ["x", "W"], ["y"], name="fc", transB=1)
        w = w.T.copy()
    else:
        node = helper.make_node("MatMul", ["x", "W"], ["y"], name="fc")
    graph = helper.make_graph([node], "linear", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])],
                              [numpy_helper.from_array(w, "W")])
    save_graph(graph, path, ir_version=9)
    return path


def test_int4_is_skipped_with_its_reason_when_there_is_no_matmul(tmp_path):
    gemm = linear_model(tmp_path / "gemm.onnx", "Gemm")
    found, skipped = build_candidates(gemm, has_calibration=False)
    reasons = {s.strategy: s.reason for s in skipped}
    assert "int4" not in {c.strategy for c in found}
    assert reasons["int4"].startswith("nothing to quantize: 1 Gemm node(s)"), reasons
    # Named, it is tried anyway (and fails with the same explanation, as before).
    found, _ = build_candidates(gemm, strategies=["int4"], has_calibration=False)
    assert {c.strategy for c in found} == {"int4"} and len(found) == 3   # its grid

    matmul = linear_model(tmp_path / "matmul.onnx", "MatMul")
    found, skipped = build_candidates(matmul, has_calibration=False)
    assert "int4" in {c.strategy for c in found}, {s.strategy: s.reason for s in skipped}


THIRD_PARTY = '''
from onnxlite import hookimpl, QuantizerSpec

class Never:
    def quantize(self, model, output, options, context):
        raise AssertionError("a skipped strategy must not run")

def picky(model):
    return "needs at least 3 nodes" if len(model.graph.node) < 3 else None

def broken(model):
    raise RuntimeError("bug in the plugin's check")

@hookimpl
def register_quantizers():
    return [QuantizerSpec(name="picky", description="skips small graphs", factory=Never, skip_reason=picky),
            QuantizerSpec(name="broken-check", description="its check raises", factory=Never, skip_reason=broken)]
'''


def test_third_party_skip_reasons_are_reported_and_a_broken_check_is_ignored(tmp_path, fresh_plugins):
    site = make_plugin_dist(tmp_path / "site", "acme-picky", "0.1", "acme_picky", THIRD_PARTY)
    fresh_plugins.syspath_prepend(str(site))
    model = linear_model(tmp_path / "m.onnx", "MatMul")
    found, skipped = build_candidates(model, has_calibration=False)
    reasons = {s.strategy: s.reason for s in skipped}
    assert reasons["picky"] == "needs at least 3 nodes"
    # A check that raises cannot stop the search; the strategy is simply tried (and judged) like any other.
    assert "broken-check" in {c.strategy for c in found}
