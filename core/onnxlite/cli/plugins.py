"""``onnxlite plugins``: every installed plugin by kind, what each offers, and what is broken (as in llm).

The listing reads specs only: ``requires`` is checked with ``find_spec`` and
nothing heavy is imported, so it is as fast as ``--help``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import click

from .common import console, emit_json

#: what each kind is called on the command line and in the JSON (registry.KIND_LABELS, kept import-free)
KINDS = ("frameworks", "strategies", "providers", "metrics")

WHERE_TO_LOOK = """\b
Where to look next:
  onnxlite quantize --strategy NAME --help  a strategy's options and grid
  onnxlite plugins --json                   every field of every spec
  docs/plugins.md                           the hooks; writing a plugin
  ONNXLITE_TRACE_HOOKS=1 (or --debug)       trace each hook call
  ONNXLITE_BLOCK_PLUGINS=a,b                skip plugins (e.g. a conflict)
"""


def cli_value(value: Any) -> str:
    """A value as it is typed after ``--option name=``: lists comma-separated, booleans lower-case."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple, set, frozenset)):
        return ",".join(cli_value(v) for v in value)
    return str(value)


def cli_options(options: Mapping[str, Any]) -> str:
    """An option set in command-line spelling (``op_types=MatMul,Gemm,Gather reduce_range=true``)."""
    return " ".join(f"{k}={cli_value(v)}" for k, v in options.items()) or "defaults"


def _options(spec: Any) -> list[dict[str, Any]]:
    # ``type`` spells choices and lists as help does: "qint8|quint8", "str[,...]".
    return [{"name": o.name, "type": o.describe_type(), "default": o.default, "help": o.help} for o in spec.options]


def _row(entry: Any) -> dict[str, Any]:
    spec, plugin = entry.spec, entry.plugin
    reason = entry.unavailable_reason()
    row: dict[str, Any] = {
        "name": spec.name, "plugin": plugin.name, "distribution": plugin.distribution, "version": plugin.version,
        "builtin": plugin.builtin, "available": reason is None, "reason": reason, "description": spec.description,
        "requires": list(spec.requires), "install": spec.install or None, "options": _options(spec),
    }
    if spec.kind == "framework":
        row["detects"] = spec.detect is not None
    elif spec.kind == "quantizer":
        row.update(needs_calibration=spec.needs_calibration, applies_to=list(spec.applies_to),
                   avoid=list(spec.avoid), grid=[dict(g) for g in spec.grid],
                   grid_cli=[cli_options(g) for g in spec.grid], gpu_only_gain=spec.gpu_only_gain,
                   skip_check=spec.skip_reason is not None)
    elif spec.kind == "provider":
        row.update(ort_name=spec.ort_name, packages=list(spec.packages),
                   provider_options=dict(spec.provider_options), fast_formats=list(spec.fast_formats),
                   platforms=list(spec.platforms))
    elif spec.kind == "metric":
        row.update(higher_is_better=spec.higher_is_better, default=spec.default)
    return row


def describe(registry: Any) -> dict[str, Any]:
    """The whole listing as plain data: what ``onnxlite plugins --json`` (and ``--list-plugins --json``) print."""
    from .. import __version__
    from ..registry import HOOKS, KIND_LABELS

    payload: dict[str, Any] = {"onnxlite": __version__}
    provides: dict[str, dict[str, list[str]]] = {}
    for kind in HOOKS:
        rows = [_row(entry) for entry in registry.all(kind)]
        payload[KIND_LABELS[kind]] = rows
        for row in rows:
            provides.setdefault(row["plugin"], {}).setdefault(KIND_LABELS[kind], []).append(row["name"])
    pm = registry.host.pm
    payload["plugins"] = [
        {"name": info.name, "distribution": info.distribution, "version": info.version, "builtin": info.builtin,
         "hooks": sorted(c.name for c in (pm.get_hookcallers(pm.get_plugin(info.name)) or [])),
         "provides": provides.get(info.name, {})}
        for info in registry.host.info.values()]
    payload["broken"] = [{"name": b.name, "distribution": b.distribution, "version": b.version, "error": b.error}
                         for b in registry.broken]
    payload["conflicts"] = [
        {"kind": kind, "name": name, "message": registry.conflict_message(kind, name),
         "distributions": [f"{r.plugin.distribution} {r.plugin.version}" for r in registry.conflicts[(kind, name)]]}
        for kind, name in sorted(registry.conflicts)]
    return payload


def _facts(row: dict[str, Any], kind: str) -> str:
    """The few things a user picks a plugin by, in one line."""
    if kind == "strategies":
        facts = [f"applies to {', '.join(row['applies_to'])}",
                 "needs --calibration" if row["needs_calibration"] else "no calibration"]
        if row["avoid"]:
            facts.append(f"skipped on {', '.join(row['avoid'])} unless named")
        if row["gpu_only_gain"]:
            facts.append("pays off mainly on GPUs")
        facts.append(f"lighten tries: {'; '.join(row['grid_cli'])}")
        return " · ".join(facts)
    if kind == "providers":
        return f"{row['ort_name']}; fast: {', '.join(row['fast_formats']) or '-'}"
    if kind == "metrics":
        return ("higher is better" if row["higher_is_better"] else "lower is better") + \
            ("" if row["default"] else " · only with --metric")
    return ""


def show(payload: dict[str, Any], kinds: tuple[str, ...] = KINDS) -> None:
    from rich.markup import escape
    from rich.table import Table

    out = console()
    for kind in kinds:
        table = Table(title=kind.capitalize(), title_justify="left", expand=False)
        table.add_column("name", overflow="fold", no_wrap=True)
        table.add_column("from", overflow="fold")
        table.add_column("about", overflow="fold", ratio=1)
        for row in payload[kind]:
            origin = "built-in" if row["builtin"] else f"{row['distribution']} {row['version']}"
            about = escape(row["description"])
            facts = _facts(row, kind)
            if facts:
                about += f"\n[dim]{escape(facts)}[/]"
            if not row["available"]:
                about += f"\n[yellow]unavailable:[/] {escape(row['reason'])}"
            table.add_row(escape(row["name"]), escape(origin), about)
        if not payload[kind]:
            table.add_row("-", "-", "none installed")
        out.print(table)
    if payload["broken"] or payload["conflicts"]:
        table = Table(title="Broken plugins", title_justify="left", title_style="bold red")
        for column in ("plugin", "from", "error"):
            table.add_column(column, overflow="fold")
        for row in payload["broken"]:
            table.add_row(escape(row["name"]), escape(f"{row['distribution']} {row['version']}"), escape(row["error"]))
        for row in payload["conflicts"]:
            table.add_row(escape(row["name"]), escape(", ".join(row["distributions"])), escape(row["message"]))
        out.print(table)


@click.command(short_help="Installed plugins by kind, where they come from, and broken ones.",
               epilog=WHERE_TO_LOOK)
@click.option("--kind", "kinds", multiple=True, type=click.Choice(KINDS),
              help="Only this kind (repeatable). Default: all four.")
@click.option("--json", "as_json", is_flag=True,
              help="Print every field of every spec (options with types and defaults, grid, install hint, "
                   "availability), the plugins and their distributions, conflicts and broken plugins.")
def plugins(kinds: tuple[str, ...], as_json: bool) -> None:
    """List the installed plugins by kind, where each comes from, and what is broken.

    Built-in plugins and third-party packages (the `onnxlite` entry-point
    group) are listed alike. A plugin that fails to load, or two that claim
    one name, are shown under "Broken plugins" with the error; everything
    else keeps working. Same as `onnxlite --list-plugins`, with more detail.
    """
    from ..registry import get_registry

    payload = describe(get_registry())
    if as_json:
        if kinds:
            payload = {k: v for k, v in payload.items() if k not in KINDS or k in kinds}
        emit_json(payload)
        return
    show(payload, kinds or KINDS)
