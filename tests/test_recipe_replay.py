"""recipe.toml reproduces the run from what it stores: a state-dict source replays without --model-class or
--input, threads come back, the data comes back, a missing file names its flag, and every built-in strategy's
winning recipe gives the same model again."""

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
                    calibration="/d/cal.npz", threads=1, batch=8, acted={"op_types": ("Gemm",)})
    path = tmp_path / "recipe.toml"
    path.write_text(recipe.to_toml())
    back = read_recipe(path)
    assert back == Recipe(**{**recipe.__dict__, "options": {"method": "MinMax", "op_types": ["MatMul", "Gemm"]},
                             "acted": {"op_types": ["Gemm"]}})


@pytest.mark.unit
def test_a_config_goes_through_recipe_toml_and_a_replay_fills_in_only_what_was_left_out(tmp_path):
    """recipe.toml records a LightenConfig's replay fields; a replay updates a config with
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


def test_the_recipe_keeps_the_options_as_run_and_notes_what_acted(tmp_path):
    """An op type the graph has no node of (Gather on a MatMul/Gemm head) did nothing: the recipe notes which
    entries acted, but keeps the options as the winner ran them, and the replay quantizes the same nodes."""
    import tomllib

    import onnxlite

    from helpers import write_gemm_head

    model = write_gemm_head(tmp_path / "mlp.onnx")
    asked = tmp_path / "asked.toml"
    asked.write_text('version = 1\n[strategy]\nname = "dynamic"\n'
                     '[strategy.options]\nop_types = ["MatMul", "Gemm", "Gather"]\n[budget]\nmax_drop = 0.4\n')
    result = onnxlite.lighten(str(model), tmp_path / "out", recipe=asked, runs=2, cache=False)
    assert result.winner is not None, result.message
    assert list(result.winner.options["op_types"]) == ["MatMul", "Gemm", "Gather"]   # what was asked
    strategy = tomllib.loads(result.recipe_path.read_text())["strategy"]
    assert strategy["options"]["op_types"] == ["MatMul", "Gemm", "Gather"]      # what reproduces it
    assert strategy["acted"] == {"op_types": ["MatMul", "Gemm"]}                  # the note: what had nodes
    again = onnxlite.lighten(str(model), tmp_path / "again", recipe=result.recipe_path, runs=2, cache=False)
    assert again.winner is not None and again.winner.name == result.winner.name
    assert graph_content(again.model_path) == graph_content(result.model_path)


def graph_content(path):
    """A model as what it computes: nodes in order, initializers by name (onnxruntime's GPTQ writes the same
    tensors in another order from one run to the next, so the bytes alone would differ)."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path))
    nodes = [(n.op_type, list(n.input), list(n.output), [a.SerializeToString() for a in n.attribute])
             for n in model.graph.node]
    tensors = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    return nodes, {name: (a.dtype.str, a.shape, a.tobytes()) for name, a in sorted(tensors.items())}


def test_a_state_dict_winner_whose_op_types_include_absent_ones_replays(first_run, tmp_path):
    """The winner dynamic[op_types=MatMul,Gemm,Gather,weight_type=quint8] of a PyTorch state dict (its
    Linears export as Gemm, which onnxruntime quantizes through a MatMul) replays to the same model: the recipe
    must not narrow op_types to the Gemm alone, which quantizes nothing."""
    import tomllib

    root, _ = first_run
    import tomli_w

    doc = tomllib.loads((root / "first" / "recipe.toml").read_text())
    doc["strategy"] = {"name": "dynamic", "options": {"op_types": ["MatMul", "Gemm", "Gather"],
                                                       "weight_type": "quint8"}}
    asked = tmp_path / "asked.toml"
    asked.write_text(tomli_w.dumps(doc))
    first = run_cli("lighten", str(root / "net_sd.pt"), "-o", str(tmp_path / "a"), "--recipe", str(asked),
                    "--runs", "2", "--no-cache", "--json")
    assert first.returncode == 0, first.stderr[-3000:]
    recorded = tomllib.loads((tmp_path / "a" / "recipe.toml").read_text())["strategy"]
    assert recorded["options"]["op_types"] == ["MatMul", "Gemm", "Gather"] and "Gather" not in \
        recorded["acted"]["op_types"]
    again = run_cli("lighten", str(root / "net_sd.pt"), "-o", str(tmp_path / "b"),
                    "--recipe", str(tmp_path / "a" / "recipe.toml"), "--runs", "2", "--no-cache", "--json")
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads(again.stdout)["winner"]["name"] == json.loads(first.stdout)["winner"]["name"]
    assert graph_content(tmp_path / "b" / "model.onnx") == graph_content(tmp_path / "a" / "model.onnx")
    quantized = [n for n in graph_content(tmp_path / "b" / "model.onnx")[0] if n[0] == "MatMulInteger"]
    assert quantized, "the replay quantized nothing"


def built_in_strategies():
    from onnxlite.registry import get_registry

    return sorted(r.name for r in get_registry().all("quantizer") if r.plugin.builtin)


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    """Three MatMuls (K of 64 and 128: whole 32-wide blocks for the 4-bit strategies) and held-out data."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    root = tmp_path_factory.mktemp("mlp")
    rng = np.random.default_rng(2)
    shapes = {"W1": (64, 128), "W2": (128, 128), "W3": (128, 16)}
    inits = [numpy_helper.from_array((rng.standard_normal(s) / np.sqrt(s[0])).astype(np.float32), n)
             for n, s in shapes.items()]
    # every node named: onnxruntime's GPTQ fails on an unnamed one
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["h1"], name="fc1"),
             helper.make_node("Relu", ["h1"], ["r1"], name="relu1"),
             helper.make_node("MatMul", ["r1", "W2"], ["h2"], name="fc2"),
             helper.make_node("Relu", ["h2"], ["r2"], name="relu2"),
             helper.make_node("MatMul", ["r2", "W3"], ["y"], name="fc3")]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 16])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.save(model, root / "mlp.onnx")
    np.savez(root / "data.npz", x=rng.standard_normal((48, 64)).astype(np.float32))
    return root


# qat trains a PyTorch source and runs only as the last resort: test_qat_last_resort covers it. gguf carries a GGUF
# file's blocks into a decoder exported from that file, which an MLP is not: tests/test_gguf_carry.py covers it.
@pytest.mark.slow
@pytest.mark.parametrize("strategy", [s for s in built_in_strategies() if s not in {"qat", "gguf"}])
def test_each_built_in_strategy_replays_its_winning_recipe(mlp, tmp_path, strategy):
    """A search over one strategy's grid, then its recipe on the same source with no other flag and no cache:
    the same candidate, the same model (nodes and tensors), the same size and accuracy figures."""
    import onnxlite

    first = onnxlite.lighten(str(mlp / "mlp.onnx"), tmp_path / "first", strategies=[strategy], runs=2,
                             data=str(mlp / "data.npz"), max_drop=0.5, partial=False, cache=False)
    assert first.winner is not None, first.message
    again = onnxlite.lighten(str(mlp / "mlp.onnx"), tmp_path / "again", recipe=first.recipe_path, runs=2,
                             cache=False)
    assert again.winner is not None, again.message
    assert (again.winner.name, dict(again.winner.options)) == (first.winner.name, dict(first.winner.options))
    assert graph_content(again.model_path) == graph_content(first.model_path)
    assert again.winner.size_bytes == first.winner.size_bytes
    # the same model on the same held-out samples; a replay computes only the budgeted metrics
    assert set(again.budgets) == set(first.budgets) and set(first.budgets) <= set(again.winner.drops)
    assert {k: again.winner.drops[k] for k in first.budgets} == {k: first.winner.drops[k] for k in first.budgets}


def test_every_built_in_strategy_is_replayed():
    """A new built-in strategy joins the replay test above (or says here why it cannot)."""
    assert "qat" in built_in_strategies() and {"dynamic", "static", "gptq"} <= set(built_in_strategies())
