"""``--executor``, ``--ray-address``, ``--bench-on``, ``--shared-dir`` and ``--max-retries``, for lighten and sweep."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click


def executor_options(f: Callable) -> Callable:
    f = click.option("--max-retries", type=click.IntRange(min=0), default=None,
                     help="With ray: re-runs of a task whose worker or node died, before it counts as failed "
                          "(default 2).")(f)
    f = click.option("--shared-dir", metavar="DIR", help="With ray: a folder every node sees at the same path; "
                     "models travel through it instead of Ray's object store.")(f)
    f = click.option("--bench-on", metavar="LABEL", help="With ray: benchmark on a node with this label "
                     "(key=value[,key=value]) or custom resource, holding all of its CPUs.")(f)
    f = click.option("--ray-address", metavar="ADDR", help="With ray: the cluster to join (default: RAY_ADDRESS, "
                     "else a Ray started on this machine).")(f)
    f = click.option("--executor", type=click.Choice(["local", "ray"]), default=None,
                     help="Where the work runs: processes on this machine (default) or Ray tasks "
                          "(pip install 'onnxlite[ray]').")(f)
    return f


def executor_from(flags: dict[str, Any]) -> Any:
    """The executor the flags ask for (Ray is not imported here: it connects when it first runs a task)."""
    from ..executors import get_executor

    return get_executor(flags.get("executor"), ray_address=flags.get("ray_address"), bench_on=flags.get("bench_on"),
                        shared_dir=flags.get("shared_dir"), max_retries=flags.get("max_retries"))
