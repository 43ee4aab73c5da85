"""The search engine: one ``lighten`` run after the export.

It owns the one shared state, the candidates table (:class:`~onnxlite.search.table.CandidateTable`), and what
every stage draws on: the trials (warm workers, the cache, duplicates run once), the time budget and the one
stop rule (once it is spent no stage starts: :meth:`Stage.not_started` says what stands for it).  It judges the
candidates, runs :data:`STAGES` in order, benchmarks the contenders and chooses; the verdict is rendered from
the records the stages returned (:mod:`onnxlite.report.verdict`).  Adding a stage is one module in
``search/stages/`` and one line in :data:`STAGES` (docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from .. import runtime_compat
from ..benchmark.stability import SEARCH_MIN_RUNS, footnote
from ..errors import UsageError
from ..figures import MEASURED, copy_figures
from .recipes import Recipe, acted_options, record
from .stages import FallbackStage, GridStage, LastResortStage, MixedStage, QuickStage, Stage, StageContext
from .stopping import final_runs
from .table import CandidateTable

if TYPE_CHECKING:
    from ..events import Kind
    from .candidates import Candidate, Skipped
    from .context import SearchContext
    from .quick import QuickTimes
    from .results import CandidateRow
    from .setup import Env, Inputs, Reference
    from .trials import TrialContext

#: the stages after the candidates are judged, in the order they run
STAGES: tuple[Stage, ...] = (GridStage(), QuickStage(), MixedStage(), FallbackStage(), LastResortStage())


class Engine:
    """The table, the trials and the stages' records of one run; :mod:`onnxlite.search.finish` chooses from them."""

    def __init__(self, env: Env, inputs: Inputs, ref: Reference, trials: TrialContext,
                 stages: Sequence[Stage] = STAGES):
        from .context import SearchContext

        self.env, self.inputs, self.ref, self.trials = env, inputs, ref, trials
        self.settings, self.judge, self.baseline = env.settings, ref.judge, ref.baseline
        self.stages = tuple(stages)
        self.table = CandidateTable()
        self.skipped: list[Skipped] = []
        self.candidates: list[Candidate] = []
        # the verdict names the ISA it was judged and timed on, then what the export changed
        self.notes: list[str] = [env.isa.note(), *ref.notes]
        self.record = record(env.config)   # what a replay needs, recorded before any work can change it
        #: each stage's record, by its name (absent: the stage did not apply to this run)
        self.records: dict[str, Any] = {}
        #: the stages wanted but not started (the time budget), and what the stages asked the verdict to say
        self.not_started: list[str] = []
        self.stage_notes: list[str] = []
        self.bench_batch: int | None = None
        self.measured_on: dict[str, Any] = {}
        self.bench_stopping: dict[str, Any] | None = None   # the final benchmark's runs taken and why
        self.ctx: SearchContext = SearchContext(ref.fp32, env.work, env.settings, ref.judge, ref.judge_dir, trials,
                                                env.emit, self.job, self.run_candidates, ref.setup.rank_metric)

    # what Ctrl-C reads (stopping.SoFar)
    @property
    def rows(self) -> list[CandidateRow]:
        return self.table.rows

    @property
    def settled(self) -> dict[str, CandidateRow]:
        return self.table.settled

    @property
    def quick(self) -> QuickTimes | None:
        found: QuickTimes | None = self.records.get("quick")
        return found

    def emit(self, kind: Kind, info: dict[str, Any]) -> None:
        self.env.emit(kind, info)

    def build(self) -> None:
        """The candidates: every applicable strategy over its option grid."""
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

    def job(self, candidate: Candidate, index: int) -> dict[str, Any]:
        """The job an executor runs for ``candidate`` (``index`` names its files)."""
        from ..registry import get_registry
        from .last_resort import source_task

        spec = get_registry().get("quantizer", candidate.strategy).spec
        calibration = self.inputs.calibration_file
        return {"candidate": candidate.to_dict(), "model": str(self.ref.fp32),
                "output": str(self.env.work / "candidates" / f"candidate{index}.onnx"),
                "calibration": str(c) if (c := self.inputs.calibration_for(spec)) else None,
                "check_data": str(calibration) if calibration else None,
                "judge": str(self.ref.judge_dir), "settings": self.settings.to_dict(),
                # a training strategy's job loads the source again in its own process (search.last_resort)
                **({"source": source_task(self.env.source, self.inputs.framework, self.env.config)}
                   if self.inputs.framework in spec.needs_source else {})}

    def run_candidates(self, workers: int | None, candidates: Sequence[Candidate] | None = None) -> list[CandidateRow]:
        """Quantize and judge ``candidates`` (default: every one built) as trials; their rows join the table."""
        from .trials import candidate_rows

        todo = list(candidates if candidates is not None else self.candidates)
        jobs = [self.job(c, len(self.table) + i) for i, c in enumerate(todo)]
        self.table.settled.clear()
        new = candidate_rows(self.trials, todo, jobs, workers, self.env.work / "tasks", self.baseline.size_bytes,
                             self.judge.primary, self.table.settled)
        self.table.add(new)
        return new

    def run_stages(self, searching: bool) -> None:
        """Every stage that applies, in order; once the time budget is spent none starts (the one stop rule)."""
        budget = self.trials.budget
        for stage in self.stages:
            ctx = StageContext(self.ctx, self.env.config, self.inputs, self.baseline, searching,
                               MappingProxyType(dict(self.records)))
            if not stage.applies(ctx):
                continue
            outcome = stage.not_started(ctx, self.table) if budget.spent() else stage.run(ctx, self.table)
            self.records[stage.name] = outcome.record
            if outcome.not_started:
                self.not_started.append(stage.title)
            self.stage_notes.extend(outcome.notes)

    def benchmark(self, batch: int | None, runs: int) -> None:
        """The contenders benchmarked interleaved with the float model."""
        from .quick import OUTPACED, contenders

        rows = self.table.rows
        survivors = runtime_compat.refuse_unfit([r for r in rows if r.status == "ok"], self.env.target)
        # the contenders only: those the quick timing put within its noise of the best, and every repair
        survivors, aside = contenders(survivors, self.quick, self.env.config.objective or "latency")
        for row in rows:
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

    def recipe(self, winner: CandidateRow | None, objective: str) -> Recipe | None:
        """The winner's ``recipe.toml``: its options as it ran them, a note of what of them acted on the graph,
        the budgets, where it was judged, and what a replay needs (:func:`~onnxlite.search.recipes.record`)."""
        judge, isa = self.judge, self.env.isa
        if winner is None:
            return None
        return Recipe(strategy=winner.strategy, options=dict(winner.options),
                      acted=acted_options(winner.options, self.ref.fp32),
                      excluded_nodes=tuple(winner.keep_float), metric=judge.primary,
                      max_drop=judge.budgets.get(judge.primary), budgets=dict(judge.budgets),
                      objective=objective, provider=self.settings.provider, framework=self.inputs.framework,
                      inputs=tuple(str(s) for s in self.inputs.specs), hardware=isa.here.to_dict(),
                      target_cpu=isa.target.isa if isa.target else None, **self.record)
