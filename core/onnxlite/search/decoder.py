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
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import UsageError

if TYPE_CHECKING:
    import numpy as np

    from .config import LightenConfig

#: config.json ``architectures`` that generate text token by token
CAUSAL_SUFFIXES = ("ForCausalLM", "LMHeadModel")
#: the budget when none is given: perplexity at most 5% above fp32's
DEFAULT_BUDGET = "perplexity=5%"
#: tokens already in the cache when one decode step is timed (the prompt length the benchmarks use)
TIMED_PAST = 128
#: what a decoder is judged by; a budget on anything else is refused before any work
DECODER_METRICS = ("perplexity", "kl", "top1_agreement", "greedy_agreement")
#: files of an export folder that onnxruntime-genai and ``onnxlite generate`` read beside model.onnx
GENAI_FILES = ("genai_config.json", "generation_config.json", "chat_template.jinja")


def causal_lm_config(folder: Path) -> dict[str, Any] | None:
    """The folder's config.json when it names a causal language model, else None."""
    config = folder / "config.json"
    if not (folder.is_dir() and config.is_file()):
        return None
    try:
        found = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    names = found.get("architectures") or []
    return found if isinstance(found, dict) and any(str(n).endswith(CAUSAL_SUFFIXES) for n in names) else None


def has_cache_inputs(model: str | os.PathLike[str]) -> bool:
    """An ONNX model that takes a KV cache (``past_key_values.*`` or ``past.*`` inputs)."""
    from ..modelio import read_header

    return any(i.name.startswith(("past_key_values", "past.")) for i in read_header(model).graph.input)


def is_decoder_source(source: str, framework: str = "auto") -> bool:
    """Whether ``source`` is a causal LM that ``lighten`` judges by text (see the module's docstring)."""
    path = Path(source)
    if framework not in {"auto", "pytorch", "huggingface", "gguf", "onnx"}:
        return False
    if path.suffix == ".gguf" and path.is_file():
        return True
    if causal_lm_config(path) is not None:
        return True
    model = path / "model.onnx" if path.is_dir() else path
    if model.suffix == ".onnx" and model.is_file():
        try:
            return has_cache_inputs(model)
        except Exception:  # noqa: BLE001 - an unreadable model is the export's error to report, not ours
            return False
    return False


def budget_names(max_drop: Any) -> list[str]:
    """The metric names a ``--max-drop`` value budgets (bare values budget the primary: no name)."""
    from ..evaluation.metrics import budget_items

    return [key.rsplit(".", 1)[-1] for key, _value in budget_items(max_drop) if key]


def decoder_config(config: LightenConfig) -> LightenConfig:
    """``config`` with a decoder's defaults: the budget (perplexity +5%) and the primary metric; a budget or
    ``--metric`` on something a decoder is not judged by is a usage error here, before any work."""
    for name in budget_names(config.max_drop):
        if name not in DECODER_METRICS:
            raise UsageError(f"--max-drop {name}: a language model is judged by {', '.join(DECODER_METRICS)}; "
                             f"it has no {name}")
    for name in config.metrics or ():
        if name.rsplit(".", 1)[-1] not in DECODER_METRICS:
            raise UsageError(f"--metric {name}: a language model is judged by {', '.join(DECODER_METRICS)}")
    out: dict[str, Any] = {}
    if config.max_drop is None:
        out["max_drop"] = DEFAULT_BUDGET
    if config.metric is None:
        named = budget_names(config.max_drop) if config.max_drop is not None else []
        out["metric"] = list(dict.fromkeys([*(named or ["perplexity"]), *DECODER_METRICS[:3]]))
    return replace(config, **out)


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
    dtype = np.float32 if layout.past_dtype == "bfloat16" else np.dtype(layout.past_dtype)
    feeds: dict[str, np.ndarray] = {name: np.zeros((batch, layout.kv_heads, past, layout.head_dim), dtype=dtype)
                                    for name in layout.past_names}
    feeds["input_ids"] = np.full((batch, 1), 1, dtype=np.int64)
    feeds["attention_mask"] = np.ones((batch, past + 1), dtype=np.int64)
    if layout.has_position_ids:
        feeds["position_ids"] = np.full((batch, 1), past, dtype=np.int64)
    return feeds


def tokens_per_second(p50_ms: float | None, batch: int = 1) -> float | None:
    """Decode tokens/s from the p50 of one timed step (``batch`` new tokens)."""
    return batch * 1000.0 / p50_ms if p50_ms else None


def speed_note(base_p50: float | None, winner_p50: float | None) -> str | None:
    """The verdict's sentence on speed, in the unit a user of a language model reads."""
    base, mine = tokens_per_second(base_p50), tokens_per_second(winner_p50)
    if base is None or mine is None:
        return None
    return (f"speed is decode tokens/s at batch 1 with {TIMED_PAST} tokens in the cache: {mine:.1f} tok/s "
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


def report_settings(models: Mapping[str, Any]) -> dict[str, Any]:
    """What the report needs to draw tokens/s instead of p50 ms."""
    return {"decoder": True, "timed_past": TIMED_PAST, **dict(models)}


# -- the data and the reference -------------------------------------------------------------------------------

#: windows sampled from the fp32 model when no --data is given, and their length in tokens
SAMPLED_WINDOWS = 24
SAMPLED_LENGTH = 64
#: their seed: the text is the same on every run, so a cached re-run judges the same tokens
SAMPLED_SEED = 0


def with_empty_cache(dataset: Any, model: Path) -> Any:
    """``dataset``'s token windows with the inputs a cached decoder also takes for a whole window: position ids
    from the mask (pads count no position) and an empty cache (past length 0)."""
    import numpy as np

    from ..data import Dataset
    from ..decoding import decoder_layout

    if dataset is None:
        return None
    layout = decoder_layout(model)
    if layout is None:
        raise UsageError(f"{model}: the export has no KV cache inputs (past_key_values.*)")
    arrays = {k: v for k, v in dataset.arrays.items() if k in {"input_ids", "attention_mask"}}
    ids = arrays["input_ids"]
    mask = arrays.get("attention_mask")
    if mask is None:
        mask = arrays["attention_mask"] = np.ones_like(ids)
    if layout.has_position_ids:
        arrays["position_ids"] = np.clip(np.cumsum(mask, axis=1) - 1, 0, None).astype(np.int64)
    dtype = np.float32 if layout.past_dtype == "bfloat16" else np.dtype(layout.past_dtype)
    for name in layout.past_names:
        arrays[name] = np.zeros((len(ids), layout.kv_heads, 0, layout.head_dim), dtype=dtype)
    found = Dataset(arrays, dataset.labels, dataset.source)
    return found


def sampled_windows(model: Any, bos: int | None, vocab: int) -> tuple[Any, str]:
    """Text the fp32 source writes itself, sampled at temperature 1 from a fixed seed (no --data given): held-out
    windows on the model's own distribution, and what they are, in words."""
    import numpy as np
    import torch

    from ..data import Dataset

    module = getattr(model, "module", model)
    generator = torch.Generator().manual_seed(SAMPLED_SEED)
    start = bos if bos is not None else int(torch.randint(vocab, (1,), generator=generator))
    ids = torch.full((SAMPLED_WINDOWS, 1), start, dtype=torch.long)
    torch.manual_seed(SAMPLED_SEED)
    with torch.no_grad():
        for _ in range(SAMPLED_LENGTH - 1):    # a plain loop: generate() would stop rows at EOS
            logits = module(input_ids=ids).logits[:, -1, :].double()
            step = torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=generator)
            ids = torch.cat([ids, step], dim=1)
    windows = ids.numpy().astype(np.int64)
    what = (f"{SAMPLED_WINDOWS} windows of {SAMPLED_LENGTH} tokens sampled from the fp32 model itself "
            f"(seed {SAMPLED_SEED}; pass --data corpus.txt for real text)")
    return Dataset({"input_ids": windows, "attention_mask": np.ones_like(windows)}, None, what), what
