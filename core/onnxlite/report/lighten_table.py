"""A ``lighten`` result as a :class:`~onnxlite.report.model.Report`: the table of every candidate read
against fp32 and its float noise, with the sections its records call for (the verdict, the budget, the
strategies not tried, the confidence rule as applied, the partial fallback, the export check).

It reads the result's records and renders them; it decides nothing (the search did).  The result is typed
``Any`` here because the report sits below the search and the evaluation, which import it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..figures import figures_of
from .model import ModelRow, Report, environment


def lighten_report(result: Any, answers: Callable[[Any], str]) -> Report:
    """The report of a ``lighten`` result (:class:`onnxlite.search.results.LightenResult`): a row per model
    read against fp32, the verdict, and the sections its records call for; ``answers`` says what a row's
    changed top-1 answers were (:func:`onnxlite.search.results.changes_text`: the evaluation package, which
    sits above the report, knows how)."""

    rows = []
    for row in yardsticks(result) + result.candidates:
        note = row.reason
        if row.keep_float:
            note = f"{note} [kept in float: {', '.join(row.keep_float[:6])}{'...' if len(row.keep_float) > 6 else ''}]"
        if row.changes:
            note = f"{note} (answers: {answers(row)})"
        # Candidate files live in the scratch folder, which is gone by now; only the winner is kept.
        path = "model.onnx" if row.status == "winner" else "(not kept)"
        rows.append(ModelRow(name=row.name, path=path, status=row.status, note=note, **figures_of(row)))
    sections = [("Result", result.message),
                ("Budget", "\n".join(f"- `{k}`: drop at most {v:.4g}" for k, v in result.budgets.items())
                 + f"\n- objective: {result.objective}\n- data: {result.data}")]
    if result.skipped:
        sections.append(("Strategies not tried",
                         "\n".join(f"- **{s['strategy']}**: {s['reason']}" for s in result.skipped)))
    confidence = _confidence_section(result)
    if confidence:
        sections.append(("Confidence", confidence))
    if result.partial and result.partial.get("tried"):
        ranking = "\n".join(f"- `{r['node']}` ({r['op_type']}): adds {r['added_error']:.3g} relative error"
                            for r in (result.partial.get("ranking") or [])[:10]) \
            or f"- none: {result.partial.get('reason', 'no node could be ranked')}"
        steps = "\n".join(f"- {s['keep_float']} node(s) in float: {_step_text(s)}" for s in result.partial["steps"])
        why = f" ({result.partial['why']})" if result.partial.get("why") else ""
        swept = "".join(f"\n- `{e['node']}`: drop {e['drop']:.3g} quantized alone"
                        for e in (result.partial.get("sweep") or [])[:10])
        if swept:
            swept = f"\n\nActivation matching's order did not reach the budget; the direct sweep:{swept}"
        sections.append(("Partial quantization", f"Based on {result.partial['base']}{why}. Worst nodes:\n{ranking}"
                                                 f"{swept}\n\nSteps:\n{steps}"))
    line = verification_line(result.export)
    if line:
        sections.append(("Export verification", line))
    return Report(title="onnxlite lighten", kind="lighten", rows=rows, primary_metric=result.primary_metric,
                  settings={"objective": result.objective,   # the hardware record is the environment block's
                            **{k: v for k, v in result.settings.items() if v is not None and k != "hardware"}},
                  sections=sections, verdict=result.message, budgets=dict(result.budgets),
                  metric_why=dict((result.evidence or {}).get("metric_why") or {}),
                  allowances=dict((result.evidence or {}).get("allowances") or {}),
                  details={row.name: _details(row) for row in yardsticks(result) + result.candidates},
                  environment=environment(result.settings.get("threads"), target_cpu=result.settings.get("target_cpu")),
                  verification=list((result.export.get("verification") or {}).get("rows") or []))


def yardsticks(result: Any) -> list[Any]:
    """The rows every candidate is read against: fp32, and its float noise when it was judged."""
    return [result.baseline] + ([result.float_noise] if result.float_noise is not None else [])


def _step_text(step: dict[str, Any]) -> str:
    """``rejected (drop 0.0312: output.top1_agreement: drop 0.0312 > max 0.005)``: a rounded drop, and why a
    step was rejected when its drop alone does not say (its confidence bound or another metric was over)."""
    from .text import shorten_paths

    drop = step.get("drop")
    figure = "" if drop is None else f"drop {drop:.4g}"
    reason = step.get("reason") or ""
    if step.get("status") == "ok" or not reason:
        return f"{step.get('status')} ({figure})" if figure else str(step.get("status"))
    return f"{step.get('status')} ({'; '.join(p for p in (figure, shorten_paths(reason)) if p)})"


def _details(row: Any) -> dict[str, Any]:
    """What the HTML report shows per candidate: drops with intervals, and what the strategy really did."""
    quantize = row.quantize or {}
    return {"strategy": row.strategy, "options": row.options, "reason": row.reason, "drops": dict(row.drops),
            "intervals": dict(row.intervals), "quantized_ops": dict(quantize.get("quantized_ops") or {}),
            "excluded_nodes": list(quantize.get("excluded_nodes") or []), "keep_float": list(row.keep_float),
            "notes": list(quantize.get("notes") or []), "warnings": list(quantize.get("warnings") or []),
            "quantize_seconds": row.quantize_seconds}


def _confidence_section(result: Any) -> str:
    """The confidence rule as applied: parts, what the data could not resolve, and every candidate's interval."""
    evidence = result.evidence or {}
    if not evidence.get("confidence"):
        return ""
    parts = evidence.get("parts") or {}
    lines = [f"A candidate passes when the one-sided {evidence['confidence']:.0%} upper bound of its drop, on the "
             f"{parts.get('confirm')} confirm samples, is within the budget"
             + (f"; option grids are chosen on the other {parts['select']} (select) samples"
                if parts.get("select") else "")
             + f". Candidates are ranked by `{evidence.get('rank_metric')}`; overlapping intervals tie on accuracy."]
    lines += [f"- {message}" for message in (evidence.get("messages") or []) + (evidence.get("split_notes") or [])]
    lines += [f"- {note}" for note in evidence.get("width_notes") or []]
    lines += [f"- {note}" for note in evidence.get("grids") or []]
    mixed = evidence.get("mixed") or {}
    if mixed.get("tried"):
        lines += [f"- mixed precision: {r['name']} {_step_text(r)}" for r in mixed.get("rounds", [])]
    elif mixed.get("reason"):
        lines.append(f"- mixed precision not tried: {mixed['reason']}")
    keys = list(dict.fromkeys([*result.budgets, evidence.get("rank_metric"), *(evidence.get("tails") or [])]))
    table = ["",
             "| candidate | "
             + " | ".join(f"`{k}` drop [{evidence['confidence']:.0%} interval], bound" for k in keys if k) + " |",
             "|---|" + "---|" * len([k for k in keys if k])]
    for row in yardsticks(result) + result.candidates:
        cells = []
        for key in keys:
            if not key:
                continue
            data = row.intervals.get(key)
            cells.append(f"{data['estimate']:.4g} [{bound_text(data['low'])}, {bound_text(data['high'])}], "
                         f"{data['upper']:.4g}" if data and data.get("upper") is not None else "-")
        table.append(f"| {row.name} | " + " | ".join(cells) + " |")
    return "\n".join(lines + table)


def bound_text(value: float | None) -> str:
    """An interval's end, ``-`` where it is unbounded (an order-statistic bound the samples cannot give)."""
    return "-" if value is None else f"{value:.4g}"


def verification_line(export: dict[str, Any]) -> str:
    """What the export check really did: how many output comparisons, on which feed sets, and the worst of them.

    ``export`` is :meth:`ExportResult.to_dict`; each row of its verification is one output on one feed set.
    """
    verification = export.get("verification") or {}
    rows = verification.get("rows") or []
    if not rows:
        return ""
    framework = export.get("framework") or "source"
    feed_sets = sorted({row["feed_set"] for row in rows})
    outputs = sorted({row["output"] for row in rows})
    failed = [row for row in rows if not row["passed"]]
    verdict = "all within tolerance" if not failed else f"{len(failed)} outside tolerance"
    parts = [f"{len(rows)} checks ({len(outputs)} output(s) x {len(feed_sets)} feed sets: {', '.join(feed_sets)}) "
             f"against {framework}, {verdict} (atol {verification.get('atol'):g}, rtol {verification.get('rtol'):g})"]
    diffs = [row for row in rows if not row["exact"] and row["max_abs_diff"] is not None]
    if diffs:
        worst = max(diffs, key=lambda row: row["max_abs_diff"])
        parts.append(f"worst max |diff| {worst['max_abs_diff']:.3g} on {worst['output']} [{worst['feed_set']}]")
    cosines = [row for row in rows if row["cosine_min"] is not None]
    if cosines:
        lowest = min(cosines, key=lambda row: row["cosine_min"])
        parts.append(f"lowest cosine {lowest['cosine_min']:.6f} on {lowest['output']} [{lowest['feed_set']}]")
    exact = [row for row in rows if row["exact"]]
    if exact:
        parts.append(f"{len(exact)} non-float check(s) matched exactly" if all(r["passed"] for r in exact)
                     else f"{sum(not r['passed'] for r in exact)} non-float check(s) differ")
    return "; ".join(parts)
