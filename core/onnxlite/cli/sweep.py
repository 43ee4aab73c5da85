"""``onnxlite sweep``: lighten every model of a manifest, locally or on a Ray cluster."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import click

from ..hardware import TARGET_CHOICES
from .common import json_option
from .executor_options import executor_options


@click.command()
@click.argument("manifest", metavar="MANIFEST.toml")
@click.option("-o", "--output-dir", metavar="ROOT",
              help="One OUTDIR per model goes under ROOT, plus summary.html/md/json "
                   "(default: the manifest's [sweep] output, else MANIFEST-stem.sweep).")
@click.option("--cpus-per-model", type=click.FloatRange(min=0.01), default=None,
              help="With ray: CPUs each model's lighten holds (default 1).")
@click.option("--target-cpu", metavar="KIND", default=None,
              help=f"The CPU every model will run on, when not this one ({', '.join(TARGET_CHOICES)}); "
                   "over the manifest's target_cpu (see lighten --target-cpu).")
@executor_options
@click.option("--force", is_flag=True, help="Lighten every model again, replacing the OUTDIRs an earlier run left.")
@json_option
def sweep(manifest: str, output_dir: str | None, cpus_per_model: float | None, target_cpu: str | None, force: bool,
          as_json: bool, **executor: Any) -> None:
    """Lighten every model listed in MANIFEST.toml.

    Each [[models]] entry names a source and any lighten option (data, metric,
    max_drop, strategies...); [defaults] applies to all. An interrupted sweep
    run again keeps the models that finished and runs the rest.
    Exits 1 unless every model got a winner.
    """
    from ..hardware import parse_target_cpu
    from ..sweeps.manifest import override, read_manifest
    from ..sweeps.run import sweep as run_sweep
    from .common import console

    parse_target_cpu(target_cpu)   # an unknown kind fails before the manifest is read or anything is written
    plan = read_manifest(manifest)
    if target_cpu is not None:
        plan = override(plan, "target_cpu", target_cpu)

    err = console(stderr=True)

    def event(kind: str, info: Mapping[str, Any]) -> None:
        from rich.markup import escape

        name = escape(str(info.get("name", "")))
        if kind == "sweep":
            err.print(f"[dim]·[/] {info['total']} models: {info['kept']} kept from an earlier run, "
                      f"{info['todo']} to lighten ({info['executor']})")
        elif kind == "model_start":
            err.print(f"[dim]·[/] {name}: started")
        elif kind == "model_stage":
            err.print(f"[dim]  {name}: {escape(info['message'])}[/]")
        elif kind == "model_kept":
            err.print(f"[dim]·[/] {name}: kept ({escape(info['status'])})")
        elif kind == "model_done":
            style = {"lightened": "green", "no winner": "yellow"}.get(info["status"], "red")
            err.print(f"[{style}]{info['status']:>9}[/] {name}: {escape(info['message'][:160])}")

    result = run_sweep(plan, output_dir, cpus_per_model=cpus_per_model, force=force, on_event=event, **executor)
    if as_json:
        from .common import emit_json

        emit_json(result.to_dict())
    else:
        from ..sweeps.summary import render_table

        out = console()
        out.print(render_table(result))
        out.print(f"summary: {result.reports.get('html')}")
    if not result.ok:
        raise SystemExit(1)
