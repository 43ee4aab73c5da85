"""``lighten``: find the smallest, fastest model that stays inside an accuracy budget.

1. export the source with its framework plugin (verified);
2. build candidates: every applicable quantizer plugin, over its option grid;
3. quantize each candidate, an independent task in a warm worker (:mod:`onnxlite.search.trials`:
   duplicates once, the result cache, the time budget), then time it quickly (speed measured early);
4. judge each against the *source framework's* outputs on held-out data
   (never the calibration samples);
5. benchmark the survivors interleaved with the float model;
6. pick: fastest within budget (ties by size), or smallest with ``objective="size"``;
   when nothing fits, keep the worst nodes in float step by step (partial quantization).

Here the run is set up (:mod:`onnxlite.search.setup`: inputs, reference, judge); the
:class:`~onnxlite.search.engine.Engine` judges the candidates and runs the stages of ``search/stages/``, each
returning a frozen record; :mod:`onnxlite.search.finish` chooses and renders the verdict from those records,
and :mod:`onnxlite.search.outdir` publishes (docs/architecture.md, "The search engine").

Everything is built in a scratch folder beside OUTDIR, which appears (or is
replaced, with ``force``) only at the end: an interrupted run leaves OUTDIR as it was.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import hardware, runtime_compat
from ..errors import UsageError
from .config import DEFAULT_MAX_DROP, LightenConfig
from .engine import STAGES, Engine
from .finish import finish
from .outdir import publish
from .recipes import Recipe, recipe_candidate
from .stopping import interrupted

if TYPE_CHECKING:
    from .results import LightenResult
    from .stages import Stage

__all__ = ["DEFAULT_MAX_DROP", "LightenConfig", "lighten"]


# -- the search ---------------------------------------------------------------------------------------------

def lighten(source: str | os.PathLike[str], output_dir: str | os.PathLike[str] | None = None, *,
            config: LightenConfig | None = None, **options: Any) -> LightenResult:
    """Search the strategies for the lightest model within ``max_drop`` of the source's accuracy.

    The settings are a :class:`~onnxlite.search.config.LightenConfig`: ``config``, with any of its fields
    given as keywords on top (``lighten(model, data="x.npz", max_drop="1%")`` needs no config at all).

    ``max_drop`` is the budget on the primary metric (``"1%"``, ``0.01``, or
    ``METRIC=VALUE`` items, as for ``compare``; default 1%, or the recipe's); ``metric`` names the metric(s)
    to judge by (default: chosen from the output shapes).  ``data`` is held-out
    evaluation data and ``calibration`` calibration data (any format
    :func:`onnxlite.data.load_data` reads); given only one, it is split
    (``split`` of it calibrates, the rest judges).  A candidate passes when its drop
    stays within the budget at the one-sided ``confidence`` (see
    :mod:`onnxlite.search.confidence`).  ``recipe`` reproduces a
    ``recipe.toml`` without searching.  Returns a :class:`LightenResult`;
    OUTDIR gets ``model.onnx``, ``recipe.toml`` and ``report.html/json/md``.
    ``executor`` runs the candidates and the benchmark: ``"local"`` (a process pool here), ``"ray"``
    (Ray tasks on the cluster at ``ray_address``; ``bench_on`` a node label or resource for the
    benchmark) or an :class:`onnxlite.executors.Executor`.  Quantized models and judgements are reused from
    ``cache_dir`` (default :func:`~onnxlite.search.cache.default_cache_dir`) unless ``cache`` is False;
    ``time_budget`` (``"5m"`` or seconds) stops starting new work when spent (:mod:`onnxlite.search.trials`).
    ``target_cpu``: the kind of CPU the model will run on, when not this one (``"avx2"``, ``"arm64"``...:
    :mod:`onnxlite.hardware`).  ``strategies`` limits the search to those names; ``objective`` is
    ``"latency"`` (default) or ``"size"``; ``partial`` allows the fallback, keeping at most
    ``max_float_nodes`` in float; ``batch`` and ``runs`` size the benchmark, ``workers`` the candidates
    quantized at once; ``on_event(kind, info)`` hears progress; ``force`` replaces an existing OUTDIR.
    """
    return run(source, output_dir, LightenConfig.build(config, **options))


def _checked(config: LightenConfig, emit: Any, decoder: bool = False) -> tuple[LightenConfig, Recipe | None]:
    """``config`` with the recipe's settings filled in and the defaults resolved (a ``decoder``'s own:
    :func:`onnxlite.search.decoder.decoder_config`), its budget and objective checked before any work."""
    from ..evaluation.metrics import check_budget_values
    from ..runtime import SessionSettings

    config = replace(config, settings=config.settings or SessionSettings())
    chosen = None
    if config.recipe is not None:
        from .recipes import read_recipe, replay

        chosen = read_recipe(config.recipe)
        config = replay(chosen, config, emit)
    if decoder:
        from .decoder import DEFAULT_BUDGET, decoder_config

        if config.max_drop is None:
            emit("note", {"message": f"no --max-drop: the budget is {DEFAULT_BUDGET} (perplexity at most 5% "
                                     "above the fp32 export's)"})
        config = decoder_config(config)
    max_drop = DEFAULT_MAX_DROP if config.max_drop is None else config.max_drop
    check_budget_values(max_drop)
    objective = config.objective or "latency"
    if objective not in {"latency", "size"}:
        raise UsageError(f"--objective: expected latency or size, got {objective!r}")
    return replace(config, max_drop=max_drop, objective=objective), chosen


def run(source: str | os.PathLike[str], output_dir: str | os.PathLike[str] | None,
        config: LightenConfig, stages: Sequence[Stage] = STAGES) -> LightenResult:
    """:func:`lighten` on one :class:`LightenConfig`: set up, then the engine runs ``stages`` in order
    (:data:`onnxlite.search.engine.STAGES`; docs/architecture.md)."""
    from ..atomic import scratch_dir
    from ..executors import get_executor
    from ..runtime import resolve_providers
    from .setup import Env, export_reference, load_inputs
    from .trials import TimeBudget, make_context, parse_duration

    started = time.perf_counter()
    budget = TimeBudget(parse_duration(config.time_budget))   # validated before any work
    emit = config.on_event or (lambda _kind, _info: None)
    if not 0 < config.split < 1:
        raise UsageError(f"split: expected a fraction between 0 and 1, got {config.split}")
    if not 0 < config.confidence < 1:
        raise UsageError(f"--confidence: expected a fraction between 0 and 1 (such as 0.95), got {config.confidence}")
    source = os.fspath(source)
    out = Path(output_dir if output_dir is not None else f"{Path(source.split(':')[0]).stem or 'model'}.lightened")
    if out.exists() and not config.force and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"{out}: already exists; choose another -o or pass --force to replace it")
    from ..modelio import check_spares_input

    # force replaces OUTDIR whole: an OUTDIR holding the source (or its data file) would delete it
    check_spares_input(source, out, folder=True)
    from .decoder import is_decoder_source

    decoder = is_decoder_source(source, config.framework)   # judged by text, timed by decode steps
    config, chosen = _checked(config, emit, decoder)
    settings = config.settings
    assert settings is not None   # _checked fills it in
    resolve_providers(settings)  # an unavailable provider fails before any work
    from .candidates import check_strategy_names
    check_strategy_names(config.strategies)  # so does a misspelt --strategies name (not after the export)
    isa = hardware.judged_on(settings.provider, config.target_cpu)   # and an unknown --target-cpu
    runner = get_executor(config.executor, ray_address=config.ray_address, bench_on=config.bench_on)
    with scratch_dir(out) as work, contextlib.closing(runner):
        env = Env(source, work, settings, emit, runner, isa, runtime_compat.target_or_none(config.target_runtime),
                  config)
        if decoder:
            from .decoder_data import decoder_reference, load_decoder_inputs

            inputs = load_decoder_inputs(env)
            ref = decoder_reference(env, inputs)
        else:
            inputs = load_inputs(env)
            ref = export_reference(env, inputs)
        cache_dir = Path(config.cache_dir) if config.cache_dir is not None else None
        trials = make_context(runner, emit, ref.fp32, inputs.calibration_file, settings.to_dict(), cache_dir,
                              config.cache and chosen is None, budget)
        if decoder:   # a decoder's judge scores windows: a few of them first
            from ..jobs.pruning import DECODER_PRUNE_WINDOWS
            from .decoder_cache import use_stable_keys

            trials.prune = DECODER_PRUNE_WINDOWS
            use_stable_keys(trials, source, ref.judge_dir, config)   # keyed on the input model and the corpus
        engine = Engine(env, inputs, ref, trials, stages)
        if chosen is not None:
            engine.candidates = [recipe_candidate(chosen, inputs.calibration_for)]
        else:
            engine.build()
        with interrupted(engine, out):   # Ctrl-C: OUTDIR untouched, the best so far kept beside it
            engine.run_candidates(config.workers)
            engine.run_stages(searching=chosen is None)
            engine.benchmark(config.batch, config.runs)
        result = finish(engine, out, chosen is not None, ref.judge.first_feeds(1) if decoder else None)
        result = replace(result, seconds=round(time.perf_counter() - started, 1))
        result = publish(result, out, work, engine.recipe(result.winner, result.objective), source, env.target, isa,
                         beside=ref.fp32.parent if decoder else None)
    emit("done", {"message": result.message})
    return result
