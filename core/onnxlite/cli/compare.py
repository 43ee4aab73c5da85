"""``onnxlite compare``: accuracy of candidate ONNX models against a reference model."""

from __future__ import annotations

import click

from .common import (
    json_option,
    session_options,
    session_settings,
    source_options,
    warn_isa,
)


@click.command(short_help="Accuracy of candidates against the source; --max-drop for CI.")
@click.argument("reference")
@click.argument("candidates", nargs=-1, required=True)
@click.option("--data", "data", metavar="PATH", help="Samples to compare on (same formats as calibration data; "
              "an .npz 'labels' entry enables accuracy). Default: generated, padded samples.")
@click.option("--data-option", "data_options", multiple=True, metavar="KEY=VALUE",
              help="Option for reading --data (e.g. tokenizer=DIR, max_length=64).")
@click.option("--metric", "metrics", multiple=True, metavar="NAME",
              help="Metric (or OUTPUT.METRIC) to report, repeatable; the first is the primary one. "
                   "Default: chosen from the output shapes.")
@click.option("--max-drop", "max_drop", multiple=True, metavar="[METRIC=]DROP",
              help="Fail (exit 1) when a candidate drops more than this on the primary metric "
                   "(or on METRIC); 0.01 and 1% are the same. Repeatable.")
@click.option("--confidence", type=click.FloatRange(min=0.5, max=0.999), default=0.95, show_default=True,
              help="Every drop gets an interval; a candidate passes when the one-sided upper confidence bound "
                   "of its drop is within the budget (as lighten decides).")
@click.option("--samples", type=click.IntRange(min=1), default=None,
              help="Use at most this many samples of --data; without --data, generate exactly this many "
                   "(default 32).")
@click.option("--batch", "batch_size", type=click.IntRange(min=1), default=8, show_default=True,
              help="Samples per onnxruntime run.")
@click.option("--batch-size", "old_batch_size", type=click.IntRange(min=1), default=None, hidden=True,
              help="The old spelling of --batch (every other command says --batch).")
@click.option("--seq-len", type=click.IntRange(min=1), default=16, show_default=True,
              help="Length of generated sequences (dynamic non-batch axes).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for generated samples.")
@click.option("--per-node", "per_node", is_flag=True,
              help="Also attribute the error node by node (one QDQ CANDIDATE, REFERENCE its float .onnx): the "
                   "drop with only each node quantized, with only it left float, and the SQNR its output's "
                   "Q/DQ adds; worst first (docs/metrics.md).")
@click.option("--report", "report_dir", metavar="DIR", help="Also write report.html, report.json and report.md here.")
@source_options("REFERENCE")
@session_options
@json_option
def compare(reference: str, candidates: tuple[str, ...], data: str | None, data_options: tuple[str, ...],
            framework: str, metrics: tuple[str, ...], max_drop: tuple[str, ...], confidence: float,
            samples: int | None, per_node: bool,
            batch_size: int, old_batch_size: int | None, seq_len: int, seed: int, report_dir: str | None,
            inputs: tuple[str, ...], model_class: str | None, framework_options: tuple[str, ...], provider: str,
            threads: int | None, graph_optimization: str, execution_mode: str, as_json: bool) -> None:
    """Score CANDIDATE ONNX models against REFERENCE.

    REFERENCE is an ONNX model or any source `export` accepts (a PyTorch module
    as file.py:name, a TensorFlow SavedModel...), so a quantized model is judged
    against the original framework's outputs.  With --max-drop the command is a
    pass/fail check: exit 1 when a candidate is over budget, that is when the
    one-sided --confidence upper bound of its drop is above it.  The drop is
    1 - value for similarities and agreements, reference minus candidate for
    accuracy, and the value itself for absolute differences (docs/metrics.md).

    Decoder language models with a key/value cache (exported folders) are
    judged on a text corpus (--data corpus.txt, documents separated by blank
    lines): perplexity (its budget relative: perplexity=5%), kl,
    next_token_agreement and greedy_agreement, on windows set with
    --data-option window=N and stride=N (context tokens).
    """
    from rich.markup import escape

    from ..evaluation.compare import compare as run_compare
    from .common import console, option_pairs

    settings = session_settings(provider, threads, graph_optimization, execution_mode)
    options = option_pairs(data_options, "--data-option") or None
    err = console(stderr=True)
    if per_node and len(candidates) != 1:
        raise click.UsageError("--per-node takes exactly one CANDIDATE")
    if per_node and _is_decoder(candidates[0]):
        raise click.UsageError("--per-node attributes an output's error node by node; a decoder language model "
                               "is judged on its corpus, so it has no per-node form")
    with err.status("comparing...") as status:
        source, specs, framework = _reference(reference, framework, inputs, model_class, framework_options,
                                              settings)
        result = run_compare(source, list(candidates), data=data, metrics=list(metrics) or None, inputs=specs,
                             max_drop=list(max_drop) or None, settings=settings, framework=framework,
                             data_options=options, samples=samples,
                             batch_size=batch_size if old_batch_size is None else old_batch_size, seq_len=seq_len,
                             seed=seed, confidence=confidence, progress=lambda msg: status.update(f"{msg}..."))
        nodes = _per_node(reference, candidates[0], data, metrics, status, settings=settings, data_options=options,
                          samples=samples, batch_size=batch_size if old_batch_size is None else old_batch_size,
                          seq_len=seq_len, seed=seed) if per_node else None
    result.reference = reference   # a reference loaded here is named by what the user typed
    warn_isa(result.settings)
    paths = None
    if report_dir:
        from ..report.files import write_report

        paths = write_report(_with_per_node(result.to_report(), nodes, result.candidates[0].name), report_dir)
    if as_json:
        from .common import emit_json

        payload = result.to_dict() | ({"per_node": nodes.to_dict()} if nodes is not None else {})
        if paths:
            payload["report"] = {k: str(v) for k, v in paths.items()}
        emit_json(payload)
    else:
        out = console()
        out.print(_table(result))
        for note in result.notes:
            out.print(f"[yellow]note[/]: {escape(note)}")
        for c in result.candidates:
            for note in c.notes:
                out.print(f"[yellow]{c.name}[/]: {note}")
        _print_per_node(out, nodes)
        if paths:
            out.print(f"report: {paths['html']}")
    if result.passed is False:
        for c in result.candidates:
            if c.passed is False:
                click.echo(f"FAIL {c.name}: {'; '.join(c.failures)}", err=True)
        click.get_current_context().exit(1)
    if result.passed:
        click.echo("PASS: every candidate is within --max-drop", err=True)


def _is_decoder(path: str) -> bool:
    from ..evaluation.decoder_compare import is_decoder_compare

    return is_decoder_compare(None, [path])


def _per_node(reference, candidate, data, metrics, status, **options):
    """``--per-node``: one implementation, :func:`onnxlite.evaluation.per_node.per_node_compare`, on the
    same samples and metrics as the table (``options``: the reference's loading, as compare's)."""
    from ..evaluation.per_node import per_node_compare

    return per_node_compare(reference, candidate, data, metrics=list(metrics) or None,
                            progress=lambda msg: status.update(f"per node: {msg}..."), **options)


def _with_per_node(report, nodes, name: str):
    """``report`` with the per-node list, its chart and its data (under ``details[name]``), when measured."""
    if nodes is not None:
        report.sections.append(("Error by node", nodes.markdown()))
        report.charts.append(("Error by node (worst first)", nodes.chart_svg()))
        report.details.setdefault(name, {})["per_node"] = nodes.to_dict()
    return report


def _print_per_node(out, nodes) -> None:
    from rich.markup import escape

    if nodes is None:
        return
    click.echo("\n".join(nodes.table_lines()))
    for note in nodes.notes:
        out.print(f"[yellow]note[/]: {escape(note)}")


def _reference(reference: str, framework: str, inputs, model_class, framework_options, settings):
    """REFERENCE as compare() takes it, and the --input specs.  A source that needs --model-class or --option
    is loaded here, exactly as export and lighten load it, and handed over loaded."""
    from ..conversion.export import _coerce_inputs, load_for_export

    specs = _coerce_inputs(list(inputs)) or None
    if not (model_class or framework_options):
        return reference, specs, framework
    loaded = load_for_export(reference, framework, inputs=specs, model_class=model_class, settings=settings,
                             framework_options=list(framework_options))
    return loaded.model, specs or loaded.input_specs, loaded.framework


def _table(result):
    """Metrics down, models across, so that two candidates fit in 80 columns: each cell holds the value and,
    under it, the drop and its one-sided upper confidence bound; red where the verdict failed that budget."""
    from rich.markup import escape
    from rich.table import Table

    from ..report.text import fmt_bytes

    bound = (f"drop ≤ its one-sided {result.confidence:.0%} upper bound, which a --max-drop budget must stay within"
             if result.confidence is not None else "drop")
    table = Table(title=escape(f"{result.reference} ({result.framework}) on {result.data}"), title_justify="left",
                  caption=f"value, then {bound}; drop > 0 is worse than the reference (docs/metrics.md)",
                  caption_justify="left")
    table.add_column("metric")
    table.add_column("reference", justify="right")
    for c in result.candidates:
        table.add_column(escape(c.name), justify="right")
    table.add_row("size", fmt_bytes(result.reference_size_bytes), *[fmt_bytes(c.size_bytes) for c in result.candidates])
    for key in result.metrics:
        label = escape(key)
        label = f"[bold]{label}[/]" if key == result.primary_metric else label
        cells = [_cell(c, key) for c in result.candidates]
        table.add_row(label, f"{result.reference_metrics[key]:.4f}", *cells)
    if any(c.passed is not None for c in result.candidates):
        table.add_row("verdict", "", *["-" if c.passed is None else ("[green]pass[/]" if c.passed else "[red]FAIL[/]")
                                       for c in result.candidates])
    return table


def _cell(candidate, key: str) -> str:
    """``value`` over ``drop ≤bound``; coloured by the verdict's own failures, so the table never re-decides."""
    value, loss = candidate.metrics.get(key), candidate.drops.get(key)
    if value is None or loss is None:
        return "-"
    upper = (candidate.intervals.get(key) or {}).get("upper")
    text = f"{value:.4f}\n{loss:+.4f}" + (f" ≤{upper:.4f}" if upper is not None else "")
    if key in candidate.budgets:
        over = any(f.startswith(f"{key}:") for f in candidate.failures)
        text = f"[{'red' if over else 'green'}]{text}[/]"
    return text
