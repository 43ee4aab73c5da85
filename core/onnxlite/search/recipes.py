"""``recipe.toml``: the exact strategy, options and budget that ``lighten`` chose.

``onnxlite lighten --recipe recipe.toml`` reads it back and reproduces the
result without searching.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UsageError

RECIPE_VERSION = 1


@dataclass(frozen=True)
class Recipe:
    strategy: str
    options: Mapping[str, Any] = field(default_factory=dict)
    excluded_nodes: tuple[str, ...] = ()
    metric: str | None = None
    max_drop: float | None = None
    #: every budget the search held (primary included), by metric key
    budgets: Mapping[str, float] = field(default_factory=dict)
    objective: str = "latency"
    provider: str = "cpu"
    framework: str | None = None
    inputs: tuple[str, ...] = ()

    def to_toml(self) -> str:
        import tomli_w

        doc: dict[str, Any] = {
            "version": RECIPE_VERSION,
            "strategy": {"name": self.strategy, "options": _plain(dict(self.options))},
            "budget": {k: v for k, v in (("metric", self.metric), ("max_drop", self.max_drop),
                                          ("objective", self.objective)) if v is not None},
            "runtime": {"provider": self.provider},
        }
        if self.budgets:
            doc["budget"]["max_drops"] = {k: float(v) for k, v in self.budgets.items()}
        if self.excluded_nodes:
            doc["strategy"]["excluded_nodes"] = list(self.excluded_nodes)
        if self.framework or self.inputs:
            doc["source"] = {k: v for k, v in (("framework", self.framework), ("inputs", list(self.inputs))) if v}
        return "# Written by onnxlite lighten; reproduce with: onnxlite lighten SOURCE --recipe recipe.toml\n" + \
            tomli_w.dumps(doc)


def _plain(options: dict[str, Any]) -> dict[str, Any]:
    """TOML has no None and no tuples: drop the one, list the other."""
    out = {}
    for key, value in options.items():
        if value is None:
            continue
        out[key] = list(value) if isinstance(value, tuple) else value
    return out


def read_recipe(path: str | os.PathLike[str]) -> Recipe:
    """Parse ``recipe.toml``; a malformed file is a one-line usage error."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib

    path = Path(path)
    if not path.is_file():
        raise UsageError(f"--recipe {path}: no such file")
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"--recipe {path}: not valid TOML ({exc})") from None
    strategy = doc.get("strategy")
    if not isinstance(strategy, dict) or not isinstance(strategy.get("name"), str):
        raise UsageError(f"--recipe {path}: missing [strategy] name")
    budget = doc.get("budget", {})
    source = doc.get("source", {})
    budgets = budget.get("max_drops", {})
    if not isinstance(budgets, dict) or not all(isinstance(v, (int, float)) for v in budgets.values()):
        raise UsageError(f"--recipe {path}: [budget.max_drops] must map metric keys to numbers")
    return Recipe(
        strategy=strategy["name"],
        options=dict(strategy.get("options", {})),
        excluded_nodes=tuple(strategy.get("excluded_nodes", ())),
        metric=budget.get("metric"),
        max_drop=budget.get("max_drop"),
        budgets={str(k): float(v) for k, v in budgets.items()},
        objective=budget.get("objective", "latency"),
        provider=doc.get("runtime", {}).get("provider", "cpu"),
        framework=source.get("framework"),
        inputs=tuple(source.get("inputs", ())),
    )
