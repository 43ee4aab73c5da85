"""The ``onnxlite`` command: a thin click layer over the Python API.

Errors the user can fix print one line (``Error: ...``) and exit with the
error's code (2 for usage errors); ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import os
import sys

import click

from ..errors import OnnxliteError
from .bench import bench
from .compare import compare
from .export import export
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
@click.option("--list-plugins", is_flag=True, help="List frameworks, strategies, providers, metrics and broken plugins (`onnxlite plugins` has more).")
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


for command in (export, quantize, compare, bench, lighten, plugins):
    cli.add_command(command)
cli.add_command(sweep)


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the CLI and turn our errors into one line and an exit code."""
    args = sys.argv[1:] if argv is None else argv
    debug = "--debug" in args
    # TensorFlow's C++ logs (and its oneDNN banner) go to stderr at import, before the
    # TF plugin can quiet them, e.g. when a user's file.py imports tensorflow itself.
    # The CLI runs TF only as a reference, so quiet it; the user's own settings win.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    try:
        code = cli.main(args=args, prog_name="onnxlite", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        click.echo("Interrupted.", err=True)
        sys.exit(130)
    except OnnxliteError as exc:
        if debug:
            raise
        click.echo(f"Error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except Exception as exc:  # noqa: BLE001 - the last line of defence against bare tracebacks
        if debug:
            raise
        message = " ".join(str(exc).split())
        click.echo(f"Error: {type(exc).__name__}: {message} (run with --debug for the traceback)", err=True)
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)
