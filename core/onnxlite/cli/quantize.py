"""``onnxlite quantize``: one strategy, one model, a table of what changed."""

from __future__ import annotations

from typing import Any

import click

from ..report.text import human_bytes, size_change
from .common import console, emit_json, json_option, option_pairs, target_runtime_option

STRATEGY_FLAGS = ("--strategy", "-s")


def _strategy_in(args: list[str]) -> str | None:
    """The ``--strategy`` value on the command line, read before click parses it (``--help`` is eager)."""
    for i, arg in enumerate(args):
        if arg in STRATEGY_FLAGS and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("--strategy="):
            return arg.split("=", 1)[1]
    return None


class StrategyCommand(click.Command):
    """A command whose ``--help`` also documents the options of the strategy named by ``--strategy``."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta["onnxlite.strategy"] = _strategy_in(args)
        return super().parse_args(ctx, args)

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        super().format_help(ctx, formatter)
        name = ctx.meta.get("onnxlite.strategy")
        from ..quantization.run import get_strategy, strategies
        from .plugins import cli_options, cli_value

        if not name:
            with formatter.section("Strategies (--strategy NAME --help shows its options)"):
                formatter.write_dl([(r.name, r.spec.description + ("" if r.available else
                                                                 f" [unavailable: {r.unavailable_reason()}]"))
                                    for r in strategies()])
            return
        entry = get_strategy(name)  # a typo raises "did you mean", printed as one line by main()
        spec = entry.spec
        with formatter.section(f"Strategy {spec.name!r} ({entry.plugin.distribution} {entry.plugin.version})"):
            formatter.write_text(spec.description)
            facts = [f"applies to: {', '.join(spec.applies_to)}",
                     f"needs calibration: {'yes (--calibration PATH)' if spec.needs_calibration else 'no'}"]
            if spec.gpu_only_gain:
                facts.append("mainly pays off on GPUs")
            if not entry.available:
                facts.append(f"unavailable here: {entry.unavailable_reason()}")
            formatter.write_text("; ".join(facts))
        with formatter.section(f"Options of {spec.name!r} (--option NAME=VALUE)"):
            rows = []
            for option in spec.options:
                # Defaults as typed on the command line (true, MatMul,Gemm), as in the grid below; a list gets
                # a space after each comma so that help can wrap it between items, not inside a name.
                default = option.default
                default = ("none" if default in (None, (), []) else ", ".join(cli_value(d) for d in default)
                           if isinstance(default, (list, tuple)) else cli_value(default))
                rows.append((f"{option.name}={option.describe_type()}", f"{option.help} [default: {default}]"))
            if rows:
                formatter.write_dl(rows)
            else:
                formatter.write_text("(none)")
        if spec.grid and any(spec.grid):
            with formatter.section("Tried by `lighten`"):
                formatter.write_text("; ".join(cli_options(g) for g in spec.grid))


@click.command(cls=StrategyCommand, short_help="Quantize an ONNX model with one strategy (built-in or plugin).")
@click.argument("model", type=click.Path(dir_okay=False, path_type=str))
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=str), default=None,
              help="Output .onnx path [default: MODEL.<strategy>.onnx beside the input].")
@click.option(*STRATEGY_FLAGS, "strategy", default="dynamic", show_default=True, metavar="NAME",
              help="Quantization strategy (see the list below; --strategy NAME --help for its options).")
@click.option("--option", "options", multiple=True, metavar="KEY=VALUE", help="A strategy option (repeatable).")
@click.option("--calibration", type=click.Path(path_type=str), default=None,
              help="Calibration data for strategies that need it (see docs/calibration.md).")
@click.option("--calibration-option", "calibration_options", multiple=True, metavar="KEY=VALUE",
              help="An option for the calibration data loader (repeatable).")
@click.option("--no-check", is_flag=True, help="Skip the smoke run of input vs output (on the first --calibration "
              "samples, else on a generated padded batch).")
@click.option("--force", is_flag=True, help="Replace an existing output file.")
@target_runtime_option
@json_option
def quantize(model: str, output: str | None, strategy: str, options: tuple[str, ...], calibration: str | None,
             calibration_options: tuple[str, ...], no_check: bool, force: bool, target_runtime: str | None,
             as_json: bool) -> None:
    """Quantize MODEL.onnx with one strategy and write a lighter ONNX model.

    The input is never modified; the output is written atomically and records
    the strategy and its options in its metadata.
    """
    from ..quantization.run import run_quantize

    err = console(stderr=True)
    calib = option_pairs(calibration_options, "--calibration-option")

    def warn(message: str) -> None:
        if not as_json:
            err.print(f"[yellow]warning:[/] {message}")

    with err.status(f"Quantizing {model} with {strategy}...", spinner="dots"):
        result = run_quantize(model, output, strategy, list(options), calibration, calib,
                              check=not no_check, on_warning=warn, force=force, target_runtime=target_runtime)
    if as_json:
        emit_json(result.to_dict())
        return
    print_result(result)


def _fmt(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value) or "-"
    return str(value)


def print_result(result) -> None:
    from rich.table import Table

    out = console()
    table = Table(title=f"{result.strategy}: {result.source} -> {result.path}", show_header=False)
    table.add_column("", style="bold")
    table.add_column("")
    table.add_row("size", f"{human_bytes(result.size_before)} -> {human_bytes(result.size_after)} "
                          f"({size_change(result.size_before, result.size_after)})")
    table.add_row("quantized ops", ", ".join(f"{op} {n}" for op, n in result.quantized_ops.items()) or "none")
    # An option left to the strategy (None) shows the value the strategy chose, once, instead of "None"
    # beside a details row with the real value.
    resolved = {k: result.details[k] for k, v in result.options.items() if v is None and k in result.details}
    table.add_row("options", ", ".join(f"{k}={_fmt(resolved[k])} (auto)" if k in resolved else f"{k}={_fmt(v)}"
                                       for k, v in result.options.items()) or "-")
    table.add_row("excluded nodes", ", ".join(result.excluded_nodes) or "none")
    table.add_row("time", f"{result.seconds:.2f} s")
    if result.hardware:   # where it was made and smoke-checked; its metadata says the same
        kernels = "U8S8 int8 kernels can saturate" if result.hardware.get("int8_saturates") else "int8 kernels exact"
        table.add_row("made on", f"{result.hardware['isa']} ({kernels})")
    check = result.details.get("check")
    if check and check.get("ran"):
        cos = [v["cosine_min"] for v in check.get("outputs", {}).values()]
        table.add_row("smoke check", _check_ran_on(check) + (f", min cosine {min(cos):.4f}" if cos else ""))
    for key, value in result.details.items():
        if key == "check" or key in resolved:
            continue
        if isinstance(value, dict):
            value = ", ".join(f"{k} {v}" for k, v in value.items() if v) or "none"
        table.add_row(key.replace("_", " "), _fmt(value))
    for note in result.notes:
        table.add_row("note", note)
    if result.warnings:
        # each was printed on stderr as it happened; repeating them here printed every warning twice
        table.add_row("[yellow]warnings[/]", f"{len(result.warnings)} (printed above)")
    out.print(table)


def _check_ran_on(check: dict[str, Any]) -> str:
    """What the smoke check really ran on: the user's samples (the only ones this command takes are
    --calibration's) or a generated, padded batch (quantization/smoke.py records which)."""
    count = check.get("batch")
    if check.get("samples") == "generated":
        return f"ran on a generated, padded batch of {count}"
    return f"ran on the first {count} sample{'s' if count != 1 else ''} of --calibration"
