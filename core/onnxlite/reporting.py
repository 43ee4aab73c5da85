"""Reports shared by ``compare``, ``bench`` and ``lighten``: one data model, three renderings.

A :class:`Report` is a list of :class:`ModelRow` plus the settings it was
measured under.  ``render_table`` gives the rich table the commands print;
``write_report`` writes ``report.html`` (self-contained: inline CSS and an
inline SVG chart, nothing fetched from the network), ``report.json`` and
``report.md`` into a folder, each file atomically.

Ratios are always taken against the *baseline* row: the row whose status is
``reference`` if there is one, else the first row.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .atomic import write_text

if TYPE_CHECKING:
    from rich.table import Table

LATENCY_KEYS = ("p50", "p90", "p99", "mean")
REPORT_FILES = {"html": "report.html", "json": "report.json", "md": "report.md"}
#: the rich style of each status, reused by the HTML palette in report_html
STATUS_STYLES = {"ok": "cyan", "failed": "red", "rejected": "yellow", "winner": "bold green", "reference": "magenta"}


@dataclass
class ModelRow:
    """One model's figures.  Anything not measured stays ``None`` (shown as a dash, never as 0)."""

    name: str
    path: str
    size_bytes: int | None = None
    latency_ms: dict[str, float] | None = None   # keys p50, p90, p99, mean
    throughput: float | None = None               # samples/s
    load_seconds: float | None = None
    peak_rss_bytes: int | None = None
    op_count: int | None = None
    metrics: dict[str, float] = field(default_factory=dict)  # e.g. {"last_hidden_state.cosine_mean": 0.99}
    status: str = "ok"          # ok | failed | rejected | winner | reference
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return _jsonable(asdict(self))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelRow:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass
class Report:
    """What a measuring command found, ready to print or write."""

    title: str
    kind: str       # "compare" | "bench" | "lighten"
    rows: list[ModelRow]
    settings: dict[str, Any] = field(default_factory=dict)
    primary_metric: str | None = None
    sections: list[tuple[str, str]] = field(default_factory=list)   # extra (heading, markdown text)

    @property
    def baseline_index(self) -> int | None:
        if not self.rows:
            return None
        for i, row in enumerate(self.rows):
            if row.status == "reference":
                return i
        return 0

    def ratios(self) -> list[dict[str, float | None]]:
        """Per row: ``size`` (size / baseline size), ``speedup`` (baseline p50 / p50) and
        ``memory`` (peak RSS / baseline peak RSS); None where either figure is missing."""
        base = self.baseline_index
        if base is None:
            return []
        ref = self.rows[base]
        out = []
        for row in self.rows:
            out.append({
                "size": _ratio(row.size_bytes, ref.size_bytes),
                "speedup": _ratio(_p50(ref), _p50(row)),
                "memory": _ratio(row.peak_rss_bytes, ref.peak_rss_bytes),
            })
        return out

    def metric_names(self) -> list[str]:
        """Every metric any row has, the primary one first."""
        names: list[str] = []
        if self.primary_metric:
            names.append(self.primary_metric)
        for row in self.rows:
            names.extend(k for k in row.metrics if k not in names)
        return names

    def to_dict(self) -> dict[str, Any]:
        from . import __version__

        base = self.baseline_index
        return _jsonable({
            "title": self.title,
            "kind": self.kind,
            "onnxlite": __version__,
            "primary_metric": self.primary_metric,
            "settings": self.settings,
            "baseline": None if base is None else self.rows[base].name,
            "rows": [row.to_dict() | {"ratios": ratios} for row, ratios in zip(self.rows, self.ratios())],
            "sections": [{"heading": h, "text": t} for h, t in self.sections],
        })

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Report:
        return cls(title=data["title"], kind=data["kind"], rows=[ModelRow.from_dict(r) for r in data["rows"]],
                   settings=dict(data.get("settings") or {}), primary_metric=data.get("primary_metric"),
                   sections=[(s["heading"], s["text"]) for s in data.get("sections") or []])


def _p50(row: ModelRow) -> float | None:
    return (row.latency_ms or {}).get("p50")


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or not b:
        return None
    return float(a) / float(b)


def _jsonable(value: Any) -> Any:
    """Plain JSON types; NaN/inf become None so the file stays valid JSON."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):  # numpy scalars
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if hasattr(value, "__fspath__"):
        return os.fspath(value)
    return str(value)


# -- formatting shared by the table, markdown and HTML ---------------------------------------------

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


def render_table(report: Report) -> Table:
    """The rich table every measuring command prints."""
    from rich.table import Table

    caption = None
    base = report.baseline_index
    if base is not None and len(report.rows) > 1:
        caption = f"ratios against {report.rows[base].name}; speedup > 1 is faster"
    table = Table(title=report.title, title_justify="left", caption=caption, caption_justify="left")
    cols = columns(report)
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
        lines += [f"- **{k}**: {_setting_text(v)}" for k, v in report.settings.items()]
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


def _setting_text(value: Any) -> str:
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(_jsonable(value))
    return str(value)


def write_report(report: Report, directory: str | os.PathLike[str]) -> dict[str, Path]:
    """Write ``report.html``, ``report.json`` and ``report.md`` into ``directory`` (created if needed).

    Each file is written to a temporary name beside it and renamed, so a
    reader never sees a half-written report.
    """
    from .errors import UsageError
    from .report_html import render_html

    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise UsageError(f"--report {directory}: exists and is not a folder")
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--report {directory}: cannot create the folder ({exc.strerror})") from None
    paths = {key: directory / name for key, name in REPORT_FILES.items()}
    write_text(paths["json"], json.dumps(report.to_dict(), indent=2) + "\n")
    write_text(paths["md"], render_markdown(report))
    write_text(paths["html"], render_html(report))
    return paths
