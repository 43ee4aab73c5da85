"""`onnxlite lighten` end to end on small real models."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import onnxlite

from conftest import ROOT, make_plugin_dist, run_cli

MLP_INPUT = "x:float32[batch,64]"


def _scratch_left(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if p.name.endswith(".work") or ".old-" in p.name]


@pytest.fixture(scope="module")
def bert_result(tiny_bert, tmp_path_factory):
    out = tmp_path_factory.mktemp("lighten-bert") / "out"
    return onnxlite.lighten(str(tiny_bert), out, max_drop="2%", runs=5)


def test_transformer_search_finds_a_winner_within_budget(bert_result, tiny_bert):
    import onnx

    result = bert_result
    primary = result.primary_metric
    assert primary.endswith("pooled_cosine_mean"), primary  # token embeddings + attention mask
    assert result.winner is not None, result.message
    assert result.winner.drops[primary] <= result.budgets[primary]
    strategies = {c.strategy for c in result.candidates}
    assert {"dynamic", "transformer"} <= strategies
    # static declares itself unsuited to transformers; fp16 is cheap and tried on the CPU too (issue 12).
    skipped = {s["strategy"]: s["reason"] for s in result.skipped}
    assert "unsuited to transformer" in skipped["static"] and "fp16" in strategies
    # Every candidate is accounted for: won, within budget (or so but not a contender of the final benchmark),
    # over budget or failed, with a reason.
    for row in result.candidates:
        assert row.status in {"winner", "ok", "rejected", "lost its grid", "outpaced", "failed"}
        assert row.status == "ok" or row.reason
    files = {p.name for p in result.output_dir.iterdir()}
    assert {"model.onnx", "recipe.toml", "report.html", "report.json", "report.md"} <= files
    model = onnx.load(str(result.model_path))
    meta = {p.key: p.value for p in model.metadata_props}
    assert meta["onnxlite.strategy"] == result.winner.strategy
    # where the verdict holds: the ISA it was judged and timed on, in the model, the recipe and the verdict
    from onnxlite.hardware import detect
    from onnxlite.search.recipes import read_recipe

    assert meta["onnxlite.isa"] == result.settings["isa"] == detect().isa == read_recipe(result.recipe_path).isa
    assert f"judged and timed on {detect().isa}" in result.message
    report = json.loads((result.output_dir / "report.json").read_text())
    # fp32 and its float noise (fp16-rounded weights, a yardstick), then every candidate
    assert result.float_noise is not None
    assert {r["name"] for r in report["rows"]} == {"fp32", "float noise"} | {c.name for c in result.candidates}
    # An independent check of the winner against the PyTorch model, on fresh data.
    check = onnxlite.compare(str(tiny_bert), result.model_path, max_drop="2%", seed=7)
    assert check.passed, check.to_dict()


def test_transformer_fusion_candidate_fuses(bert_result):
    fused = [c for c in bert_result.candidates if c.strategy == "transformer" and c.status != "failed"]
    assert fused, [(c.name, c.reason) for c in bert_result.candidates]
    stats = fused[0].quantize.get("details", {})
    assert json.dumps(stats).count("Attention") >= 1, stats


def test_recipe_reproduces_the_choice(bert_result, tiny_bert, tmp_path):
    import onnx

    again = onnxlite.lighten(str(tiny_bert), tmp_path / "again", recipe=bert_result.recipe_path, runs=3)
    assert again.winner is not None
    assert (again.winner.strategy, again.winner.options) == (bert_result.winner.strategy, bert_result.winner.options)
    assert len(again.candidates) == 1
    # The recipe's budget and metric apply when the call names none.
    assert again.budgets == bert_result.budgets and again.primary_metric == bert_result.primary_metric
    ops = [sorted(n.op_type for n in onnx.load(str(p)).graph.node) for p in (bert_result.model_path, again.model_path)]
    assert ops[0] == ops[1]


def test_smoothquant_calibrates_on_the_split_and_its_recipe_replays(tiny_bert, tmp_path):
    import onnx

    rng = np.random.default_rng(3)
    count, length = 40, 12
    ids = rng.integers(5, 120, (count, length)).astype(np.int64)
    mask = np.ones_like(ids)
    for row, keep in enumerate(rng.integers(4, length + 1, count)):
        mask[row, keep:] = 0   # padded rows: the judge and the activation maxima both see padding
        ids[row, keep:] = 0
    data = tmp_path / "tokens.npz"
    np.savez(data, input_ids=ids, attention_mask=mask, token_type_ids=np.zeros_like(ids))

    budget = ["pooled_cosine_mean=3%", "pooled_cosine_min=6%"]
    result = onnxlite.lighten(str(tiny_bert), tmp_path / "out", data=str(data), strategies=["smoothquant"],
                              max_drop=budget, runs=3)
    names = [c.name for c in result.candidates]
    # the plain grid, then (where U8S8 kernels saturate: x86 without VNNI) the saturation-free variants
    assert names[:3] == ["smoothquant[alpha=0.5]", "smoothquant[alpha=0.65]", "smoothquant[alpha=0.8]"], names
    assert result.winner is not None, result.message
    for row in result.candidates:
        details = row.quantize["details"]
        # 40% of the 40 samples calibrate; the other 24 are held out for judging.
        assert details["calibration_samples"] == 16 and details["smoothed_activations"] > 0, details
    assert "16 samples calibrate, the other 24 judge" in result.data, result.data

    again = onnxlite.lighten(str(tiny_bert), tmp_path / "again", data=str(data), recipe=result.recipe_path, runs=3)
    assert (again.winner.strategy, again.winner.options) == (result.winner.strategy, result.winner.options)
    # Both budgets come back from the recipe, not only the primary one.
    assert again.budgets == result.budgets and len(result.budgets) == 2, again.budgets
    first, second = (onnx.load(str(p)) for p in (result.model_path, again.model_path))
    assert [n.op_type for n in first.graph.node] == [n.op_type for n in second.graph.node]
    # Same data, same split, same scales: the replayed weights are the same bytes.
    weights = lambda m: {i.name: i.raw_data for i in m.graph.initializer}  # noqa: E731
    assert weights(first) == weights(second)


def test_without_data_smoothquant_calibrates_on_generated_samples_and_static_is_skipped(tiny_bert, tmp_path):
    """Zero-config: smoothquant's maxima only locate the outlier channels, so generated samples serve;
    static's ranges need real data, so it is still skipped.  The judge's samples are other ones."""
    result = onnxlite.lighten(str(tiny_bert), tmp_path / "out", strategies=["smoothquant", "static"],
                              max_drop="50%", runs=2)
    names = [c.name for c in result.candidates]
    assert names[:3] == ["smoothquant[alpha=0.5]", "smoothquant[alpha=0.65]", "smoothquant[alpha=0.8]"], names
    # then, where this CPU's U8S8 kernels saturate (x86 without VNNI), the strategy's saturation-free variants
    from onnxlite.hardware import detect

    assert (len(names) > 3) == detect().int8_saturates, names
    assert all("reduce_range=true" in n or "weight_type=quint8" in n for n in names[3:]), names
    assert any(s["strategy"] == "static" and "needs calibration data" in s["reason"] for s in result.skipped)
    for row in result.candidates:
        details = row.quantize["details"]
        assert details["calibration_samples"] == 64 and details["smoothed_activations"] > 0, details
    assert "smoothquant calibrated on 64 generated samples, none of them judged" in result.message, result.message
    from onnxlite.search.heldout import GENERATED_SEED

    assert GENERATED_SEED > 128   # the judge's generated batches use seeds 1..16


def test_digits_cnn_keeps_accuracy_with_static_quantization(tmp_path):
    import onnxruntime as ort
    import torch

    sys.path.insert(0, str(ROOT / "examples" / "digits_cnn"))
    try:
        import digits_cnn
    finally:
        sys.path.pop(0)
    paths = digits_cnn.prepare(tmp_path / "work")
    result = onnxlite.lighten(str(paths["weights"]), tmp_path / "out",
                              model_class=f"{ROOT / 'examples/digits_cnn/digits_cnn.py'}:DigitsNet",
                              inputs=["pixels:float32[batch,1,8,8]"], data=paths["heldout"],
                              calibration=paths["calibration"], metric="accuracy", max_drop="1%", runs=5,
                              objective="size")   # on a 0.25 ms model speed is load noise: dynamic won at load 6
    assert result.winner is not None, result.message
    assert result.winner.strategy == "static"
    assert result.winner.size_bytes * 2 < result.baseline.size_bytes

    held = np.load(paths["heldout"])
    net = digits_cnn.DigitsNet()
    net.load_state_dict(torch.load(paths["weights"], weights_only=True))
    with torch.no_grad():
        torch_acc = float((net.eval()(torch.from_numpy(held["pixels"])).argmax(1).numpy() == held["labels"]).mean())
    session = ort.InferenceSession(str(result.model_path), providers=["CPUExecutionProvider"])
    onnx_acc = float((session.run(None, {"pixels": held["pixels"]})[0].argmax(1) == held["labels"]).mean())
    assert onnx_acc >= torch_acc - 0.01, (onnx_acc, torch_acc)


def test_budget_unmet_keeps_the_worst_nodes_in_float(mlp_ref, tmp_path):
    out = tmp_path / "out"
    proc = run_cli("lighten", mlp_ref, "--input", MLP_INPUT, "-o", str(out), "--strategies", "dynamic",
                   "--metric", "cosine_min", "--max-drop", "1e-9", "--runs", "3", "--json")
    payload = json.loads(proc.stdout)
    partial = payload["partial"]
    assert partial["tried"] and partial["steps"], partial
    ranked = [r["node"] for r in partial["ranking"]]
    kept = [c for c in payload["candidates"] if c["keep_float"]]
    assert kept and kept[0]["keep_float"] == ranked[:len(kept[0]["keep_float"])]
    assert set(kept[0]["keep_float"]) <= set(kept[0]["quantize"]["excluded_nodes"])
    # Nothing can meet a budget this tight: said plainly, exit 1, report written, no model.
    assert payload["winner"] is None and "nothing qualifies" in payload["message"]
    assert proc.returncode == 1
    assert (out / "report.html").exists() and not (out / "model.onnx").exists()
    assert "Partial quantization" in (out / "report.md").read_text()


CRASHER = '''
import os
from onnxlite import hookimpl, QuantizerSpec

class Crasher:
    def quantize(self, model, output, options, context):
        os.abort()  # dies the way a native crash inside onnxruntime would

@hookimpl
def register_quantizers():
    return [QuantizerSpec(name="crasher", description="aborts the process", factory=Crasher)]
'''


def test_a_crashing_third_party_candidate_is_contained(mlp_ref, tmp_path, fresh_plugins):
    site = make_plugin_dist(tmp_path / "site", "acme-crasher", "0.1", "acme_crasher", CRASHER)
    fresh_plugins.syspath_prepend(str(site))
    result = onnxlite.lighten(mlp_ref, tmp_path / "out", inputs=[MLP_INPUT], strategies=["crasher", "dynamic"],
                              max_drop="5%", runs=3)
    rows = {c.name: c for c in result.candidates}
    assert rows["crasher"].status == "failed"
    assert "crashed (SIGABRT)" in rows["crasher"].reason
    assert result.winner is not None and result.winner.strategy == "dynamic"


def test_existing_outdir_is_left_alone_without_force(mlp_ref, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    refused = run_cli("lighten", mlp_ref, "--input", MLP_INPUT, "-o", str(out), "--strategies", "dynamic")
    assert refused.returncode == 2
    assert "--force" in refused.stderr and "Traceback" not in refused.stderr
    assert (out / "keep.txt").read_text() == "mine"
    forced = run_cli("lighten", mlp_ref, "--input", MLP_INPUT, "-o", str(out), "--strategies", "dynamic",
                     "--max-drop", "5%", "--runs", "3", "--force")
    assert forced.returncode == 0, forced.stderr
    assert not (out / "keep.txt").exists() and (out / "model.onnx").exists()
    assert _scratch_left(tmp_path) == []


def test_bad_data_is_one_line_and_leaves_nothing(mlp_ref, tmp_path):
    data = tmp_path / "bad.npz"
    np.savez(data, inputs=np.zeros((8, 64), np.float32))
    out = tmp_path / "out"
    proc = run_cli("lighten", mlp_ref, "--input", MLP_INPUT, "-o", str(out), "--data", str(data))
    assert proc.returncode == 2
    errors = [line for line in proc.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "'x'" in errors[0], proc.stderr
    assert not out.exists() and _scratch_left(tmp_path) == []


SLEEPER = '''
import os, time
from pathlib import Path
from onnxlite import hookimpl, QuantizerSpec

class Sleeper:
    def quantize(self, model, output, options, context):
        Path(os.environ["SLEEPER_MARK"]).write_text("started")
        time.sleep(120)

@hookimpl
def register_quantizers():
    return [QuantizerSpec(name="sleeper", description="takes its time", factory=Sleeper)]
'''


def test_interrupt_leaves_the_previous_outdir_intact(mlp_ref, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("previous run")
    # A candidate that is certainly still running when Ctrl-C comes (a real one might just have finished).
    site = make_plugin_dist(tmp_path / "site", "acme-sleeper", "0.1", "acme_sleeper", SLEEPER)
    mark = tmp_path / "sleeper-started"
    env = dict(os.environ, SLEEPER_MARK=str(mark),
               PYTHONPATH=os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH", "")])))
    env.pop("ONNXLITE_DISABLE_PLUGIN_AUTOLOAD", None)
    proc = subprocess.Popen([sys.executable, "-m", "onnxlite", "lighten", mlp_ref, "--input", MLP_INPUT, "-o",
                             str(out), "--force", "--runs", "3", "--strategies", "sleeper,dynamic"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True,
                            # A shell that starts the suite in the background ignores SIGINT, and children
                            # inherit that; this child must see Ctrl-C the way a terminal user's would.
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None and not mark.exists():
        time.sleep(0.05)
    assert proc.poll() is None and mark.exists(), "the sleeping candidate never started"
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert (out / "keep.txt").read_text() == "previous run"
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]
    assert _scratch_left(tmp_path) == []


def test_pick_winner_treats_noise_level_latency_differences_as_ties():
    from onnxlite.search.choose import pick_winner
    from onnxlite.search.results import CandidateRow

    def row(name, size, p50, p90, status="ok", drop=0.0):
        return CandidateRow(name=name, strategy=name, options={}, status=status, size_bytes=size,
                            latency_ms={"p50": p50, "p90": p90, "p99": p90, "mean": p50}, drops={"m": drop})

    big_fast = row("big", 56, 280.0, 282.0)
    small = row("small", 22, 285.0, 287.0)
    # Quiet machine: 1.8% apart is within 3%, so the smaller one wins.
    assert pick_winner([big_fast, small]).name == "small"
    # A clear 10% speed gain on a quiet machine wins over size.
    assert pick_winner([big_fast, row("small", 22, 310.0, 312.0)]).name == "big"
    # The same 10% on a machine whose runs spread by 15% is noise: the smaller one wins.
    assert pick_winner([row("big", 56, 280.0, 322.0), row("small", 22, 310.0, 350.0)]).name == "small"
    # Over-budget or failed candidates never win; objective=size ignores speed.
    assert pick_winner([row("x", 1, 1.0, 1.0, status="rejected"), small]).name == "small"
    assert pick_winner([big_fast, small], objective="size").name == "small"
    # Nobody beats fp32: the smallest one within budget wins.
    assert pick_winner([big_fast, small], baseline_p50=250.0).name == "small"
    # ... but one clearly slower than fp32 is not picked for its size while one as fast as fp32 is there
    # (EfficientNet-Lite0: fp16 1.98x smaller at 0.63x the speed, dynamic 1.26x smaller at fp32's speed).
    same_speed, slow_small = row("dynamic", 80, 99.0, 100.0), row("fp16", 50, 160.0, 162.0)
    assert pick_winner([same_speed, slow_small], baseline_p50=100.0).name == "dynamic"
    assert pick_winner([slow_small], baseline_p50=100.0).name == "fp16"   # the only one: still the answer
    # A few percent slower than fp32 is noise, not a veto: the smaller one still wins.
    assert pick_winner([same_speed, row("fp16", 50, 104.0, 105.0)], baseline_p50=100.0).name == "fp16"
    # A tie on speed and on size (within 1%) goes to the more accurate one, whatever the objective.
    rough, exact = row("rough", 1000, 100.0, 101.0, drop=0.006), row("exact", 1004, 101.0, 102.0, drop=0.002)
    for objective in ("latency", "size"):
        assert pick_winner([rough, exact], objective, primary="m").name == "exact"
        assert pick_winner([rough, exact], objective).name == "rough"   # no primary metric: size, then speed
    # Accuracy never outweighs a real difference in size.
    assert pick_winner([rough, row("exact", 1100, 100.0, 101.0, drop=0.0)], primary="m").name == "rough"


def test_the_explanation_uses_the_rule_that_picked_the_winner():
    """Speed decides when the fastest candidate beats fp32; a tied, smaller and slightly slower one may then win,
    and the result must not claim that nothing was measurably faster than fp32."""
    from onnxlite.search.choose import deciding_objective, pick_winner
    from onnxlite.search.results import CandidateRow

    def row(name, size, p50, p90):
        return CandidateRow(name=name, strategy=name, options={}, size_bytes=size,
                            latency_ms={"p50": p50, "p90": p90, "p99": p90, "mean": p50})

    fast, small = row("fast", 100, 9.6, 9.7), row("small", 50, 9.8, 9.9)
    assert pick_winner([fast, small], "latency", baseline_p50=10.0).name == "small"
    assert deciding_objective([fast, small], "latency", 10.0) == "latency"
    # Nothing beats fp32 beyond the margin: size decides, and both say so.
    assert deciding_objective([fast, small], "latency", 9.8) == "size"
    assert deciding_objective([fast, small], "size", 20.0) == "size"
