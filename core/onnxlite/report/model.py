"""Reports shared by ``compare``, ``bench`` and ``lighten``: one data model, three renderings.

A :class:`Report` is a list of :class:`ModelRow` plus the settings it was
measured under.  :mod:`~onnxlite.report.text` renders it as the rich table
the commands print and as Markdown, :mod:`~onnxlite.report.html` as a
self-contained page (inline CSS and SVG chart, nothing fetched from the
network), and :mod:`~onnxlite.report.files` writes ``report.html``,
``report.json`` and ``report.md`` into a folder, each file atomically.

Ratios are always taken against the *baseline* row: the row whose status is
``reference`` if there is one, else the first row.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any

from ..figures import Figures, row_dict

LATENCY_KEYS = ("p50", "p90", "p99", "mean")


@dataclass
class ModelRow(Figures):
    """One model's row (its figures: :class:`~onnxlite.figures.Figures`).  Anything not measured stays
    ``None`` (shown as a dash, never as 0)."""

    name: str
    path: str
    op_count: int | None = None
    status: str = "ok"          # ok | failed | rejected | winner | reference
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return jsonable(row_dict(self))

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
    #: lighten's verdict in one sentence (the page opens with it), and its budgets by metric key
    verdict: str = ""
    budgets: dict[str, float] = field(default_factory=dict)
    #: why each default metric judges its output (evaluation.metrics.KIND_RULES), by metric key
    metric_why: dict[str, str] = field(default_factory=dict)
    #: per budgeted rate metric: how many changed answers its budget allows on the judging samples
    #: (``allowed``, ``samples``, ``by``: the confidence bound or the measured drop; search.confidence)
    allowances: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: per row name: drops, their intervals, what was quantized and what stayed float, why it won or lost
    details: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: versions, CPU and its instruction-set flags, threads, the command line (see :func:`environment`)
    environment: dict[str, Any] = field(default_factory=dict)
    #: the export check, one row per output and feed set (ExportResult's verification rows)
    verification: list[dict[str, Any]] = field(default_factory=list)
    #: extra (heading, inline SVG) charts for the HTML page (compare --per-node's bars); its data is in details
    charts: list[tuple[str, str]] = field(default_factory=list)

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
        from .. import __version__

        base = self.baseline_index
        return jsonable({
            "title": self.title,
            "kind": self.kind,
            "onnxlite": __version__,
            "primary_metric": self.primary_metric,
            "settings": self.settings,
            "baseline": None if base is None else self.rows[base].name,
            "rows": [row.to_dict() | {"ratios": ratios} for row, ratios in zip(self.rows, self.ratios())],
            "sections": [{"heading": h, "text": t} for h, t in self.sections],
            "verdict": self.verdict, "budgets": self.budgets, "metric_why": self.metric_why,
            "allowances": self.allowances, "details": self.details,
            "environment": self.environment, "verification": self.verification,
            "charts": [{"heading": h, "svg": svg} for h, svg in self.charts],
        })

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Report:
        return cls(title=data["title"], kind=data["kind"], rows=[ModelRow.from_dict(r) for r in data["rows"]],
                   settings=dict(data.get("settings") or {}), primary_metric=data.get("primary_metric"),
                   sections=[(s["heading"], s["text"]) for s in data.get("sections") or []],
                   verdict=data.get("verdict") or "", budgets=dict(data.get("budgets") or {}),
                   metric_why=dict(data.get("metric_why") or {}), allowances=dict(data.get("allowances") or {}),
                   details=dict(data.get("details") or {}), environment=dict(data.get("environment") or {}),
                   verification=list(data.get("verification") or []),
                   charts=[(c["heading"], c["svg"]) for c in data.get("charts") or []])


def _p50(row: ModelRow) -> float | None:
    return (row.latency_ms or {}).get("p50")


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or not b:
        return None
    return float(a) / float(b)


def jsonable(value: Any) -> Any:
    """Plain JSON types; NaN/inf become None so the file stays valid JSON."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
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




def environment(threads: int | None = None, command: list[str] | None = None,
                target_cpu: str | None = None) -> dict[str, Any]:
    """What the figures were measured on: package versions, the CPU with the instruction sets quantized
    kernels use (AVX2, AVX-512, VNNI, AMX; :mod:`onnxlite.hardware`), its short ISA name and whether its
    int8 kernels can saturate, the ``--target-cpu`` kind, cores, threads and the exact command line."""
    import platform
    import shlex
    import sys
    from importlib.metadata import PackageNotFoundError, version

    from ..hardware import detect

    versions = {}
    for name in ("onnxlite", "onnxruntime", "onnx", "torch", "tensorflow", "tensorflow-cpu", "transformers"):
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            continue
    here = detect()
    flags = set(here.flags)
    wanted = [("AVX2", "avx2"), ("AVX-512", "avx512f"), ("AVX-512 VNNI", "avx512_vnni"), ("AVX-VNNI", "avx_vnni"),
              ("AMX", "amx_int8")] if here.arch == "x86_64" else [("dot product", "asimddp"), ("i8mm", "i8mm")]
    return {"versions": versions, "python": platform.python_version(), "cpu": here.cpu,
            "cpu_flags": {label: flag in flags for label, flag in wanted} if flags else {},
            "isa": f"{here.isa} ({here.kernels})", **({"target_cpu": target_cpu} if target_cpu else {}),
            "cores": os.cpu_count(), "threads": threads if threads else "onnxruntime default",
            "command": shlex.join(command if command is not None else sys.argv)}
