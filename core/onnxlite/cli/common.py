"""Pieces every command shares: consoles, ``--json``, session flags, ``--option key=value``."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import click

from ..errors import UsageError
from ..specs import Spec


def console(stderr: bool = False):
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    # Pipes and CI logs get a wide, fixed width rather than rich's 80 columns, so tables stay readable.
    width = None if stream.isatty() else 160
    return Console(stderr=stderr, highlight=False, soft_wrap=False, width=width)


def emit_json(payload: Any) -> None:
    """Write ``payload`` to stdout as JSON (numpy scalars and paths made plain)."""
    click.echo(json.dumps(payload, indent=2, default=_plain))


def _plain(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    if hasattr(value, "__fspath__"):
        return str(value)
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if hasattr(value, "to_dict"):
        return value.to_dict()
    return str(value)


def json_option(f: Callable) -> Callable:
    return click.option("--json", "as_json", is_flag=True, help="Print the result as JSON for scripts.")(f)


def session_options(f: Callable) -> Callable:
    """``--provider``, ``--threads``, ``--graph-optimization`` and ``--execution-mode``."""
    f = click.option("--execution-mode", type=click.Choice(["sequential", "parallel"]), default="sequential",
                     show_default=True, help="onnxruntime execution mode.")(f)
    f = click.option("--graph-optimization", type=click.Choice(["disable", "basic", "extended", "all"]),
                     default="all", show_default=True, help="onnxruntime graph optimization level.")(f)
    f = click.option("--threads", type=click.IntRange(min=1), default=None,
                     help="Intra-op threads (default: onnxruntime's choice).")(f)
    f = click.option("--provider", default="cpu", show_default=True, metavar="NAME",
                     help="Execution provider plugin (see --list-plugins).")(f)
    return f


def session_settings(provider: str, threads: int | None, graph_optimization: str, execution_mode: str):
    from ..runtime import SessionSettings

    return SessionSettings(provider=provider, threads=threads, graph_optimization=graph_optimization,
                           execution_mode=execution_mode)


def parse_options(spec: Spec, pairs: Iterable[str] | Mapping[str, Any], flag: str = "--option") -> dict[str, Any]:
    """Turn ``key=value`` strings (or a mapping) into typed values for ``spec``'s declared options.

    Unknown names are an error that lists the valid ones; missing ones get their defaults.
    """
    raw: dict[str, Any] = {}
    items = pairs.items() if isinstance(pairs, Mapping) else (_split_pair(p, flag) for p in pairs)
    for key, value in items:
        raw[key.replace("-", "_")] = value
    valid = {o.name: o for o in spec.options}
    values = {o.name: o.default for o in spec.options}
    for key, value in raw.items():
        option = valid.get(key)
        if option is None:
            names = ", ".join(sorted(valid)) or "none"
            raise UsageError(f"{flag} {key}: {spec.kind} {spec.name!r} has no such option (valid: {names})")
        try:
            values[key] = option.parse(value)
        except ValueError as exc:
            raise UsageError(f"{flag} {key}={value}: {exc}") from None
    return values


def option_pairs(pairs: Iterable[str], flag: str) -> dict[str, str]:
    """``["key=value", ...]`` from a repeatable flag as a dict; a malformed item is a usage error."""
    return dict(_split_pair(p, flag) for p in pairs)


def _split_pair(pair: str, flag: str) -> tuple[str, str]:
    key, sep, value = pair.partition("=")
    if not sep or not key.strip():
        raise UsageError(f"{flag} {pair!r}: expected key=value")
    return key.strip(), value


def is_tty() -> bool:
    return sys.stderr.isatty()
