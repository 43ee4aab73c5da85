"""``onnxlite --list-plugins``: what is installed, where it came from, and what is broken.

The short table; ``onnxlite plugins`` is the detailed listing, and both print
the same ``--json`` (:func:`onnxlite.cli.plugins.describe`).
"""

from __future__ import annotations

from ..registry import HOOKS, KIND_LABELS, Registry
from .common import console, emit_json
from .plugins import describe


def show(registry: Registry, as_json: bool) -> None:
    payload = describe(registry)
    if as_json:
        emit_json(payload)
        return
    from rich.table import Table

    out = console()
    for kind in HOOKS:
        label = KIND_LABELS[kind]
        table = Table(title=label.capitalize(), title_justify="left", expand=False)
        for column in ("name", "plugin", "from", "status", "description"):
            table.add_column(column, overflow="fold")
        for row in payload[label]:
            status = "[green]available[/]" if row["available"] else f"[yellow]unavailable[/]: {row['reason']}"
            table.add_row(row["name"], row["plugin"], f"{row['distribution']} {row['version']}", status,
                          row["description"])
        if not payload[label]:
            table.add_row("-", "-", "-", "-", "none installed")
        out.print(table)
    if payload["broken"] or payload["conflicts"]:
        table = Table(title="Broken plugins", title_justify="left", title_style="bold red")
        for column in ("plugin", "from", "error"):
            table.add_column(column, overflow="fold")
        for row in payload["broken"]:
            table.add_row(row["name"], f"{row['distribution']} {row['version']}", row["error"])
        for row in payload["conflicts"]:
            table.add_row(row["name"], ", ".join(row["distributions"]), row["message"])
        out.print(table)
