"""The partial fallback's float prefix, and probes that never see the confirm part (docs/lighten.md, "The fallback
rule")."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import onnxlite
from onnxlite.executors.local import LocalExecutor
from onnxlite.search.prefix import prefix_limit, prefixes

from conftest import save_graph
from helpers import fragile_model, misleading_model


def fragile_input_end(path: Path, channels: int = 8, convs: int = 3, at: int = 1) -> Path:
    """A chain of ``convs`` convs (Relu between them) with a Mul that widens channel 0 1000x before conv ``at``.

    That conv scales channel 0 back down, so in float nothing is lost; int8 activations on the Mul's output
    give one scale to a channel 1000x wider than the others, and those others are lost: the error enters
    before conv ``at``.  Keeping that conv alone in float cannot help (its input is still quantized);
    keeping the prefix up to it (the Mul too) does."""
    rng = np.random.default_rng(11)
    width = [4] + [channels] * convs
    scale = np.ones((1, width[at - 1], 1, 1), np.float32)
    scale[0, 0] = 1000.0
    inits, nodes, x = [numpy_helper.from_array(scale, "scale")], [], "x"
    for i in range(1, convs + 1):
        w = (rng.standard_normal((width[i], width[i - 1], 3, 3)) / np.sqrt(9 * width[i - 1])).astype(np.float32)
        if i == at:
            w[:, 0] /= 1000.0
            nodes.append(helper.make_node("Mul", [x, "scale"], ["scaled"], name="scale_input"))
            x = "scaled"
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        out = "y" if i == convs else f"c{i}"
        nodes.append(helper.make_node("Conv", [x, f"w{i}"], [out], name=f"conv{i}", pads=[1, 1, 1, 1]))
        if i < convs:
            nodes.append(helper.make_node("Relu", [out], [f"r{i}"], name=f"relu{i}"))
            x = f"r{i}"
    graph = helper.make_graph(nodes, "fragile_input_end",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", channels, 8, 8])], inits)
    return save_graph(graph, path)


def _data(tmp_path: Path) -> tuple[str, str]:
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "cal.npz", x=rng.standard_normal((16, 4, 8, 8)).astype(np.float32))
    np.savez(tmp_path / "held.npz", x=rng.standard_normal((24, 4, 8, 8)).astype(np.float32))
    return str(tmp_path / "cal.npz"), str(tmp_path / "held.npz")


def _cosine(model: str, x: np.ndarray, ref: np.ndarray) -> float:
    y = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0].reshape(len(x), -1)
    r = ref.reshape(len(x), -1)
    return float(np.mean((r * y).sum(1) / (np.linalg.norm(r, axis=1) * np.linalg.norm(y, axis=1) + 1e-30)))


class _Recording(LocalExecutor):
    """The local executor, noting which held-out samples each task's judge holds (read from its folder as it runs)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, np.ndarray]] = []
        self.parts: dict | None = None

    def run_tasks(self, tasks, folder, workers=None, on_start=None):
        for task in tasks:
            judge = Path(task["judge"])
            with np.load(judge / "judge.npz") as npz:
                self.seen.append((task["candidate"]["name"], npz["in_0"].copy()))
            config = json.loads((judge / "judge.json").read_text())
            if config["parts"]:
                self.parts = config["parts"]
        return super().run_tasks(tasks, folder, workers, on_start)


def test_prefixes_hold_every_node_up_to_the_kth_weighted_one(tmp_path):
    import onnx

    model = onnx.load(str(fragile_input_end(tmp_path / "m.onnx")))
    cuts = prefixes(model, ["conv1", "conv2", "conv3"])
    assert cuts == [["scale_input", "conv1"], ["scale_input", "conv1", "relu1", "conv2"],
                    ["scale_input", "conv1", "relu1", "conv2", "relu2", "conv3"]]


def test_the_prefix_limit_counts_the_weights_the_base_quantized():
    """Half of the quantized nodes' weights: the first two of four MatMuls, though an embedding table the base left
    float (as dynamic int8 leaves MiniLM's) precedes them and outweighs them all."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((1000, 16)).astype(np.float32), "table")]
    inits += [numpy_helper.from_array(rng.standard_normal((16, 16)).astype(np.float32), f"w{i}") for i in range(4)]
    nodes = [helper.make_node("Gather", ["table", "ids"], ["h"], name="embed")]
    for i in range(4):
        nodes.append(helper.make_node("MatMul", ["h" if i == 0 else f"m{i - 1}", f"w{i}"], [f"m{i}"], name=f"mm{i}"))
    graph = helper.make_graph(nodes, "embedded", [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch"])],
                              [helper.make_tensor_value_info("m3", TensorProto.FLOAT, ["batch", 16])], inits)
    model, weighted = helper.make_model(graph), [f"mm{i}" for i in range(4)]
    cuts = prefixes(model, weighted)
    assert cuts[0] == ["embed", "mm0"]
    assert prefix_limit(model, cuts, weighted) == 2


def test_a_float_prefix_repairs_an_input_end_that_keeping_its_conv_float_does_not(tmp_path):
    model = fragile_input_end(tmp_path / "fragile.onnx")
    calibration, held = _data(tmp_path)
    x = np.load(held)["x"]
    ref = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    # the measured premise: conv1 alone in float is far off, the prefix (the Mul and conv1) is close
    alone = onnxlite.quantize(str(model), tmp_path / "alone.onnx", "static", calibration=calibration, exclude=["conv1"])
    prefix = onnxlite.quantize(str(model), tmp_path / "prefix.onnx", "static", calibration=calibration,
                               exclude=["scale_input", "conv1"])
    assert _cosine(str(alone.path), x, ref) < 0.9 < 0.995 < _cosine(str(prefix.path), x, ref)

    result = onnxlite.lighten(str(model), tmp_path / "out", strategies=["static"], metric="cosine_mean",
                              max_drop="1%", data=held, calibration=calibration, runs=2)
    bases = [r for r in result.candidates if not r.keep_float]
    assert bases and all(r.status == "rejected" for r in bases), [(r.name, r.drops) for r in bases]
    done = result.partial
    assert done["ranked_by"] == "float prefix", done
    assert done["prefix"]["k"] == 1 and done["prefix"]["last"] == "conv1" and done["prefix"]["exact"], done["prefix"]
    winner = result.winner
    assert winner is not None and winner.keep_float == ["scale_input", "conv1"], result.message
    assert winner.drops["y.cosine_mean"] <= 0.01 and winner.size_bytes < result.baseline.size_bytes
    # the figure reported for it is the confirm part's: the probe that chose it measured the select part
    probe = done["prefix"]["probes"][0]
    assert probe["drop"] == winner.select_drops["y.cosine_mean"] != winner.drops["y.cosine_mean"]


def test_with_too_few_held_out_samples_for_a_select_part_the_confirmed_repair_can_still_win(tmp_path):
    """Below MIN_SPLIT held-out samples the probes and the confirming row share one judge: the row repeats its
    probe, and must stand as that probe's verdict (it once read "the same candidate as" itself, rejected)."""
    from onnxlite.search.confidence import MIN_SPLIT

    model = fragile_input_end(tmp_path / "fragile.onnx")
    calibration, held = _data(tmp_path)
    few = tmp_path / "few.npz"
    np.savez(few, x=np.load(held)["x"][:MIN_SPLIT - 2])
    result = onnxlite.lighten(str(model), tmp_path / "out", strategies=["static"], metric="cosine_mean",
                              max_drop="1%", data=str(few), calibration=calibration, runs=2)
    assert not result.evidence["parts"].get("select"), result.evidence["parts"]    # no select part set aside
    winner = result.winner
    assert winner is not None and winner.keep_float == ["scale_input", "conv1"], result.message
    assert winner.same_as is None and winner.drops["y.cosine_mean"] <= 0.01


def test_the_prefix_search_finds_the_shortest_prefix_that_passes(tmp_path):
    """The Mul sits before conv3 of six: prefixes of 1 and 2 convs leave it quantized, 3 is the shortest that passes."""
    model = fragile_input_end(tmp_path / "fragile.onnx", convs=6, at=3)
    calibration, held = _data(tmp_path)
    result = onnxlite.lighten(str(model), tmp_path / "out", strategies=["static"], metric="cosine_mean",
                              max_drop="1%", data=held, calibration=calibration, runs=2, workers=2)
    done = result.partial
    assert done["ranked_by"] == "float prefix" and done["prefix"]["k"] == 3 and done["prefix"]["exact"], done
    probed = {p["k"]: p["passed"] for p in done["prefix"]["probes"]}
    assert probed[3] and not probed[2], probed    # the limit (half of six) first, then the points below it
    # static's pre-processing fuses each Relu into its conv: the prefix names only what the base still holds
    assert result.winner is not None and result.winner.keep_float == ["conv1", "conv2", "scale_input", "conv3"], \
        result.message


def _check_select_only(executor: _Recording, result) -> list[str]:
    """Every task the fallback ran saw the select part only, except one per row it added (judged on every sample).

    A probe and the row it became share a name; the rows' names therefore each allow one task on every sample."""
    everything = max((x for _n, x in executor.seen), key=len)   # the search's judge holds every sample
    parts = executor.parts
    assert parts and len(everything) == len(parts["select"]) + len(parts["confirm"])
    select, confirm = everything[parts["select"]], everything[parts["confirm"]]
    rows = {r.name for r in result.candidates if not r.same_as}   # a row repeating another never runs (trials)
    whole, probes = [], []
    for name, x in executor.seen:
        if np.array_equal(x, everything):
            whole.append(name)
            continue
        probes.append(name)
        assert np.array_equal(x, select), f"{name} was judged on {len(x)} samples, not the select part's {len(select)}"
        assert not any((x == c).all(axis=tuple(range(1, x.ndim))).any() for c in confirm), name
    assert sorted(whole) == sorted(rows), "a probe was judged on every sample, or a row was not"
    return probes


def test_fallback_probes_never_see_the_confirm_part(tmp_path):
    """Prefix probes, the activation ranking's steps and the sweep's probes all get the select part's judge;
    the repair they choose is judged on every sample, and reported on the confirm part."""
    executor = _Recording()
    model = misleading_model(tmp_path / "misleading.onnx")
    result = onnxlite.lighten(str(model), tmp_path / "out", strategies=["dynamic"], metric="cosine_mean",
                              max_drop="1%", runs=2, max_float_nodes=1, executor=executor)
    done = result.partial
    assert done["ranked_by"].startswith("direct sweep") and done["prefix"]["probes"], done
    probes = _check_select_only(executor, result)
    assert any("+prefix" in n for n in probes) and any("[only " in n for n in probes)
    assert any(n.endswith("+float1") for n in probes)
    assert result.winner is not None and result.winner.keep_float == ["F2"], result.message

    executor = _Recording()
    calibration, held = _data(tmp_path)
    result = onnxlite.lighten(str(fragile_input_end(tmp_path / "fragile.onnx")), tmp_path / "out2",
                              strategies=["static"], metric="cosine_mean", max_drop="1%", data=held,
                              calibration=calibration, runs=2, executor=executor)
    assert any("+prefix" in n for n in _check_select_only(executor, result))


def test_mixed_precision_probes_never_see_the_confirm_part(tmp_path):
    """The per-node sensitivity probes of the mixed-precision plan get the select part's judge too; only the
    plan's rows are judged on every sample (and reported on the confirm part)."""

    executor = _Recording()
    model = fragile_model(tmp_path / "fragile.onnx")
    result = onnxlite.lighten(str(model), tmp_path / "out", strategies=["dynamic", "mixed"], metric="cosine_mean",
                              max_drop="1%", runs=2, partial=False, executor=executor)
    assert result.evidence["mixed"]["sensitivity"], result.evidence
    probes = _check_select_only(executor, result)
    sensitivity = result.evidence["mixed"]["sensitivity"]
    assert len(probes) >= sum(len(schemes) for schemes in sensitivity.values()), probes
