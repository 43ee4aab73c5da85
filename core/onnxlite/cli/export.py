"""``onnxlite export``: a thin layer over :func:`onnxlite.conversion.export.export`."""

from __future__ import annotations

import click

from ..report.text import human_bytes
from .common import console, emit_json, json_option, session_options, session_settings, source_options


@click.command(short_help="PyTorch / TensorFlow / ONNX to ONNX, verified against the source.")
@click.argument("source")
@click.option("-o", "--output", required=True, type=click.Path(),
              help="Where to write the .onnx file; a folder for a causal LM exported with its KV cache.")
@click.option("--opset", type=click.IntRange(7, 23), default=None, help="ONNX opset (default 18).")
@click.option("--exporter", type=click.Choice(["torchscript", "dynamo", "genai-builder"]), default=None,
              help="PyTorch exporter (default torchscript, falling back to dynamo on failure); a causal LM "
                   "folder: genai-builder (onnxruntime-genai's, where it supports the model) or torchscript.")
@click.option("--samples", type=click.Path(), default=None, help="Real inputs (.npz keyed by input name) to verify on.")
@click.option("--atol", type=float, default=None, help="Absolute tolerance (default 1e-4).")
@click.option("--rtol", type=float, default=None, help="Relative tolerance (default 1e-3).")
@click.option("--no-verify", is_flag=True, help="Skip the onnxruntime check against the source (not recommended).")
@click.option("--external-data", is_flag=True, help="Store weights in OUT.onnx.data (always done above 2 GB).")
@click.option("--decode-steps", type=click.IntRange(1, 4096), default=32, show_default=True,
              help="Causal LM folder: greedy steps checked against PyTorch through the cache.")
@source_options()
@session_options
@json_option
def export(source: str, output: str, framework: str, inputs: tuple[str, ...], opset: int | None, exporter: str | None,
           samples: str | None, atol: float | None, rtol: float | None, no_verify: bool, model_class: str | None,
           external_data: bool, decode_steps: int, framework_options: tuple[str, ...], provider: str,
           threads: int | None,
           graph_optimization: str, execution_mode: str, as_json: bool) -> None:
    """Export SOURCE (PyTorch, TensorFlow or ONNX) to a verified ONNX file.

    \b
    SOURCE is a Python reference (model.py:net, pkg.module:build), a TorchScript
    file, a torch.export .pt2, a state dict .pt with --model-class, a transformers
    folder, a GGUF file, a Keras/SavedModel source, or an .onnx file.

    \b
    A causal LM with -o FOLDER: model.onnx with its KV cache, the tokenizer,
    generation_config.json and genai_config.json (runs in onnxruntime-genai),
    checked on batched padded prompts and --decode-steps greedy tokens.
    """
    from ..conversion.export import export as run_export
    from ..conversion.verify import DEFAULT_ATOL, DEFAULT_RTOL

    settings = session_settings(provider, threads, graph_optimization, execution_mode)
    err = console(stderr=True)
    with err.status("Exporting...", spinner="dots") as status:
        result = run_export(source, output, framework=framework, inputs=list(inputs) or None, opset=opset,
                            exporter=exporter, samples=samples, atol=DEFAULT_ATOL if atol is None else atol,
                            rtol=DEFAULT_RTOL if rtol is None else rtol, verify=not no_verify,
                            model_class=model_class, external_data=external_data or None, settings=settings,
                            framework_options=list(framework_options) or None, decode_steps=decode_steps,
                            on_step=lambda message: status.update(f"{message}..."))
    if as_json:
        emit_json(result.to_dict())
        return
    if hasattr(result, "engine"):
        show_decoder(result)
        return
    show(result)


def show_decoder(result) -> None:
    from rich.markup import escape
    from rich.table import Table

    from ..conversion.causal import describe

    table = Table(title=escape(f"Exported {result.source} -> {result.path}"), show_header=False,
                  title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    for key, value in describe(result):
        table.add_row(key, escape(value))
    console().print(table)


def show(result) -> None:
    from rich.markup import escape
    from rich.table import Table

    out = console()
    summary = Table(title=escape(f"Exported {result.source} -> {result.path}"), show_header=False, title_justify="left")
    summary.add_column(style="bold")
    summary.add_column()
    summary.add_row("framework", f"{result.framework} ({result.exporter})")
    summary.add_row("opset", str(result.opset))
    summary.add_row("size", human_bytes(result.size_bytes))
    summary.add_row("inputs", escape("\n".join(result.inputs)))
    summary.add_row("outputs", escape("\n".join(result.outputs)))
    if result.fallback:
        summary.add_row("fallback", escape(result.fallback))
    for note in result.notes:
        summary.add_row("note", escape(note))
    out.print(summary)
    if result.verification is None:
        out.print("[yellow]Not verified (--no-verify).[/yellow]")
        return
    table = Table(title=f"Verification in onnxruntime (atol {result.verification.atol:g}, "
                        f"rtol {result.verification.rtol:g})", title_justify="left")
    for column in ("output", "max |diff|", "cosine mean", "cosine min", "result"):
        table.add_column(column, justify="left" if column == "output" else "right")
    for row in result.rows:
        cos_mean = "exact" if row["exact"] else f"{row['cosine_mean']:.6f}"
        cos_min = "" if row["exact"] else f"{row['cosine_min']:.6f}"
        table.add_row(escape(row["output"]), f"{row['max_abs_diff']:.3g}", cos_mean, cos_min,
                      "[green]ok[/green]" if row["passed"] else "[red]FAIL[/red]")
    out.print(table)
    sets = sorted({r.feed_set for r in result.verification.rows})
    out.print(f"Checked on {len(sets)} input sets: {'; '.join(sets)}.")
