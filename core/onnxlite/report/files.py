"""``--report DIR``: ``report.html``, ``report.json`` and ``report.md``, each written atomically."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..atomic import write_text
from .html import render_html
from .model import Report
from .text import render_markdown

REPORT_FILES = {"html": "report.html", "json": "report.json", "md": "report.md"}


def write_report(report: Report, directory: str | os.PathLike[str]) -> dict[str, Path]:
    """Write ``report.html``, ``report.json`` and ``report.md`` into ``directory`` (created if needed).

    Each file is written to a temporary name beside it and renamed, so a
    reader never sees a half-written report.
    """
    from ..errors import UsageError

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
