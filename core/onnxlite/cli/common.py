"""Pieces every command shares: consoles, ``--json``, session flags, ``--option key=value``."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any

import click

from ..specs import option_pairs  # noqa: F401  (the one typed-option parser lives in the core)


def console(stderr: bool = False):
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    # Pipes and CI logs get a wide, fixed width rather than rich's 80 columns, so tables stay readable;
    # COLUMNS, when set, says how wide the reader's screen really is.
    width = None if stream.isatty() or os.environ.get("COLUMNS", "").isdigit() else 160
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
                     help="Execution provider plugin (`onnxlite plugins --kind providers` lists them).")(f)
    return f


def source_options(what: str = "SOURCE") -> Callable[[Callable], Callable]:
    """``--framework``, ``--model-class``, ``--input`` and ``--option``: the same four flags, names and metavars
    on every command that loads a source (export, compare, lighten and its --recipe replay)."""
    def decorate(f: Callable) -> Callable:
        f = click.option("--option", "framework_options", multiple=True, metavar="KEY=VALUE",
                         help=f"A framework plugin option for loading {what} (repeatable), e.g. "
                              "signature=serving_default for a SavedModel; `onnxlite plugins --json` lists them.")(f)
        f = click.option("--input", "inputs", multiple=True, metavar="NAME:DTYPE[dims]",
                         help=f"An input of {what}, e.g. input_ids:int64[batch,seq]; named dims are dynamic axes. "
                              "Repeat per input (default: derived from the model).")(f)
        f = click.option("--model-class", "model_class", default=None, metavar="MODULE:CLASS",
                         help=f"The nn.Module class when {what} is a PyTorch state dict (models.py:Net).")(f)
        f = click.option("--framework", default="auto", show_default=True, metavar="NAME",
                         help=f"Framework plugin that loads {what} (pytorch, tensorflow, onnx...); auto works "
                              "it out from the path.")(f)
        return f
    return decorate


def target_runtime_option(f: Callable) -> Callable:
    return click.option("--target-runtime", metavar="onnxruntime==X.Y", default=None,
                        help="Keep the output loadable by this onnxruntime release (any build: -gpu, -openvino): "
                             "lowers the IR version or opset where valid, refuses what it cannot load.")(f)


def session_settings(provider: str, threads: int | None, graph_optimization: str, execution_mode: str):
    from ..runtime import SessionSettings

    return SessionSettings(provider=provider, threads=threads, graph_optimization=graph_optimization,
                           execution_mode=execution_mode)


def is_tty() -> bool:
    return sys.stderr.isatty()


def warn_isa(settings: Mapping[str, Any]) -> None:
    """The one line bench and compare print when a model was judged on a CPU kind whose int8 answers differ."""
    if settings.get("isa_warning"):
        click.echo(f"warning: {settings['isa_warning']}", err=True)
