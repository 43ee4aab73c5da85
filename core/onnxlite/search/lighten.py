"""``lighten``: find the smallest, fastest model that stays inside an accuracy budget.

1. export the source with its framework plugin (verified);
2. build candidates: every applicable quantizer plugin, over its option grid;
3. quantize each candidate, an independent task in a warm worker (:mod:`onnxlite.search.trials`:
   duplicates once, the result cache, the time budget), then time it quickly (speed measured early);
4. judge each against the *source framework's* outputs on held-out data
   (never the calibration samples);
5. benchmark the survivors interleaved with the float model;
6. pick: fastest within budget (ties by size), or smallest with ``objective="size"``;
   when nothing fits, keep the worst nodes in float step by step (partial quantization).

Each stage is a function that takes what it needs and returns a frozen record (docs/architecture.md, "The
typed search"): :mod:`onnxlite.search.setup` (inputs, reference, judge), :mod:`onnxlite.search.grids`,
:mod:`onnxlite.search.quick`, :mod:`onnxlite.search.mixed_stage`, :mod:`onnxlite.search.partial` and
:mod:`onnxlite.search.outdir`; :class:`_Search` holds only the rows they add to and the records they return.

Everything is built in a scratch folder beside OUTDIR, which appears (or is
replaced, with ``force``) only at the end: an interrupted run leaves OUTDIR as it was.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import hardware, placement, runtime_compat
from ..benchmark.stability import SEARCH_MIN_RUNS, footnote
from ..errors import UsageError
from ..figures import MEASURED, copy_figures
from ..report.text import size_change, speed_change
from .choose import deciding_objective, latency_margin, no_winner_message, pick_winner
from .config import DEFAULT_MAX_DROP, LightenConfig
from .last_resort import LastResort, last_resort, source_task
from .outdir import publish
from .recipes import Recipe, acted_options, recipe_candidate, record
from .results import CandidateRow, LightenResult, ratio_text, speed_text, why_won
from .stopping import LaterStages, account, final_runs, interrupted, later_stages

if TYPE_CHECKING:
    from .candidates import Candidate, Skipped
    from .context import SearchContext
    from .quick import QuickTimes
    from .setup import Env, Inputs, Reference
    from .trials import TrialContext

__all__ = ["DEFAULT_MAX_DROP", "LightenConfig", "lighten"]


# -- the search ---------------------------------------------------------------------------------------------

def lighten(source: str | os.PathLike[str], output_dir: str | os.PathLike[str] | None = None, *,
            config: LightenConfig | None = None, **options: Any) -> LightenResult:
    """Search the strategies for the lightest model within ``max_drop`` of the source's accuracy.

    The settings are a :class:`~onnxlite.search.config.LightenConfig`: ``config``, with any of its fields
    given as keywords on top (``lighten(model, data="x.npz", max_drop="1%")`` needs no config at all).

    ``max_drop`` is the budget on the primary metric (``"1%"``, ``0.01``, or
    ``METRIC=VALUE`` items, as for ``compare``; default 1%, or the recipe's); ``metric`` names the metric(s)
    to judge by (default: chosen from the output shapes).  ``data`` is held-out
    evaluation data and ``calibration`` calibration data (any format
    :func:`onnxlite.data.load_data` reads); given only one, it is split
    (``split`` of it calibrates, the rest judges).  A candidate passes when its drop
    stays within the budget at the one-sided ``confidence`` (see
    :mod:`onnxlite.search.confidence`).  ``recipe`` reproduces a
    ``recipe.toml`` without searching.  Returns a :class:`LightenResult`;
    OUTDIR gets ``model.onnx``, ``recipe.toml`` and ``report.html/json/md``.
    ``executor`` runs the candidates and the benchmark: ``"local"`` (a process pool here), ``"ray"``
    (Ray tasks on the cluster at ``ray_address``; ``bench_on`` a node label or resource for the
    benchmark) or an :class:`onnxlite.executors.Executor`.  Quantized models and judgements are reused from
    ``cache_dir`` (default :func:`~onnxlite.search.cache.default_cache_dir`) unless ``cache`` is False;
    ``time_budget`` (``"5m"`` or seconds) stops starting new work when spent (:mod:`onnxlite.search.trials`).
    ``target_cpu``: the kind of CPU the model will run on, when not this one (``"avx2"``, ``"arm64"``...:
    :mod:`onnxlite.hardware`).  ``strategies`` limits the search to those names; ``objective`` is
    ``"latency"`` (default) or ``"size"``; ``partial`` allows the fallback, keeping at most
    ``max_float_nodes`` in float; ``batch`` and ``runs`` size the benchmark, ``workers`` the candidates
    quantized at once; ``on_event(kind, info)`` hears progress; ``force`` replaces an existing OUTDIR.
    """
    return run(source, output_dir, LightenConfig.build(config, **options))


def _checked(config: LightenConfig, emit: Any, decoder: bool = False) -> tuple[LightenConfig, Recipe | None]:
    """``config`` with the recipe's settings filled in and the defaults resolved (a ``decoder``'s own:
    :func:`onnxlite.search.decoder.decoder_config`), its budget and objective checked before any work."""
    from ..evaluation.metrics import check_budget_values
    from ..runtime import SessionSettings

    config = replace(config, settings=config.settings or SessionSettings())
    chosen = None
    if config.recipe is not None:
        from .recipes import read_recipe, replay

        chosen = read_recipe(config.recipe)
        config = replay(chosen, config, emit)
    if decoder:
        from .decoder import DEFAULT_BUDGET, decoder_config

        if config.max_drop is None:
            emit("note", {"message": f"no --max-drop: the budget is {DEFAULT_BUDGET} (perplexity at most 5% "
                                     "above the fp32 export's)"})
        config = decoder_config(config)
    max_drop = DEFAULT_MAX_DROP if config.max_drop is None else config.max_drop
    check_budget_values(max_drop)
    objective = config.objective or "latency"
    if objective not in {"latency", "size"}:
        raise UsageError(f"--objective: expected latency or size, got {objective!r}")
    return replace(config, max_drop=max_drop, objective=objective), chosen


def run(source: str | os.PathLike[str], output_dir: str | os.PathLike[str] | None,
        config: LightenConfig) -> LightenResult:
    """:func:`lighten` on one :class:`LightenConfig`: the stages in order (docs/architecture.md)."""
    from ..atomic import scratch_dir
    from ..executors import get_executor
    from ..runtime import resolve_providers
    from .setup import Env, export_reference, load_inputs
    from .trials import TimeBudget, make_context, parse_duration

    started = time.perf_counter()
    budget = TimeBudget(parse_duration(config.time_budget))   # validated before any work
    emit = config.on_event or (lambda _kind, _info: None)
    if not 0 < config.split < 1:
        raise UsageError(f"split: expected a fraction between 0 and 1, got {config.split}")
    if not 0 < config.confidence < 1:
        raise UsageError(f"--confidence: expected a fraction between 0 and 1 (such as 0.95), got {config.confidence}")
    source = os.fspath(source)
    out = Path(output_dir if output_dir is not None else f"{Path(source.split(':')[0]).stem or 'model'}.lightened")
    if out.exists() and not config.force and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"{out}: already exists; choose another -o or pass --force to replace it")
    from .decoder import is_decoder_source

    decoder = is_decoder_source(source, config.framework)   # judged by text, timed by decode steps
    config, chosen = _checked(config, emit, decoder)
    settings = config.settings
    assert settings is not None   # _checked fills it in
    resolve_providers(settings)  # an unavailable provider fails before any work
    from .candidates import check_strategy_names
    check_strategy_names(config.strategies)  # so does a misspelt --strategies name (not after the export)
    isa = hardware.judged_on(settings.provider, config.target_cpu)   # and an unknown --target-cpu
    runner = get_executor(config.executor, ray_address=config.ray_address, bench_on=config.bench_on)
    with scratch_dir(out) as work, contextlib.closing(runner):
        env = Env(source, work, settings, emit, runner, isa, runtime_compat.target_or_none(config.target_runtime),
                  config)
        if decoder:
            from .decoder_data import decoder_reference, load_decoder_inputs

            inputs = load_decoder_inputs(env)
            ref = decoder_reference(env, inputs)
        else:
            inputs = load_inputs(env)
            ref = export_reference(env, inputs)
        cache_dir = Path(config.cache_dir) if config.cache_dir is not None else None
        trials = make_context(runner, emit, ref.fp32, inputs.calibration_file, settings.to_dict(), cache_dir,
                              config.cache and chosen is None, budget)
        if decoder:   # a decoder's judge scores windows: a few of them first
            from ..jobs.pruning import DECODER_PRUNE_WINDOWS
            from .decoder_cache import use_stable_keys

            trials.prune = DECODER_PRUNE_WINDOWS
            use_stable_keys(trials, source, ref.judge_dir, config)   # keyed on the input model and the corpus
        search = _Search(env, inputs, ref, trials)
        if chosen is not None:
            search.candidates = [recipe_candidate(chosen, inputs.calibration_for)]
        else:
            search.build()
        with interrupted(search, out):   # Ctrl-C: OUTDIR untouched, the best so far kept beside it
            search.run_candidates(config.workers)
            if chosen is None:
                from .grids import select_on_grids
                from .quick import quick_times

                search.grids = select_on_grids(search.rows, ref.setup.rank_metric)
                search.quick = quick_times(search.ctx, search.rows)   # speed measured early: fast bases here
            search.later = later_stages(search.ctx, search.rows, search.quick, config, chosen is None)
            if chosen is None:   # qat: only when post-training lost at >= 3x and the source is PyTorch
                search.resort = last_resort(search.ctx, search.rows, ref.baseline, inputs, config)
                if search.resort.cut_short:     # said with the other stages the time budget kept from starting
                    search.later = search.later.with_skipped("the last resort")
            search.benchmark(config.batch, config.runs)
        result = search.finish(out, chosen)
        if decoder:
            from .decoder import finish_result

            finish_result(result, ref.judge.first_feeds(1))
        account(trials, search.later, result, emit)
        result.seconds = round(time.perf_counter() - started, 1)
        publish(result, out, work, search.recipe(result), source, env.target, isa,
                beside=ref.fp32.parent if decoder else None)
    emit("done", {"message": result.message})
    return result


class _Search:
    """One ``lighten`` run after the export: the rows its stages add to, and the records they return."""

    def __init__(self, env: Env, inputs: Inputs, ref: Reference, trials: TrialContext):
        from .context import SearchContext

        self.env, self.inputs, self.ref, self.trials = env, inputs, ref, trials
        self.settings, self.emit, self.judge = env.settings, env.emit, ref.judge
        self.baseline = ref.baseline
        self.rows: list[CandidateRow] = []
        self.skipped: list[Skipped] = []
        self.candidates: list[Candidate] = []
        self.settled: dict[str, CandidateRow] = {}   # as they finish: Ctrl-C keeps the best of them too
        # the verdict names the ISA it was judged and timed on, then what the export changed
        self.notes: list[str] = [env.isa.note(), *ref.notes]
        self.record = record(env.config)   # what a replay needs, recorded before any work can change it
        # the later stages' records (None: the stage did not run)
        self.grids: list[str] | None = None
        self.quick: QuickTimes | None = None
        self.later = LaterStages()
        self.resort: LastResort | None = None
        self.bench_batch: int | None = None
        self.measured_on: dict[str, Any] = {}
        self.bench_stopping: dict[str, Any] | None = None   # the final benchmark's runs taken and why
        self.ctx: SearchContext = SearchContext(ref.fp32, env.work, env.settings, ref.judge, ref.judge_dir, trials,
                                                env.emit, self._task, self.run_candidates, ref.setup.rank_metric)

    # 2. candidates
    def build(self) -> None:
        from .candidates import build_candidates

        inputs = self.inputs
        self.candidates, self.skipped = build_candidates(self.ref.fp32, strategies=self.env.config.strategies,
                                                         has_calibration=inputs.calibration_file is not None,
                                                         generated_calibration=inputs.generated_calibration is not None,
                                                         provider=self.settings.provider, isa=self.env.isa)
        if inputs.generated_calibration is not None:
            from ..registry import get_registry
            from .heldout import GENERATED_CALIBRATION

            on_generated = sorted({c.strategy for c in self.candidates
                                   if get_registry().get("quantizer", c.strategy).spec.needs_calibration})
            if on_generated:
                self.notes.append(f"no data given: {', '.join(on_generated)} calibrated on {GENERATED_CALIBRATION} "
                                  "generated samples, none of them judged (its calibration only locates structure)")
                self.emit("note", {"message": self.notes[-1]})
        if not self.candidates:
            reasons = "; ".join(f"{s.strategy}: {s.reason}" for s in self.skipped) or "no quantizer plugins"
            raise UsageError(f"no strategy applies to this model ({reasons})")

    def _task(self, candidate: Candidate, index: int) -> dict[str, Any]:
        from ..registry import get_registry

        spec = get_registry().get("quantizer", candidate.strategy).spec
        calibration = self.inputs.calibration_file
        return {"candidate": candidate.to_dict(), "model": str(self.ref.fp32),
                "output": str(self.env.work / "candidates" / f"candidate{index}.onnx"),
                "calibration": str(c) if (c := self.inputs.calibration_for(spec)) else None,
                "check_data": str(calibration) if calibration else None,
                "judge": str(self.ref.judge_dir), "settings": self.settings.to_dict(),
                # a training strategy's task loads the source again in its own process (search.last_resort)
                **({"source": source_task(self.env.source, self.inputs.framework, self.env.config)}
                   if self.inputs.framework in spec.needs_source else {})}

    # 3 + 4. quantize and judge (search.trials: warm workers, the cache, duplicates run once, the time budget)
    def run_candidates(self, workers: int | None, candidates: Sequence[Candidate] | None = None) -> list[CandidateRow]:
        from .trials import candidate_rows

        todo = list(candidates if candidates is not None else self.candidates)
        tasks = [self._task(c, len(self.rows) + i) for i, c in enumerate(todo)]
        self.settled = {}
        new = candidate_rows(self.trials, todo, tasks, workers, self.env.work / "tasks", self.baseline.size_bytes,
                             self.judge.primary, self.settled)
        self.rows.extend(new)
        return new

    # 5. benchmark the survivors interleaved with the float model
    def benchmark(self, batch: int | None, runs: int) -> None:
        from .quick import OUTPACED, contenders

        survivors = runtime_compat.refuse_unfit([r for r in self.rows if r.status == "ok"],
                                                self.env.target)
        # the contenders only: those the quick timing put within its noise of the best, and every repair
        survivors, aside = contenders(survivors, self.quick, self.env.config.objective or "latency")
        for row in self.rows:
            if row.name in aside and row.status == "ok":
                row.status, row.reason = OUTPACED, aside[row.name]
        if not survivors:
            return
        samples = self.judge.samples
        size = max(1, min(batch or 32, samples, self.judge.batch_cap or samples))   # a fixed batch axis caps it
        feeds = self.judge.first_feeds(size)
        self.bench_batch = size
        self.emit("stage",
                  {"message": f"benchmarking {len(survivors)} candidate(s) and fp32 interleaved (batch {size})"})
        models = [self.baseline] + survivors
        # runs is the most: the benchmark stops once the p50 ratios against fp32 are stable (benchmark.stability);
        # past the --time-budget it takes only the least
        runs, note = final_runs(self.trials.budget, runs)
        if note:
            self.notes.append(note)
            self.emit("note", {"message": note})
        result = self.env.executor.bench([str(r.path) for r in models], feeds=feeds, runs=(SEARCH_MIN_RUNS, runs),
                                         warmup=3, settings=self.settings, names=[r.name for r in models],
                                         progress=lambda f, text: self.emit("bench", {"fraction": f, "text": text}))
        self.measured_on = {k: result.settings[k] for k in ("measured_on", "bench_node") if k in result.settings}
        if "stopping" in result.settings:   # the runs taken and why: a sentence for the report, figures in the JSON
            self.measured_on["bench_runs"] = footnote(result.settings["stopping"])
            self.bench_stopping = result.settings["stopping"]
        for row, measured in zip(models, result.rows):
            copy_figures(measured, row, *MEASURED)
            if measured.status != "ok" and row is not self.baseline:
                row.status, row.reason = "failed", f"benchmark failed: {measured.note}"

    def recipe(self, result: LightenResult) -> Recipe | None:
        """The winner's ``recipe.toml``: its options as it ran them, a note of what of them acted on the graph,
        the budgets, where it was judged, and what a replay needs (:func:`~onnxlite.search.recipes.record`)."""
        winner, judge, isa = result.winner, self.judge, self.env.isa
        if winner is None:
            return None
        return Recipe(strategy=winner.strategy, options=dict(winner.options),
                      acted=acted_options(winner.options, self.ref.fp32),
                      excluded_nodes=tuple(winner.keep_float), metric=judge.primary,
                      max_drop=judge.budgets.get(judge.primary), budgets=dict(judge.budgets),
                      objective=result.objective, provider=self.settings.provider, framework=self.inputs.framework,
                      inputs=tuple(str(s) for s in self.inputs.specs), hardware=isa.here.to_dict(),
                      target_cpu=isa.target.isa if isa.target else None, **self.record)

    # 6. pick and explain
    def finish(self, out: Path, recipe: Recipe | None) -> LightenResult:
        from .confidence import evidence_record

        objective = self.env.config.objective or "latency"
        setup = self.ref.setup
        resort = self.resort.to_dict() if self.resort is not None else None
        if self.resort is not None and (said := self.resort.note()):
            self.notes.append(said)
            self.skipped = [s for s in self.skipped if s.strategy not in self.resort.names]
        base_p50 = self.baseline.p50
        measured_base = base_p50 if self.baseline.latency_ms else None
        rank = setup.rank_metric
        winner = pick_winner(self.rows, objective, measured_base, rank)
        # The same rule pick_winner applied, so the explanation matches the choice.
        basis = deciding_objective(self.rows, objective, measured_base)
        timed = [r for r in self.rows if r.status == "ok" and r.latency_ms]
        fastest = min(timed, key=lambda r: r.p50) if timed else None
        if winner is not None and basis != objective and fastest is not None:
            # Say what the tie rule saw, with the figures it used, so "1.25x faster" and "speed did not
            # decide" never stand side by side unexplained.
            self.notes.append(
                f"speed did not decide: the fastest candidate ({fastest.name}, {speed_text(base_p50, fastest.p50)} "
                f"fp32) is within the latency noise margin ({latency_margin(fastest):.0%}: 3% or the measured "
                "p90-p50 spread, whichever is larger), so the smallest one within budget and not over 10% "
                "slower than fp32 won")
        primary = self.judge.primary
        for row in self.rows:
            if row is winner:
                row.status = "winner"
                row.reason = why_won(row, self.baseline, basis, fastest if basis == "latency" else None)
            elif row.status == "ok" and winner is not None:
                row.reason = (f"within budget, but against the winner: {speed_change(winner.p50, row.p50)}, "
                              f"{size_change(winner.size_bytes, row.size_bytes)}")
                mine, theirs = row.drops.get(primary), winner.drops.get(primary)
                if mine is not None and theirs is not None and mine > theirs:
                    row.reason += f"; its {primary} drop is larger ({mine:.4g} vs {theirs:.4g})"
        placement.report_fallback(self.rows, self.settings, self.judge.feeds, self.bench_batch,
                                  axes=self.judge.batch_axes)
        if winner is not None:
            drop = winner.drops.get(primary, float("nan"))
            early = self.quick.ratios.get(winner.name) if self.quick is not None else None
            said = f" ({1 / early:.2f}x in the quick timing)" if early else ""
            message = (f"winner: {winner.name}: {ratio_text(self.baseline.size_bytes, winner.size_bytes)}, "
                       f"{speed_text(base_p50, winner.p50)} fp32{said}, {primary} drop {drop:.4g} "
                       f"(budget {self.judge.budgets.get(primary, float('nan')):.4g})")
            message += "".join(f"; {note}" for note in self.notes)
            # what a worst-case budget promises about new samples (search.confidence.budget_allowances)
            message += "".join(f"; {a['text']}" for a in setup.allowances.values() if a.get("kind") == "worst")
            if setup.unresolved:
                message += (f"; judged by measured drop, not at {setup.confidence:.0%} confidence: the "
                            f"held-out data cannot resolve the budget (see the report); ranked by {rank}")
        else:
            message = no_winner_message(self.rows, self.baseline.size_bytes,
                                        bool((self.later.partial or {}).get("tried")), self.notes)
        quick = self.quick.to_dict() | {"objective": objective} if self.quick is not None and self.quick.batch else None
        stages = {"grids": self.grids, "quick_times": quick, "mixed": self.later.mixed, "last_resort": resort,
                  "bench_stopping": self.bench_stopping}
        return LightenResult(
            output_dir=out, winner=winner, baseline=self.baseline, candidates=self.rows, float_noise=self.ref.noise,
            skipped=[{"strategy": s.strategy, "reason": s.reason} for s in self.skipped],
            primary_metric=primary, budgets=dict(self.judge.budgets), objective=objective, message=message,
            export=self.ref.exported.to_dict(), data=self.inputs.data.description, partial=self.later.partial,
            evidence=evidence_record(setup, stages, self.rows, self.judge),
            settings={"provider": self.settings.provider, "threads": self.settings.threads,
                      "bench_batch": self.bench_batch, "held_out_samples": self.judge.samples,
                      "recipe": bool(recipe), "executor": self.env.executor.describe(),
                      **self.measured_on, **self.env.isa.settings()},
        )
