"""The self-contained HTML report: inline CSS and an inline SVG chart, no scripts, nothing from the network.

The chart puts model size on x and latency (p50) on y, so the lighter and
faster models sit bottom-left; each point is labelled with its name and its
primary metric.  Reports without latency (``compare``) plot size against the
primary metric instead.
"""

from __future__ import annotations

import datetime as _dt
import math
import re
from html import escape
from typing import TYPE_CHECKING

from .axes import nice_ticks, tick_labels
from .markdown import markdown_to_html
from .text import columns, fmt_num, setting_text

if TYPE_CHECKING:
    from .model import ModelRow, Report

#: status -> (fill, text-on-pill) colours; matched to STATUS_STYLES in reporting
PALETTE = {
    "reference": "#8e44ad",
    "ok": "#2d7dd2",
    "winner": "#1b9e4b",
    "rejected": "#e0a100",
    "lost its grid": "#8a9bb0",
    "outpaced": "#8a9bb0",
    "failed": "#d64541",
}

CSS = """
:root { --fg:#1f2933; --muted:#616e7c; --line:#e4e7eb; --bg:#f5f7fa; --card:#ffffff; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.5 -apple-system,BlinkMacSystemFont,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;
       color:var(--fg); background:var(--bg); }
main { max-width:1320px; margin:0 auto; padding:28px 24px 48px; }
header h1 { margin:0 0 4px; font-size:24px; }
header .sub { color:var(--muted); }
section.card { background:var(--card); border:1px solid var(--line); border-radius:8px; padding:16px 20px;
               margin-top:18px; box-shadow:0 1px 2px rgba(0,0,0,.04); }
h2 { font-size:16px; margin:0 0 10px; }
dl.settings { display:grid; grid-template-columns:max-content 1fr; gap:2px 18px; margin:0; }
dl.settings dt { color:var(--muted); }
dl.settings dd { margin:0; font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace; font-size:13px;
                 word-break:break-all; }
.table-wrap { overflow-x:auto; }
table.models { border-collapse:collapse; width:100%; font-variant-numeric:tabular-nums; }
table.models th, table.models td { padding:6px 8px; border-bottom:1px solid var(--line); white-space:nowrap; }
table.models th { text-align:left; font-weight:600; color:var(--muted); font-size:12px; text-transform:uppercase;
                  letter-spacing:.03em; background:#fafbfc; white-space:normal; vertical-align:bottom; }
table.models td.num, table.models th.num { text-align:right; }
table.models td.note { white-space:normal; color:var(--muted); min-width:160px; max-width:320px; }
table.models tr:hover td { background:#f8fafc; }
.pill { display:inline-block; padding:1px 8px; border-radius:10px; color:#fff; font-size:12px; font-weight:600; }
.caption { color:var(--muted); font-size:12px; margin-top:8px; }
.chart svg { width:100%; height:auto; max-width:900px; display:block; }
.legend { display:flex; gap:16px; flex-wrap:wrap; margin-top:6px; font-size:13px; }
.legend span.dot { display:inline-block; width:10px; height:10px; border-radius:50%; margin-right:5px;
                   vertical-align:baseline; }
table.md { border-collapse:collapse; font-size:12.5px; font-variant-numeric:tabular-nums; }
table.md th, table.md td { padding:3px 8px; border-bottom:1px solid var(--line); text-align:left; }
table.md th { color:var(--muted); font-weight:600; }
code { font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace; font-size:12.5px; background:#f0f2f5;
       padding:0 4px; border-radius:3px; }
ul.paths { margin:0; padding-left:18px; }
footer { color:var(--muted); font-size:12px; margin-top:22px; }
"""


def render_html(report: Report) -> str:
    now = _dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8"/>',
        '<meta name="viewport" content="width=device-width, initial-scale=1"/>',
        f"<title>{escape(report.title)}</title>",
        f"<style>{CSS}</style></head><body><main>",
        f'<header><h1>{escape(report.title)}</h1><div class="sub">onnxlite {escape(report.kind)} report · '
        f"{len(report.rows)} model{'s' if len(report.rows) != 1 else ''} · {escape(now)}</div></header>",
    ]
    lighten = bool(report.verdict)
    if lighten:
        # lighten's page reads verdict first, then the trade-off, then every candidate (report/lighten_page.py)
        from .lighten_page import CSS as LIGHTEN_CSS
        from .lighten_page import render_lighten

        parts[4] = f"<style>{CSS}{LIGHTEN_CSS}</style></head><body><main>"
        parts += render_lighten(report, PALETTE)
    if report.settings:
        items = "".join(f"<dt>{escape(str(k).replace('_', ' '))}</dt><dd>{escape(setting_text(v, str(k)))}</dd>"
                        for k, v in report.settings.items())
        parts.append(f'<section class="card settings"><h2>Settings</h2><dl class="settings">{items}</dl></section>')
    if not lighten:
        parts.append(_table_html(report))
        parts.append(_chart_section(report))
    for heading, text in report.sections:
        parts.append(f'<section class="card notes"><h2>{escape(heading)}</h2>{markdown_to_html(text)}</section>')
    for heading, svg in report.charts:      # built by onnxlite itself (node names escaped there)
        parts.append(f'<section class="card chart"><h2>{escape(heading)}</h2>{svg}</section>')
    paths = "".join(f"<li><code>{escape(r.name)}</code>: <code>{escape(r.path)}</code></li>" for r in report.rows)
    parts.append(f'<section class="card"><h2>Files</h2><ul class="paths">{paths}</ul></section>')
    parts.append("<footer>Generated by onnxlite. Self-contained: no scripts, no network.</footer>")
    parts.append("</main></body></html>")
    return "\n".join(parts) + "\n"


def _table_html(report: Report) -> str:
    cols = columns(report)
    head = "".join(f'<th class="{"" if h in {"model", "status", "note"} else "num"}">{_breakable(h)}</th>'
                   for h, _ in cols)
    body = []
    for i, row in enumerate(report.rows):
        cells = []
        for header, values in cols:
            value = values[i]
            if header == "status":
                color = PALETTE.get(row.status, "#7b8794")
                cells.append(f'<td><span class="pill" style="background:{color}">{escape(value)}</span></td>')
            elif header == "model":
                cells.append(f"<td><strong>{escape(value)}</strong></td>")
            elif header == "note":
                cells.append(f'<td class="note">{escape(value)}</td>')
            else:
                cells.append(f'<td class="num">{escape(value)}</td>')
        body.append(f'<tr data-status="{escape(row.status)}">{"".join(cells)}</tr>')
    caption = ""
    base = report.baseline_index
    if base is not None and len(report.rows) > 1:
        caption = (f'<div class="caption">Ratios are against <code>{escape(report.rows[base].name)}</code>: '
                   "size and memory ratios below 1 are smaller, a speedup above 1 is faster.</div>")
    return (f'<section class="card"><h2>Models</h2><div class="table-wrap"><table class="models">'
            f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table></div>{caption}</section>")


def _breakable(header: str) -> str:
    """Metric names such as ``last_hidden_state.cosine_mean`` may wrap after a dot or underscore."""
    return re.sub(r"([._])", r"\1<wbr/>", escape(header))


# -- chart ----------------------------------------------------------------------------------------

def _size_unit(max_bytes: float) -> tuple[str, float]:
    for unit, scale in (("GB", 1024**3), ("MB", 1024**2), ("KB", 1024)):
        if max_bytes >= scale:
            return unit, scale
    return "B", 1


def _chart_section(report: Report) -> str:
    svg, note = chart_svg(report)
    legend_statuses = [s for s in PALETTE if any(r.status == s for r in report.rows)]
    legend = "".join(f'<span><span class="dot" style="background:{PALETTE[s]}"></span>{escape(s)}</span>'
                     for s in legend_statuses)
    body = svg if svg else '<p class="caption">Nothing to plot: no model has both a size and a measured figure.</p>'
    extra = f'<div class="caption">{escape(note)}</div>' if note else ""
    return (f'<section class="card chart"><h2>Size against {"latency" if _has_latency(report) else "accuracy"}</h2>'
            f'{body}<div class="legend">{legend}</div>{extra}</section>')


def _has_latency(report: Report) -> bool:
    return any((r.latency_ms or {}).get("p50") is not None for r in report.rows)


def chart_svg(report: Report, width: int = 860, height: int = 440) -> tuple[str, str]:
    """The scatter plot as inline SVG and a note naming models left out (no size or no y figure)."""
    use_latency = _has_latency(report)
    metric = report.primary_metric

    def y_of(row: ModelRow) -> float | None:
        if use_latency:
            return (row.latency_ms or {}).get("p50")
        return row.metrics.get(metric) if metric else None

    points = [(row, float(row.size_bytes), y) for row in report.rows
              if row.size_bytes is not None and (y := y_of(row)) is not None and math.isfinite(float(y))]
    left_out = [row.name for row in report.rows if row not in [p[0] for p in points]]
    note = f"Not plotted (figure missing): {', '.join(left_out)}." if left_out else ""
    if not points:
        return "", note
    unit, scale = _size_unit(max(p[1] for p in points))
    xs = [p[1] / scale for p in points]
    ys = [p[2] for p in points]
    # Latency and size axes start at 0 so distances read as ratios; an accuracy axis zooms to the data.
    x_ticks = nice_ticks(0.0, max(xs) * 1.08 or 1.0)
    if use_latency:
        y_ticks = nice_ticks(0.0, max(ys) * 1.1 or 1.0)
    else:
        lo, hi = min(ys), max(ys)
        pad = (hi - lo) * 0.15 or abs(hi) * 0.01 or 0.01
        y_ticks = nice_ticks(lo - pad, hi + pad)
    x0, x1, y0, y1 = x_ticks[0], x_ticks[-1], y_ticks[0], y_ticks[-1]
    ml, mr, mt, mb = 78, 34, 20, 58
    pw, ph = width - ml - mr, height - mt - mb

    def sx(v: float) -> float:
        return ml + (v - x0) / ((x1 - x0) or 1) * pw

    def sy(v: float) -> float:
        return mt + ph - (v - y0) / ((y1 - y0) or 1) * ph

    y_title = "latency p50 (ms)" if use_latency else (metric or "metric")
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" role="img" '
           f'class="scatter" aria-label="model size against {escape(y_title)}" '
           'font-family="-apple-system,Segoe UI,Roboto,Arial,sans-serif">',
           f'<rect x="{ml}" y="{mt}" width="{pw}" height="{ph}" fill="#fbfcfd" stroke="#d9dde3"/>']
    for t, text in zip(x_ticks, tick_labels(x_ticks)):
        x = sx(t)
        out.append(f'<line class="grid" x1="{x:.1f}" y1="{mt}" x2="{x:.1f}" y2="{mt + ph}" stroke="#eceff3"/>')
        out.append(f'<text class="tick x" x="{x:.1f}" y="{mt + ph + 18}" text-anchor="middle" font-size="12" '
                   f'fill="#616e7c">{text}</text>')
    for t, text in zip(y_ticks, tick_labels(y_ticks)):
        y = sy(t)
        out.append(f'<line class="grid" x1="{ml}" y1="{y:.1f}" x2="{ml + pw}" y2="{y:.1f}" stroke="#eceff3"/>')
        out.append(f'<text class="tick y" x="{ml - 8}" y="{y + 4:.1f}" text-anchor="end" font-size="12" '
                   f'fill="#616e7c">{text}</text>')
    out.append(f'<line x1="{ml}" y1="{mt + ph}" x2="{ml + pw}" y2="{mt + ph}" stroke="#52606d"/>')
    out.append(f'<line x1="{ml}" y1="{mt}" x2="{ml}" y2="{mt + ph}" stroke="#52606d"/>')
    out.append(f'<text class="axis-title x" x="{ml + pw / 2:.1f}" y="{height - 14}" text-anchor="middle" '
               f'font-size="13" fill="#1f2933">model size on disk ({unit})</text>')
    out.append(f'<text class="axis-title y" transform="translate(18 {mt + ph / 2:.1f}) rotate(-90)" '
               f'text-anchor="middle" font-size="13" fill="#1f2933">{escape(y_title)}</text>')
    placed: list[tuple[float, float]] = []
    for (row, _, _), xv, yv in zip(points, xs, ys):
        cx, cy = sx(xv), sy(yv)
        color = PALETTE.get(row.status, "#7b8794")
        label = row.name
        if use_latency and metric and metric in row.metrics:
            label += f" · {_short_metric(metric)} {fmt_num(row.metrics[metric])}"
        # Nudge a label down when another sits right on top of it; put it left of points near the right edge.
        ly = cy - 12
        while any(abs(ly - py) < 15 and abs(cx - px) < 160 for px, py in placed):
            ly += 16
        placed.append((cx, ly))
        anchor, lx = ("end", cx - 10) if cx > ml + pw * 0.7 else ("start", cx + 10)
        tooltip = f"{row.name}: {fmt_num(xv, 3)} {unit}, {fmt_num(yv)} {'ms' if use_latency else ''}".strip()
        out.append(f'<g class="point" data-name="{escape(row.name)}" data-status="{escape(row.status)}">'
                   f"<title>{escape(tooltip)}</title>"
                   f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="{8 if row.status == "winner" else 6}" fill="{color}" '
                   f'stroke="#ffffff" stroke-width="1.5"/>'
                   f'<text class="label" x="{lx:.1f}" y="{ly:.1f}" text-anchor="{anchor}" font-size="12" '
                   f'fill="#1f2933">{escape(label)}</text></g>')
    out.append("</svg>")
    return "".join(out), note


def _short_metric(name: str) -> str:
    """``last_hidden_state.cosine_mean`` -> ``cosine_mean`` for point labels; the table keeps the full name."""
    return name.rsplit(".", 1)[-1]
