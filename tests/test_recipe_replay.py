"""recipe.toml reproduces the run from what it stores (issue 14): a state-dict source replays without
--model-class or --input, threads come back, the data comes back, and a missing file names its flag."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from conftest import run_cli

NET = '''
import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))

    def forward(self, x):
        return self.body(x)
'''


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    torch = pytest.importorskip("torch")
    root = tmp_path_factory.mktemp("replay")
    (root / "net.py").write_text(NET)
    sys.path.insert(0, str(root))
    try:
        import importlib

        module = importlib.import_module("net")
        torch.manual_seed(0)
        torch.save(module.Net().state_dict(), root / "net_sd.pt")
    finally:
        sys.path.remove(str(root))
        sys.modules.pop("net", None)
    data = root / "samples.npz"
    np.savez(data, x=np.random.default_rng(0).standard_normal((48, 32)).astype(np.float32))
    out = root / "first"
    result = run_cli("lighten", str(root / "net_sd.pt"), "-o", str(out), "--model-class", f"{root / 'net.py'}:Net",
                     "--input", "x:float32[batch,32]", "--data", str(data), "--strategies", "dynamic",
                     "--max-drop", "cosine_mean=5%", "--threads", "1", "--runs", "3", "--no-partial", "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    return root, json.loads(result.stdout)


def test_the_recipe_records_what_the_run_needs(first_run):
    import tomllib

    root, payload = first_run
    doc = tomllib.loads((root / "first" / "recipe.toml").read_text())
    assert doc["source"]["model_class"] == f"{root / 'net.py'}:Net"
    assert doc["source"]["inputs"] == ["x:float32[batch,32]"] and doc["source"]["framework"] == "pytorch"
    assert doc["runtime"] == {"provider": "cpu", "threads": 1}
    assert doc["data"]["path"] == str((root / "samples.npz").resolve())
    assert payload["settings"]["threads"] == 1


def test_a_state_dict_source_replays_from_the_recipe_alone(first_run):
    root, payload = first_run
    # No --model-class, --input, --data or --threads: the recipe brings them all.
    again = run_cli("lighten", str(root / "net_sd.pt"), "-o", str(root / "again"),
                    "--recipe", str(root / "first" / "recipe.toml"), "--runs", "3", "--json")
    assert again.returncode == 0, again.stderr[-3000:]
    replay = json.loads(again.stdout)
    assert replay["settings"]["threads"] == 1                      # not onnxruntime's default
    assert replay["settings"]["held_out_samples"] == payload["settings"]["held_out_samples"]
    assert (replay["winner"]["strategy"], replay["winner"]["options"]) == \
        (payload["winner"]["strategy"], payload["winner"]["options"])
    assert replay["budgets"] == payload["budgets"]


def test_a_flag_given_at_replay_wins_over_the_recipe(first_run):
    root, _ = first_run
    again = run_cli("lighten", str(root / "net_sd.pt"), "-o", str(root / "two"), "--threads", "2",
                    "--recipe", str(root / "first" / "recipe.toml"), "--runs", "3", "--json")
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads(again.stdout)["settings"]["threads"] == 2


def test_recorded_data_that_is_gone_names_the_flag(first_run, tmp_path):
    root, _ = first_run
    recipe = (root / "first" / "recipe.toml").read_text()
    moved = tmp_path / "recipe.toml"
    moved.write_text(recipe.replace(str((root / "samples.npz").resolve()), str(tmp_path / "gone.npz")))
    result = run_cli("lighten", str(root / "net_sd.pt"), "-o", str(tmp_path / "out"), "--recipe", str(moved))
    assert result.returncode == 2, result.stderr
    assert "pass --data PATH" in " ".join(result.stderr.split()) and "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()


def test_recipe_round_trips_every_field(tmp_path):
    from onnxlite.search.recipes import Recipe, read_recipe

    recipe = Recipe(strategy="static", options={"method": "MinMax", "op_types": ("MatMul", "Gemm")},
                    budgets={"logits.accuracy": 0.01}, metric="logits.accuracy", max_drop=0.01,
                    framework="pytorch", inputs=("x:float32[batch,3,32,32]",), model_class="/m/net.py:Net",
                    source_options={"opset": 17}, data="/d/val.npz", data_options={"size": 32},
                    calibration="/d/cal.npz", threads=1, batch=8)
    path = tmp_path / "recipe.toml"
    path.write_text(recipe.to_toml())
    back = read_recipe(path)
    assert back == Recipe(**{**recipe.__dict__, "options": {"method": "MinMax", "op_types": ["MatMul", "Gemm"]}})


@pytest.mark.unit
def test_a_config_goes_through_recipe_toml_and_a_replay_fills_in_only_what_was_left_out(tmp_path):
    """Issue 26: recipe.toml records a LightenConfig's replay fields; a replay updates a config with
    dataclasses.replace, by field name, and a field the user gave wins over the recipe."""
    from dataclasses import replace

    from onnxlite.runtime import SessionSettings
    from onnxlite.search.config import LightenConfig
    from onnxlite.search.recipes import Recipe, read_recipe, record, replay

    data = tmp_path / "val.npz"
    np.savez(data, x=np.zeros((4, 3), np.float32))
    made = LightenConfig(data=str(data), data_options={"size": 32}, model_class="pkg.Net", batch=8,
                         framework_options=["opset=17"], settings=SessionSettings(threads=3))
    path = tmp_path / "recipe.toml"
    path.write_text(Recipe(strategy="dynamic", budgets={"y.cosine": 0.02}, metric="y.cosine", objective="size",
                           framework="pytorch", **record(made)).to_toml())
    recipe = read_recipe(path)

    bare = replay(recipe, LightenConfig(settings=SessionSettings()))
    assert bare == replace(bare, data=str(data.resolve()), data_options={"size": 32}, model_class="pkg.Net",
                           batch=8, framework="pytorch", framework_options={"opset": "17"}, metric=["y.cosine"],
                           max_drop={"y.cosine": 0.02}, objective="size")
    assert bare.settings is not None and bare.settings.threads == 3
    given = replay(recipe, LightenConfig(batch=2, objective="latency", max_drop="5%", settings=SessionSettings()))
    assert (given.batch, given.objective, given.max_drop) == (2, "latency", "5%")


def test_the_recipe_records_only_options_that_acted_on_the_model(tmp_path):
    """Issue 25 §2: an op type the graph has no node of (Gather on a MatMul/Gemm head) did nothing, so the
    recipe lighten writes does not record them; the model it replays quantizes the same nodes."""
    import onnx
    import tomllib

    import onnxlite

    from helpers import write_gemm_head

    model = write_gemm_head(tmp_path / "mlp.onnx")
    asked = tmp_path / "asked.toml"
    asked.write_text('version = 1\n[strategy]\nname = "dynamic"\n'
                     '[strategy.options]\nop_types = ["MatMul", "Gemm", "Gather"]\n[budget]\nmax_drop = 0.4\n')
    result = onnxlite.lighten(str(model), tmp_path / "out", recipe=asked, runs=2)
    assert result.winner is not None, result.message
    assert list(result.winner.options["op_types"]) == ["MatMul", "Gemm", "Gather"]   # what was asked
    recorded = tomllib.loads(result.recipe_path.read_text())["strategy"]["options"]["op_types"]
    assert recorded == ["MatMul", "Gemm"]                                      # what acted on this graph
    again = onnxlite.lighten(str(model), tmp_path / "again", recipe=result.recipe_path, runs=2)
    ops = [sorted(n.op_type for n in onnx.load(str(p)).graph.node) for p in (result.model_path, again.model_path)]
    assert ops[0] == ops[1]
