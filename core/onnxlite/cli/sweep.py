"""``onnxlite sweep``: lighten every model of a manifest, locally or on a Ray cluster."""

from __future__ import annotations

import click

from .common import json_option


@click.command()
@click.argument("manifest", metavar="MANIFEST.toml")
@click.option("-o", "--output-dir", metavar="ROOT", help="One OUTDIR per model goes under ROOT, plus summary.html/md/json "
              "(default: the manifest's [sweep] output, else MANIFEST-stem.sweep).")
@click.option("--executor", type=click.Choice(["local", "ray"]), default=None,
              help="local: one model after another on this machine (default); ray: every model a Ray task.")
@click.option("--ray-address", metavar="ADDR", help="The Ray cluster to use (default: RAY_ADDRESS, else a local one).")
@click.option("--bench-on", metavar="LABEL", help="Benchmark every model on a node with this label (key=value) "
              "or custom resource, holding all its CPUs.")
@click.option("--cpus-per-model", type=click.FloatRange(min=0.01), default=None,
              help="With ray: CPUs each model's lighten holds (default 1).")
@click.option("--max-retries", type=click.IntRange(min=0), default=None,
              help="With ray: re-runs of a model whose worker or node died (default 2).")
@click.option("--shared-dir", metavar="DIR", help="With ray: a folder every node sees at the same path; files "
              "travel through it instead of the object store.")
@click.option("--force", is_flag=True, help="Lighten every model again, replacing the OUTDIRs an earlier run left.")
@json_option
def sweep(manifest: str, output_dir: str | None, executor: str | None, ray_address: str | None,
          bench_on: str | None, cpus_per_model: float | None, max_retries: int | None, shared_dir: str | None,
          force: bool, as_json: bool) -> None:
    """Lighten every model listed in MANIFEST.toml.

    Each [[models]] entry names a source and any lighten option (data, metric,
    max_drop, strategies...); [defaults] applies to all. An interrupted sweep
    run again keeps the models that finished and runs the rest.
    Exits 1 unless every model got a winner.
    """
    from ..sweep import sweep as run_sweep
    from .common import console

    err = console(stderr=True)

    def event(kind: str, info: dict) -> None:
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

    result = run_sweep(manifest, output_dir, executor=executor, ray_address=ray_address, bench_on=bench_on,
                       cpus_per_model=cpus_per_model, shared_dir=shared_dir, max_retries=max_retries, force=force,
                       on_event=event)
    if as_json:
        from .common import emit_json

        emit_json(result.to_dict())
    else:
        from ..sweep.summary import render_table

        out = console()
        out.print(render_table(result))
        out.print(f"summary: {result.reports.get('html')}")
    if not result.ok:
        raise SystemExit(1)
