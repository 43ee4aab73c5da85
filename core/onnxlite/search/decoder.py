"""What ``lighten`` does differently for a causal language model (docs/llm.md, "Lighten").

The search itself is the same; a decoder changes five things, each a function here that
:func:`onnxlite.search.lighten.run` calls at its place:

- :func:`is_decoder_source`: a transformers folder whose config names a causal LM, a GGUF file, or an exported
  decoder (an ONNX model with ``past_key_values`` inputs);
- :func:`decoder_config`: the default budget (perplexity +5%) and the budget's metric names, checked before
  any work;
- :func:`decode_step_feeds`: what the quick timing and the final benchmark time, one decode step at batch 1
  after a prompt already in the cache, so "faster" means decode tokens/s;
- :func:`publish_decoder_files`: the files beside ``model.onnx`` that onnxruntime-genai needs;
- :func:`speed_note`: the verdict's sentence in tokens/s.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import UsageError

if TYPE_CHECKING:
    import numpy as np

    from .config import LightenConfig

#: the budget when none is given: perplexity at most 5% above fp32's
DEFAULT_BUDGET = "perplexity=5%"
#: tokens already in the cache when one decode step is timed (the prompt length the benchmarks use)
TIMED_PAST = 128
#: files of an export folder that onnxruntime-genai and ``onnxlite generate`` read beside model.onnx
GENAI_FILES = ("genai_config.json", "generation_config.json", "chat_template.jinja")


def is_decoder_source(source: str, framework: str = "auto") -> bool:
    """Whether ``source`` is a causal LM that ``lighten`` judges by text (see the module's docstring)."""
    path = Path(source)
    if framework not in {"auto", "pytorch", "huggingface", "gguf", "onnx"}:
        return False
    from ..conversion.causal import is_causal_source

    if is_causal_source(source):
        return True
    model = path / "model.onnx" if path.is_dir() else path
    if model.suffix == ".onnx" and model.is_file():
        try:
            from ..graph_family import is_decoder

            return is_decoder(model)
        except Exception:  # noqa: BLE001 - an unreadable model is the export's error to report, not ours
            return False
    return False


def budget_names(max_drop: Any) -> list[str]:
    """The metric names a ``--max-drop`` value budgets (bare values budget the primary: no name)."""
    from ..evaluation.metrics import budget_items

    return [key.rsplit(".", 1)[-1] for key, _value in budget_items(max_drop) if key]


def decoder_metrics() -> list[str]:
    """The metrics a decoder is judged by: the registered ones that read a decoder judge's records."""
    from ..registry import get_registry

    return sorted(e.name for e in get_registry().all("metric") if getattr(e.spec, "decoder", False))


def _known(name: str, known: list[str]) -> bool:
    """A decoder metric, or a name the decoder judge reads as one (``top1_agreement``)."""
    from ..evaluation.decoder_judge import ALIASES

    return name in known or ALIASES.get(name) in known


def decoder_config(config: LightenConfig) -> LightenConfig:
    """``config`` with a decoder's default budget (perplexity +5%) and no float fallback unless
    ``max_float_nodes`` is given; a budget or ``--metric`` on something a decoder is not judged by is a usage
    error here, before the model is loaded."""
    known = decoder_metrics()
    for name in budget_names(config.max_drop):
        if not _known(name, known):
            raise UsageError(f"--max-drop {name}: a language model has no {name}; it is judged by "
                             f"{', '.join(known)}")
    for name in config.metrics or ():
        if not _known(name.rsplit(".", 1)[-1], known):
            raise UsageError(f"--metric {name}: a language model is judged by {', '.join(known)}")
    if config.max_float_nodes is None:
        # a float MatMul in a decoder costs its full weight on every decoded token, and mixed 4/8-bit points are
        # the decoder grid's own repairs: the float fallback runs only when --max-float-nodes asks for it
        config = replace(config, partial=False)
    return config if config.max_drop is not None else replace(config, max_drop=DEFAULT_BUDGET)


def primary_metric(config: LightenConfig) -> str | None:
    """The metric a decoder's verdict leads with: the first one named (``--metric``, else ``--max-drop``)."""
    from ..evaluation.decoder_judge import ALIASES

    named = [n.rsplit(".", 1)[-1] for n in config.metrics or ()] or budget_names(config.max_drop)
    return ALIASES.get(named[0], named[0]) if named else None


# -- timing --------------------------------------------------------------------------------------------------

def decode_step_feeds(model: str | os.PathLike[str], past: int = TIMED_PAST, batch: int = 1) -> dict[str, np.ndarray]:
    """Feeds for one decode step: one new token per sequence after ``past`` tokens in the cache.

    The cache holds zeros: a decode step's cost does not depend on the values in it, and the step runs
    the same kernels whether they came from a prompt or not.
    """
    import numpy as np

    from ..decoding import decoder_layout

    layout = decoder_layout(model)
    if layout is None:
        raise UsageError(f"{model}: not a decoder with a KV cache (input_ids, attention_mask, past_key_values.*)")
    past = max(1, min(past, context_length(Path(model)) - 1))   # a short-context model times a shorter cache
    dtype = np.float32 if layout.past_dtype == "bfloat16" else np.dtype(layout.past_dtype)
    feeds: dict[str, np.ndarray] = {name: np.zeros((batch, layout.kv_heads, past, layout.head_dim), dtype=dtype)
                                    for name in layout.past_names}
    feeds["input_ids"] = np.full((batch, 1), 1, dtype=np.int64)
    feeds["attention_mask"] = np.ones((batch, past + 1), dtype=np.int64)
    if layout.has_position_ids:
        feeds["position_ids"] = np.full((batch, 1), past, dtype=np.int64)
    return feeds


def context_length(model: Path) -> int:
    """The most tokens the model takes (prompt and cache): its genai_config.json's, else its config.json's."""
    folder = model if model.is_dir() else model.parent
    for name, keys in (("genai_config.json", ("context_length",)),
                       ("config.json", ("max_position_embeddings", "n_positions"))):
        try:
            doc = json.loads((folder / name).read_text())
        except (OSError, ValueError):
            continue
        doc = doc.get("model", doc) if name == "genai_config.json" else doc
        for key in keys:
            if isinstance(doc.get(key), int) and doc[key] > 1:
                return int(doc[key])
    return TIMED_PAST + 1


def tokens_per_second(p50_ms: float | None, batch: int = 1) -> float | None:
    """Decode tokens/s from the p50 of one timed step (``batch`` new tokens)."""
    return batch * 1000.0 / p50_ms if p50_ms else None


def speed_note(base_p50: float | None, winner_p50: float | None, feeds: Mapping[str, Any]) -> str | None:
    """The verdict's sentence on speed, in the unit a user of a language model reads (``feeds``: the timed step's)."""
    batch, total = feeds["attention_mask"].shape
    base, mine = tokens_per_second(base_p50, batch), tokens_per_second(winner_p50, batch)
    if base is None or mine is None:
        return None
    return (f"speed is decode tokens/s at batch {batch} with {total - 1} tokens in the cache: {mine:.1f} tok/s "
            f"against fp32's {base:.1f}")


# -- the output folder ----------------------------------------------------------------------------------------

def publish_decoder_files(export_dir: Path, staged: Path, model: Path) -> list[str]:
    """Copy the export folder's generation files beside the winner's ``model.onnx`` in ``staged``.

    ``genai_config.json`` names the model file and its inputs and outputs; a quantized candidate keeps them
    all, so the export's file describes the winner as it is, and the folder runs in onnxruntime-genai.
    The tokenizer and config come with :func:`onnxlite.search.recipes.copy_hf_files` (or from the export
    folder when the source was not a transformers folder).
    """
    copied = []
    names = [*GENAI_FILES]
    from .recipes import HF_FILES

    names += [n for n in HF_FILES if not (staged / n).exists()]
    for name in names:
        if (export_dir / name).is_file() and not (staged / name).exists():
            shutil.copy2(export_dir / name, staged / name)
            copied.append(name)
    config = staged / "genai_config.json"
    if config.is_file():
        doc = json.loads(config.read_text())
        decoder = doc.get("model", {}).get("decoder", {})
        if decoder.get("filename") != model.name:
            decoder["filename"] = model.name
            from ..atomic import write_text

            write_text(config, json.dumps(doc, indent=4))
    return copied


def finish_result(baseline: Any, winner: Any, feeds: Mapping[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The decoder's words on a finished search: the report's speed axis (settings) and tokens/s for the
    verdict (None: not timed) (``feeds``: the decode step the benchmarks timed)."""
    # the report draws tokens/s instead of p50 ms for a decoder
    settings = {"decoder": True, "timed_past": int(feeds["attention_mask"].shape[1]) - 1}
    note = speed_note(baseline.p50 if baseline.latency_ms else None,
                      winner.p50 if winner is not None and winner.latency_ms else None, feeds)
    return settings, note
