"""Speed measured early (issue 22, part 3): the fallback repairs a base that is fast here, not the lightest one.

The rule is tested on recorded figures (the rows an AVX2 run of the README job produced: 4-bit weight-only
lightest but slower than fp32, int8 smoothquant fast and just over budget, fp16 within budget but slower),
so it holds whatever CPU runs the test; the quick timing itself is tested on a real model, and the whole
search on a real model whose speeds the recording executor (tests/helpers.py) replays from that AVX2 run.
"""

from __future__ import annotations

import pytest

import onnxlite
from onnxlite.search.fallback_rule import fallback_base
from onnxlite.search.partial import fallback_bases
from onnxlite.search.quick import QuickTimes, fast_enough, time_quickly
from onnxlite.search.results import CandidateRow

from helpers import RecordingExecutor, make_mlp

PRIMARY, BUDGET = "pooled.cosine_mean", 0.005
FP32_BYTES = 90_000_000


def _row(name: str, strategy: str, shrink: float, drop: float, p50: float | None = None) -> CandidateRow:
    over = drop > BUDGET
    return CandidateRow(name=name, strategy=strategy, options={}, status="rejected" if over else "ok",
                        over_budget=over, path=f"/recorded/{name}.onnx", size_bytes=int(FP32_BYTES / shrink),
                        drops={PRIMARY: drop}, latency_ms={"p50": p50, "p90": p50} if p50 else None)


#: an AVX2 machine's figures: shrink, drop on the confirm part, quick p50 over fp32's
RECORDED = {
    "fp16": ("fp16", 1.98, 0.0000, 1.15),
    "weightonly[bits=4]": ("weightonly", 5.6, 0.0090, 1.45),
    "smoothquant": ("smoothquant", 3.92, 0.0062, 0.76),
    "dynamic": ("dynamic", 3.95, 0.0355, 0.79),
}


def _recorded() -> tuple[list[CandidateRow], QuickTimes]:
    rows = [_row(name, strategy, shrink, drop) for name, (strategy, shrink, drop, _) in RECORDED.items()]
    return rows, QuickTimes({name: ratio for name, (*_, ratio) in RECORDED.items()}, fp32_ms=40.0)


def _can_exclude(_strategy: str) -> bool:
    return True


@pytest.mark.unit
def test_the_fallback_picks_the_fast_base_over_the_light_but_slow_one():
    rows, quick = _recorded()
    by_size, _ = fallback_base(rows, PRIMARY, BUDGET, _can_exclude)
    assert by_size.name == "weightonly[bits=4]"   # the premise: by size alone, the slow 4-bit one is repaired
    fast, why = fallback_base(rows, PRIMARY, BUDGET, _can_exclude, fast_enough(quick, "latency"))
    assert fast.name == "smoothquant", why
    bases, _ = fallback_bases(rows, PRIMARY, BUDGET, _can_exclude, PRIMARY, fast_enough(quick, "latency"))
    assert "weightonly[bits=4]" not in [b.name for b in bases] and bases[0].name == "smoothquant"
    # --objective size asks for the lightest, however slow
    sized, _ = fallback_base(rows, PRIMARY, BUDGET, _can_exclude, fast_enough(quick, "size"))
    assert sized.name == "weightonly[bits=4]"


@pytest.mark.unit
def test_a_slower_passing_candidate_never_blocks_the_repair_of_a_much_lighter_fast_one():
    """Never ship a slower, larger winner while a >= 3x smaller candidate, faster than fp32, is one repair away:
    fp16 passes but is slower than fp32 here, so it does not stand in for "something already fits"."""
    rows, quick = _recorded()
    base, why = fallback_base(rows, PRIMARY, BUDGET, _can_exclude, fast_enough(quick, "latency"))
    assert base is not None and base.name == "smoothquant", why
    assert FP32_BYTES / base.size_bytes >= 3 and quick.ratios[base.name] < 1
    # with a fast candidate within budget and as light, nothing needs repairing for speed
    light_fast = _row("dynamic[per_channel]", "dynamic", 3.95, 0.004)
    quick = QuickTimes(dict(quick.ratios) | {"dynamic[per_channel]": 0.75}, fp32_ms=40.0)
    none, why = fallback_base(rows + [light_fast], PRIMARY, BUDGET, _can_exclude, fast_enough(quick, "latency"))
    assert none is None and "clearly lighter" in why


@pytest.mark.unit
def test_every_base_slower_than_fp32_is_not_repaired_for_latency():
    rows, quick = _recorded()
    slow_only = [r for r in rows if r.name in {"fp16", "weightonly[bits=4]"}]
    base, why = fallback_base(slow_only, PRIMARY, BUDGET, _can_exclude, fast_enough(quick, "latency"))
    assert base is None and "slower than fp32" in why


#: a VNNI machine's figures from the README job (2026-12-03, AMD EPYC Zen 5): int8 smoothquant twice fp32's
#: speed and within budget, 4-bit weight-only about fp32's speed, the lightest 4-bit over budget
RECORDED_VNNI = {
    "smoothquant[alpha=0.8]": ("smoothquant", 3.93, 0.0035, 0.52),
    "weightonly[gather=int4]": ("weightonly", 5.3, 0.0026, 0.98),
    "weightonly[bits=4,block_size=32,gather=int4]": ("weightonly", 6.8, 0.0266, 0.93),
}


@pytest.mark.unit
def test_a_base_slower_than_a_fast_passing_candidate_is_not_repaired():
    """Keeping nodes in float never makes a model faster: a light base already slower than the passing int8 one
    cannot win on latency once repaired, so it is not repaired (the README job spent its sweep on one)."""
    rows = [_row(name, strategy, shrink, drop) for name, (strategy, shrink, drop, _) in RECORDED_VNNI.items()]
    ratios = {name: ratio for name, (*_, ratio) in RECORDED_VNNI.items()}
    by_size, _ = fallback_base(rows, PRIMARY, BUDGET, _can_exclude,
                               fast_enough(QuickTimes(ratios, fp32_ms=40.0), "size"))
    assert by_size is not None and by_size.name.startswith("weightonly[bits=4")   # the premise
    base, why = fallback_base(rows, PRIMARY, BUDGET, _can_exclude,
                              fast_enough(QuickTimes(ratios, fp32_ms=40.0), "latency"))
    assert base is None and "smoothquant[alpha=0.8]" in why, why
    # when no passing candidate clearly beats fp32, speed cannot decide and size does: the light one is repaired
    even = ratios | {"smoothquant[alpha=0.8]": 0.95}
    base, why = fallback_base(rows, PRIMARY, BUDGET, _can_exclude,
                              fast_enough(QuickTimes(even, fp32_ms=40.0), "latency"))
    assert base is not None and base.name.startswith("weightonly[bits=4"), why
    # nor is a base within the quick timing's noise of the fastest passing one left out
    close = ratios | {"weightonly[bits=4,block_size=32,gather=int4]": 0.55}
    base, why = fallback_base(rows, PRIMARY, BUDGET, _can_exclude,
                              fast_enough(QuickTimes(close, fp32_ms=40.0), "latency"))
    assert base is not None and base.name.startswith("weightonly[bits=4"), why


def test_quick_timing_times_each_candidate_against_fp32_in_turns(tmp_path):
    import numpy as np

    import onnxlite
    from onnxlite.runtime import SessionSettings

    model = make_mlp(tmp_path / "mlp.onnx")
    same = tmp_path / "copy.onnx"
    same.write_bytes(model.read_bytes())
    int8 = onnxlite.quantize(str(model), tmp_path / "int8.onnx", "dynamic").path
    feeds = {"x": np.random.default_rng(0).standard_normal((8, 32)).astype(np.float32)}
    found = time_quickly(str(model), {"copy": str(same), "int8": str(int8), "broken": str(tmp_path / "none.onnx")},
                         feeds, SessionSettings(threads=1), runs=3)
    assert set(found.ratios) == {"copy", "int8"}   # a model that cannot run is left out, not fatal
    assert all(r > 0 for r in found.ratios.values()) and found.fp32_ms and found.fp32_ms > 0


def test_quick_timing_stops_each_sessions_spinning_so_the_other_gets_the_cores(tmp_path, monkeypatch):
    """Two sessions take turns in one process: each must stop spinning at a run's end (onnxruntime's own option)."""
    import numpy as np

    import onnxlite.runtime
    from onnxlite.runtime import SessionSettings
    from onnxlite.search.quick import SPIN_STOP

    model = make_mlp(tmp_path / "mlp.onnx")
    seen = []
    real = onnxlite.runtime.create_session

    def recording(path, settings=None, options=None):
        session = real(path, settings, options)
        seen.append(options.get_session_config_entry(SPIN_STOP[0]) if options is not None else None)
        return session

    monkeypatch.setattr(onnxlite.runtime, "create_session", recording)
    feeds = {"x": np.random.default_rng(0).standard_normal((8, 32)).astype(np.float32)}
    found = time_quickly(str(model), {"copy": str(model)}, feeds, SessionSettings(threads=1), runs=2)
    assert set(found.ratios) == {"copy"} and seen == [SPIN_STOP[1], SPIN_STOP[1]]


@pytest.mark.unit
def test_never_a_slower_larger_winner_while_a_light_fast_one_is_within_budget():
    """Once the repair exists (within budget, >= 3x smaller, faster than fp32), the slower, larger fp16 cannot win."""
    from onnxlite.search.choose import pick_winner

    fp32_p50 = 40.0
    fp16 = _row("fp16", "fp16", 1.98, 0.0, p50=46.0)
    repaired = _row("smoothquant+float8", "smoothquant", 3.6, 0.0045, p50=31.0)
    for objective in ("latency", "size"):
        assert pick_winner([fp16, repaired], objective, fp32_p50, PRIMARY) is repaired


@pytest.mark.unit
def test_below_a_millisecond_the_quick_timing_does_not_choose_bases():
    """On a model fp32 runs in 0.3 ms a batch, per-call overhead decides the quick figure: bases by size, as before."""
    rows, quick = _recorded()
    tiny = QuickTimes(quick.ratios, fp32_ms=0.3)
    base, _ = fallback_base(rows, PRIMARY, BUDGET, _can_exclude, fast_enough(tiny, "latency"))
    assert base.name == "weightonly[bits=4]"


def _widened_chain(path, layers: int = 16, width: int = 128, factor: float = 90.0, at: int = 6):
    """``layers`` MatMuls (Tanh between them); before layer ``at`` a Mul widens channel 0 ``factor`` times and that
    layer's weights scale it back, so in float nothing changes.

    Dynamic int8 gives that layer's input one scale, set by the wide channel: the others lose their resolution
    there and nowhere else, so keeping that one layer in float repairs it.  fp16 keeps everything; 4-bit
    weights lose a little in every layer (activations stay float)."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    from conftest import save_graph

    rng = np.random.default_rng(3)
    widen = np.ones(width, np.float32)
    widen[0] = factor
    inits, nodes, x = [numpy_helper.from_array(widen, "widen")], [], "x"
    for i in range(layers):
        w = (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32)
        if i == at:
            w[0] /= factor
            nodes.append(helper.make_node("Mul", [x, "widen"], ["widened"], name="widen"))
            x = "widened"
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        out = "y" if i == layers - 1 else f"h{i}"
        nodes.append(helper.make_node("MatMul", [x, f"w{i}"], [out], name=f"layer{i}"))
        if i < layers - 1:
            nodes.append(helper.make_node("Tanh", [out], [f"t{i}"], name=f"tanh{i}"))
            x = f"t{i}"
    graph = helper.make_graph(nodes, "widened_chain",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", width])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", width])], inits)
    return save_graph(graph, path)


def test_a_whole_lighten_repairs_the_fast_int8_base_not_the_light_slow_4bit_one(tmp_path):
    """Never ship a slower, larger winner while a >= 3x smaller candidate, faster than fp32, is one repair away.

    A whole ``lighten`` on a real model, its accuracy measured here, its speeds an AVX2 machine's (the recording
    executor replays them): fp16 within budget, 2x smaller, slower than fp32; 4-bit weight-only the lightest and
    slower than fp32, within 3x of the budget; dynamic int8 fast and over budget, one float layer from it."""
    from onnxlite.search.fallback_rule import fallback_base

    executor = RecordingExecutor({"fp16": RECORDED["fp16"][3], "int4": RECORDED["weightonly[bits=4]"][3],
                                  "dynamic": RECORDED["smoothquant"][3]})
    model = _widened_chain(tmp_path / "chain.onnx")
    result = onnxlite.lighten(str(model), tmp_path / "out", strategies=["fp16", "int4", "dynamic"],
                              metric="cosine_mean", max_drop="3%", runs=3, cache=False, executor=executor)
    primary, budget = result.primary_metric, result.budgets[result.primary_metric]
    fp32 = result.baseline.size_bytes
    grid = [r for r in result.candidates if not r.keep_float]
    by_strategy = {s: [r for r in grid if r.strategy == s] for s in ("fp16", "int4", "dynamic")}

    # the premise, measured: (a) fp16 within budget and 2x smaller; (b) every 4-bit one over budget, the lightest
    # of all and within 3x of the budget, so by size alone it would be the base; (c) every int8 one over budget
    (fp16,) = by_strategy["fp16"]
    assert fp16.status == "ok" and 1.9 < fp32 / fp16.size_bytes < 2.1, fp16
    assert by_strategy["int4"] and all(r.over_budget for r in by_strategy["int4"] + by_strategy["dynamic"]), \
        [(r.name, r.drops) for r in grid]
    by_size, _ = fallback_base(grid, primary, budget, _can_exclude)
    assert by_size.strategy == "int4" and by_size.drops[primary] <= 3 * budget, (by_size.name, by_size.drops)

    # every candidate was timed quickly, and the recorded speeds were the ones used
    assert sorted(executor.timed) == sorted(r.name for r in grid), executor.timed
    assert result.evidence["quick_times"]["ratios"][fp16.name] > 1

    # the int8 base was repaired, one or two layers in float; not one probe went to a 4-bit base
    repairs = [n for n in executor.ran if "+" in n or "[only " in n]
    assert repairs and all(n.startswith("dynamic") for n in repairs), repairs
    assert result.partial and all(b.startswith("dynamic") for b in result.partial["bases"]), result.partial
    winner = result.winner
    assert winner is not None and winner.strategy == "dynamic" and 1 <= len(winner.keep_float) <= 2, result.message
    assert "layer6" in winner.keep_float or "widen" in winner.keep_float, winner.keep_float
    assert winner.drops[primary] <= budget and fp32 / winner.size_bytes >= 3
    assert winner.p50 < result.baseline.p50 < fp16.p50


@pytest.mark.unit
def test_the_final_benchmark_times_only_the_contenders_of_the_quick_timing():
    """Within the quick timing's noise of the best (15%), and every repair it never saw; the rest set aside
    with their quick figures, unless speed may not decide (then size does, and every one is timed)."""
    from onnxlite.search.quick import CONTENDER_MARGIN, contenders

    rows = [_row(n, "dynamic", 3.9, 0.001) for n in ("fast", "close", "slow")]
    repair = _row("slow+float1", "dynamic", 3.8, 0.002)
    ratios = {"fast": 0.5, "close": 0.5 * (1 + CONTENDER_MARGIN) - 0.01, "slow": 0.8}
    kept, aside = contenders([*rows, repair], QuickTimes(ratios, fp32_ms=40.0), "latency")
    assert [r.name for r in kept] == ["fast", "close", "slow+float1"] and list(aside) == ["slow"]
    assert "1.25x fp32's speed in the quick timing against fast's 2.00x" in aside["slow"]
    everyone = ["fast", "close", "slow", "slow+float1"]
    for quick, objective in ((QuickTimes(ratios, fp32_ms=40.0), "size"),          # size decides
                             (QuickTimes(ratios, fp32_ms=0.3), "latency"),         # per-call overhead decides
                             (QuickTimes({n: r + 0.45 for n, r in ratios.items()}, fp32_ms=40.0), "latency"),
                             (None, "latency")):
        kept, aside = contenders([*rows, repair], quick, objective)
        assert [r.name for r in kept] == everyone and not aside, (quick, objective)


def test_a_whole_lighten_benchmarks_the_contenders_and_says_the_quick_figure(tmp_path):
    """fp16 passes but reads 1.15x fp32's time in the quick timing (an AVX2 machine's figure) against int8's
    0.5x: it is set aside unbenchmarked, and the verdict gives the winner's quick ratio beside its final one."""
    executor = RecordingExecutor({"fp16": RECORDED["fp16"][3], "dynamic": 0.5})
    model = make_mlp(tmp_path / "mlp.onnx")
    result = onnxlite.lighten(str(model), tmp_path / "out", strategies=["fp16", "dynamic"], metric="cosine_mean",
                              max_drop="5%", runs=3, cache=False, executor=executor)
    (fp16,) = [r for r in result.candidates if r.strategy == "fp16"]
    assert fp16.status == "outpaced" and fp16.latency_ms is None and "quick timing" in fp16.reason, fp16
    winner = result.winner
    assert winner is not None and winner.strategy == "dynamic", result.message
    assert "(2.00x in the quick timing)" in result.message, result.message
    timed = [r for r in result.candidates if r.latency_ms]
    assert fp16 not in timed and len(result.evidence["bench_stopping"]["runs_taken"]) == 1 + len(timed)
