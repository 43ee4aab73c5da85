"""``onnxlite bench MODEL [MODEL ...]``: a thin layer over :func:`onnxlite.benchmark.bench.bench`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from ..errors import OnnxliteError
from .common import console, emit_json, is_tty, json_option, option_pairs, session_options, session_settings, warn_isa


@click.command(short_help="Latency, throughput, memory and size of ONNX models, interleaved.")
@click.argument("models", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--runs", type=click.IntRange(min=1), default=100, show_default=True,
              help="Timed runs per model at most (after the warm-up); fewer once the p50s are stable.")
@click.option("--min-runs", type=click.IntRange(min=1), default=20, show_default=True,
              help="Timed runs per model at least, before the p50s may be judged stable (each ratio to the first "
                   "model moved less than 1.5% over the last 3 rounds, and its 95% interval is that narrow). "
                   "Give --min-runs equal to --runs for a fixed count.")
@click.option("--seconds", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Measure each model for about this many seconds of running time instead of --runs.")
@click.option("--warmup", type=click.IntRange(min=0), default=10, show_default=True,
              help="Untimed runs per model before measuring.")
@click.option("--batch", type=click.IntRange(min=1), default=1, show_default=True,
              help="Batch size, on each input's sample axis (the dim named batch, else the first dynamic one; "
                   "a scalar input has none).")
@click.option("--seq-len", type=click.IntRange(min=1), default=128, show_default=True,
              help="Size of the other dynamic axes (sequence length) for generated inputs.")
@click.option("--data", type=click.Path(path_type=Path), default=None,
              help="Run on samples from this .npz (keyed by input name) instead of generated inputs.")
@click.option("--data-option", "data_options", multiple=True, metavar="KEY=VALUE",
              help="Option for reading --data (see onnxlite.data), repeatable.")
@click.option("--prompt-lengths", default="128,512", show_default=True, metavar="N[,N...]",
              help="Decoders: prompt lengths whose prefill tokens/s and time to first token are measured.")
@click.option("--new-tokens", type=click.IntRange(min=2), default=32, show_default=True,
              help="Decoders: tokens each decode run generates (prompts of the first --prompt-lengths).")
@click.option("--decode-batches", default="1,4", show_default=True, metavar="B[,B...]",
              help="Decoders: batch sizes whose decode tokens/s are measured.")
@click.option("--rounds", type=click.IntRange(min=1), default=3, show_default=True,
              help="Decoders: interleaved rounds of every scenario on every model (figures are their medians).")
@click.option("--name", "names", multiple=True, help="Name for each model, in order (default: file names).")
@click.option("--title", default=None, help="Title of the table and report.")
@click.option("--report", "report_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Write report.html, report.json and report.md into this folder.")
@session_options
@json_option
def bench(models: tuple[Path, ...], runs: int, min_runs: int, seconds: float | None, warmup: int, batch: int,
          seq_len: int, data: Path | None, data_options: tuple[str, ...], names: tuple[str, ...], title: str | None,
          report_dir: Path | None, provider: str, threads: int | None, graph_optimization: str,
          execution_mode: str, as_json: bool, prompt_lengths: str = "128,512", new_tokens: int = 32,
          decode_batches: str = "1,4", rounds: int = 3) -> None:
    """Latency, throughput, load time, memory, size and op count of one or more ONNX models.

    Several models are measured interleaved (A B A B ...), each in its own
    process, and compared with the first: size ratio, speedup, memory ratio.
    Decoder language models with a key/value cache (an exported folder, or its
    model.onnx) get generation figures instead: prefill tokens/s and time to
    first token per prompt length, decode tokens/s per batch, peak RSS, KV-cache
    bytes per token and size (docs/measure.md).
    """
    settings = session_settings(provider, threads, graph_optimization, execution_mode)
    if _decoders(models):
        _bench_generation(models, names, settings, as_json, prompt_lengths, new_tokens, decode_batches, rounds)
        return
    from ..benchmark.bench import bench as run_bench
    from ..benchmark.stability import footnote
    from ..report.files import write_report
    from ..report.text import render_table

    err = console(stderr=True)
    with _progress(err, enabled=is_tty()) as update:
        result = run_bench(list(models), batch=batch, seq_len=seq_len, runs=(min_runs, runs), warmup=warmup,
                           seconds=seconds, settings=settings, data=data,
                           data_options=option_pairs(data_options, "--data-option"), names=list(names) or None,
                           progress=update)
    warn_isa(result.settings)
    report = result.to_report(title)
    written = write_report(report, report_dir) if report_dir else {}
    if as_json:
        payload = result.to_dict(latencies=False)
        if written:
            payload["report"] = {k: str(v) for k, v in written.items()}
        emit_json(payload)
    else:
        out = console()
        out.print(render_table(report, width=out.width))
        line = footnote(result.settings.get("stopping"))
        if line:
            out.print(line, markup=False, highlight=False)
        if written:
            out.print(f"Report: {written['html']} (and report.json, report.md)")
    failed = [r for r in result.rows if r.status == "failed"]
    if failed:
        raise OnnxliteError("; ".join(f"{r.name} failed: {r.note}" for r in failed))


def _decoders(models: tuple[Path, ...]) -> bool:
    """Whether the models are decoders with a cache (all of them; a mix is a usage error)."""
    from ..errors import UsageError
    from ..evaluation.decoder_run import is_onnx_decoder

    found = [is_onnx_decoder(model) for model in models]
    if any(found) and not all(found):
        odd = next(m for m, f in zip(models, found) if not f)
        raise UsageError(f"{odd}: not a decoder with a key/value cache, as the others are; bench decoders "
                         "(generation) and other models (latency) in separate runs")
    return bool(found) and all(found)


def _ints(text: str, flag: str) -> tuple[int, ...]:
    from ..errors import UsageError

    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise UsageError(f"{flag} {text!r}: expected comma-separated integers such as 128,512") from None
    return values


def _bench_generation(models, names, settings, as_json: bool, prompt_lengths: str, new_tokens: int,
                      decode_batches: str, rounds: int) -> None:
    from ..benchmark.generation import GenerationPlan, bench_generation

    plan = GenerationPlan(prompt_lengths=_ints(prompt_lengths, "--prompt-lengths"), new_tokens=new_tokens,
                          batches=_ints(decode_batches, "--decode-batches"), rounds=rounds)
    err = console(stderr=True)
    with _progress(err, enabled=is_tty()) as update:
        result = bench_generation(list(models), plan, settings, names=list(names) or None, progress=update)
    warn_isa(result.settings)
    if as_json:
        emit_json(result.to_dict())
    else:
        click.echo("\n".join(result.table_lines()))
    failed = [r for r in result.rows if r.status == "failed"]
    if failed:
        raise OnnxliteError("; ".join(f"{r.name} failed: {r.note}" for r in failed))


class _progress:
    """A rich progress bar on stderr; when stderr is not a terminal (CI logs, pipes), one line per step and
    per quarter of the run instead, as lighten prints, so a minute of measuring never looks like a hang."""

    def __init__(self, err, enabled: bool):
        self.err, self.enabled = err, enabled
        self.bar: Any = None

    def __enter__(self):
        if not self.enabled:
            seen: dict[str, Any] = {"name": None, "quarter": -1}

            def lines(fraction: float, name: str) -> None:
                # "measuring A", "measuring B"... alternate every turn: a new step is a new verb, or
                # loading/warming up a new model, not a new name in the interleaving
                step = name if not name.startswith("measuring") else "measuring"
                quarter = int(max(0.0, min(fraction, 1.0)) * 4)
                if step != seen["name"] or quarter > seen["quarter"]:
                    seen["name"], seen["quarter"] = step, quarter
                    self.err.print(f"· {name} ({fraction:.0%})", markup=False, highlight=False)

            return lines
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
                            TimeElapsedColumn(), console=self.err, transient=True)
        self.bar.start()
        task = self.bar.add_task("starting", total=1.0)

        def update(fraction: float, name: str) -> None:
            self.bar.update(task, completed=fraction, description=name)

        return update

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.stop()


