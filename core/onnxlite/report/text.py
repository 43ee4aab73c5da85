"""A :class:`~onnxlite.report.model.Report` as text: the rich table the commands print, and Markdown.

The ``fmt_*`` helpers render one figure each ("-" when it was not measured);
``columns`` decides which columns a report has, for every rendering.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any

from .model import LATENCY_KEYS

if TYPE_CHECKING:
    from rich.table import Table

    from .model import Report


#: the rich style of each status, reused by the HTML palette in report_html
STATUS_STYLES = {"ok": "cyan", "failed": "red", "rejected": "yellow", "lost its grid": "blue", "outpaced": "blue",
                 "winner": "bold green", "reference": "magenta"}


def fmt_bytes(n: float | None) -> str:
    return "-" if n is None else human_bytes(n)


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def fmt_ms(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 100:
        return f"{value:.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}" if value >= 1 else f"{value:.3f}"


def fmt_num(value: float | None, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    if isinstance(value, int):
        return str(value)
    if value != 0 and (abs(value) >= 1e5 or abs(value) < 1e-3):
        return f"{value:.{digits - 1}e}"
    return f"{value:.{digits}f}"


def fmt_ratio(value: float | None, suffix: str = "×") -> str:
    return "-" if value is None else f"{value:.2f}{suffix}"


def size_change(before: float | None, after: float | None) -> str:
    """``3.15x smaller`` or ``1.01x larger`` (never "0.99x smaller"); ``? size`` when either is unknown."""
    if not before or not after:
        return "? size"
    ratio = before / after
    if round(ratio, 2) == 1:
        return "same size"
    return f"{ratio:.2f}x smaller" if ratio > 1 else f"{after / before:.2f}x larger"


def speed_change(before: float | None, after: float | None) -> str:
    """``1.25x faster`` or ``1.10x slower`` from two latencies (never "0.91x faster")."""
    if not before or not after or math.isinf(before) or math.isinf(after):
        return "? speed"
    ratio = before / after
    if round(ratio, 2) == 1:
        return "same speed"
    return f"{ratio:.2f}x faster" if ratio > 1 else f"{after / before:.2f}x slower"


def fmt_seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def fmt_throughput(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.0f}/s" if value >= 100 else f"{value:.1f}/s"


def columns(report: Report) -> list[tuple[str, list[str]]]:
    """The table as (header, cells) columns; only figures some row has are shown."""
    rows = report.rows
    ratios = report.ratios()
    out: list[tuple[str, list[str]]] = [("model", [r.name for r in rows]), ("status", [r.status for r in rows])]

    def add(header: str, cells: list[str]) -> None:
        if any(c != "-" for c in cells):
            out.append((header, cells))

    add("size", [fmt_bytes(r.size_bytes) for r in rows])
    for key in LATENCY_KEYS:
        add(f"{key} ms", [fmt_ms((r.latency_ms or {}).get(key)) for r in rows])
    add("throughput", [fmt_throughput(r.throughput) for r in rows])
    add("load", [fmt_seconds(r.load_seconds) for r in rows])
    add("peak RSS", [fmt_bytes(r.peak_rss_bytes) for r in rows])
    add("ops", ["-" if r.op_count is None else str(r.op_count) for r in rows])
    if len(rows) > 1:
        add("size ratio", [fmt_ratio(r["size"]) for r in ratios])
        add("speedup", [fmt_ratio(r["speedup"]) for r in ratios])
        add("memory ratio", [fmt_ratio(r["memory"]) for r in ratios])
    for name in report.metric_names():
        add(name, [fmt_num(r.metrics.get(name)) for r in rows])
    add("note", [r.note or "-" for r in rows])
    return out


#: the columns a narrow screen loses first, in order; model, status, size, p50, the ratios and the metrics stay
DROP_ORDER = ("p99 ms", "ops", "load", "p90 ms", "mean ms", "throughput", "memory ratio", "peak RSS")


def fit_columns(cols: list[tuple[str, list[str]]], width: int | None) -> tuple[list[tuple[str, list[str]]], list[str]]:
    """The columns that fit ``width`` characters of rich's default box, and the headers left out.

    Each column costs its widest cell plus two spaces of padding and a rule; the note column folds at 48.
    Columns go in :data:`DROP_ORDER` until the table fits (the figures stay in ``--json`` and the report)."""
    def cost(header: str, cells: list[str]) -> int:
        widest = max([len(header)] + [len(c) for c in cells])
        return min(widest, 48 if header == "note" else widest) + 3

    kept = list(cols)
    dropped: list[str] = []
    for header in DROP_ORDER:
        if width is None or 1 + sum(cost(h, c) for h, c in kept) <= width:
            break
        if any(h == header for h, _ in kept):
            kept = [(h, c) for h, c in kept if h != header]
            dropped.append(header)
    return kept, dropped


def render_table(report: Report, width: int | None = None) -> Table:
    """The rich table every measuring command prints, narrowed to ``width`` columns when given."""
    from rich.table import Table

    cols, dropped = fit_columns(columns(report), width)
    notes = []
    base = report.baseline_index
    if base is not None and len(report.rows) > 1:
        notes.append(f"ratios against {report.rows[base].name}; speedup > 1 is faster")
    if dropped:
        notes.append(f"left out to fit {width} columns: {', '.join(dropped)} (--json and --report have them)")
    caption = "; ".join(notes) or None
    table = Table(title=report.title, title_justify="left", caption=caption, caption_justify="left")
    for header, _ in cols:
        numeric = header not in {"model", "status", "note"}
        table.add_column(header, justify="right" if numeric else "left",
                         overflow="fold", max_width=48 if header == "note" else None)
    for i, row in enumerate(report.rows):
        cells = [cells[i] for _, cells in cols]
        style = STATUS_STYLES.get(row.status, "")
        cells[1] = f"[{style}]{cells[1]}[/]" if style else cells[1]
        table.add_row(*cells)
    return table


def render_markdown(report: Report) -> str:
    lines = [f"# {report.title}", ""]
    if report.settings:
        lines += ["## Settings", ""]
        lines += [f"- **{k}**: {setting_text(v, str(k))}" for k, v in report.settings.items()]
        lines.append("")
    lines += ["## Models", ""]
    cols = columns(report)
    lines.append("| " + " | ".join(h for h, _ in cols) + " |")
    lines.append("|" + "|".join("---" if h in {"model", "status", "note"} else "---:" for h, _ in cols) + "|")
    for i in range(len(report.rows)):
        lines.append("| " + " | ".join(_md_cell(cells[i]) for _, cells in cols) + " |")
    base = report.baseline_index
    if base is not None and len(report.rows) > 1:
        lines += ["", f"Ratios are against `{report.rows[base].name}`; a speedup above 1 is faster."]
    if report.primary_metric:
        lines += ["", f"Primary metric: `{report.primary_metric}`."]
    lines += ["", "Paths:", ""] + [f"- `{r.name}`: `{r.path}`" for r in report.rows]
    for heading, text in report.sections:
        lines += ["", f"## {heading}", "", text.rstrip()]
    return "\n".join(lines) + "\n"


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


#: how a setting whose value is a plain yes/no reads in a report (a bare ``recipe False`` says nothing)
_FLAG_WORDS = {"recipe": ("replayed from a recipe", "searched (no recipe)")}


def setting_text(value: Any, key: str = "") -> str:
    """One setting as a person reads it: ``name local, tasks 17`` rather than a JSON object, byte counts as
    KB/MB/GB, yes/no rather than True/False."""
    if isinstance(value, bool):
        yes, no = _FLAG_WORDS.get(key, ("yes", "no"))
        return yes if value else no
    if isinstance(value, dict):
        return ", ".join(f"{k.replace('_', ' ')} {setting_text(v, str(k))}" for k, v in value.items()
                         if v not in (None, "", [], {}))
    if isinstance(value, (list, tuple)):
        return ", ".join(setting_text(v) for v in value)
    if isinstance(value, (int, float)) and key.endswith("_bytes"):
        return human_bytes(value)
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def allowance_note(allowance: dict[str, Any] | None) -> str:
    """``: ≤ 0 of 400 answers may change`` for a table header, ``: worst of 47, ~1 in 48 new may score lower``
    for a worst-case budget (empty for other continuous metrics)."""
    if not allowance:
        return ""
    if allowance.get("kind") == "worst":
        return f": worst of {allowance['samples']}, ~1 in {allowance['one_in']} new may score lower"
    if allowance.get("kind") == "tail":
        return (f": bounded on {allowance['samples']} for new samples" if allowance.get("bounded")
                else f": measured on {allowance['samples']} (a bound needs {allowance['needed']})")
    allowed = allowance["allowed"]
    if allowed < 0:
        return f": no candidate can pass on {allowance['samples']} samples"
    by = " (measured)" if allowance.get("by") == "measured drop" else ""
    return f": ≤ {allowed} of {allowance['samples']} answers may change{by}"



# -- fitting text into a terminal -------------------------------------------------------------------

_PATH = re.compile(r"(?:[A-Za-z]:)?(?:/[^\s/:'\"(),;]+){2,}/([^\s/:'\"(),;]+)")


def shorten_paths(text: str) -> str:
    """Absolute paths reduced to their file name (``/tmp/x/scratch/fp32.onnx`` -> ``fp32.onnx``), so a
    one-line reason keeps the error itself instead of spending its width on a scratch folder."""
    return _PATH.sub(r"\1", text)


def ellipsize(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters at a word boundary, with "…" (never in the middle of a
    number or a word: "drop 0)" must not stand for "drop 0.04271")."""
    if len(text) <= width:
        return text
    cut = text[:max(1, width - 1)]
    space = cut.rfind(" ")
    if space > 0 and text[len(cut)] != " ":   # a word would be cut: end before it (one long word is cut)
        cut = cut[:space]
    return cut.rstrip(" ,;:(") + "…"


def wrap_name(name: str, width: int) -> str:
    """A candidate name wrapped after ``[``, ``,`` or ``+`` so that no option is split mid-word."""
    if len(name) <= width:
        return name
    tokens = re.findall(r"[^\[,+]+[\[,+]?|[\[,+]", name)
    lines, line = [], ""
    for token in tokens:
        if line and len(line) + len(token) > width:
            lines.append(line)
            line = ""
        line += token
    lines.append(line)
    return "\n".join(lines)


def wrap_words(text: str, width: int, separators: str = "_.") -> str:
    """A header such as ``pooled_cosine_mean`` wrapped after ``_`` or ``.`` (and spaces) to ``width``."""
    tokens = re.findall(rf"[^\s{re.escape(separators)}]+[{re.escape(separators)}]?\s*|\s+", text)
    lines, line = [], ""
    for token in tokens:
        if line and len(line) + len(token.rstrip()) > width:
            lines.append(line.rstrip())
            line = ""
        line += token
    lines.append(line.rstrip())
    return "\n".join(x for x in lines if x)
