"""Strategy ``qat``: quantization-aware training recovers a budget that static int8 misses, on a tiny CNN."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")
datasets = pytest.importorskip("sklearn.datasets")

from helpers import fragile_digits as helpers_fragile_digits  # noqa: E402 - after the skips

BUDGET = 0.10


@pytest.fixture(scope="module")
def fragile_digits(tmp_path_factory):
    """helpers.fragile_digits: static int8 loses answers on it (net, ONNX, calibration, the 397 test digits)."""
    net, path, calibration, test, _weights = helpers_fragile_digits(tmp_path_factory.mktemp("qat"))
    return net, path, calibration, test


def _drop(path, net, test):
    want = net(torch.from_numpy(test)).detach().numpy().argmax(1)
    got = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": test})[0].argmax(1)
    return 1.0 - float(np.mean(got == want))


def test_qat_recovers_what_static_misses(fragile_digits, tmp_path):
    import onnx

    import onnxlite

    net, path, calibration, test = fragile_digits
    static = tmp_path / "static.onnx"
    onnxlite.quantize(path, static, strategy="static", calibration=str(calibration))
    assert _drop(static, net, test) > BUDGET
    qat = tmp_path / "qat.onnx"
    result = onnxlite.quantize(path, qat, strategy="qat", calibration=str(calibration), source_model=net,
                               steps=150, lr=3e-3, max_drop=0.04)
    assert _drop(qat, net, test) <= BUDGET
    curve = result.details["qat"]
    assert curve["steps"] >= 1 and len(curve["loss"]) == curve["steps"] and curve["heldout"]
    assert curve["train_samples"] + curve["heldout_samples"] == 200
    ops = {n.op_type for n in onnx.load(str(qat)).graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops        # onnxruntime runs it as int8
    # the teacher is untouched
    assert float(net.c2.weight[0, 0, 0, 0].abs()) == 50.0


def test_qat_without_the_source_is_a_usage_error(fragile_digits, tmp_path):
    import onnxlite
    from onnxlite import UsageError

    _net, path, calibration, _test = fragile_digits
    with pytest.raises(UsageError, match="source_model"):
        onnxlite.quantize(path, tmp_path / "q.onnx", strategy="qat", calibration=str(calibration))
