"""``onnxlite sweep``: the manifest is read strictly and fast; the CLI never imports Ray to start."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from onnxlite.errors import UsageError
from onnxlite.sweeps import read_manifest

from conftest import save_graph


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text))
    return path


def test_defaults_apply_and_model_entries_override(tmp_path):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "a.onnx").write_bytes(b"")
    manifest = write(tmp_path / "zoo.toml", """
        [sweep]
        output = "out"
        executor = "ray"
        [defaults]
        max_drop = "1%"
        runs = 7
        strategies = "dynamic, static"
        threads = 2
        [[models]]
        source = "models/a.onnx"
        data = "a-heldout.npz"
        data_options = { tokenizer = "models", max_length = 64 }
        [[models]]
        name = "b-model"
        source = "bert-base-uncased"
        max_drop = "accuracy=0.5%"
        metric = ["accuracy", "cosine_min"]
        model_class = "net.py:Net"
    """)
    plan = read_manifest(manifest)
    a, b = plan.models
    assert a.name == "a" and b.name == "b-model"
    assert a.options["source"] == str(tmp_path / "models" / "a.onnx")
    # A data file is taken from the manifest's folder even before it exists, so an error names that path.
    assert a.options["data"] == str(tmp_path / "a-heldout.npz")
    assert a.options["data_options"] == {"tokenizer": str(tmp_path / "models"), "max_length": 64}
    assert a.options["strategies"] == ["dynamic", "static"] and a.options["runs"] == 7 and a.options["threads"] == 2
    assert a.options["max_drop"] == "1%" and b.options["max_drop"] == "accuracy=0.5%"
    # Not a file next to the manifest: a hub id stays as written.
    assert b.options["source"] == "bert-base-uncased"
    assert b.options["model_class"] == f"{tmp_path / 'net.py'}:Net"
    assert plan.sweep["output"] == str(tmp_path / "out") and plan.sweep["executor"] == "ray"


def test_lighten_arguments_split_the_session_settings(tmp_path):
    from onnxlite.sweeps.one_model import lighten_arguments

    plan = read_manifest(write(tmp_path / "m.toml", """
        [[models]]
        source = "/abs/model.onnx"
        threads = 1
        provider = "cpu"
        runs = 3
    """))
    source, options = lighten_arguments(plan.models[0])
    assert source == "/abs/model.onnx"
    assert options["settings"].threads == 1 and options["settings"].provider == "cpu"
    assert options["runs"] == 3 and "threads" not in options


@pytest.mark.parametrize("body, message", [
    ("[[models]]\nsource = 'a.onnx'\nmax_dorp = '1%'\n", "unknown key 'max_dorp' (did you mean max_drop?)"),
    ("[defaults]\nruns = 'ten'\n[[models]]\nsource = 'a.onnx'\n", "[defaults]: runs must be an integer"),
    ("[defaults]\nruns = 0\n[[models]]\nsource = 'a.onnx'\n", "runs must be at least 1"),
    ("[defaults]\npartial = 1\n[[models]]\nsource = 'a.onnx'\n", "partial must be true/false"),
    ("[[models]]\ndata = 'd.npz'\n", "[[models]] #1: needs a source"),
    ("[defaults]\nmax_drop = '1%'\n", "needs at least one [[models]] entry"),
    ("[[models]]\nsource = 'a.onnx'\n[[models]]\nsource = 'other/a.onnx'\n", "two models are named 'a'"),
    ("[[models]]\nname = '../escape'\nsource = 'a.onnx'\n", "name '../escape' must be letters"),
    ("[sweep]\nexecutor = 'spark'\n[[models]]\nsource = 'a.onnx'\n", "executor: expected local or ray"),
    ("[sweeps]\n[[models]]\nsource = 'a.onnx'\n", "unknown key 'sweeps' (did you mean sweep?)"),
    ("[defaults]\nsource = 'a.onnx'\n[[models]]\nsource = 'b.onnx'\n", "[defaults] cannot set source"),
    ("[[models]]\nsource = 'a.onnx'\ninputs = [1, 2]\n", "inputs must be a list of strings"),
    ("[[models]\nsource = 'a.onnx'\n", "not valid TOML"),
    ("[defaults]\ntarget_cpu = 'avx3'\n[[models]]\nsource = 'a.onnx'\n", "[defaults]: target_cpu avx3: unknown CPU"),
    ("[[models]]\nsource = 'a.onnx'\ntarget_cpu = 'pentium'\n", "model 'a': target_cpu pentium: unknown CPU kind"),
])
def test_manifest_mistakes_are_one_line_naming_the_file(tmp_path, body, message):
    manifest = write(tmp_path / "zoo.toml", body)
    with pytest.raises(UsageError) as caught:
        read_manifest(manifest)
    text = str(caught.value)
    assert text.startswith(str(manifest)) and message in text and "\n" not in text


@pytest.mark.slow
def test_a_local_sweep_keeps_finished_models_and_retries_failed_ones(tmp_path):
    import json

    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    weights = numpy_helper.from_array(np.random.default_rng(0).standard_normal((16, 64)).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "mm",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 64])], [weights])
    save_graph(graph, tmp_path / "mm.onnx")
    manifest = write(tmp_path / "zoo.toml", """
        [defaults]
        strategies = ["dynamic"]
        metric = "y.cosine_min"
        max_drop = "5%"
        runs = 3
        [[models]]
        source = "mm.onnx"
        [[models]]
        name = "broken"
        source = "mm.onnx"
        data = "missing.npz"
    """)
    command = [sys.executable, "-m", "onnxlite", "sweep", str(manifest), "-o", str(tmp_path / "out"), "--json"]
    first = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert first.returncode == 1, first.stderr   # not every model got a winner
    models = {m["name"]: m for m in json.loads(first.stdout)["models"]}
    assert models["mm"]["status"] == "lightened" and not models["mm"]["kept"]
    assert models["broken"]["status"] == "failed" and "missing.npz" in models["broken"]["message"]
    assert (tmp_path / "out" / "mm" / "model.onnx").is_file() and not (tmp_path / "out" / "broken").exists()
    again = subprocess.run(command, capture_output=True, text=True, timeout=600)
    models = {m["name"]: m for m in json.loads(again.stdout)["models"]}
    assert models["mm"]["kept"] and models["broken"]["status"] == "failed"
    assert "kept" in again.stderr and "mm" in (tmp_path / "out" / "summary.md").read_text()
    # issue 25: every generated report page is well-formed XML, the sweep's summary page too
    import xml.etree.ElementTree as ET

    page = (tmp_path / "out" / "summary.html").read_text()
    root = ET.fromstring(page.replace("<!DOCTYPE html>", "", 1))
    assert "mm" in "".join(root.itertext())


def test_missing_manifest_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="no such manifest"):
        read_manifest(tmp_path / "absent.toml")


def test_ray_flags_need_the_ray_executor(tmp_path):
    import onnxlite

    manifest = write(tmp_path / "m.toml", "[[models]]\nsource = 'a.onnx'\n")
    with pytest.raises(UsageError, match="--bench-on: needs --executor ray"):
        onnxlite.sweep(manifest, tmp_path / "out", bench_on="arch=arm64")
    assert not (tmp_path / "out").exists()


def test_sweep_cli_errors_exit_2_in_one_line(tmp_path):
    manifest = write(tmp_path / "m.toml", "[[models]]\nsource = 'a.onnx'\nrun = 3\n")
    proc = subprocess.run([sys.executable, "-m", "onnxlite", "sweep", str(manifest)], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [f"Error: {manifest}: model 'a': unknown key 'run' (did you mean runs?)"]


def test_lighten_ray_flags_without_the_ray_executor_exit_2(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "onnxlite", "lighten", "model.onnx", "--bench-on", "arch=arm64"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == "Error: --bench-on: needs --executor ray"
    assert list(tmp_path.iterdir()) == []


def test_a_ray_address_nobody_answers_on_fails_in_seconds():
    import socket
    import time

    from onnxlite.errors import OnnxliteError
    from onnxlite.executors import get_executor

    with socket.socket() as probe:   # a port that was free a moment ago: nothing listens there
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = time.monotonic()
    with pytest.raises(OnnxliteError, match=f"--ray-address 127.0.0.1:{port}: no Ray cluster answers there"):
        get_executor("ray", ray_address=f"127.0.0.1:{port}")
    assert time.monotonic() - started < 10
    with pytest.raises(UsageError, match="expected HOST:PORT"):
        get_executor("ray", ray_address="headnode")


def test_help_listing_and_sweep_help_do_not_import_ray():
    probe = (
        "import sys\n"
        "from onnxlite.cli import main\n"
        "for args in (['--help'], ['--list-plugins'], ['sweep', '--help'], ['lighten', '--help']):\n"
        "    try:\n"
        "        main(args)\n"
        "    except SystemExit as exc:\n"
        "        assert exc.code == 0, (args, exc.code)\n"
        "print('RAY=' + str('ray' in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "RAY=False" in result.stdout, result.stdout[-300:]


@pytest.mark.unit
def test_the_sweep_api_is_a_plain_function_that_its_package_never_hides():
    import types

    import onnxlite
    import onnxlite.sweeps  # importing the package sets it on onnxlite: named sweeps, it cannot hide sweep()

    assert isinstance(onnxlite.sweep, types.FunctionType)
    assert onnxlite.sweep is onnxlite.sweeps.sweep
    assert onnxlite.sweeps.SweepResult.__module__ == "onnxlite.sweeps.outcome"


def _tiny_matmul(path: Path) -> Path:
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    weights = numpy_helper.from_array(np.random.default_rng(0).standard_normal((16, 64)).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "mm",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 64])], [weights])
    return save_graph(graph, path)


def _recipe_target(outdir: Path) -> str | None:
    import tomllib

    return tomllib.loads((outdir / "recipe.toml").read_text()).get("hardware", {}).get("target_cpu")


def test_target_cpu_from_the_manifest_reaches_each_models_recipe(tmp_path):
    import onnxlite

    _tiny_matmul(tmp_path / "mm.onnx")
    manifest = write(tmp_path / "zoo.toml", """
        [defaults]
        strategies = ["dynamic"]
        metric = "y.cosine_min"
        max_drop = "5%"
        runs = 2
        target_cpu = "avx2"
        [[models]]
        source = "mm.onnx"
        [[models]]
        name = "for-arm"
        source = "mm.onnx"
        target_cpu = "arm64"
    """)
    result = onnxlite.sweep(manifest, tmp_path / "out")
    assert result.ok, [(m.name, m.message) for m in result.models]
    assert _recipe_target(tmp_path / "out" / "mm") == "avx2"
    assert _recipe_target(tmp_path / "out" / "for-arm") == "arm64"


def test_sweep_target_cpu_flag_is_checked_first_and_wins_over_the_manifest(tmp_path):
    _tiny_matmul(tmp_path / "mm.onnx")
    manifest = write(tmp_path / "zoo.toml", """
        [[models]]
        source = "mm.onnx"
        strategies = ["dynamic"]
        metric = "y.cosine_min"
        max_drop = "5%"
        runs = 2
        target_cpu = "arm64"
    """)
    command = [sys.executable, "-m", "onnxlite", "sweep", str(manifest), "-o", str(tmp_path / "out")]
    bad = subprocess.run(command + ["--target-cpu", "avx3"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    assert bad.stderr.startswith("Error: --target-cpu avx3: unknown CPU kind") and "avx2" in bad.stderr
    assert not (tmp_path / "out").exists()
    good = subprocess.run(command + ["--target-cpu", "avx512-vnni"], capture_output=True, text=True, timeout=600)
    assert good.returncode == 0, good.stderr
    assert _recipe_target(tmp_path / "out" / "mm") == "avx512-vnni"
