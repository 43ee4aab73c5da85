"""The end of a search: choose the winner from the table, explain every row, account for the trials, and
make the frozen :class:`~onnxlite.search.results.LightenResult` with its verdict rendered from the records."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import placement
from ..report.text import size_change, speed_change
from ..report.verdict import Verdict, WinnerFigures, speed_text, winner_head
from .choose import deciding_objective, latency_margin, no_winner_message, pick_winner
from .results import LightenResult, why_won
from .shares import MIXED_SWEEP_STAGE

if TYPE_CHECKING:
    from ..events import Event
    from .engine import Engine
    from .trials import TrialContext

#: the records the report knows by name, and the evidence key each is shown under
_EVIDENCE = {"grids": "grids", "mixed": "mixed", "last_resort": "last_resort"}
#: records shown elsewhere than the evidence (the fallback's is the result's ``partial``; quick's its own key)
_ELSEWHERE = {"quick", "partial"}


def finish(engine: Engine, out: Path, replayed: bool, decoder_feeds: Any = None) -> LightenResult:
    """The result of ``engine``'s run, written to nowhere yet (:func:`onnxlite.search.outdir.publish` does).

    ``replayed``: the run replayed a recipe; ``decoder_feeds``: a decoder's decode step, whose tokens/s the
    verdict gives (None: not a decoder)."""
    from .confidence import evidence_record

    config, judge, setup, baseline = engine.env.config, engine.judge, engine.ref.setup, engine.baseline
    objective = config.objective or "latency"
    rows, records, notes = engine.table.rows, engine.records, list(engine.notes)
    resort = records.get("last_resort")
    skipped = list(engine.skipped)
    if resort is not None and (said := resort.note()):
        notes.append(said)
        skipped = [s for s in skipped if s.strategy not in resort.names]
    measured_base = baseline.p50 if baseline.latency_ms else None
    rank = setup.rank_metric
    winner = pick_winner(rows, objective, measured_base, rank)
    # The same rule pick_winner applied, so the explanation matches the choice.
    basis = deciding_objective(rows, objective, measured_base)
    timed = [r for r in rows if r.status == "ok" and r.latency_ms]
    fastest = min(timed, key=lambda r: r.p50) if timed else None
    if winner is not None and basis != objective and fastest is not None:
        # Say what the tie rule saw, with the figures it used, so "1.25x faster" and "speed did not
        # decide" never stand side by side unexplained.
        notes.append(
            f"speed did not decide: the fastest candidate ({fastest.name}, {speed_text(baseline.p50, fastest.p50)} "
            f"fp32) is within the latency noise margin ({latency_margin(fastest):.0%}: 3% or the measured "
            "p90-p50 spread, whichever is larger), so the smallest one within budget and not over 10% "
            "slower than fp32 won")
    primary = judge.primary
    for row in rows:
        if row is winner:
            row.status = "winner"
            row.reason = why_won(row, baseline, basis, fastest if basis == "latency" else None)
        elif row.status == "ok" and winner is not None:
            row.reason = (f"within budget, but against the winner: {speed_change(winner.p50, row.p50)}, "
                          f"{size_change(winner.size_bytes, row.size_bytes)}")
            mine, theirs = row.drops.get(primary), winner.drops.get(primary)
            if mine is not None and theirs is not None and mine > theirs:
                row.reason += f"; its {primary} drop is larger ({mine:.4g} vs {theirs:.4g})"
    placement.report_fallback(rows, engine.settings, judge.feeds, engine.bench_batch, axes=judge.batch_axes)
    quick = engine.quick
    partial = records.get("partial")
    if winner is not None:
        early = quick.ratios.get(winner.name) if quick is not None else None
        figures = WinnerFigures(primary, winner.drops.get(primary, float("nan")),
                                judge.budgets.get(primary, float("nan")), early)
        notes += [a["text"] for a in setup.allowances.values() if a.get("kind") == "worst"]
        if setup.unresolved:
            notes.append(f"judged by measured drop, not at {setup.confidence:.0%} confidence: the held-out data "
                         f"cannot resolve the budget (see the report); ranked by {rank}")
        verdict = Verdict(winner_head(winner, baseline, figures), tuple(notes))
    else:
        verdict = Verdict(no_winner_message(rows, baseline.size_bytes, bool((partial or {}).get("tried"))),
                          tuple(notes))
    quick_record = quick.to_dict() | {"objective": objective} if quick is not None and quick.batch else None
    stages: dict[str, Any] = {"grids": records.get("grids"), "quick_times": quick_record,
                              "mixed": records.get("mixed"),
                              "last_resort": resort.to_dict() if resort is not None else None,
                              "bench_stopping": engine.bench_stopping}
    # a stage the report does not know by name is shown under its own
    stages |= {name: _shown(found) for name, found in records.items() if name not in {*_EVIDENCE, *_ELSEWHERE}}
    settings: dict[str, Any] = {"provider": engine.settings.provider, "threads": engine.settings.threads,
                                "bench_batch": engine.bench_batch, "held_out_samples": judge.samples,
                                "recipe": replayed, "executor": engine.env.executor.describe(),
                                **engine.measured_on, **engine.env.isa.settings()}
    if decoder_feeds is not None:   # tokens/s in the verdict, and the report's speed axis
        from .decoder import finish_result

        decoder_settings, note = finish_result(baseline, winner, decoder_feeds)
        settings |= decoder_settings
        verdict = verdict.with_notes([note] if note else [])
    skipped_dicts = [{"strategy": s.strategy, "reason": s.reason} for s in skipped]
    said = account(engine.trials, engine.not_started, settings, skipped_dicts, engine.env.emit)
    verdict = verdict.with_notes([*engine.stage_notes, *said])
    return LightenResult(
        output_dir=out, winner=winner, baseline=baseline, candidates=rows, float_noise=engine.ref.noise,
        skipped=skipped_dicts, primary_metric=primary, budgets=dict(judge.budgets), objective=objective,
        message=verdict.text(), export=engine.ref.exported.to_dict(), data=engine.inputs.data.description,
        partial=partial, evidence=evidence_record(setup, stages, rows, judge), settings=settings)


def _shown(found: Any) -> Any:
    return found.to_dict() if hasattr(found, "to_dict") else found


def account(ctx: TrialContext, not_started: list[str], settings: dict[str, Any], skipped: list[dict[str, str]],
            emit: Event) -> list[str]:
    """What the cache gave, what repeated, and what the time budget cut (``not_started``: the stages it kept
    from starting): recorded in ``settings`` and ``skipped``, said as they are found; returns the notes."""
    ledger = ctx.ledger.to_dict()
    settings["trials"] = ledger
    if ctx.budget.seconds is not None:
        settings["time_budget_seconds"] = ctx.budget.seconds
    notes = []
    if ctx.cache is not None:
        settings["cache"] = ctx.cache.describe()
        if ctx.cache.hits:
            notes.append(f"reused {len(ctx.cache.hits)} quantized model(s) and judgement(s) from the cache "
                         f"({ctx.cache.folder}); timings measured afresh")
    if ledger["duplicates"]:
        notes.append(f"{ledger['duplicates']} candidate(s) or probe(s) repeated another and ran once")
    # probes the sweep's own time share left unmeasured are said by its note, not as a search cut short
    untried = [u for u in ledger["untried"] if u["stage"] != MIXED_SWEEP_STAGE]
    if untried or not_started:
        names = [u["name"] for u in untried]
        shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
        left = "; ".join(x for x in (f"left untried: {shown}" if names else "",
                                     f"stages not started: {', '.join(not_started)}" if not_started else "") if x)
        notes.append(f"the search was cut short by --time-budget ({ctx.budget.seconds:.0f} s): the best so far "
                     f"is shown; {left}")
        skipped.extend({"strategy": n, "reason": "not tried: the --time-budget was spent"} for n in names)
        settings["cut_short"] = {"untried": names, "stages": list(not_started)}
    for note in notes:
        emit("note", {"message": note})
    return notes
