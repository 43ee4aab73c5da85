"""``onnxlite --list-plugins``: what is installed, where it came from, and what is broken."""

from __future__ import annotations

from typing import Any

from ..registry import HOOKS, KIND_LABELS, Registry
from .common import console, emit_json


def describe(registry: Registry) -> dict[str, Any]:
    """The listing as plain data (what ``--json`` prints)."""
    from .. import __version__

    payload: dict[str, Any] = {"onnxlite": __version__}
    for kind in HOOKS:
        rows = []
        for entry in registry.all(kind):
            reason = entry.unavailable_reason()
            rows.append({
                "name": entry.name,
                "plugin": entry.plugin.name,
                "distribution": entry.plugin.distribution,
                "version": entry.plugin.version,
                "builtin": entry.plugin.builtin,
                "available": reason is None,
                "reason": reason,
                "description": entry.spec.description,
                "options": [{"name": o.name, "type": o.describe_type(), "default": o.default, "help": o.help}
                            for o in entry.spec.options],
            })
        payload[KIND_LABELS[kind]] = rows
    payload["broken"] = [{"name": b.name, "distribution": b.distribution, "version": b.version, "error": b.error}
                         for b in registry.broken]
    payload["conflicts"] = [{"kind": kind, "name": name, "message": registry.conflict_message(kind, name)}
                            for kind, name in sorted(registry.conflicts)]
    return payload


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
            table.add_row(row["name"], "-", row["message"])
        out.print(table)
