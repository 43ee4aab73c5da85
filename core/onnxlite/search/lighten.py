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

Everything is built in a scratch folder beside OUTDIR, which appears (or is
replaced, with ``force``) only at the end: an interrupted run leaves OUTDIR as it was.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import placement, runtime_compat
from ..errors import UsageError
from ..figures import MEASURED, copy_figures, figures_of
from ..normalize import normalize_file
from ..report.text import size_change, speed_change
from ..stats import DEFAULT_CONFIDENCE
from .choose import deciding_objective, latency_margin, no_winner_message, pick_winner
from .heldout import _hf_tokenizer_default, _split_data, _write_calibration, export_samples
from .outdir import publish
from .quick import quick_times
from .recipes import recipe_candidate, record
from .results import CandidateRow, LightenResult, _ratio, _speed, _why_won
from .stopping import account, interrupted, later_stages

if TYPE_CHECKING:
    from ..runtime import SessionSettings
    from .candidates import Candidate, Skipped

Event = Callable[[str, Mapping[str, Any]], None]

#: the accuracy budget when neither the caller nor a recipe gives one
DEFAULT_MAX_DROP = "1%"
GENERATED_SAMPLES = 128   # held-out samples generated when the user gives no data


# -- the search ---------------------------------------------------------------------------------------------

def lighten(source: str | os.PathLike[str], output_dir: str | os.PathLike[str] | None = None, *,
            framework: str = "auto", inputs: Sequence[Any] | None = None, model_class: str | None = None,
            opset: int | None = None, exporter: str | None = None, max_drop: Any = None,
            metric: Sequence[str] | str | None = None, data: Any = None, data_options: Mapping[str, Any] | None = None,
            calibration: Any = None, calibration_options: Mapping[str, Any] | None = None,
            settings: SessionSettings | None = None, strategies: Sequence[str] | None = None,
            recipe: str | os.PathLike[str] | None = None, objective: str | None = None, force: bool = False,
            batch: int | None = None, runs: int = 20, workers: int | None = None, partial: bool = True,
            max_float_nodes: int | None = None, split: float = 0.4, on_event: Event | None = None,
            executor: Any = "local", ray_address: str | None = None, bench_on: str | None = None,
            confidence: float = DEFAULT_CONFIDENCE, framework_options: Any = None,
            target_runtime: str | None = None, cache_dir: str | os.PathLike[str] | None = None, cache: bool = True,
            time_budget: str | float | None = None) -> LightenResult:
    """Search the strategies for the lightest model within ``max_drop`` of the source's accuracy.

    ``max_drop`` is the budget on the primary metric (``"1%"``, ``0.01``, or
    ``METRIC=VALUE`` items, as for ``compare``; default 1%, or the recipe's); ``metric`` names the metric(s)
    to judge by (default: chosen from the output shapes).  ``data`` is held-out
    evaluation data and ``calibration`` calibration data (any format
    :func:`onnxlite.data.load_data` reads); given only one, it is split
    (``split`` of it calibrates, the rest judges).  A candidate passes when its drop
    stays within the budget at the one-sided ``confidence`` (see
    :mod:`onnxlite.search.evidence`).  ``recipe`` reproduces a
    ``recipe.toml`` without searching.  Returns a :class:`LightenResult`;
    OUTDIR gets ``model.onnx``, ``recipe.toml`` and ``report.html/json/md``.
    ``executor`` runs the candidates and the benchmark: ``"local"`` (a process pool here), ``"ray"``
    (Ray tasks on the cluster at ``ray_address``; ``bench_on`` a node label or resource for the
    benchmark) or an :class:`onnxlite.executors.Executor`.  Quantized models and judgements are reused from
    ``cache_dir`` (default :func:`~onnxlite.search.cache.default_cache_dir`) unless ``cache`` is False;
    ``time_budget`` (``"5m"`` or seconds) stops starting new work when spent (:mod:`onnxlite.search.trials`).
    """
    from ..atomic import scratch_dir
    from ..runtime import SessionSettings, resolve_providers
    from .trials import TimeBudget, make_context, parse_duration

    started = time.perf_counter()
    budget = TimeBudget(parse_duration(time_budget))   # validated before any work
    emit = on_event or (lambda _kind, _info: None)
    settings = settings or SessionSettings()
    if not 0 < split < 1:
        raise UsageError(f"split: expected a fraction between 0 and 1, got {split}")
    if not 0 < confidence < 1:
        raise UsageError(f"--confidence: expected a fraction between 0 and 1 (such as 0.95), got {confidence}")
    source = os.fspath(source)
    out = Path(output_dir if output_dir is not None else f"{Path(source.split(':')[0]).stem or 'model'}.lightened")
    if out.exists() and not force and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"{out}: already exists; choose another -o or pass --force to replace it")
    chosen = None
    if recipe is not None:
        from .recipes import read_recipe, replay

        chosen = read_recipe(recipe)
        given = replay(chosen, dict(framework=framework, inputs=inputs, model_class=model_class, data=data,
                                    framework_options=framework_options, data_options=data_options,
                                    calibration=calibration, calibration_options=calibration_options,
                                    settings=settings, batch=batch), emit)
        (framework, inputs, model_class, data, framework_options, data_options, calibration, calibration_options,
         settings, batch) = given.values()
        if metric is None and chosen.metric:
            # Every budgeted metric must be computed again, the primary first.
            metric = [chosen.metric, *(k for k in chosen.budgets if k != chosen.metric)]
        if max_drop is None:
            max_drop = dict(chosen.budgets) if chosen.budgets else chosen.max_drop
        objective = chosen.objective if objective is None else objective
    max_drop = DEFAULT_MAX_DROP if max_drop is None else max_drop
    from ..evaluation.metrics import check_budget_values

    check_budget_values(max_drop)
    objective = objective or "latency"
    if objective not in {"latency", "size"}:
        raise UsageError(f"--objective: expected latency or size, got {objective!r}")
    metrics = [metric] if isinstance(metric, str) else (list(metric) if metric else None)
    resolve_providers(settings)  # an unavailable provider fails before any work
    from ..executors import get_executor
    from .candidates import check_strategy_names
    check_strategy_names(strategies)  # so does a misspelt --strategies name (not after the export)
    runner = get_executor(executor, ray_address=ray_address, bench_on=bench_on)
    with scratch_dir(out) as work, contextlib.closing(runner):
        state = _Search(source, work, settings, emit, runner)
        state.confidence, state.target = confidence, runtime_compat.target_or_none(target_runtime)
        state.load(framework, inputs, model_class, framework_options)
        state.record = record(model_class=model_class, framework_options=framework_options, data=data,
                              data_options=data_options, calibration=calibration,
                              calibration_options=calibration_options, threads=settings.threads, batch=batch)
        state.prepare_data(data, calibration, data_options, calibration_options, split)
        state.run_reference()
        state.export(opset, exporter, metrics, max_drop)
        state.trials = make_context(runner, emit, state.fp32, state.calibration_file, settings.to_dict(), cache_dir,
                                    cache and chosen is None, budget)
        if chosen is not None:
            state.from_recipe(chosen)
        else:
            state.build(strategies)
        with interrupted(state, out):   # Ctrl-C: OUTDIR untouched, the best so far kept beside it
            state.run_candidates(workers)
            if chosen is None:
                state.select_grids()
                quick_times(state, objective)   # speed measured early: the repairs' bases are fast here
            later_stages(state, workers, strategies, partial, max_float_nodes, chosen is None)
            state.benchmark(batch, runs)
        result = state.finish(objective, out, chosen)
        account(state, result)
        result.seconds = round(time.perf_counter() - started, 1)
        publish(state, result, out)
    emit("done", {"message": result.message})
    return result


class _Search:
    """The state of one ``lighten`` run, step by step."""

    def __init__(self, source: str, work: Path, settings: SessionSettings, emit: Event, executor: Any):
        self.source, self.work, self.settings, self.emit = source, work, settings, emit
        self.executor = executor   # where candidates and the benchmark run (onnxlite.executors)
        self.rows: list[CandidateRow] = []
        self.skipped: list[Skipped] = []
        self.candidates: list[Candidate] = []
        self.partial: dict[str, Any] | None = None
        self.notes: list[str] = []

    # 1. the source, loaded once: it serves the export and the judge (a file.py runs once)
    def load(self, framework, inputs, model_class, framework_options=None) -> None:
        from ..conversion.export import load_for_export

        self.emit("step", {"message": f"Loading {self.source}"})
        self.loaded = load_for_export(self.source, framework, inputs=inputs, model_class=model_class,
                                      settings=self.settings, framework_options=framework_options)
        self.framework = self.loaded.framework
        self.specs = self.loaded.input_specs

    # data
    def prepare_data(self, data, calibration, data_options, calibration_options, split) -> None:
        data_options = _hf_tokenizer_default(self.source, data_options)
        calibration_options = _hf_tokenizer_default(self.source, calibration_options)
        self.data = _split_data(data, calibration, self.specs, data_options, calibration_options, split)
        self.calibration_file: Path | None = None
        self.generated_calibration: Path | None = None
        if self.data.calibration is not None:
            self.calibration_file = _write_calibration(self.data.calibration, self.work / "calibration.npz")
        elif self.data.held_out is None:
            from ..evaluation.judge import DEFAULT_SEQ
            from .heldout import generated_calibration

            self.generated_calibration = generated_calibration(self.specs, self.work / "generated_calibration.npz",
                                                               DEFAULT_SEQ)

    def calibration_for(self, spec) -> Path | None:
        """The calibration file a strategy gets: the user's data, else generated samples if it may use them."""
        if not spec.needs_calibration:
            return None
        if self.calibration_file is not None:
            return self.calibration_file
        return self.generated_calibration if spec.calibrates_on_generated else None

    # 4. the judge: the source framework's outputs on held-out data, computed before exporting
    def run_reference(self) -> None:
        from ..evaluation.judge import Judge

        self.emit("stage", {"message": f"running the {self.framework} source on held-out data"})
        # An ONNX source runs as the judge's CPU reference (its answers are the ones to keep, whatever
        # --provider says); any other source runs as loaded, so user code is not run a second time.
        reference = self.source if self.framework == "onnx" else self.loaded.model
        self.reference = Judge.run_reference(reference, self.data.held_out, framework=self.framework,
                                             inputs=self.specs, settings=self.settings, seed=1,
                                             samples=None if self.data.held_out is not None else GENERATED_SAMPLES)
        self.reference.name = self.source

    # 1b. export (verified), then the judge, named like the exported model, and the float model's verdict
    def export(self, opset, exporter, metrics, max_drop) -> None:
        from ..conversion.export import export
        from ..evaluation.judge import Judge
        from .tasks import save_judge

        self.emit("stage", {"message": "exporting and verifying against the source"})
        self.exported = export(self.source, self.work / "fp32.onnx", opset=opset, exporter=exporter, loaded=self.loaded,
                               settings=self.settings, samples=export_samples(self.data.held_out, self.specs),
                               on_step=lambda msg: self.emit("step", {"message": msg}))
        self.fp32 = Path(self.exported.path)
        if (done := normalize_file(self.fp32)) and done.summary():   # once per model, before family and candidates
            self.notes.append(f"normalised before quantizing: {done.summary()}")
            self.emit("note", {"message": self.notes[-1]})
        self.judge: Judge = Judge.from_run(self.reference, self.fp32, metrics=metrics, max_drop=max_drop,
                                           settings=self.settings)
        if not self.judge.budgets:
            raise UsageError("--max-drop: a budget is needed to judge candidates (for example 1%)")
        from .evidence import configure_judge

        # before any quantizing: the confidence rule, the select/confirm parts, and what the data cannot resolve
        self.evidence = configure_judge(self.judge, getattr(self, "confidence", DEFAULT_CONFIDENCE))
        for line in self.evidence["messages"]:
            self.emit("note", {"message": line})
        self.judge_dir = save_judge(self.judge, self.work / "judge")
        verdict = self.judge.evaluate(self.fp32, "fp32")
        self.baseline = CandidateRow(name="fp32", strategy="none", options={}, status="reference",
                                     path=str(self.fp32), reason="the exported model, unquantized",
                                     **figures_of(verdict, "size_bytes", "metrics", "drops"))

    # 2. candidates
    def build(self, strategies) -> None:
        from .candidates import build_candidates

        self.candidates, self.skipped = build_candidates(self.fp32, strategies=strategies,
                                                         has_calibration=self.calibration_file is not None,
                                                         generated_calibration=self.generated_calibration is not None,
                                                         provider=self.settings.provider)
        if self.generated_calibration is not None:
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

    def from_recipe(self, recipe) -> None:
        self.candidates = [recipe_candidate(recipe, self.calibration_for)]

    def _task(self, candidate: Candidate, index: int) -> dict[str, Any]:
        from ..registry import get_registry

        spec = get_registry().get("quantizer", candidate.strategy).spec
        settings = self.settings.to_dict()
        return {"candidate": candidate.to_dict(), "model": str(self.fp32),
                "output": str(self.work / "candidates" / f"candidate{index}.onnx"),
                "calibration": str(c) if (c := self.calibration_for(spec)) else None,
                "check_data": str(self.calibration_file) if self.calibration_file else None,
                "judge": str(self.judge_dir), "settings": settings}

    # 3 + 4. quantize and judge (search.trials: warm workers, the cache, duplicates run once, the time budget)
    def run_candidates(self, workers: int | None, candidates: Sequence[Candidate] | None = None) -> list[CandidateRow]:
        from .trials import candidate_rows

        todo = list(candidates if candidates is not None else self.candidates)
        tasks = [self._task(c, len(self.rows) + i) for i, c in enumerate(todo)]
        self.settled: dict[str, CandidateRow] = {}   # as they finish: Ctrl-C keeps the best of them too
        new = candidate_rows(self.trials, todo, tasks, workers, self.work / "tasks", self.baseline.size_bytes,
                             self.judge.primary, self.settled)
        self.rows.extend(new)
        return new

    # option grids are decided on the select part; the confirm part's figures are reported
    def select_grids(self) -> None:
        from .evidence import select_on_grids

        self.evidence["grids"] = select_on_grids(self.rows, self.evidence["rank_metric"])

    # mixed precision: a scheme per node from a per-node sensitivity sweep
    def mixed_precision(self, workers: int | None, strategies: Sequence[str] | None) -> None:
        from .evidence import mixed_candidates_wanted, mixed_stage

        wanted, why = mixed_candidates_wanted(self, strategies)
        if not wanted:
            self.evidence["mixed"] = {"tried": False, "reason": why}
            return
        primary = self.judge.primary
        self.evidence["mixed"] = mixed_stage(self, workers, primary, self.judge.budgets.get(primary) or 0.0)

    # partial quantization (search.partial.fallback)
    def partial_fallback(self, max_float_nodes: int | None, workers: int | None) -> None:
        from .partial import fallback

        fallback(self, max_float_nodes, workers)

    # 5. benchmark the survivors interleaved with the float model
    def benchmark(self, batch: int | None, runs: int) -> None:
        survivors = runtime_compat.refuse_unfit([r for r in self.rows if r.status == "ok"],
                                                getattr(self, "target", None))
        if not survivors:
            return
        samples = self.judge.samples
        size = max(1, min(batch or 32, samples, self.judge.batch_cap or samples))   # a fixed batch axis caps it
        feeds = self.judge.first_feeds(size)
        self.bench_batch = size
        self.emit("stage",
                  {"message": f"benchmarking {len(survivors)} candidate(s) and fp32 interleaved (batch {size})"})
        models = [self.baseline] + survivors
        result = self.executor.bench([r.path for r in models], feeds=feeds, runs=runs, warmup=3,
                                     settings=self.settings, names=[r.name for r in models],
                                     progress=lambda frac, text: self.emit("bench", {"fraction": frac, "text": text}))
        self.measured_on = {k: result.settings[k] for k in ("measured_on", "bench_node") if k in result.settings}
        for row, measured in zip(models, result.rows):
            copy_figures(measured, row, *MEASURED)
            if measured.status != "ok" and row is not self.baseline:
                row.status, row.reason = "failed", f"benchmark failed: {measured.note}"

    # 6. pick and explain
    def finish(self, objective: str, out: Path, recipe: Any) -> LightenResult:
        from .evidence import evidence_record

        base_p50 = self.baseline.p50
        measured_base = base_p50 if self.baseline.latency_ms else None
        rank = self.evidence["rank_metric"]
        winner = pick_winner(self.rows, objective, measured_base, rank)
        # The same rule pick_winner applied, so the explanation matches the choice.
        basis = deciding_objective(self.rows, objective, measured_base)
        timed = [r for r in self.rows if r.status == "ok" and r.latency_ms]
        fastest = min(timed, key=lambda r: r.p50) if timed else None
        if winner is not None and basis != objective and fastest is not None:
            # Say what the tie rule saw, with the figures it used, so "1.25x faster" and "speed did not
            # decide" never stand side by side unexplained.
            self.notes.append(
                f"speed did not decide: the fastest candidate ({fastest.name}, {_speed(base_p50, fastest.p50)} "
                f"fp32) is within the latency noise margin ({latency_margin(fastest):.0%}: 3% or the measured "
                "p90-p50 spread, whichever is larger), so the smallest one within budget and not over 10% "
                "slower than fp32 won")
        primary = self.judge.primary
        for row in self.rows:
            if row is winner:
                row.status = "winner"
                row.reason = _why_won(row, self.baseline, basis, fastest if basis == "latency" else None)
            elif row.status == "ok" and winner is not None:
                row.reason = (f"within budget, but against the winner: {speed_change(winner.p50, row.p50)}, "
                              f"{size_change(winner.size_bytes, row.size_bytes)}")
                mine, theirs = row.drops.get(primary), winner.drops.get(primary)
                if mine is not None and theirs is not None and mine > theirs:
                    row.reason += f"; its {primary} drop is larger ({mine:.4g} vs {theirs:.4g})"
        placement.report_fallback(self.rows, self.settings, self.judge.feeds, getattr(self, "bench_batch", None),
                                  axes=self.judge.batch_axes)
        if winner is not None:
            drop = winner.drops.get(primary, float("nan"))
            message = (f"winner: {winner.name}: {_ratio(self.baseline.size_bytes, winner.size_bytes)}, "
                       f"{_speed(base_p50, winner.p50)} fp32, {primary} drop {drop:.4g} "
                       f"(budget {self.judge.budgets.get(primary, float('nan')):.4g})")
            message += "".join(f"; {note}" for note in self.notes)
            if self.evidence["unresolved"]:
                message += (f"; judged by measured drop, not at {self.evidence['confidence']:.0%} confidence: the "
                            f"held-out data cannot resolve the budget (see the report); ranked by {rank}")
        else:
            message = no_winner_message(self.rows, self.baseline.size_bytes, bool((self.partial or {}).get("tried")),
                                        self.notes)
        return LightenResult(
            output_dir=out, winner=winner, baseline=self.baseline, candidates=self.rows,
            skipped=[{"strategy": s.strategy, "reason": s.reason} for s in self.skipped],
            primary_metric=primary, budgets=dict(self.judge.budgets), objective=objective, message=message,
            export=self.exported.to_dict(), data=self.data.description, partial=self.partial,
            evidence=evidence_record(self.evidence, self.rows, self.judge),
            settings={"provider": self.settings.provider, "threads": self.settings.threads,
                      "bench_batch": getattr(self, "bench_batch", None), "held_out_samples": self.judge.samples,
                      "recipe": bool(recipe), "executor": self.executor.describe(),
                      **getattr(self, "measured_on", {})},
        )
