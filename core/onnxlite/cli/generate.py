"""``onnxlite generate``: a thin layer over :func:`onnxlite.decoding.generate`."""

from __future__ import annotations

import click

from .common import console, emit_json, json_option


@click.command(short_help="Greedy text from an exported causal LM folder.")
@click.argument("model", type=click.Path())
@click.argument("prompts", nargs=-1, required=True)
@click.option("--max-new-tokens", type=click.IntRange(min=1), default=64, show_default=True,
              help="New tokens per prompt at most (each prompt also stops at its end-of-sequence token).")
@click.option("--threads", type=click.IntRange(min=1), default=None,
              help="Intra-op threads (default: onnxruntime's choice).")
@json_option
def generate(model: str, prompts: tuple[str, ...], max_new_tokens: int, threads: int | None, as_json: bool) -> None:
    """Continue each PROMPT greedily with the LM in MODEL (a folder `onnxlite export` wrote).

    \b
    Several prompts run as one padded batch (on the side the graph's
    attention takes); each stops at its end-of-sequence token or after
    --max-new-tokens.
    """
    from pathlib import Path

    from ..decoding.generate import generate as run_generate
    from ..errors import UsageError

    if not Path(model).exists():
        raise UsageError(f"{model}: no such model folder")
    err = console(stderr=True)
    with err.status("Generating...", spinner="dots"):
        result = run_generate(model, list(prompts), max_new_tokens, threads=threads)
    if as_json:
        emit_json(result.to_dict())
        return
    out = console()
    from rich.markup import escape

    for prompt, text, stopped in zip(result.prompts, result.texts, result.stopped):
        out.print(f"[bold]{escape(prompt)}[/bold]{escape(text)}" + ("" if stopped else " [dim]...[/dim]"))
    if result.capped_to is not None:
        err.print(f"new tokens cut to {result.capped_to} to fit the model's context")
    err.print(f"prefill {result.prefill_tokens_per_second:.0f} tok/s, decode {result.decode_tokens_per_second:.1f} "
              f"tok/s ({result.decode_steps} steps)")
