"""Speed measured early (issue 22, part 3): the fallback repairs a base that is fast here, not the lightest one.

The rule is tested on recorded figures (the rows an AVX2 run of the README job produced: 4-bit weight-only
lightest but slower than fp32, int8 smoothquant fast and just over budget, fp16 within budget but slower),
so it holds whatever CPU runs the test; the quick timing itself is tested on a real model.
"""

from __future__ import annotations

import pytest

from onnxlite.search.fallback_rule import fallback_base
from onnxlite.search.partial import fallback_bases
from onnxlite.search.quick import QuickTimes, fast_enough, time_quickly
from onnxlite.search.results import CandidateRow

from helpers import make_mlp

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
