"""Strategy ``qat``: quantization-aware training recovers a budget that static int8 misses, on a tiny CNN."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")
datasets = pytest.importorskip("sklearn.datasets")

BUDGET = 0.10


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1 = torch.nn.Conv2d(1, 16, 3, padding=1)
        self.c2 = torch.nn.Conv2d(16, 16, 3, padding=1)
        self.fc = torch.nn.Linear(16 * 4 * 4, 10)

    def forward(self, x):
        x = torch.relu(self.c1(x))
        x = torch.nn.functional.max_pool2d(torch.relu(self.c2(x)), 2)
        return self.fc(x.flatten(1))


@pytest.fixture(scope="module")
def fragile_digits(tmp_path_factory):
    """A digits CNN trained a few seconds, then made fragile: each of c2's output channels gets one weight of
    +-50 on an input it never sees lit (a corner), so per-channel int8 rounds the weights that matter to a
    grid of 0.39 and static int8 loses answers."""
    digits = datasets.load_digits()
    images = (digits.images / 16.0).astype(np.float32)[:, None]
    torch.manual_seed(0)
    net = Net()
    optim = torch.optim.Adam(net.parameters(), lr=3e-3)
    x, y = torch.from_numpy(images[:1200]), torch.from_numpy(digits.target[:1200])
    for _ in range(6):
        for start in range(0, 1200, 64):
            optim.zero_grad()
            torch.nn.functional.cross_entropy(net(x[start:start + 64]), y[start:start + 64]).backward()
            optim.step()
    net.eval()
    with torch.no_grad():
        net.c2.weight[:, :, 0, 0] = 0
        net.c2.weight[:, 0, 0, 0] = 50.0 * torch.sign(torch.randn(16))
    folder = tmp_path_factory.mktemp("qat")
    path = folder / "digits.onnx"
    torch.onnx.export(net, (x[:2],), str(path), input_names=["x"], output_names=["logits"],
                      dynamic_axes={"x": {0: "b"}, "logits": {0: "b"}}, opset_version=17, dynamo=False)
    calibration = folder / "calibration.npz"
    np.savez(calibration, x=images[1200:1400])
    return net, path, calibration, images[1400:]      # the last 397 digits: never calibrated, trained or checked


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
