"""``onnxlite lighten``: the one-command job."""

from __future__ import annotations

from typing import Any

import click

from .common import json_option, session_options, session_settings
from .executor_options import executor_from, executor_options


@click.command(short_help="Search for the lightest model within an accuracy budget.")
@click.argument("source")
@click.option("-o", "--output-dir", metavar="OUTDIR", help="Where model.onnx, recipe.toml and the report go "
              "(default: SOURCE-stem.lightened). An existing OUTDIR is left alone unless --force.")
@click.option("--max-drop", "max_drop", multiple=True, metavar="[METRIC=]DROP",
              help="Accuracy budget on the primary metric (or on METRIC); 0.01 and 1% are the same. Repeatable. "
                   "Default: 1%, or the --recipe's budget.")
@click.option("--confidence", type=click.FloatRange(min=0.5, max=0.999), default=0.95, show_default=True,
              help="A candidate passes when the one-sided upper confidence bound of its drop is within the budget.")
@click.option("--metric", "metrics", multiple=True, metavar="NAME",
              help="Metric to judge by (the first is primary), e.g. accuracy, pooled_cosine_mean. "
                   "Default: chosen from the output shapes.")
@click.option("--data", metavar="PATH", help="Held-out evaluation data (any calibration-data format; an .npz "
              "'labels' entry enables accuracy). Without --calibration it is split: part calibrates, the rest judges.")
@click.option("--data-option", "data_options", multiple=True, metavar="KEY=VALUE",
              help="Option for reading --data (tokenizer=DIR, max_length=64, size=28...).")
@click.option("--calibration", metavar="PATH", help="Calibration data for strategies that need it.")
@click.option("--calibration-option", "calibration_options", multiple=True, metavar="KEY=VALUE",
              help="Option for reading --calibration.")
@click.option("--strategies", metavar="A,B", help="Only try these strategies (comma-separated).")
@click.option("--recipe", metavar="recipe.toml", help="Reproduce a recipe.toml from an earlier run, without searching.")
@click.option("--objective", type=click.Choice(["latency", "size"]), default=None,
              help="Among candidates within budget: the fastest (ties by size, the default) or the smallest "
                   "(ties by speed). Default: latency, or the --recipe's.")
@click.option("--force", is_flag=True, help="Replace an existing OUTDIR.")
@click.option("--framework", default="auto", show_default=True, help="Framework plugin that loads SOURCE.")
@click.option("--input", "inputs", multiple=True, metavar="NAME:DTYPE[dims]",
              help="Input spec, e.g. input_ids:int64[batch,seq] (repeatable; default: derived from the model).")
@click.option("--model-class", metavar="module:Class", help="The nn.Module class for a PyTorch state dict.")
@click.option("--batch", type=click.IntRange(min=1), default=None,
              help="Batch size for the benchmark (default: 32, or fewer if the held-out data is smaller).")
@click.option("--runs", type=click.IntRange(min=1), default=20, show_default=True, help="Timed runs per model.")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Candidates quantized at once (default: bounded by cores and memory).")
@click.option("--no-partial", is_flag=True, help="Do not fall back to partial quantization when nothing fits.")
@executor_options
@session_options
@json_option
def lighten(source: str, output_dir: str | None, max_drop: tuple[str, ...], confidence: float, metrics: tuple[str, ...],
            data: str | None, data_options: tuple[str, ...], calibration: str | None,
            calibration_options: tuple[str, ...], strategies: str | None, recipe: str | None, objective: str | None,
            force: bool, framework: str, inputs: tuple[str, ...], model_class: str | None, batch: int | None,
            runs: int, workers: int | None, no_partial: bool, provider: str, threads: int | None,
            graph_optimization: str, execution_mode: str, as_json: bool, **executor: Any) -> None:
    """Find the smallest, fastest model that stays within an accuracy budget.

    Exports SOURCE (verified), quantizes it with every strategy that applies
    (third-party plugins included), judges each candidate against SOURCE's own
    outputs on held-out data, benchmarks the ones within budget interleaved,
    and writes the winner to OUTDIR/model.onnx with recipe.toml and a report.
    Exits 1 when nothing qualifies (the report is still written).
    """
    from ..search.lighten import lighten as run_lighten
    from .common import console, option_pairs

    settings = session_settings(provider, threads, graph_optimization, execution_mode)
    progress = _Progress(console(stderr=True))
    with progress:
        result = run_lighten(
            source, output_dir, framework=framework, inputs=list(inputs) or None, model_class=model_class,
            max_drop=list(max_drop) or None, metric=list(metrics) or None, data=data,
            data_options=option_pairs(data_options, "--data-option"),
            calibration=calibration,
            calibration_options=option_pairs(calibration_options, "--calibration-option"),
            settings=settings, strategies=[s.strip() for s in strategies.split(",") if s.strip()] if strategies else None,
            recipe=recipe, objective=objective, force=force, batch=batch, runs=runs, workers=workers,
            partial=not no_partial, on_event=progress.event, executor=executor_from(executor),
            confidence=confidence)
    if as_json:
        from .common import emit_json

        emit_json(result.to_dict())
    else:
        out = console()
        out.print(_table(result))
        out.print(result.message, markup=False)
        if result.model_path:
            out.print(f"model:  {result.model_path}")
            out.print(f"recipe: {result.recipe_path}")
        out.print(f"report: {result.reports.get('html')}")
    if result.winner is None:
        raise SystemExit(1)


def _table(result: Any) -> Any:
    """One line per candidate: the few figures that decide, and why it won or lost."""
    from rich.markup import escape
    from rich.table import Table

    from ..report.text import STATUS_STYLES
    from ..report.text import human_bytes

    primary = result.primary_metric
    base = result.baseline
    table = Table(title=f"onnxlite lighten: {primary} within {result.budgets.get(primary, float('nan')):.4g}",
                  title_justify="left")
    for header in ("candidate", "status", "size", "smaller", "p50 ms", "faster", primary.rsplit(".", 1)[-1],
                   "drop", "why"):
        table.add_column(header, justify="left" if header in {"candidate", "status", "why"} else "right",
                         overflow="fold", max_width=60 if header == "why" else None)
    for row in [base] + list(result.candidates):
        smaller = f"{base.size_bytes / row.size_bytes:.2f}x" if row.size_bytes and base.size_bytes else "-"
        p50 = (row.latency_ms or {}).get("p50")
        faster = f"{base.p50 / p50:.2f}x" if p50 and base.latency_ms else "-"
        value, drop = row.metrics.get(primary), row.drops.get(primary)
        style = STATUS_STYLES.get(row.status, "")
        why = row.reason if len(row.reason) <= 120 else row.reason[:117] + "..."
        table.add_row(escape(row.name), f"[{style}]{row.status}[/]" if style else row.status,
                      human_bytes(row.size_bytes) if row.size_bytes else "-", smaller,
                      f"{p50:.2f}" if p50 else "-", faster, f"{value:.4f}" if value is not None else "-",
                      _drop_cell(drop, row.intervals.get(primary)), escape(why))
    return table


def _drop_cell(drop: float | None, interval: dict | None) -> str:
    """The measured drop, and its one-sided upper confidence bound when it has one."""
    if drop is None:
        return "-"
    upper = (interval or {}).get("upper")
    return f"{drop:.4f} ≤{upper:.3g}" if upper is not None and upper != drop else f"{drop:.4f}"


class _Progress:
    """A rich progress bar over the candidates, plus one line per finished step (on stderr)."""

    def __init__(self, err: Any):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self.err = err
        self.bar = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TimeElapsedColumn(), console=err, transient=True)
        self.task = None

    def __enter__(self) -> _Progress:
        self.bar.__enter__()
        self.task = self.bar.add_task("starting", total=None)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.bar.__exit__(*exc)

    def event(self, kind: str, info: dict) -> None:
        from rich.markup import escape

        info = {k: escape(v) if isinstance(v, str) else v for k, v in info.items()}
        if kind in {"stage", "step"}:
            self.bar.update(self.task, description=info["message"])
            if kind == "stage":
                self.bar.console.print(f"[dim]·[/] {info['message']}")
        elif kind == "note":
            self.bar.console.print(f"[yellow]![/] {info['message']}")
        elif kind == "candidates":
            self.bar.update(self.task, description="quantizing and judging candidates", total=info["total"],
                            completed=0)
        elif kind == "candidate_start":
            self.bar.update(self.task, description=f"candidate {info['name']}")
        elif kind == "candidate_done":
            self.bar.advance(self.task)
            primary = info.get("primary")
            value = info["metrics"].get(primary) if primary else None
            figure = f" {primary}={value:.4f}" if isinstance(value, float) else ""
            style = {"ok": "green", "rejected": "yellow", "failed": "red"}.get(info["status"], "white")
            reason = f" ({info['reason'][:120]})" if info["status"] != "ok" and info["reason"] else ""
            self.bar.console.print(f"[{style}]{info['status']:>8}[/] {info['name']}{figure}{reason}")
        elif kind == "bench":
            self.bar.update(self.task, description=f"benchmarking: {info['text']}", total=1.0,
                            completed=info["fraction"])
