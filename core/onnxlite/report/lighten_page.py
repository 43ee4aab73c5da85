"""The ``lighten`` report page: the verdict first, the accuracy/size and accuracy/latency trade-off, every
candidate with every budgeted metric and its interval, the environment, and what each candidate really did.

:func:`~onnxlite.report.html.render_html` uses it for a report that carries a verdict; ``compare`` and
``bench`` keep the generic page.  Everything is inline (CSS and SVG), nothing is fetched.
"""

from __future__ import annotations

import math
import re
from html import escape
from typing import TYPE_CHECKING, Any

from .axes import nice_ticks, tick_labels
from .text import allowance_note, fmt_ms, human_bytes, shorten_paths

if TYPE_CHECKING:
    from .model import ModelRow, Report

CSS = """
.verdict { border-left:6px solid #1b9e4b; }
.verdict.none { border-left-color:#d64541; }
.verdict .big { font-size:20px; font-weight:650; margin:0 0 6px; overflow-wrap:anywhere; }
.verdict .figs { display:flex; flex-wrap:wrap; gap:10px 28px; margin:8px 0; }
.verdict .fig b { display:block; font-size:18px; }
.verdict .fig span { color:var(--muted); font-size:12px; }
.verdict p { margin:6px 0 0; overflow-wrap:anywhere; }
.charts { display:grid; grid-template-columns:repeat(auto-fit, minmax(420px, 1fr)); gap:14px; }
.charts svg { width:100%; height:auto; display:block; }
table.cands { border-collapse:collapse; width:100%; table-layout:fixed; font-variant-numeric:tabular-nums; }
table.cands th, table.cands td { padding:5px 6px; border-bottom:1px solid var(--line); vertical-align:top;
                                 overflow-wrap:anywhere; }
table.cands th { text-align:left; font-size:12px; color:var(--muted); background:#fafbfc; }
table.cands td.num { text-align:right; }
table.cands td small, table.cands td .ratio { color:var(--muted); font-size:11.5px; display:block; }
table.cands td.why { color:var(--muted); font-size:12.5px; }
table.cands td.over { color:#b3261e; font-weight:600; }
dl.env { display:grid; grid-template-columns:max-content minmax(0, 1fr); gap:2px 18px; margin:0; }
dl.env dt { color:var(--muted); }
dl.env dd { margin:0; overflow-wrap:anywhere; }
details.cand { border-top:1px solid var(--line); padding:6px 0; }
details.cand summary { cursor:pointer; overflow-wrap:anywhere; }
details.cand ul { margin:4px 0 0; padding-left:18px; overflow-wrap:anywhere; }
table.checks { border-collapse:collapse; width:100%; table-layout:fixed; font-size:12.5px; }
table.checks td, table.checks th { padding:3px 6px; border-bottom:1px solid var(--line); text-align:left;
                                   overflow-wrap:anywhere; }
"""


def render_lighten(report: Report, palette: dict[str, str]) -> list[str]:
    """The page's cards, in reading order."""
    parts = [_verdict(report), _charts(report, palette), _table(report, palette), _environment(report)]
    parts.append(_details(report))
    if report.verification:
        parts.append(_verification(report))
    return [p for p in parts if p]


# -- verdict ------------------------------------------------------------------------------------------

def _base(report: Report) -> ModelRow:
    return report.rows[report.baseline_index or 0]


def _keys(report: Report) -> list[str]:
    return list(dict.fromkeys([k for k in [report.primary_metric, *report.budgets] if k]))


def _verdict(report: Report) -> str:
    winner = next((r for r in report.rows if r.status == "winner"), None)
    base = _base(report)
    if winner is None:
        return (f'<section class="card verdict none"><h2>Verdict</h2><p class="big">No candidate qualifies</p>'
                f"<p>{escape(shorten_paths(report.verdict))}</p></section>")
    figs = []
    if winner.size_bytes and base.size_bytes:
        figs.append((f"{base.size_bytes / winner.size_bytes:.2f}x smaller",
                     f"{human_bytes(winner.size_bytes)} vs {human_bytes(base.size_bytes)} fp32"))
    wp, bp = _p50(winner), _p50(base)
    if wp and bp:
        ratio = bp / wp
        figs.append((f"{ratio:.2f}x faster" if ratio >= 1 else f"{1 / ratio:.2f}x slower",
                     f"p50 {fmt_ms(wp)} ms vs {fmt_ms(bp)} ms fp32"))
    details = report.details.get(winner.name, {})
    for key in _keys(report):
        drop = (details.get("drops") or {}).get(key)
        upper = ((details.get("intervals") or {}).get(key) or {}).get("upper")
        if drop is not None:
            bound = f", bound {upper:.4g}" if upper is not None else ""
            figs.append((f"drop {drop:.4g}", f"{key} (budget {report.budgets.get(key, float('nan')):.4g}{bound})"))
    cells = "".join(f'<div class="fig"><b>{escape(a)}</b><span>{escape(b)}</span></div>' for a, b in figs)
    why = details.get("reason") or winner.note
    judged = report.metric_why.get(report.primary_metric or "")
    judged = (f"<p><strong>Judged by</strong> <code>{escape(report.primary_metric or '')}</code>: {escape(judged)}</p>"
              if judged else "")
    return (f'<section class="card verdict"><h2>Verdict</h2><p class="big">Winner: {_breakable(winner.name)}</p>'
            f'<div class="figs">{cells}</div><p><strong>Why:</strong> {escape(why)}</p>{judged}'
            f"<p>{escape(shorten_paths(report.verdict))}</p></section>")


def _p50(row: ModelRow) -> float | None:
    return (row.latency_ms or {}).get("p50")


def _breakable(name: str) -> str:
    """A candidate name may wrap after ``[`` ``,`` ``+`` ``=`` (never inside an option)."""
    return re.sub(r"([\[,+=])", r"\1<wbr/>", escape(name))


# -- trade-off charts -------------------------------------------------------------------------------------

def _chart_key(report: Report) -> str | None:
    """The metric the trade-off is drawn on: the primary one if it has a budget, else the first budgeted one."""
    if report.primary_metric in report.budgets or not report.budgets:
        return report.primary_metric
    return next(iter(report.budgets))


def _charts(report: Report, palette: dict[str, str]) -> str:
    primary = _chart_key(report)
    if not primary:
        return ""
    size = tradeoff_svg(report, "size", palette)
    latency = tradeoff_svg(report, "latency", palette)
    speed = "decode tokens/s" if _decoder(report) else "latency"
    legend = "".join(f'<span><span class="dot" style="background:{palette[s]}"></span>{escape(s)}</span>'
                     for s in palette if any(r.status == s for r in report.rows))
    return (f'<section class="card chart"><h2>Trade-off: {escape(primary)} drop against size and {speed}</h2>'
            f'<div class="charts">{size}{latency}</div><div class="legend">{legend}</div>'
            '<div class="caption">Each point is a candidate, numbered as in the table; the bar above it reaches '
            "the upper confidence bound of its drop. The dashed line is the budget: below it is within budget. "
            "The solid line is no drop. Rejected candidates are never benchmarked, so only the size chart has "
            "them; a triangle on the top edge marks a drop beyond the drawn range, with its figure beside it, and an "
            "arrow head a bound beyond it (hover a point for its figures).</div></section>")


def _decoder(report: Report) -> bool:
    """A language model's search: its speed is one decode step's, drawn as tokens/s (faster to the right)."""
    return bool(report.settings.get("decoder"))


def _speed(report: Report, row: ModelRow) -> float | None:
    """The speed axis's value: p50 ms, or decode tokens/s (one new token per timed step) for a decoder."""
    p50 = _p50(row)
    if not _decoder(report):
        return p50
    return 1000.0 / p50 if p50 else None


def _drop(report: Report, row: ModelRow, key: str) -> tuple[float | None, float | None]:
    details = report.details.get(row.name, {})
    drop = (details.get("drops") or {}).get(key)
    if drop is None and row.status == "reference":
        drop = 0.0
    upper = ((details.get("intervals") or {}).get(key) or {}).get("upper")
    return drop, upper


def _y_range(budget: float | None, points: list[tuple[Any, ...]]) -> tuple[float, float]:
    """The drawn drop range: zero, the budget, every drop and every upper bound, unless a wildly failed candidate
    would squash the budget region (then its point sits on the top edge with its figure written beside it)."""
    top = max([budget or 0.0] + [p[3] for p in points] + [p[4] for p in points if p[4] is not None]) or 0.01
    if budget and top > 4 * budget:
        top = max([4 * budget] + [p[3] for p in points if p[3] <= 4 * budget])
    bottom = max(min([0.0] + [p[3] for p in points]), -top / 2)
    return bottom, top * 1.08


def tradeoff_svg(report: Report, axis: str, palette: dict[str, str], width: int = 560, height: int = 340) -> str:
    """Drop on the primary metric (y) against size or p50 latency (x), the budget as a dashed line."""
    key = _chart_key(report) or ""
    budget = report.budgets.get(key)
    sizes = [r.size_bytes for r in report.rows if r.size_bytes]
    unit, scale = ("MB", 1024**2) if sizes and max(sizes) >= 1024**2 else ("KB", 1024)
    points = []
    for index, row in enumerate(report.rows):
        x = (row.size_bytes / scale if row.size_bytes else None) if axis == "size" else _speed(report, row)
        drop, upper = _drop(report, row, key)
        if x is not None and drop is not None and math.isfinite(drop):
            points.append((index, row, float(x), float(drop), upper))
    speed_title = "decode tokens/s (batch 1)" if _decoder(report) else "latency p50 (ms)"
    title = f"size on disk ({unit})" if axis == "size" else speed_title
    if not points:
        return f'<p class="caption">No candidate has both a {escape(title)} and a drop.</p>'
    low, high = _y_range(budget, points)
    y_ticks = nice_ticks(low, high)
    x_ticks = nice_ticks(0.0, max(p[2] for p in points) * 1.05 or 1.0)
    bottom, top, xmax = y_ticks[0], y_ticks[-1], x_ticks[-1]
    ml, mr, mt, mb = 64, 18, 22, 48
    pw, ph = width - ml - mr, height - mt - mb

    def sx(v: float) -> float:
        return ml + v / xmax * pw

    def sy(v: float) -> float:
        return mt + ph - (min(max(v, bottom), top) - bottom) / ((top - bottom) or 1) * ph

    out = [(f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" class="tradeoff {axis}" '
            f'role="img" aria-label="{escape(key)} drop against {escape(title)}" '
            'font-family="-apple-system,Segoe UI,Roboto,Arial,sans-serif">'),
           f'<rect x="{ml}" y="{mt}" width="{pw}" height="{ph}" fill="#fbfcfd" stroke="#d9dde3"/>']
    for v, text in zip(x_ticks, tick_labels(x_ticks)):
        out.append(f'<line class="grid x" x1="{sx(v):.1f}" y1="{mt}" x2="{sx(v):.1f}" y2="{mt + ph}" '
                   f'stroke="#eceff3"/><text class="tick x" x="{sx(v):.1f}" y="{mt + ph + 16}" '
                   f'text-anchor="middle" font-size="11" fill="#616e7c">{text}</text>')
    for w, text in zip(y_ticks, tick_labels(y_ticks)):
        out.append(f'<line class="grid y" x1="{ml}" y1="{sy(w):.1f}" x2="{ml + pw}" y2="{sy(w):.1f}" '
                   f'stroke="#eceff3"/><text class="tick y" x="{ml - 6}" y="{sy(w) + 4:.1f}" text-anchor="end" '
                   f'font-size="11" fill="#616e7c">{text}</text>')
    # zero drop: as good as the reference; drawn solid so that gains (below it) read as gains
    out.append(f'<line class="zero" x1="{ml}" y1="{sy(0):.1f}" x2="{ml + pw}" y2="{sy(0):.1f}" stroke="#52606d"/>')
    out.append(f'<text x="{ml + pw / 2:.1f}" y="{height - 10}" text-anchor="middle" font-size="12" '
               f'fill="#1f2933">{escape(title)}</text>')
    out.append(f'<text transform="translate(14 {mt + ph / 2:.1f}) rotate(-90)" text-anchor="middle" font-size="12" '
               f'fill="#1f2933">drop ({escape(key.rsplit(".", 1)[-1])})</text>')
    boxes: list[tuple[float, float, float, float]] = []
    if budget is not None:
        out.append(f'<line class="budget" x1="{ml}" y1="{sy(budget):.1f}" x2="{ml + pw}" y2="{sy(budget):.1f}" '
                   'stroke="#d64541" stroke-dasharray="6 4" stroke-width="1.5"/>'
                   f'<text x="{ml + pw - 4}" y="{sy(budget) - 5:.1f}" text-anchor="end" font-size="11" '
                   f'fill="#d64541">budget {budget:.4g}</text>')
        boxes.append((ml + pw - 90, sy(budget) - 17, ml + pw, sy(budget) - 3))
    marks = []
    for index, row, x, drop, upper in points:
        beyond = drop > top
        cx, cy = sx(x), (mt + 5 if beyond else sy(drop))
        color = palette.get(row.status, "#7b8794")
        shape = (f'<path d="M{cx - 6:.1f} {mt + 9} L{cx + 6:.1f} {mt + 9} L{cx:.1f} {mt - 1} Z" fill="{color}"/>'
                 if beyond else
                 f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="{7 if row.status == "winner" else 5}" fill="{color}" '
                 'stroke="#fff" stroke-width="1.2"/>')
        bar = ""
        if upper is not None and upper > drop and not beyond:
            end = sy(upper)
            bar = (f'<line class="bound" x1="{cx:.1f}" y1="{cy:.1f}" x2="{cx:.1f}" y2="{end:.1f}" stroke="{color}" '
                   'stroke-width="1.5"/>')
            if upper > top:              # the bound runs off the top: an arrow head says it continues
                bar += f'<path d="M{cx - 4:.1f} {mt + 6} L{cx + 4:.1f} {mt + 6} L{cx:.1f} {mt} Z" fill="{color}"/>'
            else:
                bar += f'<line x1="{cx - 4:.1f}" y1="{end:.1f}" x2="{cx + 4:.1f}" y2="{end:.1f}" stroke="{color}"/>'
        marks.append((index, row, cx, cy, bar + shape, x, drop, upper, beyond))
        boxes.append((cx - 7, cy - 7, cx + 7, cy + 7))
    labels = []
    for index, row, cx, cy, shape, x, drop, upper, beyond in marks:
        text = str(index)
        if beyond:
            text += f" drop {drop:.2g}"          # off the drawn range: its figure, since its height cannot say it
        elif row.status in {"winner", "reference"}:
            text += f" {_short(row.name)}"
        labels.append(_place(text, cx, cy, boxes, (ml, mt, ml + pw, mt + ph)))
        unit_text = unit if axis == "size" else "tok/s" if _decoder(report) else "ms"
        bound = f", bound {upper:.4g}" if upper is not None else ""
        tip = f"{index}. {row.name} ({row.status}): {x:.3g} {unit_text}, drop {drop:.4g}{bound}"
        out.append(f'<g class="point" data-name="{escape(row.name)}" data-status="{escape(row.status)}">'
                   f"<title>{escape(tip)}</title>{shape}</g>")
    out += labels                                # drawn last: no later point hides a label
    out.append("</svg>")
    return "".join(out)


def _short(name: str, limit: int = 26) -> str:
    """A point label stays short so that it hides no other point; the table has the full name."""
    return name if len(name) <= limit else name[:limit - 1] + "…"


#: where a label may go around its point, nearest first; the farther ones keep a crowded winner labelled
PLACES = ((9, 4, "start"), (-9, 4, "end"), (0, -10, "middle"), (0, 17, "middle"), (9, -8, "start"),
          (-9, -8, "end"), (9, 15, "start"), (-9, 15, "end"), (12, -22, "start"), (-12, -22, "end"),
          (12, 30, "start"), (-12, 30, "end"), (0, -36, "middle"), (24, -40, "start"), (-24, -40, "end"))


def _place(text: str, cx: float, cy: float, boxes: list, frame: tuple[float, float, float, float]) -> str:
    """A label beside its point where it overlaps no other label or point; left out when nowhere fits (the
    point's number is then in its tooltip and the table)."""
    w, h = 6.4 * len(text) + 2, 13
    for dx, dy, anchor in PLACES:
        x0 = cx + dx if anchor == "start" else cx + dx - w if anchor == "end" else cx - w / 2
        box = (x0, cy + dy - h + 3, x0 + w, cy + dy + 3)
        inside = frame[0] <= box[0] and box[2] <= frame[2] + 14 and frame[1] - 12 <= box[1] and box[3] <= frame[3] + 2
        if inside and not any(_overlap(box, other) for other in boxes):
            boxes.append(box)
            return (f'<text class="label" x="{cx + dx:.1f}" y="{cy + dy:.1f}" text-anchor="{anchor}" '
                    'font-size="11" fill="#1f2933" stroke="#fbfcfd" stroke-width="3" paint-order="stroke">'
                    f"{escape(text)}</text>")
    return ""


def _overlap(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


# -- the candidate table --------------------------------------------------------------------------------

def _table(report: Report, palette: dict[str, str]) -> str:
    keys = _keys(report)
    base = _base(report)
    head = ['<th style="width:3%">#</th>', '<th style="width:22%">candidate</th>', '<th style="width:8%">status</th>',
            '<th style="width:8%">size</th>', '<th style="width:8%">p50 ms</th>']
    share = max(8, 24 // max(1, len(keys)))
    head += [f'<th style="width:{share}%">{_breakable_key(k)} drop<br/><small>[interval] ≤ bound / '
             + (f"budget {report.budgets[k]:.3g}" if k in report.budgets else "no budget")
             + escape(allowance_note(report.allowances.get(k))) + "</small></th>" for k in keys]
    head.append("<th>why</th>")
    body = []
    for index, row in enumerate(report.rows):
        details = report.details.get(row.name, {})
        cells = [f"<td>{index}</td>", f"<td><strong>{_breakable(row.name)}</strong></td>",
                 f'<td><span class="pill" style="background:{palette.get(row.status, "#7b8794")}">'
                 f"{escape(row.status)}</span></td>"]
        size = human_bytes(row.size_bytes) if row.size_bytes else "-"
        if row is not base and row.size_bytes and base.size_bytes:
            size += f'<span class="ratio">{_times(base.size_bytes, row.size_bytes, "smaller", "larger")}</span>'
        p50 = _p50(row)
        speed = fmt_ms(p50) if p50 else "-"
        base_p50 = _p50(base)
        if row is not base and p50 and base_p50:
            speed += f'<span class="ratio">{_times(base_p50, p50, "faster", "slower")}</span>'
        cells += [f'<td class="num">{size}</td>', f'<td class="num">{speed}</td>']
        for key in keys:
            drop = (details.get("drops") or {}).get(key)
            interval = (details.get("intervals") or {}).get(key) or {}
            if drop is None:
                cells.append('<td class="num">-</td>')
                continue
            text = f"{drop:.4f}"
            if interval.get("low") is not None and interval.get("high") is not None:
                text += f'<small>[{interval["low"]:.4f}, {interval["high"]:.4f}]</small>'
            upper = interval.get("upper")
            if upper is not None:
                text += f"<small>≤ {upper:.4f}</small>"
            worst = upper if upper is not None else drop
            # a candidate that passed was held to its measured drop (the data could not resolve the budget at the
            # confidence): its bound is shown but not painted red
            over = key in report.budgets and (drop if row.status in {"winner", "ok"} else worst) > report.budgets[key]
            cells.append(f'<td class="num{" over" if over else ""}">{text}</td>')
        cells.append(f'<td class="why">{escape(shorten_paths(details.get("reason") or row.note or ""))}</td>')
        body.append(f'<tr data-status="{escape(row.status)}">{"".join(cells)}</tr>')
    return (f'<section class="card"><h2>Candidates</h2><table class="cands"><thead><tr>{"".join(head)}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table><div class=\"caption\">Size and latency ratios are against "
            f"<code>{escape(base.name)}</code>. A drop is how far the candidate falls below it; a red drop (or its "
            "confidence bound) is over budget.</div></section>")


def _breakable_key(key: str) -> str:
    return re.sub(r"([._])", r"\1<wbr/>", escape(key))


def _times(before: float, after: float, better: str, worse: str) -> str:
    ratio = before / after
    if round(ratio, 2) == 1:
        return "same"
    return f"{ratio:.2f}x {better}" if ratio > 1 else f"{1 / ratio:.2f}x {worse}"


# -- environment, details, export checks -------------------------------------------------------------------

def _environment(report: Report) -> str:
    env = report.environment
    if not env:
        return ""
    flags = env.get("cpu_flags") or {}
    rows: list[tuple[str, Any]] = [("versions", ", ".join(f"{k} {v}" for k, v in (env.get("versions") or {}).items())),
                                   ("python", env.get("python")), ("CPU", env.get("cpu")),
                                   ("instruction sets",
                                    ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in flags.items())
                                    or "unknown (no /proc/cpuinfo)"),
                                   ("ISA (judged and timed on)", env.get("isa")), ("target CPU", env.get("target_cpu")),
                                   ("cores", env.get("cores")), ("threads", env.get("threads")),
                                   ("command", env.get("command"))]
    items = "".join(f"<dt>{escape(k)}</dt><dd>"
                    f"{'<code>' + escape(str(v)) + '</code>' if k == 'command' else escape(str(v))}"
                    "</dd>" for k, v in rows if v not in (None, ""))
    return f'<section class="card"><h2>Environment</h2><dl class="env">{items}</dl></section>'


def _details(report: Report) -> str:
    blocks = []
    for index, row in enumerate(report.rows):
        d = report.details.get(row.name)
        if not d:
            continue
        ops = ", ".join(f"{op} x{n}" for op, n in (d.get("quantized_ops") or {}).items()) or "none reported"
        floats = d.get("excluded_nodes") or []
        items = [f"strategy <code>{escape(str(d.get('strategy')))}</code>, options "
                 "<code>" + escape(", ".join(f"{k}={v}" for k, v in (d.get("options") or {}).items()) or "defaults")
                 + "</code>",
                 f"quantized op types: {escape(ops)}",
                 f"nodes left in float: {len(floats)}" + (f" (<code>{escape(', '.join(floats[:8]))}</code>"
                                                          f"{' ...' if len(floats) > 8 else ''})" if floats else "")]
        if d.get("keep_float"):
            items.append(f"kept in float by the partial fallback: {len(d['keep_float'])}")
        items += [f"note: {escape(n)}" for n in d.get("notes") or []]
        items += [f"warning: {escape(w)}" for w in d.get("warnings") or []]
        if d.get("quantize_seconds"):
            items.append(f"quantized in {d['quantize_seconds']:.1f} s")
        if row.status == "reference":
            items = ["the exported model, unquantized: every candidate is judged against the source framework's "
                     "outputs, and the ratios are against this file"]
        body = "".join(f"<li>{i}</li>" for i in items)
        blocks.append(f'<details class="cand"><summary>{index}. {_breakable(row.name)} '
                      f"({escape(row.status)})</summary><ul>{body}</ul></details>")
    return f'<section class="card"><h2>Details per candidate</h2>{"".join(blocks)}</section>' if blocks else ""


def _verification(report: Report) -> str:
    head = "<tr><th>output</th><th>feed set</th><th>max |diff|</th><th>lowest cosine</th><th>result</th></tr>"
    rows = []
    for r in report.verification:
        diff = "exact" if r.get("exact") else ("-" if r.get("max_abs_diff") is None else f"{r['max_abs_diff']:.3g}")
        cos = "-" if r.get("cosine_min") is None else f"{r['cosine_min']:.6f}"
        rows.append(f"<tr><td>{escape(str(r.get('output')))}</td><td>{escape(str(r.get('feed_set')))}</td>"
                    f"<td>{diff}</td><td>{cos}</td><td>{'pass' if r.get('passed') else 'FAIL'}</td></tr>")
    return (f'<section class="card"><h2>Export verification: every check</h2><table class="checks"><thead>{head}'
            f"</thead><tbody>{''.join(rows)}</tbody></table></section>")
