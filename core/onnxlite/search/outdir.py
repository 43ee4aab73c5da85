"""``lighten``'s OUTDIR: the winner's ``model.onnx`` and ``recipe.toml``, the reports, and for a Hugging Face
source its config and tokenizer, appearing whole or not at all.

Everything is written into a staging folder inside the search's scratch
folder, then moved into place with one rename (an existing OUTDIR is renamed
aside first and removed after), so an interrupted ``lighten`` never leaves
half an OUTDIR behind.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .results import LightenResult


def publish(search: Any, result: LightenResult, out: Path) -> None:
    """Write what ``search`` (the lighten run's state) found into ``out``; record the paths on ``result``."""
    from ..atomic import replace_dir, write_text
    from ..modelio import publish_model
    from ..report.files import write_report
    from .recipes import Recipe, copy_hf_files, effective_options

    staged = search.work / "out"
    staged.mkdir()
    if result.winner is not None:
        judge = search.judge
        publish_model(result.winner.path, staged / "model.onnx", runtime=getattr(search, "target", None))
        # the options that acted on this model (issue 25: not an op type it has no node of)
        recipe = Recipe(strategy=result.winner.strategy, options=effective_options(result.winner.options, search.fp32),
                        excluded_nodes=tuple(result.winner.keep_float), metric=judge.primary,
                        max_drop=judge.budgets.get(judge.primary),
                        budgets=dict(judge.budgets), objective=result.objective,
                        provider=search.settings.provider, framework=search.framework,
                        inputs=tuple(str(s) for s in search.specs), **search.record)
        write_text(staged / "recipe.toml", recipe.to_toml())
        copy_hf_files(search.source, staged, staged / "model.onnx")   # config and tokenizer: it loads as it came
    names = write_report(result.to_report(), staged)
    replace_dir(staged, out)
    result.reports = {kind: out / Path(path).name for kind, path in names.items()}
    if result.winner is not None:
        result.model_path, result.recipe_path = out / "model.onnx", out / "recipe.toml"
