"""Trials: candidates and probes run once each, through the cache and the executor, on one clock.

Every stage of the search that quantizes and judges (the candidates, mixed precision's
sweep, the fallback's probes) goes through :func:`run_trials`, which

1. runs identical candidates once: the same strategy with the same *effective* options
   (:func:`normalise_options`: defaults dropped, ``op_types`` the model lacks removed) and the
   same float nodes and judge;
2. takes what it can from the :class:`~onnxlite.search.cache.ResultCache` (model and judgement;
   never timing);
3. hands the rest to the executor, starting nothing once the search's :class:`TimeBudget` is spent;
4. appends a :class:`Trial` per candidate to the search's :class:`Ledger` (append-only), which says
   what was cached, what repeated another, and what the time budget left untried;
5. reports "candidate 7 of 17" with an estimate of the time left as ``candidate_done`` events.
"""

from __future__ import annotations

import inspect
import json
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..events import Event
from ..jobs.pruning import PRUNE_SAMPLES

if TYPE_CHECKING:
    from ..jobs.candidate import JobResult
    from ..specs import QuantizerSpec
    from .cache import CacheContext, ResultCache
    from .candidates import Candidate
    from .results import CandidateRow

#: a candidate must be at most this fraction of the float model's size to count as lighter
MIN_SHRINK = 0.95



@dataclass(frozen=True)
class TimeBudget:
    """The search's one clock: ``seconds`` from ``started`` (None: no limit)."""

    seconds: float | None = None
    started: float = field(default_factory=time.monotonic)

    def left(self) -> float:
        return float("inf") if self.seconds is None else self.seconds - (time.monotonic() - self.started)

    def spent(self) -> bool:
        return self.left() <= 0


@dataclass(frozen=True)
class Trial:
    """One candidate or probe as the search met it: how it was settled, and where it stands."""

    name: str
    stage: str                    # candidates | probes: <what>
    how: str                      # ran | cached | duplicate | untried
    status: str = ""              # the result's status (ok | failed), empty when untried
    same_as: str | None = None    # the trial a duplicate repeats
    seconds: float = 0.0


@dataclass
class Ledger:
    """Every trial of one search, in the order they were settled; only ever appended to."""

    trials: list[Trial] = field(default_factory=list)

    def add(self, trial: Trial) -> None:
        self.trials.append(trial)

    def untried(self) -> list[Trial]:
        return [t for t in self.trials if t.how == "untried"]

    def count(self, how: str) -> int:
        return sum(1 for t in self.trials if t.how == how)

    def to_dict(self) -> dict[str, Any]:
        return {"ran": self.count("ran"), "cached": self.count("cached"), "duplicates": self.count("duplicate"),
                "untried": [{"name": t.name, "stage": t.stage} for t in self.untried()],
                "same_as": {t.name: t.same_as for t in self.trials if t.how == "duplicate"}}


def normalise_options(spec: QuantizerSpec, options: Mapping[str, Any], ops: set[str] | None = None) -> dict[str, Any]:
    """The options that change what ``spec`` writes: defaults dropped, lists as tuples, absent op types removed.

    ``op_types=MatMul,Gather`` on a model without Gather is ``op_types=MatMul``; ``per_channel=false``
    where false is the default is no option at all.
    """
    defaults = {o.name: o.default for o in spec.options}
    found: dict[str, Any] = {}
    for name, value in options.items():
        if isinstance(value, list):
            value = tuple(value)
        default = defaults.get(name)
        if isinstance(default, list):
            default = tuple(default)
        if name == "op_types" and ops is not None and isinstance(value, tuple):
            # only the op types the model has change anything, in any order
            value = tuple(sorted(v for v in value if v in ops))
            if isinstance(default, tuple):
                default = tuple(sorted(v for v in default if v in ops))
        if name in defaults and value == default:
            continue
        found[name] = value
    return dict(sorted(found.items()))


def _signature(candidate: Candidate, spec: QuantizerSpec, ops: set[str] | None, judge: str) -> str:
    return json.dumps([candidate.strategy, normalise_options(spec, candidate.options, ops),
                       sorted(candidate.keep_float), judge], sort_keys=True, default=str)


def _accepts(method: Any, name: str) -> bool:
    try:
        return name in inspect.signature(method).parameters
    except (TypeError, ValueError):
        return False


@dataclass
class TrialContext:
    """What :func:`run_trials` needs from the search (never the search object itself)."""

    executor: Any
    emit: Event
    ledger: Ledger
    budget: TimeBudget
    ops: set[str] | None = None
    cache: ResultCache | None = None
    cache_context: CacheContext | None = None
    #: results by signature, across batches: a probe equal to an earlier candidate is that candidate
    seen: dict[str, JobResult] = field(default_factory=dict)
    #: judge candidates on a few confirm samples first (jobs.pruning); an int: on that many
    prune: bool | int = True
    judge_hashes: dict[str, str] = field(default_factory=dict)

    def judge_hash(self, folder: str) -> str:
        from .cache import judge_hash

        if folder not in self.judge_hashes:
            self.judge_hashes[folder] = judge_hash(folder)
        return self.judge_hashes[folder]


@dataclass
class _Batch:
    """One call's bookkeeping: results by index, cache keys, what is left to run, and what repeats what."""

    results: list[JobResult | None]
    signatures: list[str]
    keys: dict[int, str] = field(default_factory=dict)
    todo: list[int] = field(default_factory=list)
    repeats: dict[int, int | str] = field(default_factory=dict)   # index -> the index or earlier signature


def _sort_out(ctx: TrialContext, candidates: Sequence[Candidate], tasks: Sequence[Mapping[str, Any]],
              stage: str) -> _Batch:
    """Repeats (of this batch or an earlier one) set aside, cache hits settled, the rest left to run."""
    from dataclasses import replace

    from ..registry import get_registry
    from .cache import candidate_key

    registry = get_registry()
    batch = _Batch([None] * len(candidates), [])
    first: dict[str, int] = {}       # signature -> the index that runs it, within this batch
    for i, (candidate, task) in enumerate(zip(candidates, tasks)):
        spec = registry.get("quantizer", candidate.strategy).spec
        signature = _signature(candidate, spec, ctx.ops, str(task.get("judge")))
        batch.signatures.append(signature)
        if signature in ctx.seen or signature in first:
            batch.repeats[i] = signature if signature in ctx.seen else first[signature]
            continue
        first[signature] = i
        if ctx.cache is not None and ctx.cache_context is not None:
            batch.keys[i] = candidate_key(ctx.cache_context, candidate.strategy,
                                          normalise_options(spec, candidate.options, ctx.ops), candidate.keep_float,
                                          ctx.judge_hash(str(task["judge"])), task.get("calibration") is not None)
            hit = ctx.cache.get(batch.keys[i], task["output"])
            if hit is not None:
                batch.results[i] = replace(hit, name=candidate.name)
                ctx.ledger.add(Trial(candidate.name, stage, "cached", hit.status))
                continue
        batch.todo.append(i)
    return batch


def _progress(ctx: TrialContext, stage: str, total: int, cached: int,
              on_result: Callable[[JobResult, dict[str, Any]], None] | None) -> Callable[[JobResult, str], None]:
    """What to call as each result is settled: "n of m" with an estimate of the time left."""
    began, done = time.monotonic(), 0

    def finished(result: JobResult, how: str) -> None:
        nonlocal done
        done += 1
        ran = max(0, done - cached)
        # time left: what the ones run so far took each (several at once), times those still to run
        eta = (time.monotonic() - began) / ran * (total - done) if ran else None
        progress = {"done": done, "total": total, "stage": stage, "how": how,
                    "eta_seconds": None if eta is None else round(eta, 1)}
        if on_result is not None:
            on_result(result, progress)
        else:
            ctx.emit("probe_done", progress | {"name": result.name, "status": result.status})

    return finished


def _run_rest(ctx: TrialContext, batch: _Batch, candidates: Sequence[Candidate], tasks: Sequence[Mapping[str, Any]],
              workers: int | None, folder: Path, stage: str, finished: Callable[[JobResult, str], None],
              until: TimeBudget | None = None) -> None:
    """The executor runs what is left, starting nothing once the time budget (or the stage's share, ``until``)
    is spent; new results are cached."""
    by_name = {candidates[i].name: i for i in batch.todo}
    clocks = [b for b in (ctx.budget, until) if b is not None and b.seconds is not None]

    def on_start(task: Mapping[str, Any]) -> None:
        ctx.emit("candidate_start", {"name": task["candidate"]["name"]})

    options: dict[str, Any] = {"on_start": on_start}
    if clocks and _accepts(ctx.executor.run_tasks, "should_start"):
        options["should_start"] = lambda _t: not any(b.spent() for b in clocks)
    # candidates are judged on a few confirm samples first (jobs.pruning); probes and repairs in full
    samples = ctx.prune if type(ctx.prune) is int else PRUNE_SAMPLES   # True: the default subset's size
    prune = {"prune": samples} if stage == "candidates" and ctx.prune else {}
    run = [dict(tasks[i]) | prune for i in batch.todo]
    if run and not any(b.spent() for b in clocks):
        for result in ctx.executor.run_tasks(run, folder, workers, **options):
            at = by_name.get(result.name)
            if at is None:
                continue
            batch.results[at] = result
            ctx.ledger.add(Trial(result.name, stage, "ran", result.status, seconds=result.seconds))
            if ctx.cache is not None and at in batch.keys:
                ctx.cache.put(batch.keys[at], result)
            finished(result, "ran")
    for i in batch.todo:
        if batch.results[i] is None:
            ctx.ledger.add(Trial(candidates[i].name, stage, "untried"))


def _fill_repeats(ctx: TrialContext, batch: _Batch, candidates: Sequence[Candidate], stage: str) -> None:
    """Each repeat gets its original's result under its own name; each new result is remembered for later batches."""
    from dataclasses import replace

    for i, candidate in enumerate(candidates):
        if i in batch.repeats:
            source = batch.repeats[i]
            original = ctx.seen.get(source) if isinstance(source, str) else batch.results[source]
            if original is not None:
                batch.results[i] = replace(original, name=candidate.name)
                ctx.ledger.add(Trial(candidate.name, stage, "duplicate", original.status, same_as=original.name))
            else:
                ctx.ledger.add(Trial(candidate.name, stage, "untried"))
        elif (found := batch.results[i]) is not None and batch.signatures[i] not in ctx.seen:
            ctx.seen[batch.signatures[i]] = found


def run_trials(ctx: TrialContext, candidates: Sequence[Candidate], tasks: Sequence[Mapping[str, Any]],
               workers: int | None, folder: Path, stage: str = "candidates",
               on_result: Callable[[JobResult, dict[str, Any]], None] | None = None,
               until: TimeBudget | None = None) -> list[JobResult | None]:
    """Each candidate's result, in order (None for one the time budget left untried).

    ``on_result`` gets each result as it is settled (cached or run) with the progress (``done``, ``total``,
    ``eta_seconds``); without it a ``probe_done`` event says the same.  ``until``: the stage's own time share
    (:mod:`onnxlite.search.shares`), a clock apart from the search's: nothing starts once either is spent.
    """
    batch = _sort_out(ctx, candidates, tasks, stage)
    total = len(candidates) - len(batch.repeats)
    cached = total - len(batch.todo)
    ctx.emit("candidates", {"total": total, "workers": workers, "stage": stage, "cached": cached,
                            "duplicates": len(batch.repeats)})
    finished = _progress(ctx, stage, total, cached, on_result)
    for result in batch.results:
        if result is not None:
            finished(result, "cached")
    _run_rest(ctx, batch, candidates, tasks, workers, folder, stage, finished, until)
    _fill_repeats(ctx, batch, candidates, stage)
    return batch.results


def same_model_as(results: Sequence[JobResult | None], repeated: Collection[str] = ()) -> dict[str, str]:
    """Results whose written models are byte-identical to an earlier one's: ``{name: the earlier name}``.

    ``repeated``: names already known to repeat another (they share its file, and say so already).
    """
    from ..modelio import file_hash

    seen: dict[str, str] = {}
    same: dict[str, str] = {}
    for result in results:
        if result is None or result.status != "ok" or not result.path or result.name in repeated:
            continue
        digest = file_hash(result.path)
        if digest in seen:
            same[result.name] = seen[digest]
        else:
            seen[digest] = result.name
    return same


def untried_result(candidate: Candidate) -> JobResult:
    """What a stage sees for a candidate the time budget left untried: a failure that says so."""
    from ..jobs.candidate import JobResult

    return JobResult(name=candidate.name, strategy=candidate.strategy, options=dict(candidate.options),
                      keep_float=list(candidate.keep_float), status="failed",
                      error="not tried: the --time-budget was spent")


def parse_duration(value: str | float | None) -> float | None:
    """``5m``, ``90s``, ``1h``, ``1h30m`` or plain seconds, as seconds (None stays None)."""
    import re

    from ..errors import UsageError

    if value is None or isinstance(value, (int, float)):
        if value is not None and value <= 0:
            raise UsageError(f"--time-budget: expected a positive duration, got {value}")
        return None if value is None else float(value)
    text = str(value).strip().lower()
    parts = re.fullmatch(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s?)?", text)
    if not text or parts is None or not any(parts.groups()):
        raise UsageError(f"--time-budget: expected a duration such as 5m, 90s or 1h30m, got {value!r}")
    hours, minutes, seconds = (float(g) if g else 0.0 for g in parts.groups())
    total = hours * 3600 + minutes * 60 + seconds
    if total <= 0:
        raise UsageError(f"--time-budget: expected a positive duration, got {value!r}")
    return total


def make_context(executor: Any, emit: Event, model: Path, calibration: Path | None, settings: Mapping[str, Any],
                 cache_dir: str | Path | None, use_cache: bool, budget: TimeBudget) -> TrialContext:
    """The trials' context for one search: the float model's op types, and the cache unless ``use_cache`` is off."""
    from ..modelio import read_header
    from .cache import ResultCache, context, default_cache_dir

    ops = {n.op_type for n in read_header(model).graph.node}   # the parse the grid and the benchmark share
    cache = cache_ctx = None
    if use_cache:
        cache = ResultCache(Path(cache_dir) if cache_dir is not None else default_cache_dir())
        cache_ctx = context(model, calibration, settings)
    return TrialContext(executor, emit, Ledger(), budget, ops, cache, cache_ctx)


def candidate_rows(ctx: TrialContext, candidates: Sequence[Candidate], tasks: Sequence[Mapping[str, Any]],
                   workers: int | None, folder: Path, baseline_bytes: int | None, primary: str,
                   settled: dict[str, CandidateRow] | None = None) -> list[CandidateRow]:
    """The candidates' rows, in order: run through :func:`run_trials`, each row in ``settled`` as it finishes.

    A row within budget but not lighter than :data:`MIN_SHRINK` of fp32 is rejected; one repeating another
    (same effective options, or a byte-identical model) is shown, ``same_as`` naming the other, and never
    benchmarked, repaired or chosen.
    """
    from .results import candidate_row

    rows: dict[str, CandidateRow] = settled if settled is not None else {}

    def on_result(result: JobResult, progress: dict[str, Any]) -> None:
        row = rows[result.name] = candidate_row(result)
        if row.status == "ok" and row.size_bytes and baseline_bytes and row.size_bytes > baseline_bytes * MIN_SHRINK:
            row.status = "rejected"
            row.reason = f"within budget but not lighter: {row.size_bytes / baseline_bytes:.2f}x the float size"
        ctx.emit("candidate_done", progress | {"name": row.name, "status": row.status, "reason": row.reason,
                                               "metrics": row.metrics, "primary": primary})

    before = len(ctx.ledger.trials)   # the trials this batch adds: a probe may share a row's name
    results = run_trials(ctx, candidates, tasks, workers, folder, on_result=on_result)
    # A row repeating a probe of its own name (the fallback confirms the repair it probed; with no select part
    # both get the same judge) is that probe's verdict as a row, not a repeat of another row.
    same = {t.name: (t.same_as, "is the same candidate, once options are normalised, as")
            for t in ctx.ledger.trials[before:] if t.how == "duplicate" and t.same_as != t.name}
    same |= {k: (v, "writes the same model, byte for byte, as") for k, v in same_model_as(results, same).items()}
    new = [rows.get(r.name) or candidate_row(r) for r in results if r is not None]
    for row in new:
        if row.name in same:
            row.same_as, what = same[row.name]
            row.status, row.reason = "rejected", f"{what} {row.same_as}"
    return new
