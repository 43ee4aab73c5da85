"""``onnxlite lighten``: the one-command job."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import click

from ..hardware import TARGET_CHOICES
from .common import json_option, session_options, session_settings, source_options, target_runtime_option
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
@click.option("--batch", type=click.IntRange(min=1), default=None,
              help="Batch size for the benchmark (default: 32, or fewer if the held-out data is smaller).")
@click.option("--runs", type=click.IntRange(min=1), default=20, show_default=True,
              help="Timed runs per model at most in the final benchmark; it may stop after 10, once the p50 ratios "
                   "against fp32 are stable (moved less than 1.5% over 3 rounds, 95% intervals that narrow).")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Candidates quantized at once (default: bounded by cores and memory).")
@click.option("--no-partial", is_flag=True, help="Do not fall back to partial quantization when nothing fits.")
@click.option("--target-cpu", metavar="KIND", default=None,
              help=f"The CPU the model will run on, when not this one ({', '.join(TARGET_CHOICES)}): where its "
                   "int8 kernels answer differently from this machine's, only saturation-free int8 variants are tried.")
@click.option("--time-budget", metavar="DURATION", default=None,
              help="Stop starting new work after this long (5m, 90s, 1h30m); what passed is benchmarked and the "
                   "best so far written, with what was left untried.")
@click.option("--cache-dir", metavar="DIR", default=None,
              help="Reuse quantized models and judgements from DIR (default: $XDG_CACHE_HOME/onnxlite).")
@click.option("--no-cache", is_flag=True, help="Neither read nor write the result cache.")
@source_options()
@executor_options
@session_options
@target_runtime_option
@json_option
def lighten(source: str, output_dir: str | None, max_drop: tuple[str, ...], confidence: float, metrics: tuple[str, ...],
            data: str | None, data_options: tuple[str, ...], calibration: str | None,
            calibration_options: tuple[str, ...], strategies: str | None, recipe: str | None, objective: str | None,
            force: bool, framework: str, inputs: tuple[str, ...], model_class: str | None,
            framework_options: tuple[str, ...], batch: int | None, runs: int, workers: int | None,
            no_partial: bool, target_cpu: str | None, time_budget: str | None, cache_dir: str | None,
            no_cache: bool, provider: str, threads: int | None,
            graph_optimization: str, execution_mode: str, target_runtime: str | None, as_json: bool,
            **executor: Any) -> None:
    """Find the smallest, fastest model that stays within an accuracy budget.

    Exports SOURCE (verified), quantizes it with every strategy that applies
    (third-party plugins included), judges each candidate against SOURCE's own
    outputs on held-out data, benchmarks the ones within budget interleaved,
    and writes the winner to OUTDIR/model.onnx with recipe.toml and a report.
    Exits 1 when nothing qualifies (the report is still written).
    """
    from ..search.config import LightenConfig
    from ..search.lighten import run as run_lighten
    from .common import console, option_pairs

    settings = session_settings(provider, threads, graph_optimization, execution_mode)
    from ..search.trials import parse_duration

    parse_duration(time_budget)   # a bad duration is a usage error before any work
    progress = LiveProgress(console(stderr=True), as_json)
    config = LightenConfig(
        framework=framework, inputs=list(inputs) or None, model_class=model_class,
        max_drop=list(max_drop) or None, metric=list(metrics) or None, data=data,
        data_options=option_pairs(data_options, "--data-option"),
        calibration=calibration,
        calibration_options=option_pairs(calibration_options, "--calibration-option"),
        settings=settings,
        strategies=[s.strip() for s in strategies.split(",") if s.strip()] if strategies else None,
        recipe=recipe, objective=objective, force=force, batch=batch, runs=runs, workers=workers,
        partial=not no_partial, on_event=progress.event, executor=executor_from(executor),
        confidence=confidence, framework_options=list(framework_options) or None, target_runtime=target_runtime,
        target_cpu=target_cpu, cache_dir=cache_dir, cache=not no_cache, time_budget=time_budget)
    with progress:
        result = run_lighten(source, output_dir, config)
    if as_json:
        from .common import emit_json

        emit_json(result.to_dict())
    else:
        out = console()
        out.print(lighten_table(result, out.width))
        # every budgeted default says why it judges (a detector head's worst-slice budget beside cosine)
        whys = (result.evidence or {}).get("metric_why", {})
        judged: dict[str, Any] = {}
        for key in [result.primary_metric, *(k for k in result.budgets if k != result.primary_metric)]:
            if whys.get(key):
                judged.setdefault(whys[key], []).append(key)
        for why, keys in judged.items():
            out.print(f"judged by {' and '.join(keys)}: {why}", markup=False)
        for line in reason_lines(result, out.width):
            out.print(f"- {line}", markup=False)
        out.print("")
        out.print(result.message, markup=False)
        if result.model_path:
            out.print(f"model:  {result.model_path}")
            out.print(f"recipe: {result.recipe_path}")
        out.print(f"report: {result.reports.get('html')}")
    if result.winner is None:
        raise SystemExit(1)


def lighten_table(result: Any, width: int = 80) -> Any:
    """One compact row per candidate, sized to ``width`` columns: status, size and p50 (each with its ratio
    to fp32 under it), and the drop (with its upper confidence bound) on every budgeted metric.  The reasons
    are too long for a cell at 80 columns; :func:`reason_lines` lists them under the table."""
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    from ..report.text import STATUS_STYLES, allowance_note, human_bytes, wrap_name, wrap_words

    base = result.baseline
    keys = _budget_keys(result)
    shorts = _short_keys(keys)
    allowances = (result.evidence or {}).get("allowances") or {}
    title = "onnxlite lighten: budget " + ", ".join(
        f"{k} drop ≤ {result.budgets[k]:.4g}{allowance_note(allowances.get(k))}" for k in keys if k in result.budgets)
    caption = ("size and p50 below them: ÷N is N times smaller or faster than fp32, ×N N times larger or "
               "slower; drop ≤ upper confidence bound; a red drop is over budget")
    metric_width = 8
    fixed = 8 + 8 + 7 + len(keys) * (metric_width + 2) + 2 * 4
    name_width = max(12, min(60, width - fixed - 2))
    table = Table(title=title, title_justify="left", caption=caption, caption_justify="left", box=box.SIMPLE_HEAD,
                  pad_edge=False, expand=False)
    table.add_column("candidate", justify="left", no_wrap=True)
    table.add_column("status", justify="left", no_wrap=True)
    table.add_column("size", justify="right", no_wrap=True)
    table.add_column("p50 ms", justify="right", no_wrap=True)
    for key in keys:
        table.add_column(wrap_words(f"{shorts[key]} drop", metric_width), justify="right", no_wrap=True)
    noise = [result.float_noise] if getattr(result, "float_noise", None) is not None else []
    for row in [base] + noise + list(result.candidates):
        p50 = (row.latency_ms or {}).get("p50")
        size = human_bytes(row.size_bytes) if row.size_bytes else "-"
        if row is not base and row.size_bytes and base.size_bytes:
            size += "\n" + _times(base.size_bytes, row.size_bytes)
        speed = f"{p50:.2f}" if p50 else "-"
        if row is not base and p50 and base.latency_ms:
            speed += "\n" + _times(base.p50, p50)
        style = STATUS_STYLES.get(row.status, "")
        status = row.status.replace("lost its grid", "lost its\ngrid")   # the column stays 9 wide at 80 columns
        cells = [escape(wrap_name(row.name, name_width)), f"[{style}]{status}[/]" if style else status, size, speed]
        for key in keys:
            cells.append(_drop_cell(row.drops.get(key), row.intervals.get(key), result.budgets.get(key)))
        table.add_row(*cells)
    return table


def _budget_keys(result: Any) -> list[str]:
    """Every budgeted metric, the primary first."""
    return list(dict.fromkeys([result.primary_metric, *result.budgets]))


def _short_keys(keys: list[str]) -> dict[str, str]:
    """``last_hidden_state.cosine_mean`` -> ``cosine_mean`` unless two budgets would then read the same."""
    shorts = {k: k.rsplit(".", 1)[-1] for k in keys}
    return shorts if len(set(shorts.values())) == len(shorts) else {k: k for k in keys}


def _times(before: float, after: float) -> str:
    """``÷3.94`` for 3.94 times smaller/faster, ``×1.01`` for larger/slower, ``=`` when the same to 2 digits."""
    ratio = before / after
    if round(ratio, 2) == 1:
        return "="
    return f"÷{ratio:.2f}" if ratio > 1 else f"×{1 / ratio:.2f}"


def _drop_cell(drop: float | None, interval: dict | None, budget: float | None = None) -> str:
    """The measured drop and, under it, its one-sided upper confidence bound; red when over budget."""
    if drop is None:
        return "-"
    upper = (interval or {}).get("upper")
    text = f"{drop:.4f}" + (f"\n≤{upper:.4f}" if upper is not None and upper != drop else "")
    worst = upper if upper is not None else drop
    return f"[red]{text}[/]" if budget is not None and worst > budget else text


def reason_lines(result: Any, width: int) -> list[str]:
    """``name: why`` for every candidate, whole (paths shortened to file names), for under the table."""
    from ..report.text import shorten_paths
    from ..search.results import changes_text

    rows = ([result.float_noise] if getattr(result, "float_noise", None) is not None else []) + list(result.candidates)
    return [f"{row.name} ({row.status}): {shorten_paths(row.reason)}"
            + (f" (answers: {changes}" + ")" if (changes := changes_text(row)) else "")
            for row in rows if row.reason]


class LiveProgress:
    """A rich progress bar over the candidates, plus one line per finished step (on stderr).

    With ``--json`` each event is also one JSON line on stderr (stdout keeps the one result document),
    so a script can follow "candidate 7 of 17" and the estimate of the time left.
    """

    def __init__(self, err: Any, as_json: bool = False):
        self.as_json = as_json
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self.err = err
        self.bar = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TimeElapsedColumn(), console=err, transient=True)
        self.task: Any = None

    def __enter__(self) -> LiveProgress:
        self.bar.__enter__()
        self.task = self.bar.add_task("starting", total=None)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.bar.__exit__(*exc)

    def event(self, kind: str, info: Mapping[str, Any]) -> None:
        from rich.markup import escape

        if self.as_json:
            import json
            import sys

            print(json.dumps({"event": kind} | dict(info), default=str), file=sys.stderr, flush=True)
            return
        raw, info = info, {k: escape(v) if isinstance(v, str) else v for k, v in info.items()}
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
        elif kind == "probe_done":
            self.bar.update(self.task, description=f"{info.get('stage', 'probes')}: {_of(info)}",
                            total=info.get("total"), completed=info.get("done"))
        elif kind == "candidate_done":
            self.bar.update(self.task, description=f"candidate {_of(info)}", total=info.get("total"),
                            completed=info.get("done"))
            primary: str | None = info.get("primary")
            value = info["metrics"].get(primary) if primary else None
            # one line at 80 columns: metric keys lose their output's name (the final table has them whole)
            prefixes = sorted({k.rsplit(".", 1)[0] + "." for k in info["metrics"] if "." in k}, key=len, reverse=True)
            figure = f" {primary.rsplit('.', 1)[-1]}={value:.4f}" if primary and isinstance(value, float) else ""
            style = {"ok": "green", "rejected": "yellow", "failed": "red"}.get(info["status"], "white")
            reason = ""
            if info["status"] != "ok" and info["reason"]:
                figure = ""   # the reason holds the figures that matter, and the width is better spent on them
                line = f"{info['status']:>8} {info['name']}"
                # the whole reason is in the final table; here it must fit one line without lying
                from ..report.text import ellipsize, shorten_paths

                room = max(20, self.bar.console.width - len(line) - 3)
                text = shorten_paths(raw["reason"]).removeprefix("over budget: ")
                for prefix in prefixes:
                    text = text.replace(prefix, "")
                reason = f" ({escape(ellipsize(text, room))})"
            cached = " [dim](cached)[/]" if info.get("how") == "cached" else ""
            self.bar.console.print(f"[{style}]{info['status']:>8}[/] {info['name']}{cached}{figure}{reason}")
        elif kind == "bench":
            self.bar.update(self.task, description=f"benchmarking: {info['text']}", total=1.0,
                            completed=info["fraction"])


def _of(info: dict) -> str:
    """``7 of 17, about 1 min 20 s left`` (the estimate once one has run)."""
    text = f"{info.get('done')} of {info.get('total')}"
    eta = info.get("eta_seconds")
    if isinstance(eta, (int, float)):
        minutes, seconds = divmod(round(eta), 60)
        text += f", about {minutes} min {seconds} s left" if minutes else f", about {seconds} s left"
    return text
