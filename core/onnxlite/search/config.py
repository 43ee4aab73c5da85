"""``LightenConfig``: everything one ``lighten`` run is asked to do, as one frozen record.

The CLI builds one, the Python API builds one from its keywords (``lighten(model, data=..., max_drop=...)``
or ``lighten(model, config=LightenConfig(...), runs=5)``), ``recipe.toml`` records the fields a replay needs
(:func:`onnxlite.search.recipes.record`), and a replay fills in what the user left out with
:func:`dataclasses.replace` (:func:`onnxlite.search.recipes.replay`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any

from ..events import Event
from ..stats import DEFAULT_CONFIDENCE

if TYPE_CHECKING:
    from ..executors import Executor
    from ..runtime import SessionSettings


#: the accuracy budget when neither the caller nor a recipe gives one
DEFAULT_MAX_DROP = "1%"


@dataclass(frozen=True)
class LightenConfig:
    """The settings of one ``lighten`` run; :func:`onnxlite.search.lighten.lighten` documents each field."""

    # the source and how it exports
    framework: str = "auto"
    inputs: Sequence[Any] | None = None
    model_class: str | None = None
    framework_options: Any = None
    opset: int | None = None
    exporter: str | None = None
    # the budget and how it is judged
    max_drop: Any = None
    metric: Sequence[str] | str | None = None
    confidence: float = DEFAULT_CONFIDENCE
    objective: str | None = None
    # the data
    data: Any = None
    data_options: Mapping[str, Any] | None = None
    calibration: Any = None
    calibration_options: Mapping[str, Any] | None = None
    split: float = 0.4
    # what is searched
    strategies: Sequence[str] | None = None
    recipe: str | os.PathLike[str] | None = None
    partial: bool = True
    max_float_nodes: int | None = None
    target_cpu: str | None = None
    target_runtime: str | None = None
    # where and how it runs
    settings: SessionSettings | None = None
    batch: int | None = None
    runs: int = 20
    workers: int | None = None
    executor: str | Executor = "local"
    ray_address: str | None = None
    bench_on: str | None = None
    cache_dir: str | os.PathLike[str] | None = None
    cache: bool = True
    time_budget: str | float | None = None
    force: bool = False
    on_event: Event | None = None

    @classmethod
    def build(cls, config: LightenConfig | None = None, **overrides: Any) -> LightenConfig:
        """``config`` (default: every default) with ``overrides`` (field names as keywords) applied."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise TypeError(f"lighten() got an unexpected keyword argument {unknown[0]!r}")
        return replace(config or cls(), **overrides)

    @property
    def metrics(self) -> list[str] | None:
        """``metric`` as a list (None: chosen from the output shapes)."""
        return [self.metric] if isinstance(self.metric, str) else (list(self.metric) if self.metric else None)
