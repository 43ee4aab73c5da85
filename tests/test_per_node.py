"""``compare --per-node``: the node a built model makes fragile is ranked first, in the API, the CLI and the report."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from helpers import conv_chain

pytest.importorskip("onnxruntime")


@pytest.fixture(scope="module")
def fragile(tmp_path_factory):
    """(float model, static QDQ model, data): conv2's output has one channel at +1000 that the next layer
    ignores, so one uint8 scale for that tensor rounds the channels that matter to a few levels."""
    import onnxlite

    folder = tmp_path_factory.mktemp("per_node")
    rng = np.random.default_rng(0)
    w1, w2, w3 = rng.normal(size=(8, 3, 3, 3)) * 0.3, rng.normal(size=(8, 8, 3, 3)) * 0.1, rng.normal(size=(8, 8, 1, 1))
    b2 = np.zeros(8)
    b2[0] = 1000.0
    w3[:, 0] = 0.0
    model = conv_chain(folder / "fragile.onnx", [(w1, np.zeros(8), "Relu", 1), (w2, b2, None, 1),
                                                 (w3, np.zeros(8), "Relu", 1)])
    data = folder / "data.npz"
    np.savez(data, x=rng.normal(size=(48, 3, 8, 8)).astype(np.float32))
    quantized = folder / "fragile.static.onnx"
    onnxlite.quantize(model, quantized, strategy="static", calibration=str(data))
    return model, quantized, data


def test_fragile_node_ranks_first(fragile):
    from onnxlite.evaluation.judge import Judge
    from onnxlite.evaluation.per_node import per_node_errors, rank_nodes

    model, quantized, data = fragile
    judge = Judge.from_reference(str(model), str(data), str(quantized), metrics=["top1_agreement"])
    result = per_node_errors(model, quantized, judge)
    first = result.nodes[0]
    assert first.node == "conv2"
    # quantizing conv2 alone loses answers, leaving it alone float gets most of them back, and no other
    # node alone loses as much
    assert first.drop_alone > 0.2
    assert first.recovered > 0.2
    assert all(n.drop_alone < first.drop_alone for n in result.nodes[1:])
    assert {n.node for n in result.nodes} >= {"conv1", "conv2", "conv3", "head"}
    assert rank_nodes(model, quantized, judge, isolate=False)[0] != "" and len(result.table_lines()[1]) <= 80


def test_lightens_sweep_measures_what_per_node_reports(fragile):
    """lighten's fallback sweep on a QDQ base (search.partial) takes drops_alone: compare --per-node's own
    'alone' figures, node for node, worst first, without quantizing anything again."""
    from onnxlite.evaluation.judge import Judge
    from onnxlite.evaluation.per_node import drops_alone, per_node_errors

    model, quantized, data = fragile
    judge = Judge.from_reference(str(model), str(data), str(quantized), metrics=["top1_agreement"])
    reported = {n.node: n.drop_alone for n in per_node_errors(model, quantized, judge).nodes}
    swept = drops_alone(model, quantized, judge, ["conv3", "conv1", "conv2", "no_such_node"], judge.primary)
    assert [e["node"] for e in swept][0] == "conv2" and len(swept) == 3
    assert all(e["drop"] == pytest.approx(reported[e["node"]]) for e in swept)
    assert drops_alone(model, model, judge, ["conv2"], judge.primary) is None     # no Q/DQ: the caller re-quantizes


def test_without_qdq_everything_is_the_float_model(fragile):
    """Taking every Q/DQ out gives the float model back (the folded Relus restored), the base of every figure."""
    import onnx
    import onnxruntime as ort

    from onnxlite.evaluation.per_node import qdq_groups, without_qdq

    model, quantized, data = fragile
    qdq, reference = onnx.load(str(quantized)), onnx.load(str(model))
    every = {n.name for n in qdq.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")}
    assert qdq_groups(qdq).nodes
    restored = without_qdq(qdq, every, reference)
    x = np.load(data)["x"][:8]
    want = ort.InferenceSession(str(model)).run(None, {"x": x})[0]
    got = ort.InferenceSession(restored.SerializeToString()).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


@pytest.mark.slow
def test_cli_per_node_json_and_report(fragile, tmp_path):
    model, quantized, data = fragile
    run = subprocess.run([sys.executable, "-m", "onnxlite", "compare", str(model), str(quantized), "--data", str(data),
                          "--per-node", "--json", "--report", str(tmp_path / "rep")], check=False,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    payload = json.loads(run.stdout)
    assert payload["per_node"]["nodes"][0]["node"] == "conv2"
    html = (tmp_path / "rep" / "report.html").read_text()
    assert "Error by node" in html and "<svg" in html and "conv2" in html
    two = subprocess.run([sys.executable, "-m", "onnxlite", "compare", str(model), str(quantized), str(quantized),
                          "--data", str(data), "--per-node"], check=False, capture_output=True, text=True)
    assert two.returncode == 2 and "exactly one CANDIDATE" in two.stderr
    assert "Traceback" not in two.stderr
