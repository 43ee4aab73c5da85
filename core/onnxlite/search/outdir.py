"""``lighten``'s OUTDIR: the winner's ``model.onnx`` and ``recipe.toml``, the reports, and for a Hugging Face
source its config and tokenizer, appearing whole or not at all.

Everything is written into a staging folder inside the search's scratch
folder, then moved into place with one rename (an existing OUTDIR is renamed
aside first and removed after), so an interrupted ``lighten`` never leaves
half an OUTDIR behind.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..hardware import JudgedOn
    from ..runtime_compat import TargetRuntime
    from .recipes import Recipe
    from .results import CandidateRow, LightenResult


def publish(result: LightenResult, out: Path, work: Path, recipe: Recipe | None, source: str,
            target: TargetRuntime | None, isa: JudgedOn, beside: Path | None = None) -> LightenResult:
    """Write what the search found into ``out`` (staged in ``work``), with ``recipe`` beside the winner and the
    Hugging Face ``source``'s config and tokenizer; returns ``result`` with the paths it wrote.  ``beside``: a decoder's
    export folder, whose generation files (``genai_config.json``...) go beside the winner too."""
    from ..atomic import replace_dir, write_text
    from ..modelio import publish_model
    from ..report.files import write_report
    from .recipes import copy_hf_files

    staged = work / "out"
    staged.mkdir()
    if result.winner is not None and result.winner.path and recipe is not None:
        # the ISA it was judged on travels in the model, so a lone model.onnx can say where its verdict holds
        publish_model(result.winner.path, staged / "model.onnx", runtime=target,
                      metadata=isa.metadata(_portable(result.winner)))
        write_text(staged / "recipe.toml", recipe.to_toml())
        copy_hf_files(source, staged, staged / "model.onnx")   # config and tokenizer: it loads as it came
        if beside is not None:   # and a decoder's folder runs in onnxruntime-genai as it is
            from .decoder import publish_decoder_files

            publish_decoder_files(beside, staged, staged / "model.onnx")
    names = write_report(result.to_report(), staged)
    replace_dir(staged, out)
    reports = {kind: out / Path(path).name for kind, path in names.items()}
    if result.winner is None:
        return replace(result, reports=reports)
    return replace(result, reports=reports, model_path=out / "model.onnx", recipe_path=out / "recipe.toml")


def _portable(winner: CandidateRow) -> bool:
    """The winner's int8 math cannot saturate, by its strategy's word (then it answers alike on every CPU)."""
    from ..registry import get_registry
    from .candidates import int8_portable

    try:
        spec = get_registry().get("quantizer", winner.strategy).spec
    except Exception:  # noqa: BLE001 - an unknown strategy is not known to be saturation-free
        return False
    return int8_portable(spec, winner.options)
