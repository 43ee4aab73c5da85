"""What a search costs (issue 24): warm workers, duplicates run once, the result cache, the time budget, Ctrl-C.

Every case runs the real search on a small ONNX MLP (a few seconds each); the executor is the real local
one, subclassed only to note which tasks reached it.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import onnxlite

from conftest import make_plugin_dist, other_cpu
from helpers import SeenExecutor, make_mlp, tree

SEGFAULTS = '''
import ctypes
from onnxlite import hookimpl, QuantizerSpec

class Segfaults:
    def quantize(self, model, output, options, context):
        ctypes.string_at(0)   # a null read: SIGSEGV, as a native bug inside onnxruntime would

class Sleeps:
    def quantize(self, model, output, options, context):
        import os, pathlib, time
        pathlib.Path(os.environ["SLEEPY_PID"]).write_text(str(os.getpid()))
        time.sleep(120)

@hookimpl
def register_quantizers():
    return [QuantizerSpec(name="segv", description="segfaults", factory=Segfaults),
            QuantizerSpec(name="sleepy", description="sleeps until killed", factory=Sleeps)]
'''




def _data(folder: Path, seed: int = 0, count: int = 96) -> str:
    rng = np.random.default_rng(seed)
    path = folder / f"held{seed}.npz"
    np.savez(path, x=rng.standard_normal((count, 32)).astype(np.float32))
    return str(path)


def _lighten(model: Path, out: Path, **options):
    options = {"strategies": ["dynamic"], "max_drop": "5%", "metric": "cosine_mean", "runs": 2,
               "partial": False} | options
    return onnxlite.lighten(str(model), out, **options)


def test_the_pool_survives_a_segfault_and_a_sigkilled_worker(tmp_path, fresh_plugins):
    site = make_plugin_dist(tmp_path / "site", "acme-crashes", "0.1", "acme_crashes", SEGFAULTS)
    fresh_plugins.syspath_prepend(str(site))
    pid_file = tmp_path / "sleepy.pid"
    fresh_plugins.setenv("SLEEPY_PID", str(pid_file))

    def kill_the_sleeper() -> None:   # what the OOM killer does to a worker in the middle of a candidate
        deadline = time.monotonic() + 120
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(int(pid_file.read_text()), 9)

    killer = threading.Thread(target=kill_the_sleeper, daemon=True)
    killer.start()
    model = make_mlp(tmp_path / "mlp.onnx")
    result = _lighten(model, tmp_path / "out", strategies=["segv", "sleepy", "dynamic"], workers=1)
    killer.join(timeout=5)
    rows = {c.name: c for c in result.candidates}
    assert rows["segv"].status == "failed" and "SIGSEGV" in rows["segv"].reason, rows["segv"].reason
    assert rows["sleepy"].status == "failed" and "SIGKILL" in rows["sleepy"].reason, rows["sleepy"].reason
    assert result.winner is not None and result.winner.strategy == "dynamic", result.message
    pool = result.settings["executor"]
    # one worker at a time: each crash cost its worker and a new one took the next task; the workers that
    # lived took more than one task each (the warm part)
    assert pool["warm_workers"] and pool["workers_replaced"] == 2, pool
    assert pool["workers_started"] == 1 + pool["workers_replaced"] < pool["tasks"], pool


def _mlp_and_judge(tmp_path: Path) -> tuple[Path, Path]:
    """An MLP and a saved judge of its own outputs on 64 samples (cosine, 5% budget), for trials run by hand."""
    import onnxruntime as ort

    from onnxlite.evaluation.judge import Judge
    from onnxlite.jobs.candidate import save_judge

    model = make_mlp(tmp_path / "mlp.onnx")
    x = np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32)
    y = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    return model, save_judge(Judge({"y": y}, {"x": x}, None, ["y.cosine_mean"], max_drop="5%"), tmp_path / "judge")


def test_two_identical_candidates_run_once(tmp_path):
    """op_types=MatMul,Gemm,Gather on a model with no Gather (or Gemm) is plain dynamic: one task, two results."""
    from onnxlite.search.candidates import Candidate
    from onnxlite.search.trials import TimeBudget, make_context, run_trials

    model, judge_dir = _mlp_and_judge(tmp_path)
    plain = Candidate("dynamic", "dynamic", {})
    twin = Candidate("dynamic[op_types=MatMul,Gemm,Gather]", "dynamic", {"op_types": ("MatMul", "Gemm", "Gather")})
    other = Candidate("dynamic[reduce_range=true]", "dynamic", {"reduce_range": True})
    tasks = [{"candidate": c.to_dict(), "model": str(model), "output": str(tmp_path / f"c{i}.onnx"),
              "calibration": None, "check_data": None, "judge": str(judge_dir), "settings": {}}
             for i, c in enumerate((plain, twin, other))]
    seen = SeenExecutor()
    try:
        ctx = make_context(seen, lambda *_: None, model, None, {}, None, False, TimeBudget())
        results = run_trials(ctx, [plain, twin, other], tasks, 1, tmp_path / "tasks")
    finally:
        seen.close()
    assert sorted(seen.names) == sorted([plain.name, other.name]), seen.names
    assert [r.name for r in results] == [plain.name, twin.name, other.name]
    assert results[1].drops == results[0].drops and results[1].status == "ok"
    assert ctx.ledger.to_dict()["same_as"] == {twin.name: plain.name}
    # a later batch (the fallback's repairs) repeating one is not run again either
    again = run_trials(ctx, [Candidate("again", "dynamic", {"reduce_range": True})], tasks[2:], 1, tmp_path / "t2")
    assert again[0].drops == results[2].drops and sorted(seen.names) == sorted([plain.name, other.name])


def test_a_row_repeating_its_own_probe_keeps_the_probes_verdict(tmp_path):
    """The fallback confirms, as a row, the repair it probed under the same name; with no select part both get
    the same judge, so it runs once, and the row is that verdict (not "the same candidate as" itself)."""
    from onnxlite.search.candidates import Candidate
    from onnxlite.search.trials import TimeBudget, candidate_rows, make_context, run_trials

    model, judge_dir = _mlp_and_judge(tmp_path)
    repair = Candidate("dynamic+float1", "dynamic", {"exclude": ("fc2",)})
    plain = Candidate("dynamic", "dynamic", {})
    task = {"model": str(model), "calibration": None, "check_data": None, "judge": str(judge_dir), "settings": {}}
    tasks = [task | {"candidate": c.to_dict(), "output": str(tmp_path / f"{i}.onnx")}
             for i, c in enumerate((repair, plain))]
    seen = SeenExecutor()
    try:
        ctx = make_context(seen, lambda *_: None, model, None, {}, None, False, TimeBudget())
        probed = run_trials(ctx, [repair, plain], tasks, 1, tmp_path / "probes", stage="probes")
        rows = candidate_rows(ctx, [repair, Candidate("twin", "dynamic", {})], tasks, 1, tmp_path / "rows",
                              model.stat().st_size * 10, "y.cosine_mean")
    finally:
        seen.close()
    assert sorted(seen.names) == sorted([repair.name, plain.name]), seen.names      # each ran once
    row, twin = rows
    assert probed[0].status == "ok" and row.status == "ok" and row.same_as is None, (row.status, row.reason)
    assert row.drops == probed[0].drops
    # a row repeating another candidate is still shown as that repeat
    assert twin.same_as == plain.name and twin.status == "rejected"


def test_the_cache_hits_on_a_rerun_and_misses_when_an_input_changes(tmp_path, monkeypatch):
    model = make_mlp(tmp_path / "mlp.onnx")
    data = _data(tmp_path)
    cache = tmp_path / "cache"
    # the smallest candidate wins, and the grid's sizes differ by far more than the size tie: the winner cannot
    # hang on the fresh timings of a re-run (int8 grid points tie on a model this small, on speed and on size)
    options = {"strategies": ["weightonly"], "objective": "size"}
    first = _lighten(model, tmp_path / "a", data=data, cache_dir=cache, **options)
    ran = first.settings["cache"]["stored"]
    assert ran >= 2 and first.settings["cache"]["hits"] == 0, first.settings["cache"]

    seen = SeenExecutor()
    again = _lighten(model, tmp_path / "b", data=data, cache_dir=cache, executor=seen, **options)
    assert seen.names == [] and again.settings["cache"]["hits"] == ran, (seen.names, again.settings["cache"])
    assert "from the cache" in again.message
    assert again.winner is not None and again.winner.name == first.winner.name
    assert again.winner.drops == first.winner.drops
    assert again.winner.latency_ms and again.winner.latency_ms != first.winner.latency_ms   # benchmarked afresh

    def misses(**changed) -> int:
        seen = SeenExecutor()
        result = _lighten(changed.pop("model", model), tmp_path / f"run{len(os.listdir(tmp_path))}",
                          cache_dir=cache, executor=seen, **({"data": data} | options | changed))
        assert result.settings["cache"]["hits"] == 0, (changed, result.settings["cache"])
        return len(seen.names)

    assert misses(data=_data(tmp_path, seed=1)) >= 2                 # other judge data
    assert misses(model=make_mlp(tmp_path / "other.onnx", op="Gemm")) >= 2   # another model
    monkeypatch.setattr("onnxruntime.__version__", "0.0.0-other")
    assert misses() >= 2                                              # another onnxruntime


def test_the_cache_key_follows_options_calibration_and_the_isa(tmp_path):
    from onnxlite.search.cache import candidate_key, context

    model = make_mlp(tmp_path / "mlp.onnx")
    calibration = _data(tmp_path, seed=3)
    ctx = context(model, calibration, {"threads": 1})
    key = candidate_key(ctx, "dynamic", {}, (), "judge", uses_calibration=True)
    assert key == candidate_key(context(model, calibration, {"threads": 1}), "dynamic", {}, (), "judge", True)
    assert key != candidate_key(ctx, "dynamic", {"reduce_range": True}, (), "judge", True)
    assert key != candidate_key(ctx, "dynamic", {}, ("fc1",), "judge", True)
    other_data = context(model, _data(tmp_path, seed=4), {"threads": 1})
    assert key != candidate_key(other_data, "dynamic", {}, (), "judge", True)
    other_isa = "x86_64-avx2" if ctx.isa != "x86_64-avx2" else "x86_64-avx512vnni"
    assert key != candidate_key(context(model, calibration, {"threads": 1}, isa=other_isa), "dynamic", {}, (),
                                "judge", True)
    # a strategy that takes no calibration data does not miss when only that data changes
    assert candidate_key(ctx, "dynamic", {}, (), "judge", False) == candidate_key(
        context(model, _data(tmp_path, seed=4), {"threads": 1}), "dynamic", {}, (), "judge", False)


def test_a_corrupt_cache_entry_is_a_miss_not_a_crash(tmp_path):
    """The second run re-quantizes and re-judges every candidate, and judges each as the first did: they are
    saturation-free (for the other kind of CPU, conftest.other_cpu), so neither this CPU's int8 rounding nor
    (comparing drops, not which same-size candidate timed fastest) the machine's load decides it."""
    model = make_mlp(tmp_path / "mlp.onnx")
    cache = tmp_path / "cache"
    first = _lighten(model, tmp_path / "a", cache_dir=cache, target_cpu=other_cpu())
    entries = sorted(p for p in cache.rglob("model.onnx"))
    assert entries, "nothing was cached"
    entries[0].write_bytes(b"not a model")
    for result_file in cache.rglob("result.json"):
        if result_file.parent != entries[0].parent:
            result_file.write_text("{ broken")
    seen = SeenExecutor()
    again = _lighten(model, tmp_path / "b", cache_dir=cache, executor=seen, target_cpu=other_cpu())
    assert again.settings["cache"]["hits"] == 0 and len(seen.names) == first.settings["cache"]["stored"]
    assert again.winner is not None and first.winner is not None
    judged = lambda result: {r.name: r.drops for r in result.candidates}  # noqa: E731
    assert judged(again) == judged(first)


def test_no_cache_reads_and_writes_nothing(tmp_path):
    model = make_mlp(tmp_path / "mlp.onnx")
    result = _lighten(model, tmp_path / "a", cache_dir=tmp_path / "cache", cache=False)
    assert "cache" not in result.settings and not (tmp_path / "cache").exists()


def test_a_spent_time_budget_writes_a_consistent_outdir_with_the_best_so_far(tmp_path):
    """dynamic is in the cache; fp16 is not, and the budget is spent before it could start."""
    model = make_mlp(tmp_path / "mlp.onnx")
    cache = tmp_path / "cache"
    _lighten(model, tmp_path / "warm", cache_dir=cache)
    out = tmp_path / "out"
    result = _lighten(model, out, cache_dir=cache, strategies=["dynamic", "fp16"], time_budget="0.01s")
    assert result.winner is not None and result.winner.strategy == "dynamic", result.message
    assert "cut short by --time-budget" in result.message and "fp16" in result.message
    assert result.settings["cut_short"]["untried"] == ["fp16"]
    assert {"strategy": "fp16", "reason": "not tried: the --time-budget was spent"} in result.skipped
    assert "fp16" not in [c.name for c in result.candidates]
    # OUTDIR is whole: the winner's model, its recipe, the reports; and the recipe replays
    assert {"model.onnx", "recipe.toml", "report.html", "report.json", "report.md"} <= set(os.listdir(out))
    assert result.winner.latency_ms   # what passed was benchmarked
    replayed = onnxlite.lighten(str(model), tmp_path / "replay", recipe=out / "recipe.toml", runs=2)
    assert replayed.winner is not None and replayed.winner.strategy == "dynamic"


def test_ctrl_c_keeps_outdir_untouched_and_the_best_so_far_beside_it(tmp_path):
    model = make_mlp(tmp_path / "mlp.onnx")
    out = tmp_path / "out"
    out.mkdir()
    (out / "model.onnx").write_bytes(b"the previous run's model")
    before = tree(out)

    def interrupt(kind, info):
        if kind == "candidate_done" and info.get("status") == "ok":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _lighten(model, out, strategies=["dynamic", "fp16"], force=True, workers=1, time_budget="5m",
                 on_event=interrupt)
    assert tree(out) == before
    kept = tmp_path / "out.interrupted"
    assert (kept / "model.onnx").exists() and (kept / "best-so-far.json").exists()
    import json

    note = json.loads((kept / "best-so-far.json").read_text())
    assert note["interrupted"] and note["best_so_far"]["status"] == "ok"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out") or p.name.endswith(".work")]


@pytest.mark.unit
def test_durations_parse_and_bad_ones_are_usage_errors():
    from onnxlite.errors import UsageError
    from onnxlite.search.trials import parse_duration

    assert parse_duration("5m") == 300 and parse_duration("90s") == 90 and parse_duration("1h30m") == 5400
    assert parse_duration("2.5") == 2.5 and parse_duration(None) is None
    for bad in ("", "5x", "0s", "-1", "m"):
        with pytest.raises(UsageError, match="--time-budget"):
            parse_duration(bad)


@pytest.mark.unit
def test_options_normalise_to_what_changes_the_model():
    from onnxlite.registry import get_registry
    from onnxlite.search.trials import normalise_options

    spec = get_registry().get("quantizer", "dynamic").spec
    ops = {"MatMul", "Relu"}
    plain = normalise_options(spec, {}, ops)
    assert normalise_options(spec, {"op_types": ("MatMul", "Gemm", "Gather")}, ops) == plain
    assert normalise_options(spec, {"op_types": ("MatMul", "Gemm", "Gather")}, ops | {"Gather"}) != plain
    assert normalise_options(spec, {"reduce_range": True}, ops) == {"reduce_range": True}
    default = next(o.default for o in spec.options if o.name == "reduce_range")
    assert normalise_options(spec, {"reduce_range": default}, ops) == plain


def _embeddings(seed: int, count: int, noise: float) -> tuple[np.ndarray, np.ndarray]:
    """Recorded figures: reference embeddings, and a candidate's with per-sample noise of a seeded scale."""
    rng = np.random.default_rng(seed)
    reference = rng.standard_normal((count, 16)).astype(np.float32)
    # a few samples hurt much more than the rest, as outliers in real text do
    scale = noise * np.where(rng.random(count) < 0.1, 4.0, 1.0)[:, None]
    return reference, (reference + scale * rng.standard_normal((count, 16))).astype(np.float32)


@pytest.mark.unit
def test_pruning_never_drops_a_candidate_whose_full_data_bound_is_within_budget():
    """Over 300 seeded candidates around a cosine budget: every one whose one-sided 95% bound on all 160 confirm
    samples is within budget survives a subset of 32; and the rule is not idle: clearly bad ones are dropped."""
    from onnxlite.evaluation.intervals import metric_interval
    from onnxlite.evaluation.metrics import resolve_metrics
    from onnxlite.jobs.pruning import PRUNE_SAMPLES, clearly_over, subset_interval
    from onnxlite.protocols import MetricContext

    budget, count = 0.005, 160
    within = pruned = 0
    for seed in range(300):
        noise = 0.02 + 0.13 * (seed % 30) / 29   # drops from about 0.0002 to 0.01: both sides of the budget
        reference, candidate = _embeddings(seed, count, noise)
        metric = resolve_metrics({"emb": reference}, {}, None, ["emb.cosine_mean"])[0]
        full = metric_interval(metric, reference, candidate, MetricContext("emb", reference_outputs={"emb": reference}),
                               confidence=0.95)
        subset = np.random.default_rng(seed).permutation(count)[:PRUNE_SAMPLES]
        early = subset_interval(metric, reference[subset], candidate[subset],
                                MetricContext("emb", reference_outputs={"emb": reference[subset]}))
        if full.within(budget):
            within += 1
            assert not clearly_over(early, budget), (seed, full, early)
        pruned += clearly_over(early, budget)
    assert within >= 50 and pruned >= 20, (within, pruned)


def test_a_clearly_over_budget_candidate_is_pruned_and_a_passing_one_is_judged_in_full(tmp_path):
    model = make_mlp(tmp_path / "mlp.onnx")
    data = _data(tmp_path, count=400)   # 40% calibrates; the other 240 judge, half of them confirm
    result = _lighten(model, tmp_path / "out", data=data, strategies=["dynamic", "fp16"],
                      max_drop="cosine_mean=0.001%")
    rows = {c.name: c for c in result.candidates}
    confirm = result.evidence["parts"]["confirm"]
    confirm = len(confirm) if isinstance(confirm, list) else confirm
    assert rows["dynamic"].status == "rejected" and "pruned early" in rows["dynamic"].reason, rows["dynamic"].reason
    assert rows["dynamic"].quantize.get("pruned_on") == 32
    fp16 = rows["fp16"]
    assert "pruned" not in fp16.reason and fp16.quantize.get("pruned_on") is None
    assert fp16.intervals["y.cosine_mean"]["samples"] == confirm > 64


def test_the_cli_reports_n_of_m_as_json_events_and_refuses_a_bad_budget(tmp_path):
    import json

    from conftest import run_cli

    model = make_mlp(tmp_path / "mlp.onnx")
    bad = run_cli("lighten", str(model), "-o", str(tmp_path / "bad"), "--time-budget", "soon")
    assert bad.returncode == 2 and "--time-budget" in bad.stderr and "Traceback" not in bad.stderr
    assert not (tmp_path / "bad").exists()
    done = run_cli("lighten", str(model), "-o", str(tmp_path / "out"), "--strategies", "dynamic,fp16",
                   "--max-drop", "5%", "--runs", "2", "--no-partial", "--json", "--time-budget", "10m",
                   "--cache-dir", str(tmp_path / "cache"))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["winner"]                      # stdout: the one result document
    events = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    finished = [e for e in events if e["event"] == "candidate_done"]
    total = finished[0]["total"]
    assert [e["done"] for e in finished] == list(range(1, total + 1)) and total == len(finished)
    assert all("eta_seconds" in e for e in finished) and finished[-1]["eta_seconds"] == 0
    assert (tmp_path / "cache").is_dir()
