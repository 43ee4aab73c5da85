"""The judge of a decoder language model: its corpus windows and prompts, and the decoder metrics on them.

:class:`DecoderJudge` is a :class:`~onnxlite.evaluation.judge.Judge` whose
"outputs" are the per-window records of
:mod:`onnxlite.evaluation.decoder_records` instead of a model's outputs, so
everything a judge does (budgets, drops, held-out parts, intervals, the
verdict) works on decoders as it does on any model.  The reference runs once;
each candidate runs on the same windows and prompts, scored on the reference's
support.  docs/metrics.md describes the metrics and their budgets.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from . import decoder_records as records
from .judge import Judge, Progress
from .metrics import ResolvedMetric, choose_primary, parse_budgets

if TYPE_CHECKING:
    import numpy as np

    from ..data.corpus import CorpusWindows
    from ..runtime import SessionSettings
    from .decoder_run import GreedyPlan

#: the order decoder metrics are listed in, the first being the headline one
DECODER_ORDER = ("perplexity", "kl", "next_token_agreement", "greedy_agreement")
#: what a classifier's metric is called on a decoder: top-1 agreement is teacher-forced next-token agreement
ALIASES = {"top1_agreement": "next_token_agreement"}
#: greedy prompts and continuations when the user names neither
DEFAULT_PROMPT_TOKENS = 32
DEFAULT_NEW_TOKENS = 32

NO_CORPUS = ("a decoder language model is judged on text: give --data corpus.txt (documents separated by blank "
             "lines; `python -m onnxlite.data.gensim_text wiki corpus.txt` writes one)")


@dataclass(frozen=True)
class DecoderOptions:
    """How a decoder is judged: the windows (``window``, ``stride``: context tokens), the greedy prompts
    (each window's first ``prompt_tokens``, continued for ``new_tokens``), the KL ``support``, at most
    ``samples`` windows, and onnxruntime's ``threads``."""

    window: int | None = None
    stride: int | None = None
    prompt_tokens: int = DEFAULT_PROMPT_TOKENS
    new_tokens: int = DEFAULT_NEW_TOKENS
    support: int = records.DEFAULT_SUPPORT
    samples: int | None = None
    threads: int | None = None

    @classmethod
    def from_data_options(cls, options: Mapping[str, Any] | None, **overrides: Any) -> DecoderOptions:
        """The decoder's fields among ``--data-option`` values (``window``, ``stride``, ``prompt_tokens``,
        ``new_tokens``), then ``overrides``."""
        from ..data import parse_data_options

        parsed = parse_data_options(options, "--data-option") if options else {}
        names = {f.name for f in fields(cls)}
        given = {k: v for k, v in parsed.items() if k in names and v is not None}
        return cls(**(given | {k: v for k, v in overrides.items() if v is not None}))


def _documents(data: Any) -> tuple[list[str], str]:
    from ..data.corpus import read_documents

    if data is None:
        raise UsageError(NO_CORPUS)
    if isinstance(data, (str, os.PathLike)):
        return read_documents(data), str(data)
    if isinstance(data, Sequence) and all(isinstance(d, str) for d in data):
        if not data:
            raise UsageError("the corpus has no documents")
        return list(data), f"{len(data)} documents"
    raise UsageError(f"{NO_CORPUS} (got a {type(data).__name__})")


class DecoderJudge(Judge):
    """Scores decoder candidates against a reference decoder on corpus windows (:meth:`from_decoders`)."""

    windows: CorpusWindows
    greedy_plan: GreedyPlan | None = None
    support: int = records.DEFAULT_SUPPORT
    vocab: int | None = None
    threads: int | None = None

    @staticmethod
    def bind(outputs: Mapping[str, Any], feeds: Any, labels: Any,   # type: ignore[override]
             requested: Sequence[str] | None, max_drop: Any = None) -> list[ResolvedMetric]:
        return resolve_decoder_metrics(outputs, requested)

    @classmethod
    def from_decoders(cls, reference: str | os.PathLike[str], data: Any,
                      candidate: str | os.PathLike[str] | None = None, *, metrics: Sequence[str] | None = None,
                      max_drop: Any = None, primary: str | None = None,
                      options: DecoderOptions | None = None, settings: SessionSettings | None = None,
                      progress: Progress | None = None) -> DecoderJudge:
        """Run ``reference`` (an exported decoder folder or its transformers folder) on ``data`` (a corpus file,
        a list of documents, or :class:`~onnxlite.data.corpus.CorpusWindows`) and judge with it.

        The tokenizer and generation settings are the ones saved beside the reference (else beside
        ``candidate``).  Greedy continuations are run only when a greedy metric is asked for (or by default).
        """
        from ..data.corpus import CorpusWindows, corpus_windows, plan_windows
        from ..decoding import generation_defaults, has_tokenizer, load_tokenizer, model_folder
        from .decoder_run import GreedyPlan, open_decoder, run_records

        options = options or DecoderOptions()
        say = progress or (lambda _msg: None)
        # metric names and budgets are checked before any work (the reference runs for minutes on a real model)
        metrics, max_drop = _aliased_metrics(metrics), _aliased_budgets(max_drop)
        early = resolve_decoder_metrics({records.NEXT_TOKEN: None, records.GREEDY: None}, metrics)
        parse_budgets(max_drop, early, choose_primary(early, [primary] if primary else metrics))
        wanted = [m.name for m in early]
        where = reference if has_tokenizer(model_folder(reference)) or candidate is None else candidate
        defaults = generation_defaults(where)
        if isinstance(data, CorpusWindows):
            windows = data
        else:
            documents, source = _documents(data)
            tokenizer = load_tokenizer(where)
            plan = plan_windows(options.window, options.stride, defaults.context_length)
            windows = corpus_windows(documents, tokenizer, plan, source)
        if options.samples and len(windows) > options.samples:
            windows = windows.take(options.samples)
        greedy = None
        if "greedy_agreement" in wanted:
            greedy = GreedyPlan(options.prompt_tokens, options.new_tokens, defaults.eos_token_id,
                                defaults.pad_token_id)
            _check_greedy(greedy, windows, defaults.context_length)
        threads = options.threads or (settings.threads if settings is not None else None)
        decoder = open_decoder(reference, threads)
        say(f"running the {decoder.framework} reference on {windows.describe()}")
        run = run_records(decoder, windows, greedy, options.support, vocab=_vocab(reference, candidate),
                          progress=say)
        judge = cls(run, {"input_ids": windows.ids}, None, metrics, max_drop=max_drop, primary=primary,
                    settings=settings)
        judge.windows, judge.greedy_plan, judge.support = windows, greedy, options.support
        judge.vocab = _vocab(reference, candidate)
        judge.threads = threads
        judge.reference_name, judge.framework = decoder.name, decoder.framework
        judge.reference_path = decoder.path
        judge.data_description = windows.describe()
        del decoder
        return judge

    #: the decode step the benchmarks time instead of the first windows (``lighten`` sets it), or None
    timing_feeds: Mapping[str, np.ndarray] | None = None

    def first_feeds(self, count: int) -> dict[str, np.ndarray]:
        """The decode step to time (:attr:`timing_feeds`), else the first ``count`` samples' feeds."""
        return dict(self.timing_feeds) if self.timing_feeds is not None else super().first_feeds(count)

    def run_candidate(self, path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
        """The candidate decoder's records on the judge's windows and prompts, on the reference's support; the
        candidate runs on the judge's provider (the reference ran on the CPU)."""
        from ..runtime import resolve_providers
        from .decoder_run import open_decoder, run_records

        providers = resolve_providers(self.settings) if self.settings.provider != "cpu" else None
        decoder = open_decoder(path, self.threads, providers)
        out = run_records(decoder, self.windows, self.greedy_plan, self.reference_outputs[records.NEXT_TOKEN])
        return {name: out[name] for name in self.reference_outputs}

    def settings_dict(self) -> dict[str, Any]:
        """How the decoder was judged, for results and reports: the windows, the prompts, the KL support."""
        plan = self.windows.plan
        support = (self.reference_outputs[records.NEXT_TOKEN].shape[-1] - records.SUPPORT) // 2
        out: dict[str, Any] = {"window": plan.window, "stride": plan.stride, "scored_per_window": plan.scored,
                               "windows": len(self.windows), "scored_tokens": self.windows.scored_tokens,
                               "kl_support": support}
        if self.greedy_plan is not None:
            out |= {"prompt_tokens": self.greedy_plan.prompt_tokens, "new_tokens": self.greedy_plan.new_tokens}
        return out

    def greedy_note(self, outputs: Mapping[str, np.ndarray]) -> str | None:
        """``greedy_agreement`` in tokens: mean tokens equal before the first difference, of how many."""
        import numpy as np

        if records.GREEDY not in outputs or self.greedy_plan is None:
            return None
        lengths = records.prefix_lengths(self.reference_outputs[records.GREEDY], outputs[records.GREEDY])
        plan = self.greedy_plan
        return (f"greedy: {float(np.mean(lengths)):.1f} of {plan.new_tokens} new tokens equal to the reference's "
                f"before the first difference, mean over {len(lengths)} prompts of {plan.prompt_tokens} tokens "
                f"(all {plan.new_tokens} on {int(np.sum(lengths == plan.new_tokens))})")


def _aliased_metrics(metrics: Sequence[str] | None) -> list[str] | None:
    return None if metrics is None else [ALIASES.get(m, m) for m in metrics]


def _aliased_budgets(max_drop: Any) -> Any:
    """``max_drop`` with :data:`ALIASES` spelt as the decoder metrics they stand for."""
    from .metrics import budget_items

    if max_drop is None:
        return None
    items = budget_items(max_drop)
    if not any(key in ALIASES for key, _ in items):
        return max_drop
    return [value if key is None else f"{ALIASES.get(key, key)}={value}" for key, value in items]


def _vocab(reference: Any, candidate: Any) -> int | None:
    from ..decoding import decoder_layout, model_file

    for path in (reference, candidate):
        try:
            layout = decoder_layout(model_file(path)) if path is not None and model_file(path).is_file() else None
        except Exception:  # noqa: BLE001 - only a hint for batching
            layout = None
        if layout is not None and layout.vocab_size:
            return layout.vocab_size
    return None


def _check_greedy(plan: GreedyPlan, windows: CorpusWindows, context: int | None) -> None:
    if plan.prompt_tokens < 1 or plan.new_tokens < 1:
        raise UsageError("--data-option prompt_tokens and new_tokens: must be at least 1")
    if plan.prompt_tokens > windows.plan.window:
        raise UsageError(f"--data-option prompt_tokens={plan.prompt_tokens}: longer than a window "
                         f"({windows.plan.window} tokens)")
    if context and plan.prompt_tokens + plan.new_tokens > context:
        raise UsageError(f"--data-option prompt_tokens={plan.prompt_tokens} and new_tokens={plan.new_tokens}: "
                         f"longer than the model's context of {context} tokens")


def resolve_decoder_metrics(outputs: Mapping[str, Any], requested: Sequence[str] | None) -> list[ResolvedMetric]:
    """The decoder metrics to judge with, each bound to the record (of ``outputs``) it reads.

    Without ``requested``, every default decoder metric; a metric that judges model outputs
    (``pooled_cosine_mean``) is one clear error.
    """
    from ..protocols import MetricContext
    from ..registry import get_registry

    registry = get_registry()
    entries = {e.name: e for e in registry.all("metric") if e.available and getattr(e.spec, "decoder", False)}
    names: list[str] = []
    for request in requested or [n for n in DECODER_ORDER if n in entries and entries[n].spec.default] + \
            sorted(n for n, e in entries.items() if n not in DECODER_ORDER and e.spec.default):
        name = request.rpartition(".")[2] if request.rpartition(".")[0] in (records.NEXT_TOKEN, records.GREEDY) \
            else request
        if name not in entries:
            registry.get("metric", name)   # an unknown name: "did you mean"
            raise UsageError(f"--metric {request}: judges model outputs; a decoder language model is judged by "
                             f"{', '.join(sorted(entries))}")
        if name not in names:
            names.append(name)
    bound = []
    for name in names:
        entry = entries[name]
        metric = entry.create()
        hits = [o for o in outputs if metric.applies(outputs[o], MetricContext(output=o))]
        if not hits:
            raise UsageError(f"--metric {name}: reads none of a decoder judge's records "
                             f"({', '.join(outputs)})")
        bound.append(ResolvedMetric(hits[0], name, metric, entry.spec.higher_is_better, entry.spec.description,
                                    relative=getattr(entry.spec, "relative", False), rate=False))
    return bound
