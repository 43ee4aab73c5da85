"""The ``onnxlite`` command: a thin click layer over the Python API.

Errors the user can fix print one line (``Error: ...``) and exit with the
error's code (2 for usage errors); ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

import click

from ..errors import OnnxliteError
from .bench import bench
from .compare import compare
from .export import export
from .generate import generate
from .lighten import lighten
from .plugins import plugins
from .quantize import quantize
from .sweep import sweep


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    from .. import __version__

    click.echo(f"onnxlite {__version__}")
    ctx.exit(0)


@click.group(invoke_without_command=True, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Show the version and exit.")
@click.option("--list-plugins", is_flag=True,
              help="List frameworks, strategies, providers, metrics and broken plugins (`onnxlite plugins` has more).")
@click.option("--json", "as_json", is_flag=True, help="With --list-plugins: print JSON.")
@click.option("--debug", is_flag=True, help="Show tracebacks and trace plugin hook calls.")
@click.pass_context
def cli(ctx: click.Context, list_plugins: bool, as_json: bool, debug: bool) -> None:
    """Make trained models small and fast without losing their answers.

    `onnxlite COMMAND --help` describes each command.
    """
    if debug:
        os.environ.setdefault("ONNXLITE_TRACE_HOOKS", "1")
    if list_plugins:
        from ..registry import get_registry
        from .list_plugins import show

        show(get_registry(), as_json)
        return
    if ctx.invoked_subcommand is None:
        click.echo(ctx.get_help())


for command in (export, generate, quantize, compare, bench, lighten, plugins):
    cli.add_command(command)
cli.add_command(sweep)


#: signals that stop a run the way Ctrl-C does: the stack unwinds, so workers are stopped and
#: scratch folders removed by the same ``finally`` blocks (a bare SIGTERM would skip them all)
STOP_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")

#: the stop signal received during this run, if any
_stopped: int | None = None


def _on_stop_signal(signum: int, _frame: object) -> None:
    global _stopped
    _stopped = signum
    raise KeyboardInterrupt


def _handle_stop_signals() -> dict[int, Any]:
    """Install :func:`_on_stop_signal` (main thread only); returns the handlers to put back."""
    previous: dict[int, Any] = {}
    for name in STOP_SIGNALS:
        number = getattr(signal, name, None)
        if number is None:
            continue
        try:
            if signal.getsignal(number) is signal.SIG_IGN:
                continue   # e.g. SIGHUP under nohup: the user asked to ignore it
            previous[number] = signal.signal(number, _on_stop_signal)
        except (ValueError, OSError):   # not the main thread, or not allowed here
            break
    return previous


def _abort(signum: int | None) -> None:
    """Report a stop as ``Aborted.`` and exit 128 + the signal (130 for Ctrl-C)."""
    signum = signum or signal.SIGINT
    name = signal.Signals(signum).name
    click.echo("Aborted." if signum == signal.SIGINT else f"Aborted ({name}).", err=True)
    sys.exit(128 + signum)


def _one_line(text: str) -> str:
    """Whitespace runs become one space and other control characters are escaped, so an error
    quoting the user's input (``--option 'a=\\x1e'``) still prints as exactly one line."""
    text = " ".join(text.split())
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


#: commands that run models and so need an onnxruntime build (their --help does not)
_RUNTIME_COMMANDS = frozenset({"export", "quantize", "compare", "bench", "lighten", "sweep"})


def _needs_runtime(args: list[str]) -> bool:
    if {"-h", "--help"} & set(args):
        return False
    return next((a for a in args if not a.startswith("-")), None) in _RUNTIME_COMMANDS


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the CLI and turn our errors into one line and an exit code.

    SIGINT, SIGTERM and SIGHUP all end the run as ``Aborted.`` with exit code
    128 + the signal.  An error raised after a stop signal (an extension module
    that turns the interrupt into ``ImportError: initialization failed`` while
    it loads, say) is reported as the stop it is, not as that error.
    """
    global _stopped
    args = sys.argv[1:] if argv is None else argv
    debug = "--debug" in args
    # TensorFlow's C++ logs (and its oneDNN banner) go to stderr at import, before the
    # TF plugin can quiet them, e.g. when a user's file.py imports tensorflow itself.
    # The CLI runs TF only as a reference, so quiet it; the user's own settings win.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    _stopped = None
    previous = _handle_stop_signals()
    try:
        if _needs_runtime(args):
            from ..runtime import require_onnxruntime

            require_onnxruntime()   # one line naming the extras, before any model is read
        code = cli.main(args=args, prog_name="onnxlite", standalone_mode=False)
    except (click.exceptions.Abort, KeyboardInterrupt):
        _abort(_stopped)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except OnnxliteError as exc:
        if _stopped is not None:
            _abort(_stopped)
        if debug:
            raise
        click.echo(f"Error: {_one_line(str(exc))}", err=True)
        sys.exit(exc.exit_code)
    except Exception as exc:  # noqa: BLE001 - the last line of defence against bare tracebacks
        if _stopped is not None:
            _abort(_stopped)
        if debug:
            raise
        click.echo(f"Error: {type(exc).__name__}: {_one_line(str(exc))} (run with --debug for the traceback)",
                   err=True)
        sys.exit(1)
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    sys.exit(code if isinstance(code, int) else 0)
