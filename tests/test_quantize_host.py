"""The quantize host: options, refusals, atomic outputs, metadata, external data, the CLI.

Models are built with onnx.helper in the test (an MLP and a small CNN), so this
file needs no torch and stays fast.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxlite
from onnxlite.errors import UsageError
from onnxlite.graph_family import model_family
from onnxlite.modelio import external_data_files, get_metadata
from onnxlite.quantization.run import applicable_strategies

from conftest import make_plugin_dist, run_cli, save_graph
from helpers import calibration_npz, fixed_size_detector, streaming_model


def make_mlp(path: Path, k: int = 128, external: bool = False, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array((rng.standard_normal((k, k)) * 0.1).astype(np.float32), "w1"),
             numpy_helper.from_array((rng.standard_normal(k) * 0.1).astype(np.float32), "b1"),
             numpy_helper.from_array((rng.standard_normal((k, 16)) * 0.1).astype(np.float32), "w2")]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
             helper.make_node("Add", ["h", "b1"], ["h2"], name="add1"),
             helper.make_node("Relu", ["h2"], ["h3"], name="relu"),
             helper.make_node("MatMul", ["h3", "w2"], ["y"], name="fc2")]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 16])], inits)
    save_graph(graph, path, external=external)
    return path


def make_cnn(path: Path) -> Path:
    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array((rng.standard_normal((16, 3, 3, 3)) * 0.1).astype(np.float32), "k1"),
             numpy_helper.from_array((rng.standard_normal((16, 16, 3, 3)) * 0.1).astype(np.float32), "k2"),
             numpy_helper.from_array((rng.standard_normal((16, 4)) * 0.1).astype(np.float32), "w")]
    nodes = [helper.make_node("Conv", ["x", "k1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "k2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
             helper.make_node("GlobalAveragePool", ["c2"], ["p"], name="pool"),
             helper.make_node("Flatten", ["p"], ["f"], name="flat"),
             helper.make_node("MatMul", ["f", "w"], ["y"], name="head")]
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])], inits)
    save_graph(graph, path)
    return path


def digest(*paths: Path) -> str:
    h = hashlib.sha256()
    for p in paths:
        h.update(p.read_bytes())
    return h.hexdigest()


def run(path: Path, x: np.ndarray) -> np.ndarray:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


@pytest.fixture(scope="module")
def mlp(tmp_path_factory) -> Path:
    return make_mlp(tmp_path_factory.mktemp("mlp") / "mlp.onnx")


def test_api_quantizes_records_metadata_and_keeps_input(mlp, tmp_path):
    before = digest(mlp)
    out = tmp_path / "q.onnx"
    result = onnxlite.quantize(mlp, out, strategy="dynamic", per_channel="false", exclude=["fc2"])
    assert digest(mlp) == before
    assert result.path == out and out.exists()
    assert result.size_after < result.size_before and result.ratio > 1
    assert result.quantized_ops.get("MatMulInteger") == 1  # fc1 only: fc2 was excluded
    assert result.excluded_nodes == ["fc2"]
    assert result.options["per_channel"] is False
    meta = get_metadata(onnx.load(str(out)))
    assert meta["onnxlite.strategy"] == "dynamic"
    assert json.loads(meta["onnxlite.strategy_options"])["exclude"] == ["fc2"]
    x = np.random.default_rng(3).standard_normal((4, 128)).astype(np.float32)
    ref, got = run(mlp, x), run(out, x)
    cos = (ref * got).sum(1) / np.linalg.norm(ref, axis=1) / np.linalg.norm(got, axis=1)
    assert cos.min() > 0.99
    assert result.details["check"]["ran"] is True
    payload = result.to_dict()
    json.dumps(payload)
    assert payload["ratio"] == pytest.approx(result.ratio, rel=1e-3)
    # nothing left behind in the output folder but the model
    assert sorted(p.name for p in tmp_path.iterdir()) == ["q.onnx"]


def test_default_output_name(mlp, tmp_path):
    src = tmp_path / "m.onnx"
    src.write_bytes(mlp.read_bytes())
    result = onnxlite.quantize(src)
    assert result.path == tmp_path / "m.dynamic.onnx" and result.path.exists()


def test_refusals(mlp, tmp_path):
    with pytest.raises(UsageError, match=r"no such option \(valid: exclude, op_types, pack_qkv, per_channel"):
        onnxlite.quantize(mlp, tmp_path / "a.onnx", bogus=1)
    with pytest.raises(UsageError, match="per_channel=maybe: expected true or false"):
        onnxlite.quantize(mlp, tmp_path / "a.onnx", per_channel="maybe")
    with pytest.raises(UsageError, match="did you mean 'dynamic'"):
        onnxlite.quantize(mlp, tmp_path / "a.onnx", strategy="dynamc")
    with pytest.raises(UsageError, match="no such file"):
        onnxlite.quantize(tmp_path / "missing.onnx", tmp_path / "a.onnx")
    corrupt = tmp_path / "corrupt.onnx"
    corrupt.write_bytes(b"this is not protobuf \x00\xff" * 10)
    with pytest.raises(UsageError, match="not a readable ONNX model"):
        onnxlite.quantize(corrupt, tmp_path / "a.onnx")
    with pytest.raises(UsageError, match="matches no MatMul/Gemm node"):
        onnxlite.quantize(mlp, tmp_path / "a.onnx", exclude="nothing_like_this*")
    with pytest.raises(UsageError, match="would replace the input "):
        onnxlite.quantize(mlp, mlp)
    done = onnxlite.quantize(mlp, tmp_path / "q.onnx").path
    with pytest.raises(UsageError, match="already quantized"):
        onnxlite.quantize(done, tmp_path / "qq.onnx")
    fp16 = onnxlite.quantize(mlp, tmp_path / "h.onnx", strategy="fp16").path
    with pytest.raises(UsageError, match="already quantized .*strategy 'fp16'"):
        onnxlite.quantize(fp16, tmp_path / "hq.onnx")
    assert not (tmp_path / "a.onnx").exists() and not (tmp_path / "qq.onnx").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no scratch left behind


def test_external_data_in_and_out(tmp_path):
    src = make_mlp(tmp_path / "ext.onnx", external=True)
    assert external_data_files(src)
    before = digest(src, *external_data_files(src))
    out = tmp_path / "out" / "q.onnx"
    result = onnxlite.quantize(src, out)
    assert digest(src, *external_data_files(src)) == before
    assert external_data_files(out), "external data in, external data out"
    x = np.random.default_rng(0).standard_normal((2, 128)).astype(np.float32)
    assert run(out, x).shape == (2, 16)
    assert result.size_after < result.size_before


def test_fp16_and_int4_on_mlp(mlp, tmp_path):
    x = np.random.default_rng(5).standard_normal((3, 128)).astype(np.float32)
    ref = run(mlp, x)
    half = onnxlite.quantize(mlp, tmp_path / "h.onnx", strategy="fp16")
    assert half.size_after < 0.6 * half.size_before
    assert any(t.data_type == TensorProto.FLOAT16 for t in onnx.load(str(half.path)).graph.initializer)
    np.testing.assert_allclose(run(half.path, x), ref, atol=5e-3, rtol=1e-2)  # float32 I/O kept
    assert onnxlite.get_registry().get("quantizer", "fp16").spec.gpu_only_gain

    int4 = onnxlite.quantize(mlp, tmp_path / "i4.onnx", strategy="int4", block_size=32)
    assert int4.quantized_ops == {"MatMulNBits": 2}
    assert int4.size_after < int4.size_before / 4
    got = run(int4.path, x)
    cos = (ref * got).sum(1) / np.linalg.norm(ref, axis=1) / np.linalg.norm(got, axis=1)
    assert cos.min() > 0.95
    # a bigger block keeps fewer scales: smaller file
    coarse = onnxlite.quantize(mlp, tmp_path / "i4b.onnx", strategy="int4", block_size=128)
    assert coarse.size_after < int4.size_after
    with pytest.raises(UsageError, match="block_size=48: must be a power of two"):
        onnxlite.quantize(mlp, tmp_path / "bad.onnx", strategy="int4", block_size=48)


def test_int4_explains_models_it_cannot_touch(tmp_path):
    # torch exports nn.Linear on 2-D inputs as Gemm, which MatMulNBits does not cover
    w = numpy_helper.from_array(np.ones((64, 64), np.float32), "w")
    graph = helper.make_graph([helper.make_node("Gemm", ["x", "w"], ["y"], name="linear")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 64])], [w])
    save_graph(graph, tmp_path / "gemm.onnx")
    with pytest.raises(UsageError, match="nothing for int4 to quantize: 1 Gemm node"):
        onnxlite.quantize(tmp_path / "gemm.onnx", tmp_path / "o.onnx", strategy="int4")
    assert not (tmp_path / "o.onnx").exists()


def test_conv_heavy_model_warns_and_family(tmp_path, mlp):
    cnn = make_cnn(tmp_path / "cnn.onnx")
    assert model_family(cnn) == {"conv", "matmul"}
    assert model_family(mlp) == {"matmul"}
    seen = []
    result = onnxlite.quantize(cnn, tmp_path / "q.onnx", on_warning=seen.append)
    assert any("conv-heavy" in w and "static" in w for w in result.warnings)
    assert seen == result.warnings
    names = {r.name for r in applicable_strategies(mlp)}
    assert {"dynamic", "int4", "fp16"} <= names and "transformer" not in names


# ---------------------------------------------------------------- CLI (subprocesses: real plugin discovery)


def test_cli_json_help_and_errors(mlp, tmp_path):
    before = digest(mlp)
    out = tmp_path / "q.onnx"
    done = run_cli("quantize", str(mlp), "-o", str(out), "--option", "per_channel=true", "--json")
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert payload["strategy"] == "dynamic" and payload["quantized_ops"]["MatMulInteger"] == 2
    assert payload["size_after"] < payload["size_before"]
    assert digest(mlp) == before

    shown = run_cli("quantize", "--strategy", "dynamic", "--help")
    assert shown.returncode == 0
    for name in ("per_channel", "weight_type", "reduce_range", "op_types", "exclude", "qint8|quint8"):
        assert name in shown.stdout
    listing = run_cli("quantize", "--help")
    assert "transformer" in listing.stdout and "int4" in listing.stdout

    for args, needle in [
        (("quantize", str(mlp), "-o", str(tmp_path / "x.onnx"), "--option", "nope=1"), "valid: exclude, op_types"),
        (("quantize", str(mlp), "-o", str(tmp_path / "x.onnx"), "--strategy", "int8"), "unknown quantizer 'int8'"),
        (("quantize", str(tmp_path / "missing.onnx")), "no such file"),
        (("quantize", str(out), "-o", str(tmp_path / "x.onnx")), "already quantized"),
        (("quantize", "--strategy", "dinamic", "--help"), "did you mean 'dynamic'"),
    ]:
        failed = run_cli(*args)
        assert failed.returncode == 2, (args, failed.stderr)
        lines = failed.stderr.strip().splitlines()
        assert len(lines) == 1 and needle in lines[0], failed.stderr
    assert not (tmp_path / "x.onnx").exists()


def test_calibration_required_and_third_party_strategy(tmp_path, mlp):
    """A third-party strategy that needs calibration is reached through the registry, like the built-ins."""
    site = make_plugin_dist(tmp_path / "site", "onnxlite-copycat", "0.1", "onnxlite_copycat", '''
        import shutil
        from onnxlite import QuantizerSpec, QuantizeOutcome, Option, hookimpl

        class Copy:
            def quantize(self, model, output, options, context):
                n = sum(len(batch["x"]) for batch in context.calibration)
                shutil.copyfile(model, output)
                return QuantizeOutcome(notes=[f"saw {n} calibration samples"])

        @hookimpl
        def register_quantizers():
            return [QuantizerSpec(name="copycat", description="copies", factory=Copy,
                                  needs_calibration=True, options=(Option("level", int, 1, "unused"),))]
    ''')
    missing = run_cli("quantize", str(mlp), "-o", str(tmp_path / "c.onnx"), "-s", "copycat", site=site)
    assert missing.returncode == 2 and "needs calibration data: pass --calibration" in missing.stderr
    data = tmp_path / "calib.npz"
    np.savez(data, x=np.random.default_rng(0).standard_normal((5, 128)).astype(np.float32))
    done = run_cli("quantize", str(mlp), "-o", str(tmp_path / "c.onnx"), "-s", "copycat", "--calibration",
                   str(data), "--json", site=site)
    assert done.returncode == 0, done.stderr
    assert "saw 5 calibration samples" in json.loads(done.stdout)["notes"]
    helped = run_cli("quantize", "-s", "copycat", "--help", site=site)
    assert "level=int" in helped.stdout and "onnxlite-copycat" in helped.stdout


def test_the_table_says_what_the_smoke_check_ran_on(tmp_path):
    # A fixed batch of one (as Ultralytics exports): the check on the user's data runs one sample, and the
    # table said "a padded batch of 2" whatever it ran on.
    path = make_mlp(tmp_path / "one.onnx", k=32)
    model = onnx.load(str(path))
    for value in (*model.graph.input, *model.graph.output):
        value.type.tensor_type.shape.dim[0].dim_value = 1
    onnx.save(model, str(path))
    data = tmp_path / "calib.npz"
    np.savez(data, x=np.random.default_rng(0).standard_normal((6, 32)).astype(np.float32))
    done = run_cli("quantize", str(path), "-o", str(tmp_path / "s.onnx"), "-s", "static", "--calibration", str(data))
    assert done.returncode == 0, done.stderr
    assert "ran on the first 1 sample of --calibration" in done.stdout and "padded" not in done.stdout
    as_json = run_cli("quantize", str(path), "-o", str(tmp_path / "s2.onnx"), "-s", "static", "--calibration",
                      str(data), "--json")
    check = json.loads(as_json.stdout)["details"]["check"]
    assert check["samples"] == "user data" and check["batch"] == 1
    generated = run_cli("quantize", str(make_mlp(tmp_path / "mlp.onnx", k=32)), "-o", str(tmp_path / "d.onnx"))
    assert generated.returncode == 0, generated.stderr
    assert "ran on a generated, padded batch of 2" in generated.stdout and "--calibration" not in generated.stdout


def test_the_smoke_check_of_a_strategy_that_does_not_calibrate_runs_on_the_given_calibration(tmp_path):
    """dynamic ignores --calibration, and so did its smoke check: it ran on generated samples (a fixed-size
    graph was not checked at all) and the table said so.  Now it runs on the first samples given."""

    model = fixed_size_detector(tmp_path / "det.onnx")   # runs only on 16x16 images; generated ones are 8x8
    data = calibration_npz(tmp_path / "images.npz", (6, 3, 16, 16))
    done = run_cli("quantize", str(model), "-o", str(tmp_path / "d.onnx"), "--calibration", str(data))
    assert done.returncode == 0, done.stderr
    assert "ran on the first 2 samples of --calibration" in done.stdout and "padded" not in done.stdout
    assert "does not use calibration data; the smoke check runs on the first samples of" in done.stderr
    as_json = run_cli("quantize", str(model), "-o", str(tmp_path / "d2.onnx"), "--calibration", str(data), "--json")
    check = json.loads(as_json.stdout)["details"]["check"]
    assert check["ran"] and check["samples"] == "user data" and check["batch"] == 2
    # without --calibration the same graph fails on generated samples: the check is skipped, as before
    warnings: list[str] = []
    plain = onnxlite.quantize(model, tmp_path / "d3.onnx", "dynamic", on_warning=warnings.append)
    assert plain.details["check"]["ran"] is False and any("generated samples" in w for w in warnings), warnings
    # --no-check: the data serves nothing, and the warning says it is ignored
    unchecked = run_cli("quantize", str(model), "-o", str(tmp_path / "d4.onnx"), "--calibration", str(data),
                        "--no-check")
    assert unchecked.returncode == 0 and "ignoring" in unchecked.stderr


def test_the_smoke_check_cuts_each_input_on_its_own_sample_axis(tmp_path, monkeypatch):
    """A state [2, batch, 8] holds its samples on axis 1: the check takes the first ones there, and counts
    them there (the count read axis 0 of whichever input came first: the state's 2)."""
    import onnxlite.quantization.run as run

    model = streaming_model(tmp_path / "stream.onnx")
    rng = np.random.default_rng(0)
    feeds = {"state": rng.standard_normal((2, 6, 8)).astype(np.float32),
             "x": rng.standard_normal((6, 16)).astype(np.float32), "sr": np.array(16000, np.int64)}
    data = tmp_path / "stream.npz"
    np.savez(data, **feeds)
    monkeypatch.setattr(run, "CHECK_SAMPLES", 3)
    for given in (str(data), feeds):   # a data path, and feeds from a Python caller
        result = onnxlite.quantize(model, tmp_path / "q.onnx", "dynamic", calibration=given, force=True)
        check = result.details["check"]
        assert check["ran"] and check["samples"] == "user data" and check["batch"] == 3, check
    first = run._check_samples(feeds, onnx.load(str(model)))
    assert first["state"].shape == (2, 3, 8) and first["x"].shape == (3, 16) and first["sr"].shape == ()
    np.testing.assert_array_equal(first["state"], feeds["state"][:, :3])
