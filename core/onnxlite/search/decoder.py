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
    from ..conversion.causal import is_causal_source

    if is_causal_source(source):
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
    past = max(1, min(past, context_length(Path(model)) - 1))   # a short-context model times a shorter cache
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

#: held-out windows an ONNX source is checked on when it is copied in as the fp32 model
EXPORT_WINDOWS = 2
#: windows sampled from the fp32 model when no --data is given, and their length in tokens
SAMPLED_WINDOWS = 24
SAMPLED_LENGTH = 64
#: their seed: the text is the same on every run, so a cached re-run judges the same tokens
SAMPLED_SEED = 0


def with_empty_cache(dataset: Any, model: Path) -> Any:
    """``dataset``'s token windows with what a cached decoder also takes for a whole window (positions from the
    mask, an empty cache: :func:`onnxlite.decoder_inputs.with_empty_past`), as one in-memory dataset."""
    from ..data import Dataset
    from ..decoder_inputs import with_empty_past
    from ..modelio import read_header

    if dataset is None:
        return None
    windows = {k: v for k, v in dataset.arrays.items() if k in {"input_ids", "attention_mask", "position_ids"}}
    [arrays] = with_empty_past(read_header(model), [windows])
    return Dataset(arrays, dataset.labels, dataset.source)


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


def decoder_reference(env: Any, inputs: Any) -> Any:
    """:func:`onnxlite.search.setup.export_reference` for a decoder: export the folder (verified against PyTorch
    through the cache by the export itself), then judge on the **fp32 ONNX export's** logits on the held-out
    windows fed whole with an empty cache, and time one decode step at batch 1 (:func:`decode_step_feeds`)."""
    from ..conversion.export import export
    from ..decoding import model_file
    from ..evaluation.judge import Judge
    from ..figures import figures_of
    from .confidence import configure_judge
    from .results import CandidateRow
    from .setup import Reference
    from .tasks import save_judge

    config = env.config
    env.emit("stage", {"message": "exporting with the KV cache and verifying against the source"})
    folder = env.work / "fp32"
    onnx_source = inputs.framework == "onnx"
    if onnx_source:   # an exported decoder: its folder's tokenizer and genai files come along
        folder.mkdir()
        given = Path(env.source)
        publish_decoder_files(given if given.is_dir() else given.parent, folder, folder / "model.onnx")
    # an ONNX source runs on the first held-out windows (generated ones cannot fill a symbolic head size)
    samples = with_empty_cache(inputs.data.held_out, model_file(env.source)).take(EXPORT_WINDOWS) \
        if onnx_source else None
    exported = export(env.source, folder / "model.onnx" if onnx_source else folder, opset=config.opset,
                      exporter=config.exporter, loaded=inputs.loaded, settings=env.settings, samples=samples,
                      on_step=lambda msg: env.emit("step", {"message": msg}))
    fp32 = model_file(exported.path)
    held_out = with_empty_cache(inputs.data.held_out, fp32)
    if inputs.calibration_file is not None:
        # the same file, completed with the export's empty cache: the smoke check of every candidate runs it
        from .heldout import write_calibration

        write_calibration(with_empty_cache(inputs.data.calibration, fp32), inputs.calibration_file)
    env.emit("stage", {"message": f"running the fp32 export on {len(held_out)} held-out windows"})
    run = Judge.run_reference(str(fp32), held_out, framework="onnx", settings=env.settings)
    run.outputs = {"logits": run.outputs["logits"]}   # the cache it wrote is no answer: logits are
    run.name = env.source
    judge = Judge.from_run(run, fp32, metrics=config.metrics, max_drop=config.max_drop, settings=env.settings)
    batch = config.batch or 1
    judge.timing_feeds = decode_step_feeds(fp32, batch=batch)
    judge.batch_cap = batch
    setup = configure_judge(judge, config.confidence)
    for line in setup.messages:
        env.emit("note", {"message": line})
    judge_dir = save_judge(judge, env.work / "judge")
    verdict = judge.evaluate(fp32, "fp32")
    baseline = CandidateRow(name="fp32", strategy="none", options={}, status="reference", path=str(fp32),
                            reason="the exported model, unquantized",
                            **figures_of(verdict, "size_bytes", "metrics", "drops"))
    notes = (f"judged against the fp32 ONNX export (checked against PyTorch through the cache) on "
             f"{inputs.data.description}",)
    return Reference(exported, fp32, judge, setup, judge_dir, baseline, notes)


def window_specs() -> list[Any]:
    """What a corpus is read as for a decoder: token windows (the cache inputs are the export's, added later)."""
    from ..inputs import InputSpec

    return [InputSpec("input_ids", "int64", ("batch", "sequence")).with_role(),
            InputSpec("attention_mask", "int64", ("batch", "sequence")).with_role()]


def load_decoder_inputs(env: Any) -> Any:
    """:func:`onnxlite.search.setup.load_inputs` for a decoder: the source loaded once, the corpus read as token
    windows and split by document (40% calibrates, the rest judges), or, with no data, windows sampled from the
    fp32 model itself (:func:`sampled_windows`), which judge only (nothing calibrates on them)."""
    from ..conversion.export import load_for_export
    from .heldout import DataSets, hf_tokenizer_default, split_data, write_calibration
    from .setup import Inputs

    config = env.config
    env.emit("step", {"message": f"Loading {env.source}"})
    loaded = load_for_export(env.source, config.framework, inputs=config.inputs, model_class=config.model_class,
                             settings=env.settings, framework_options=config.framework_options)
    specs = window_specs()
    if config.data is None and config.calibration is None:
        model = getattr(loaded, "model", None)
        if model is None or not hasattr(getattr(model, "module", model), "forward"):
            raise UsageError(f"{env.source}: pass --data corpus.txt (text to judge on): only a PyTorch source can "
                             "write its own held-out text")
        bos, vocab = _special_ids(env.source)
        held, what = sampled_windows(model, bos, vocab)
        env.emit("note", {"message": f"no --data: judged on {what}"})
        data = DataSets(None, held, f"judged on {what}; no calibration data")
        return Inputs(loaded, loaded.framework, loaded.input_specs, data)
    data_options = hf_tokenizer_default(env.source, config.data_options)
    calibration_options = hf_tokenizer_default(env.source, config.calibration_options)
    data = split_data(config.data, config.calibration, specs, data_options, calibration_options, config.split)
    calibration_file = write_calibration(data.calibration, env.work / "calibration.npz") \
        if data.calibration is not None else None
    return Inputs(loaded, loaded.framework, loaded.input_specs, data, calibration_file)


def _special_ids(source: str) -> tuple[int | None, int]:
    """The beginning-of-text id and the vocabulary size, from the source folder's config."""
    config = causal_lm_config(Path(source)) or {}
    bos = config.get("bos_token_id")
    return (int(bos) if isinstance(bos, int) else None), int(config.get("vocab_size") or 2)


def finish_result(result: Any) -> None:
    """The decoder's words on a finished search: tokens/s in the verdict, and the report's speed axis."""
    result.settings.update(report_settings({}))
    winner = result.winner
    note = speed_note(result.baseline.p50 if result.baseline.latency_ms else None,
                      winner.p50 if winner is not None and winner.latency_ms else None)
    if note:
        result.message += f"; {note}"
