"""The partial fallback pays for itself: the base with the least to repair first, probes bounded by the model's cost,
activations compared a memory-sized batch at a time (docs/lighten.md, "The fallback rule")."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxlite
from onnxlite.search import partial
from onnxlite.search.partial import fallback_bases, rank_nodes, relative_errors
from onnxlite.search.results import CandidateRow

from conftest import other_cpu, save_graph
from helpers import misleading_model


def _row(name, size, drop, select=None, status="rejected", over=True):
    return CandidateRow(name=name, strategy="static", options={}, status=status, size_bytes=size, drops={"m": drop},
                        select_drops={"m": drop if select is None else select}, over_budget=over, path=f"{name}.onnx")


def test_bases_of_near_equal_size_are_repaired_least_drop_first():
    lightest = _row("all-ops", 1000, 0.020, select=0.018)
    conv_only = _row("conv-only", 1035, 0.015, select=0.010)
    heavier = _row("heavier", 1200, 0.012, select=0.005)     # beyond the 10% slack: never a base here
    far = _row("far", 1010, 0.5)                             # over 3x the budget: nothing to gain from it
    bases, why = fallback_bases([lightest, heavier, conv_only, far], "m", 0.01, lambda s: True)
    assert [b.name for b in bases] == ["conv-only", "all-ops"], why
    assert "select part first: conv-only, all-ops" in why
    # ordered by the select part's drop, not the confirm part's (which judges the repaired model)
    swapped = _row("conv-only", 1035, 0.015, select=0.030)
    bases, _ = fallback_bases([lightest, swapped], "m", 0.01, lambda s: True)
    assert [b.name for b in bases] == ["all-ops", "conv-only"]
    # when the rule's base is not within 3x of the budget it is the only one, as before
    bases, _ = fallback_bases([_row("a", 1000, 0.5), _row("b", 1001, 0.4)], "m", 0.01, lambda s: True)
    assert [b.name for b in bases] == ["b"]
    # with a passing candidate, only clearly lighter ones are bases, and never more than MAX_BASES
    rows = [_row(f"q{i}", 500 + i, 0.02) for i in range(6)] + [_row("fp16", 1000, 0.0, status="ok", over=False)]
    bases, why = fallback_bases(rows, "m", 0.01, lambda s: True)
    assert len(bases) == partial.MAX_BASES and "lighter than fp16" in why
    assert fallback_bases([_row("fp16", 1000, 0.0, status="ok", over=False), _row("q", 900, 0.02)], "m", 0.01,
                          lambda s: True)[0] == []


def _chain(path: Path, k: int = 64) -> Path:
    rng = np.random.default_rng(7)
    inits = [numpy_helper.from_array((rng.standard_normal((k, k)) / np.sqrt(k)).astype(np.float32), f"w{i}")
             for i in range(3)]
    nodes = [helper.make_node("MatMul", ["x", "w0"], ["h0"], name="M0"),
             helper.make_node("Relu", ["h0"], ["r0"], name="R0"),
             helper.make_node("MatMul", ["r0", "w1"], ["h1"], name="M1"),
             helper.make_node("MatMul", ["h1", "w2"], ["y"], name="M2")]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", k])], inits)
    return save_graph(graph, path)


def test_activations_are_compared_a_memory_sized_batch_at_a_time(tmp_path, monkeypatch):
    import onnxlite.activations as activations

    model = _chain(tmp_path / "chain.onnx")
    x = np.random.default_rng(1).standard_normal((10, 64)).astype(np.float32)
    np.savez(tmp_path / "calibration.npz", x=x[:4])
    # static: fixed activation scales, so the figures do not depend on the batching (dynamic int8's do)
    quantized = onnxlite.quantize(str(model), tmp_path / "q.onnx", "static",
                                  calibration=str(tmp_path / "calibration.npz")).path
    names = ["r0", "h1", "y"]   # tensors both graphs hold (pre-processing fuses M0 with its Relu)
    float_proto, quant_proto = onnx.load(str(model)), onnx.load(str(quantized))
    # all at once, by hand: the figures the streamed sums must equal
    whole = {n: v for n, v in zip(names, [np.concatenate(a) for a in zip(*[
        [b[n] for n in names] for b in activations.iter_activations(float_proto, names, [{"x": x}])])])}
    quant = {n: v for n, v in zip(names, [np.concatenate(a) for a in zip(*[
        [b[n] for n in names] for b in activations.iter_activations(quant_proto, names, [{"x": x}])])])}
    expected = {n: float(np.linalg.norm(whole[n].astype(np.float64) - quant[n]) / np.linalg.norm(whole[n]))
                for n in names}

    seen = []
    real = activations.iter_activations

    def recording(model, names, feeds, threads=None):
        for feed in feeds:
            seen.append(len(feed["x"]))
            yield from real(model, names, [feed], threads)

    monkeypatch.setattr(activations, "iter_activations", recording)
    # one sample exposes 3 tensors x 64 floats in each model: let a batch hold three samples' worth
    monkeypatch.setattr("onnxlite.inputs.available_memory", lambda: 3 * 2 * 3 * 64 * 4)
    monkeypatch.setattr(partial, "RANKING_MEMORY_SHARE", 1.0)
    found = relative_errors(float_proto, quant_proto, names, [{"x": x}])
    assert found == pytest.approx(expected, rel=1e-6)
    # both sessions see the same batches: one sample to measure, then three at a time
    assert seen[::2] == seen[1::2] == [1, 3, 3, 3]
    ranked = rank_nodes(model, quantized, [{"x": x}])
    assert {e.node for e in ranked} == {"M1", "M2"}
    assert next(e for e in ranked if e.node == "M1").output_error == pytest.approx(expected["h1"], rel=1e-6)


def test_the_sensitivity_sweep_is_bounded_by_the_models_cost(tmp_path, monkeypatch):
    """No time left for probes: the sweep measures the activation ranking's suspects only, and still finds F2."""
    monkeypatch.setattr(partial, "FALLBACK_SECONDS", 0.0)
    monkeypatch.setattr(partial, "SWEEP_MIN_NODES", 2)
    model = misleading_model(tmp_path / "misleading.onnx")
    notes = []
    result = onnxlite.lighten(str(model), tmp_path / "out", strategies=["dynamic"], metric="cosine_mean",
                              max_drop="1%", runs=2, max_float_nodes=1,
                              on_event=lambda kind, info: notes.append(info.get("message", "")))
    done = result.partial
    assert done["ranked_by"].startswith("direct sweep"), done
    assert done["sweep_budget"]["nodes"] == 4 and done["sweep_budget"]["measured"] == 2, done["sweep_budget"]
    assert len(done["sweep"]) == 2 and done["sweep"][0]["node"] == "F2", done["sweep"]
    assert any("measures 2 of 4 nodes" in n for n in notes)
    assert result.winner is not None and result.winner.keep_float == ["F2"], result.message


def test_a_qdq_bases_sweep_is_compare_per_nodes_measurement(tmp_path):
    """On a QDQ base (static) the sweep takes compare --per-node's 'alone' drops (per_node.drops_alone): every
    node the base quantized is measured with its own Q/DQ kept, and nothing is quantized again for it."""
    model = misleading_model(tmp_path / "misleading.onnx")
    data = tmp_path / "data.npz"
    np.savez(data, x=np.random.default_rng(1).standard_normal((200, 128)).astype(np.float32))
    messages = []
    result = onnxlite.lighten(str(model), tmp_path / "out", strategies=["static"], data=str(data),
                              metric="cosine_mean", max_drop="1%", runs=2, max_float_nodes=1, cache=False,
                              on_event=lambda kind, info: messages.append(info.get("message", "")))
    done = result.partial
    assert done["ranked_by"].startswith("per-node drops, as compare --per-node"), done
    assert done["sweep_budget"]["measured"] == done["sweep_budget"]["nodes"] == len(done["sweep"]) > 1, done
    drops = [e["drop"] for e in done["sweep"]]
    assert drops == sorted(drops, reverse=True) and all(np.isfinite(drops)), done["sweep"]
    assert not [m for m in messages if m.startswith("sensitivity sweep of") and "probe model" in m], messages


@pytest.mark.parametrize("seconds", [partial.FALLBACK_SECONDS, 0.0])
def test_near_equal_bases_are_tried_in_turn_while_time_allows(tmp_path, monkeypatch, seconds):
    """dynamic's grid points are near-equal int8 models within 3x of a 10% budget, and keeping the node
    activation matching blames (F1) in float repairs none of them: each is tried in turn, unless the
    fallback's time is spent, when only the first is and the others are skipped with the reason.  The search
    is for the other kind of CPU (conftest.other_cpu), so its grid is dynamic's saturation-free points on
    either ISA: 7-bit weights, and U8U8 (with Gather, which this model lacks; 7-bit with Gather is 7-bit
    again and is built once), whose integer results are the same everywhere."""
    monkeypatch.setattr(partial, "FALLBACK_SECONDS", seconds)
    monkeypatch.setattr(partial, "SWEEP_MIN_NODES", 1)
    model = misleading_model(tmp_path / "misleading.onnx")
    result = onnxlite.lighten(str(model), tmp_path / "out", strategies=["dynamic"], metric="cosine_mean",
                              max_drop="10%", runs=2, max_float_nodes=1, target_cpu=other_cpu())
    done = result.partial
    assert done["tried"] and done["bases"] == ["dynamic[reduce_range=true]",
                                               "dynamic[op_types=MatMul,Gemm,Gather,weight_type=quint8]"], done
    assert not [r.name for r in result.candidates if r.same_as and r.name in done["bases"]]   # a repeat is no base
    by_activations = {s["name"].split("+float")[0] for s in done["steps"] if s["ranked_by"] == "activations"}
    if seconds:
        assert by_activations == set(done["bases"]) and not done.get("skipped_bases"), done["steps"]
        assert done["sweep_budget"]["measured"] == 4 and done["sweep"][0]["node"] == "F2"
        assert result.winner is not None and result.winner.keep_float == ["F2"], result.message
    else:
        assert by_activations == {done["bases"][0]}, done["steps"]
        assert len(done["skipped_bases"]) == 1 and "do not fit" in done["skipped_bases"][0]["reason"]
        assert done["sweep_budget"]["measured"] == 1
