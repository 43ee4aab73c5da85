"""Default metrics on outputs whose channels differ in range: the worst slice is budgeted, not only cosine.

A ``[batch, 4 + classes, anchors]`` detector head (Ultralytics) concatenates box pixels with class
scores.  One int8 scale over it rounds every class score to 0 while whole-output cosine stays
above 0.999; the default must reject that candidate and still pass a well-behaved one.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from onnxlite.evaluation.metrics import KIND_BUDGETS, choose_primary, output_kind, parse_budgets, resolve_metrics
from onnxlite.protocols import MetricContext


def _head(rng, batch=16, anchors=50):
    boxes = rng.uniform(0, 1024, (batch, 4, anchors))
    classes = 1 / (1 + np.exp(-rng.normal(-3, 2, (batch, 6, anchors))))
    return np.concatenate([boxes, classes], axis=1).astype(np.float32)


def _kind(name, array, feeds=None):
    return output_kind(name, array, MetricContext(name, feeds or {}, None, {name: array}))


def _budgets(outputs, max_drop="1%", feeds=None):
    metrics = resolve_metrics(outputs, feeds or {})
    return metrics, parse_budgets(max_drop, metrics, choose_primary(metrics))


def test_mixed_range_head_gets_a_budgeted_slice_metric():
    head = _head(np.random.default_rng(0))
    assert _kind("output0", head) == "mixed-range channels"      # by statistics, not by the name
    metrics, budgets = _budgets({"output0": head})
    assert choose_primary(metrics) == "output0.cosine_mean"       # a bare --max-drop still goes to cosine
    assert budgets == {"output0.cosine_mean": 0.01,
                       "output0.slice_rel_error_max": KIND_BUDGETS["mixed-range channels"]["slice_rel_error_max"]}
    why = {m.key: m.why for m in metrics}
    assert "10x" in why["output0.slice_rel_error_max"]
    # the user's own budget on that key wins; without a budget nothing is judged
    assert _budgets({"output0": head}, ["1%", "slice_rel_error_max=20%"])[1]["output0.slice_rel_error_max"] == 0.2
    assert _budgets({"output0": head}, None)[1] == {}
    # naming metrics turns the kind's defaults off
    named = resolve_metrics({"output0": head}, {}, requested=["cosine_mean"])
    assert parse_budgets("1%", named, "output0.cosine_mean") == {"output0.cosine_mean": 0.01}


def test_other_kinds_keep_their_defaults_and_no_extra_budget():
    rng = np.random.default_rng(1)
    frames = rng.dirichlet(np.ones(12), (8, 20)).astype(np.float32)          # [batch, frames, classes]
    features = rng.normal(0, 1, (8, 6, 7, 7)).astype(np.float32)             # NCHW, channels alike
    state = np.stack([np.tanh(rng.normal(0, 1, (8, 16))),
                      rng.normal(0, 3, (8, 16))], axis=1).astype(np.float32)  # LSTM h and c: within 10x
    logits, prob = rng.normal(0, 1, (8, 10)).astype(np.float32), rng.uniform(0, 1, (8, 1)).astype(np.float32)
    assert _kind("softmax_probs", frames) == "class sequence"
    assert _kind("features", features) == "tensor" and _kind("stateN", state) == "sequence"
    assert _kind("logits", logits) == "classification logits" and _kind("output", prob) == "scalar"
    for outputs in ({"features": features}, {"stateN": state}, {"logits": logits}, {"output": prob}):
        metrics, budgets = _budgets(outputs)
        assert budgets == {choose_primary(metrics): 0.01}, outputs.keys()
    # a class sequence's decoded strings are its answers: their agreement is budgeted too
    metrics, budgets = _budgets({"softmax_probs": frames})
    assert budgets == {choose_primary(metrics): 0.01, "softmax_probs.ctc_agreement": 0.03}
    # a dead (all-zero) channel is empty, not a small range
    dead = features.copy()
    dead[:, 2] = 0
    assert _kind("features", dead) == "tensor"


def _head_models(tmp_path):
    """The float head, a per-tensor QDQ candidate (quantize_static's way) and a per-channel QDQ one."""
    import onnx
    from onnx import TensorProto, helper

    from conftest import save_graph

    x = np.random.default_rng(4).uniform(0, 4, (16, 4, 50)).astype(np.float32)
    head = np.concatenate([x * 256, 1 / (1 + np.exp(-x))], axis=1)
    io = ([helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4, 50])],
          [helper.make_tensor_value_info("head", TensorProto.FLOAT, ["batch", 8, 50])])
    nodes = [helper.make_node("Mul", ["x", "scale"], ["boxes"]), helper.make_node("Sigmoid", ["x"], ["classes"])]
    scale = helper.make_tensor("scale", TensorProto.FLOAT, [], [256.0])

    def save(name, extra_nodes, extra_inits, out="head"):
        graph = helper.make_graph(nodes + [helper.make_node("Concat", ["boxes", "classes"], [out], axis=1)]
                                  + extra_nodes, name, *io, [scale, *extra_inits])
        path = tmp_path / f"{name}.onnx"
        save_graph(graph, path, ir_version=onnx.IR_VERSION)   # onnx's own default, as make_model stamps it
        return str(path)

    def qdq(name, s, z, axis):
        attrs = {} if axis is None else {"axis": axis}
        return save(name, [helper.make_node("QuantizeLinear", ["head_f", "s", "z"], ["head_q"], **attrs),
                           helper.make_node("DequantizeLinear", ["head_q", "s", "z"], ["head"], **attrs)],
                    [helper.make_tensor("s", TensorProto.FLOAT, list(np.shape(s)), np.ravel(s).tolist()),
                     helper.make_tensor("z", TensorProto.UINT8, list(np.shape(z)), np.ravel(z).tolist())],
                    out="head_f")

    reference = save("head", [], [])
    per_tensor = qdq("per_tensor", float(head.max()) / 255, 0, None)
    row_max = head.max(axis=(0, 2))
    per_channel = qdq("per_channel", row_max / 255, np.zeros(8, np.uint8), 1)
    data = tmp_path / "data.npz"
    np.savez(data, x=x)
    return reference, per_tensor, per_channel, str(data)


def test_compare_rejects_per_tensor_head_that_cosine_passes_and_passes_per_channel(tmp_path):
    """End to end through onnxruntime: the default budget on the worst slice decides, cosine alone would not."""
    from conftest import run_cli

    reference, per_tensor, per_channel, data = _head_models(tmp_path)
    result = run_cli("compare", reference, per_tensor, per_channel, "--data", data, "--max-drop", "1%", "--json")
    assert result.returncode == 1, result.stderr          # one candidate over budget
    report = json.loads(result.stdout)
    bad, good = report["candidates"]
    assert bad["metrics"]["head.cosine_mean"] > 0.999    # what the primary metric alone says
    assert bad["metrics"]["head.slice_rel_error_max"] == pytest.approx(1.0, abs=1e-6)   # class rows zeroed
    assert bad["passed"] is False
    assert [f.split(":")[0] for f in bad["failures"]] == ["head.slice_rel_error_max"]
    assert good["passed"] is True
    assert good["metrics"]["head.slice_rel_error_max"] < 0.05
    assert bad["budgets"]["head.slice_rel_error_max"] == 0.5


def test_a_ctc_output_whose_strings_change_fails_its_default_budget_while_cosine_passes():
    """Issue 12: a recognizer's probabilities keep their cosine while decoded strings change."""
    from onnxlite.evaluation.metrics import compute, drop

    rng = np.random.default_rng(4)
    batch, frames, classes = 40, 20, 30
    labels = rng.integers(0, classes, (batch, frames))
    reference = np.full((batch, frames, classes), 0.01, np.float32)
    np.put_along_axis(reference, labels[..., None], 0.6, axis=2)
    candidate = reference.copy()
    for row in range(4):   # 4 of 40 strings (10%) change in one frame: a near-tie flips
        frame = int(rng.integers(0, frames))
        other = (labels[row, frame] + 1) % classes
        candidate[row, frame, labels[row, frame]], candidate[row, frame, other] = 0.3, 0.31
    metrics, budgets = _budgets({"softmax_probs": reference})
    by_key = {m.key: m for m in metrics}
    context = MetricContext(feeds={}, output="softmax_probs")
    drops = {k: drop(m, compute(m, reference, reference, context), compute(m, reference, candidate, context))
             for k, m in by_key.items() if k in budgets}
    assert drops["softmax_probs.cosine_mean"] < budgets["softmax_probs.cosine_mean"], drops
    assert drops["softmax_probs.ctc_agreement"] == pytest.approx(0.1)
    assert drops["softmax_probs.ctc_agreement"] > budgets["softmax_probs.ctc_agreement"]


@pytest.mark.unit
def test_a_pooled_output_with_a_meaningless_name_is_an_embedding_by_use():
    """Issue 25 §4: a sentence embedder's ``[batch, hidden]`` output named ``onnx::Shape_422`` is judged as an
    embedding (no top-1 agreement) because it is as wide as the token embeddings beside it, or unit-length;
    a lone ``[batch, 10]`` output stays classification logits."""
    rng = np.random.default_rng(3)
    tokens = rng.normal(0, 1, (4, 6, 32)).astype(np.float32)
    pooled = tokens.mean(axis=1)
    outputs = {"last_hidden_state": tokens, "onnx::Shape_422": pooled}
    context = MetricContext("onnx::Shape_422", {}, None, outputs)
    assert output_kind("onnx::Shape_422", pooled, context) == "embedding"
    names = {m.key for m in resolve_metrics(outputs, {})}
    assert "onnx::Shape_422.top1_agreement" not in names and "onnx::Shape_422.cosine_mean" in names
    unit = pooled / np.linalg.norm(pooled, axis=1, keepdims=True)
    assert _kind("output_1", unit) == "embedding"                       # normalised rows, alone
    logits = rng.normal(0, 3, (4, 10)).astype(np.float32)
    assert _kind("output_1", logits) == "classification logits"
    assert output_kind("logits", pooled, context) == "classification logits"   # a class name still decides
