"""Static int8 quantization of a small CNN trained on scikit-learn's digits, calibrated with real data."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import basic_optimized

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")
datasets = pytest.importorskip("sklearn.datasets")


class DigitsNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(1, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
            torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
            torch.nn.MaxPool2d(2),
        )
        self.head = torch.nn.Linear(16 * 4 * 4, 10)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))


@pytest.fixture(scope="module")
def digits_model(tmp_path_factory):
    """(model path, train images, test images, test labels): a CNN trained a few seconds, exported with a dynamic
    batch."""
    digits = datasets.load_digits()
    images = (digits.images / 16.0).astype(np.float32)[:, None]  # N x 1 x 8 x 8 in 0..1
    labels = digits.target.astype(np.int64)
    rng = np.random.default_rng(0)
    order = rng.permutation(len(images))
    train, test = order[:1300], order[1300:]

    torch.manual_seed(0)
    net = DigitsNet()
    optim = torch.optim.Adam(net.parameters(), lr=3e-3)
    x, y = torch.from_numpy(images[train]), torch.from_numpy(labels[train])
    net.train()
    for _ in range(12):
        for start in range(0, len(x), 64):
            optim.zero_grad()
            loss = torch.nn.functional.cross_entropy(net(x[start:start + 64]), y[start:start + 64])
            loss.backward()
            optim.step()
    net.eval()

    folder = tmp_path_factory.mktemp("digits")
    path = folder / "digits.onnx"
    torch.onnx.export(net, (torch.from_numpy(images[:2]),), str(path), input_names=["pixels"],
                      output_names=["logits"], dynamic_axes={"pixels": {0: "batch"}, "logits": {0: "batch"}},
                      opset_version=17, dynamo=False)
    return path, images[train], images[test], labels[test]


def _accuracy(path, images, labels, batch=100):
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    predictions = np.concatenate([session.run(None, {"pixels": images[i:i + batch]})[0].argmax(1)
                                  for i in range(0, len(images), batch)])
    return float((predictions == labels).mean() * 100)


def _quantize(model, output, options, calibration):
    from onnxlite import QuantizeContext
    from onnxlite.registry import get_registry

    warnings: list[str] = []
    quantizer = get_registry().get("quantizer", "static").create()
    outcome = quantizer.quantize(model, output, options, QuantizeContext(calibration=calibration,
                                                                         warn=warnings.append))
    return outcome, warnings


def test_spec_is_registered_with_a_grid():
    from onnxlite.registry import get_registry

    spec = get_registry().get("quantizer", "static").spec
    assert spec.needs_calibration
    assert spec.applies_to == ("conv", "any")
    assert len(spec.grid) >= 2 and all(spec.option(k) for g in spec.grid for k in g)
    assert spec.option("method").choices == ("MinMax", "Entropy", "Percentile", "Distribution")


def test_qdq_per_channel_keeps_accuracy_and_shrinks(digits_model, tmp_path):
    from onnxlite.data import load_data
    from onnxlite.inputs import specs_from_onnx
    from onnxlite.modelio import load_model, model_size, op_counts

    model, train, test, test_labels = digits_model
    np.savez(tmp_path / "calib.npz", pixels=train[:200])
    before = (tmp_path / "calib.npz").read_bytes()
    calibration = load_data(tmp_path / "calib.npz", specs_from_onnx(model))
    output = tmp_path / "static.onnx"
    outcome, _ = _quantize(model, output, {"per_channel": True, "format": "QDQ"}, calibration)

    ops = op_counts(load_model(output))
    assert ops.get("QuantizeLinear", 0) > 0 and ops.get("DequantizeLinear", 0) > 0
    assert model_size(output) < model_size(model)
    assert outcome.details["per_channel"] is True
    assert outcome.details["calibration_samples"] == 200
    assert (tmp_path / "calib.npz").read_bytes() == before

    fp32 = _accuracy(model, test, test_labels)
    int8 = _accuracy(output, test, test_labels)
    assert fp32 > 80, f"the test CNN did not learn (fp32 top-1 {fp32:.1f}%)"
    assert int8 >= fp32 - 1.0, f"static int8 top-1 {int8:.2f}% vs fp32 {fp32:.2f}%"


def test_percentile_calibrates_one_sample_at_a_time(digits_model, tmp_path):
    model, train, test, test_labels = digits_model
    # A shorter last batch is what breaks histogram calibrators; 37 samples would give one with any batch > 1.
    calibration = [{"pixels": train[i:i + 1]} for i in range(37)]
    output = tmp_path / "percentile.onnx"
    outcome, _ = _quantize(model, output, {"method": "Percentile", "percentile": 99.99}, calibration)
    assert outcome.details["calibration_batch_size"] == 1
    assert outcome.details["calibration_samples"] == 37
    assert outcome.details["per_channel"] is True  # the default for a convolutional graph
    assert _accuracy(output, test, test_labels) >= _accuracy(model, test, test_labels) - 3.0


def test_entropy_streams_in_strides(digits_model, tmp_path, capsys):
    """More samples than one stride: calibration folds stride by stride and still sees every sample once."""
    from onnxlite.data import load_data

    model, train, test, test_labels = digits_model
    folder = tmp_path / "calib"
    folder.mkdir()
    for i in range(5):  # a streamed folder of .npz files, 10 samples each
        np.savez(folder / f"part{i}.npz", pixels=train[i * 10:(i + 1) * 10])
    calibration = load_data(folder)
    assert calibration.streamed and len(calibration) == 50
    output = tmp_path / "entropy.onnx"
    outcome, _ = _quantize(model, output, {"method": "Entropy", "chunk": 16, "format": "QOperator"},
                           calibration)
    assert outcome.details["calibration_samples"] == 50
    printed = capsys.readouterr()
    assert printed.out == ""  # onnxruntime's progress prints must not pollute --json output
    assert "making histogram" not in printed.err  # nor sit between onnxlite's own progress lines (issue 14)
    from onnxlite.modelio import load_model, op_counts

    assert op_counts(load_model(output)).get("QLinearConv", 0) == 2
    assert _accuracy(output, test, test_labels) >= _accuracy(model, test, test_labels) - 3.0


def test_exclude_by_glob_keeps_nodes_float(digits_model, tmp_path):
    from onnxlite.modelio import load_model

    model, train, _, _ = digits_model
    output = tmp_path / "excluded.onnx"
    outcome, warnings = _quantize(model, output, {"exclude": ("*Gemm*",), "format": "QOperator",
                                                  "calibration_samples": 20},
                                  [{"pixels": train[:20]}])
    assert outcome.excluded_nodes and all("Gemm" in n for n in outcome.excluded_nodes)
    ops = {n.op_type for n in load_model(output).graph.node}
    assert "QLinearConv" in ops and "Gemm" in ops and "QGemm" not in ops
    assert outcome.details["calibration_samples"] == 20


def test_exclude_that_matches_nothing_is_refused(digits_model, tmp_path):
    # As in every other strategy: a typo must not quantize the layer the user meant to protect.
    from onnxlite import UsageError

    model, train, _, _ = digits_model
    output = tmp_path / "typo.onnx"
    with pytest.raises(UsageError, match="exclude=no_such_node: matches no node"):
        _quantize(model, output, {"exclude": ("*Gemm*", "no_such_node"), "calibration_samples": 4},
                  [{"pixels": train[:4]}])
    assert not output.exists()


def test_missing_calibration_is_a_usage_error(digits_model, tmp_path):
    from onnxlite import UsageError

    with pytest.raises(UsageError, match="calibration"):
        _quantize(digits_model[0], tmp_path / "x.onnx", {}, None)
    assert not (tmp_path / "x.onnx").exists()


def test_through_the_quantize_host_with_an_images_folder(digits_model, tmp_path):
    """The registry path: onnxlite.quantize loads a folder of PNGs with load_data and hands it to static."""
    Image = pytest.importorskip("PIL.Image")
    import onnxlite

    model, train, test, test_labels = digits_model
    folder = tmp_path / "pngs"
    folder.mkdir()
    for i, image in enumerate(train[:60]):
        Image.fromarray((image[0] * 255).round().astype(np.uint8), mode="L").save(folder / f"{i:03d}.png")
    result = onnxlite.quantize(model, tmp_path / "host.onnx", "static", calibration=folder,
                               calibration_options={"scale": "true"}, method="MinMax")
    assert result.details["calibration_samples"] == 60
    assert result.quantized_ops.get("QuantizeLinear", 0) > 0
    # PNG rounding changes pixels by at most 1/510, so calibration on them is as good as on the arrays.
    assert _accuracy(result.path, test, test_labels) >= _accuracy(model, test, test_labels) - 1.0


def test_cli_reports_bad_calibration_in_one_line(digits_model, tmp_path):
    from conftest import run_cli

    model = digits_model[0]
    np.savez(tmp_path / "bad.npz", pixels=np.zeros((4, 1, 9, 9), np.float32))
    done = run_cli("quantize", str(model), "-o", str(tmp_path / "out.onnx"), "--strategy", "static",
                   "--calibration", str(tmp_path / "bad.npz"))
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and "'pixels'" in lines[0] and "axis 2" in lines[0], done.stderr
    assert not (tmp_path / "out.onnx").exists()


def test_reader_refuses_ragged_samples_for_histogram_methods():
    from onnxlite import UsageError
    from onnxlite_plugins.quantizers.common import CalibrationReader

    feeds = [{"ids": np.zeros((1, 5), np.int64)}, {"ids": np.zeros((1, 7), np.int64)}]
    assert len(list(CalibrationReader(feeds, uniform=False))) == 2  # MinMax copes with varying lengths
    reader = CalibrationReader(feeds, uniform=True)
    reader.get_next()
    with pytest.raises(UsageError, match="max_length"):
        reader.get_next()


def test_reader_strides_read_each_batch_once(tmp_path):
    from onnxlite.data import load_data
    from onnxlite_plugins.quantizers.common import CalibrationReader

    for i in range(3):
        np.savez(tmp_path / f"p{i}.npz", x=np.arange(i * 10, i * 10 + 10, dtype=np.float32)[:, None])
    reader = CalibrationReader(load_data(tmp_path), batch_size=4, limit=25)
    assert len(reader) == 7  # 25 samples in batches of 4
    seen = []
    for start in range(0, 8, 3):  # strides as quantize_static issues them, the last past the end
        reader.set_range(start, start + 3)
        seen += [f["x"][:, 0].tolist() for f in iter(reader.get_next, None)]
    assert [v for batch in seen for v in batch] == list(range(25))
    assert reader.samples_seen == 25


class DepthwiseNet(torch.nn.Module):
    """conv -> depthwise conv -> conv: the depthwise one is what an exclusion keeps in float (EfficientNet-like)."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Conv2d(1, 8, 3, padding=1)
        self.depthwise = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.project = torch.nn.Conv2d(8, 8, 1)
        self.head = torch.nn.Linear(8, 4)

    def forward(self, x):
        x = torch.relu(self.stem(x))
        x = torch.relu(self.depthwise(x))
        return self.head(torch.relu(self.project(x)).mean((2, 3)))


def _depthwise_model(folder, opset):
    torch.manual_seed(0)
    path = folder / f"depthwise{opset}.onnx"
    torch.onnx.export(DepthwiseNet().eval(), (torch.rand(2, 1, 8, 8),), str(path), input_names=["pixels"],
                      output_names=["logits"], dynamic_axes={"pixels": {0: "batch"}, "logits": {0: "batch"}},
                      opset_version=opset, dynamo=False)
    return path


def _runs_float(optimized, name):
    """Whether ``name`` still reads a float initializer as its weight once onnxruntime has optimised the graph."""
    node = next(n for n in optimized.graph.node if n.name == name)
    return any(i.name == node.input[1] and i.data_type == 1 for i in optimized.graph.initializer)


@pytest.mark.parametrize("fmt", ["QDQ", "QOperator"])
def test_an_excluded_conv_between_quantized_ones_runs_in_float(tmp_path, fmt):
    """onnxruntime's WeightBiasQuantization would give it per-tensor int8 weights at session start; static's own
    per-axis input DequantizeLinear (same values) keeps it float, and the result is what the pass-free session gives."""
    from onnxlite.claims import weight_bias_quantization_inputs
    from onnxlite.modelio import load_model

    model = _depthwise_model(tmp_path, 17)
    rng = np.random.default_rng(0)
    images = rng.random((48, 1, 8, 8), dtype=np.float32)
    output = tmp_path / "dw.onnx"
    outcome, warnings = _quantize(model, output, {"exclude": ("*depthwise*",), "format": fmt},
                                  [{"pixels": images[:32]}])
    (conv,) = outcome.excluded_nodes
    assert outcome.details["float_input_dequantize"] == [conv] and not warnings
    written = load_model(output)
    assert not weight_bias_quantization_inputs(written)
    session, optimized = basic_optimized(output, tmp_path)
    assert _runs_float(optimized, conv)
    reference, _ = basic_optimized(output, tmp_path, disabled=["WeightBiasQuantization"])
    held_out = {"pixels": images[32:]}
    np.testing.assert_allclose(session.run(None, held_out)[0], reference.run(None, held_out)[0], rtol=0, atol=1e-6)


def test_an_exclusion_onnxruntime_would_undo_is_not_reported_as_float(tmp_path):
    """Opset 12 has no per-axis DequantizeLinear, so static cannot protect the conv: it says so and does not
    claim it float (and onnxruntime indeed gives it int8 weights)."""
    model = _depthwise_model(tmp_path, 12)
    images = np.random.default_rng(1).random((16, 1, 8, 8), dtype=np.float32)
    output = tmp_path / "dw12.onnx"
    outcome, warnings = _quantize(model, output, {"exclude": ("*depthwise*",), "per_channel": False},
                                  [{"pixels": images}])
    assert outcome.excluded_nodes == []
    (warning,) = [w for w in warnings if "WeightBiasQuantization" in w]
    assert "depthwise" in warning and "not kept in float" in warning
    _, optimized = basic_optimized(output, tmp_path)
    name = next(n.name for n in optimized.graph.node if "depthwise" in n.name and n.op_type == "Conv")
    assert not _runs_float(optimized, name)


class ClippedConv(torch.nn.Module):
    """A conv whose outputs span about -30..30, then ReLU6: the int8 range that matters is 0..6."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 4, 3, padding=1)
        with torch.no_grad():
            self.conv.weight.mul_(40.0)

    def forward(self, x):
        return torch.nn.functional.relu6(self.conv(x)).mean((2, 3))


def test_op_types_conv_quantizes_the_conv_over_its_clipped_range(tmp_path):
    """op_types=Conv brings the Clip after it: onnxruntime then folds the Clip and the conv's output takes 0..6."""
    import onnx
    from onnx import numpy_helper

    torch.manual_seed(0)
    model = tmp_path / "clipped.onnx"
    torch.onnx.export(ClippedConv().eval(), (torch.rand(2, 1, 8, 8),), str(model), input_names=["pixels"],
                      output_names=["out"], dynamic_axes={"pixels": {0: "batch"}, "out": {0: "batch"}},
                      opset_version=17, dynamo=False)
    images = np.random.default_rng(0).random((32, 1, 8, 8), dtype=np.float32) * 2 - 1
    output = tmp_path / "clipped.int8.onnx"
    outcome, _ = _quantize(model, output, {"op_types": ("Conv",)}, [{"pixels": images}])
    written = onnx.load(str(output))
    consts = {i.name: numpy_helper.to_array(i) for i in written.graph.initializer}
    conv = next(n for n in written.graph.node if n.op_type == "Conv")
    # the QuantizeLinear reading the conv's output (the Clip is gone: its range is the Q's)
    (q,) = [n for n in written.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == conv.output[0]]
    assert float(consts[q.input[1]]) <= 6 / 255 * 1.01
    assert not any(n.op_type == "Clip" for n in written.graph.node)
    session = ort.InferenceSession(str(output), providers=["CPUExecutionProvider"])
    reference = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    held_out = {"pixels": images[:8]}
    assert np.abs(session.run(None, held_out)[0] - reference.run(None, held_out)[0]).max() < 0.1
    assert outcome.details["op_types_quantized"] == ["Conv", "Clip", "Relu"]
