"""A decoder's first stages in ``lighten``: its corpus split by document, and its reference and judge.

:func:`load_decoder_inputs` and :func:`decoder_reference` stand in for :func:`onnxlite.search.setup.load_inputs`
and :func:`~onnxlite.search.setup.export_reference`, and return the same records, so every later stage runs
as it does on any model:

- ``--data corpus.txt`` (documents separated by blank lines) is split by *document*: the first 40% calibrate
  (GPTQ), the other 60% judge, so no document both calibrates and judges; with ``--calibration`` too, each
  file keeps its role;
- with neither, the held-out windows are text the fp32 source writes itself (sampled at temperature 1 from
  a fixed seed), and calibration windows are sampled likewise from another seed;
- the reference is the fp32 ONNX export (the export checked it against PyTorch through the cache) run on
  the held-out windows, and the judge is a :class:`~onnxlite.evaluation.decoder_judge.DecoderJudge`
  (perplexity, KL, next-token and greedy agreement), timed by one decode step
  (:func:`onnxlite.search.decoder.decode_step_feeds`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from .decoder import decode_step_feeds, primary_metric, publish_decoder_files

if TYPE_CHECKING:
    from .setup import Env, Inputs, Reference

#: the search judges every candidate on at most this many held-out windows of this many tokens (half of them
#: context) unless ``--data-option window=N``: 4096 scored tokens, a judge of seconds per candidate on a 135M model
SEARCH_WINDOWS = 32
SEARCH_WINDOW = 256
#: windows sampled from the fp32 model when no --data is given (judging, calibrating), and their length
SAMPLED_WINDOWS = 24
SAMPLED_CALIBRATION = 16
SAMPLED_LENGTH = 64
#: their seeds: the same text on every run (a cached re-run judges the same tokens), apart for the two parts
SAMPLED_SEED = 0
SAMPLED_CALIBRATION_SEED = 10_000


def sampled_ids(model: Any, start: int, windows: int, length: int, seed: int) -> Any:
    """``windows`` sequences of ``length`` tokens the PyTorch ``model`` samples at temperature 1 after ``start``."""
    import numpy as np
    import torch

    module = getattr(model, "module", model)
    generator = torch.Generator().manual_seed(seed)
    ids = torch.full((windows, 1), start, dtype=torch.long)
    with torch.no_grad():
        for _ in range(length - 1):    # a plain loop: generate() would stop rows at EOS
            logits = module(input_ids=ids).logits[:, -1, :].double()
            step = torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=generator)
            ids = torch.cat([ids, step], dim=1)
    return ids.numpy().astype(np.int64)


def _onnx_file(source: str) -> Path | str:
    """An exported decoder's folder as its ``model.onnx`` (what the ONNX plugin loads); any other source as is."""
    folder = Path(source)
    return folder / "model.onnx" if folder.is_dir() and (folder / "model.onnx").is_file() else source


def load_decoder_inputs(env: Env) -> Inputs:
    """The source loaded once, and the documents that calibrate and judge (read, not yet tokenized: the
    tokenizer is the export's)."""
    from ..conversion.export import load_for_export
    from ..data.corpus import read_documents, split_documents
    from .heldout import DataSets
    from .setup import Inputs

    config = env.config
    env.emit("step", {"message": f"Loading {env.source}"})
    loaded = load_for_export(str(_onnx_file(env.source)), config.framework, inputs=config.inputs,
                             model_class=config.model_class, settings=env.settings,
                             framework_options=config.framework_options)
    calibration_file = env.work / "calibration.npz"   # written once the export's tokenizer and cache are known
    if config.data is None and config.calibration is None:
        return Inputs(loaded, loaded.framework, loaded.input_specs,
                      DataSets(None, None, "text sampled from the fp32 model"), calibration_file)
    if config.data is not None and config.calibration is not None:
        held, calib = read_documents(config.data), read_documents(config.calibration)
        what = f"judged on {len(held)} documents of {config.data}; calibrated on {config.calibration}"
    else:
        path = config.data if config.data is not None else config.calibration
        calib, held = split_documents(read_documents(path), config.split)
        what = f"{path}: {len(calib)} documents calibrate, the other {len(held)} judge (held out)"
    return Inputs(loaded, loaded.framework, loaded.input_specs, DataSets(calib, held, what), calibration_file)


def _export(env: Env, inputs: Inputs) -> Any:
    """The fp32 folder: the export of a causal LM (checked against PyTorch through the cache), or an exported
    decoder copied in with its tokenizer and genai files (it is its own reference: nothing to check)."""
    from ..conversion.export import export

    config, folder = env.config, env.work / "fp32"
    env.emit("stage", {"message": "exporting with the KV cache and verifying against the source"})
    step = lambda msg: env.emit("step", {"message": msg})  # noqa: E731
    if inputs.framework != "onnx":
        return export(env.source, folder, opset=config.opset, exporter=config.exporter, loaded=inputs.loaded,
                      settings=env.settings, on_step=step)
    import shutil

    from ..conversion.export import ExportResult
    from ..modelio import external_data_files, model_size, read_header

    folder.mkdir()
    model = Path(_onnx_file(env.source))
    publish_decoder_files(model.parent, folder, folder / "model.onnx")
    for path in [model, *external_data_files(model)]:   # copied as they are: the source is the reference
        shutil.copy2(path, folder / Path(path).name)
    header = read_header(folder / "model.onnx")
    opset = next((int(o.version) for o in header.opset_import if o.domain in ("", "ai.onnx")), 0)
    return ExportResult(path=folder / "model.onnx", source=env.source, framework="onnx", exporter="copy",
                        opset=opset, inputs=[i.name for i in header.graph.input],
                        outputs=[o.name for o in header.graph.output], size_bytes=model_size(folder / "model.onnx"))


def _windows(env: Env, inputs: Inputs, fp32: Path) -> tuple[Any, Any, str]:
    """The held-out windows, the calibration windows (or None), and what they are, in words."""
    from ..data.corpus import CorpusWindows, WindowPlan, corpus_windows, plan_windows
    from ..decoding import generation_defaults, load_tokenizer
    from ..evaluation.decoder_judge import DecoderOptions

    config = env.config
    defaults = generation_defaults(fp32.parent)
    options = DecoderOptions.from_data_options(config.data_options)
    data = inputs.data
    if data.held_out is None:
        model = getattr(inputs.loaded, "model", None)
        if model is None or not hasattr(getattr(model, "module", model), "forward"):
            raise UsageError(f"{env.source}: pass --data corpus.txt (text to judge on): only a PyTorch source "
                             "can write its own held-out text")
        length = min(SAMPLED_LENGTH, defaults.context_length or SAMPLED_LENGTH)
        start = defaults.bos_token_id if defaults.bos_token_id is not None else defaults.pad_token_id
        plan = WindowPlan(length, length // 2)
        what = (f"text sampled from the fp32 model itself ({SAMPLED_WINDOWS} windows of {length} tokens, seed "
                f"{SAMPLED_SEED}; pass --data corpus.txt to judge on real text)")
        held = CorpusWindows(sampled_ids(model, start, SAMPLED_WINDOWS, length, SAMPLED_SEED), plan, what,
                             SAMPLED_WINDOWS, SAMPLED_WINDOWS * length)
        calib = CorpusWindows(sampled_ids(model, start, SAMPLED_CALIBRATION, length, SAMPLED_CALIBRATION_SEED),
                              plan, "sampled", SAMPLED_CALIBRATION, SAMPLED_CALIBRATION * length)
        return held, calib, f"judged on {what}; calibrated on {SAMPLED_CALIBRATION} other sampled windows"
    tokenizer = load_tokenizer(fp32.parent)
    window = options.window or min(SEARCH_WINDOW, defaults.context_length or SEARCH_WINDOW)
    plan = plan_windows(window, options.stride, defaults.context_length)
    source = str(config.data or config.calibration)
    judged = spread(corpus_windows(data.held_out, tokenizer, plan, source), SEARCH_WINDOWS)
    calibrating = spread(corpus_windows(data.calibration, tokenizer, plan, str(config.calibration or source)),
                         SEARCH_WINDOWS) if data.calibration else None
    return judged, calibrating, data.description


def spread(windows: Any, count: int) -> Any:
    """At most ``count`` of ``windows``, evenly spaced through the corpus (every document has its say)."""
    from dataclasses import replace

    import numpy as np

    if len(windows) <= count:
        return windows
    return replace(windows, ids=windows.ids[np.linspace(0, len(windows) - 1, count).round().astype(int)])


def decoder_reference(env: Env, inputs: Inputs) -> Reference:
    """Export, then set the decoder judge up on the fp32 export and judge the fp32 model itself."""
    import numpy as np

    from ..decoder_inputs import with_empty_past
    from ..decoding import model_file
    from ..evaluation.decoder_judge import DecoderJudge, DecoderOptions
    from ..jobs.candidate import save_judge
    from ..modelio import model_size, read_header
    from .confidence import configure_judge
    from .heldout import write_calibration
    from .results import CandidateRow
    from .setup import Reference

    config = env.config
    exported = _export(env, inputs)
    fp32 = model_file(exported.path)
    held, calib, what = _windows(env, inputs, fp32)
    # candidates are written beside these: a graph that leaves the cache's head size symbolic (the builder's)
    # states it in genai_config.json, which the judge reads beside each candidate
    (env.work / "candidates").mkdir(exist_ok=True)
    publish_decoder_files(fp32.parent, env.work / "candidates", env.work / "candidates" / "model.onnx")
    if calib is not None and inputs.calibration_file is not None:
        # token windows completed with the export's empty cache: GPTQ calibrates on them, every candidate's
        # smoke check runs them
        [arrays] = with_empty_past(read_header(fp32), [{"input_ids": calib.ids,
                                                         "attention_mask": np.ones_like(calib.ids)}])
        from ..data import Dataset

        write_calibration(Dataset(arrays), inputs.calibration_file)
    env.emit("stage", {"message": f"running the fp32 export on {held.describe()}"})
    options = DecoderOptions.from_data_options(config.data_options, threads=env.settings.threads)
    judge = DecoderJudge.from_decoders(fp32.parent, held, metrics=config.metrics, max_drop=config.max_drop,
                                       primary=primary_metric(config), options=options, settings=env.settings,
                                       progress=lambda msg: env.emit("step", {"message": msg}))
    # the stages that run the graph itself on the judge's samples (the fallback's ranking of nodes) get whole
    # windows as the decoder takes them: with positions and an empty cache
    [judge.feeds] = with_empty_past(read_header(fp32), [{"input_ids": held.ids,
                                                         "attention_mask": np.ones_like(held.ids)}])
    batch = config.batch or 1
    judge.timing_feeds = decode_step_feeds(fp32, batch=batch)
    judge.batch_cap = batch
    setup = configure_judge(judge, config.confidence)
    for line in setup.messages:
        env.emit("note", {"message": line})
    judge_dir = save_judge(judge, env.work / "judge")
    # the reference *is* the fp32 export: its scores are the judge's own, its drops nothing (no second pass)
    baseline = CandidateRow(name="fp32", strategy="none", options={}, status="reference", path=str(fp32),
                            reason="the exported model, unquantized", size_bytes=model_size(fp32),
                            metrics=dict(judge.reference_scores), drops={k: 0.0 for k in judge.reference_scores})
    notes = [f"judged against the fp32 ONNX export on {held.describe()}"]
    if inputs.data.held_out is None:
        notes.append(f"no --data: {what}")
        env.emit("note", {"message": notes[-1]})
    return Reference(exported, fp32, judge, setup, judge_dir, baseline, tuple(notes))
