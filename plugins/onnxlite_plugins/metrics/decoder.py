"""Built-in metrics of decoder language models: perplexity, KL divergence, next-token and greedy agreement.

They read the per-window records a decoder's judge keeps
(:mod:`onnxlite.evaluation.decoder_records`), never logits: ``text`` for
the first three, ``greedy`` for the last.  A window is a sample, so each has
the held-out parts and intervals every metric has.  docs/metrics.md says what
each budget means.
"""

from __future__ import annotations

from typing import Any

from onnxlite import MetricSpec, hookimpl


def _records():
    from onnxlite.evaluation.decoder_records import GREEDY, NEXT_TOKEN, columns, kl_per_token, prefix_lengths

    return _Records(GREEDY, NEXT_TOKEN, columns, kl_per_token, prefix_lengths)


class _Records:
    """The host's record helpers, imported once a metric runs (numpy only then)."""

    def __init__(self, greedy, next_token, columns, kl_per_token, prefix_lengths):
        self.GREEDY, self.NEXT_TOKEN = greedy, next_token
        self.columns, self.kl_per_token, self.prefix_lengths = columns, kl_per_token, prefix_lengths


def _np():
    import numpy as np

    return np


def _finite(array: Any) -> bool:
    np = _np()
    return bool(np.all(~np.isnan(array)) and np.all(array != np.inf))


class _OnRecord:
    record = ""

    def applies(self, reference: Any, context: Any) -> bool:
        return context.output == getattr(_records(), self.record)


class Perplexity(_OnRecord):
    """exp of the mean negative log-likelihood over every scored token (the candidate's own perplexity)."""

    record = "NEXT_TOKEN"

    def compute(self, reference: Any, candidate: Any, context: Any) -> float:
        np = _np()
        target = _records().columns(candidate).target
        if not _finite(target):
            return float("nan")
        return float(np.exp(-np.mean(target)))


class KLDivergence(_OnRecord):
    """Mean over scored tokens of KL(reference || candidate) of the next-token distributions, in nats."""

    record = "NEXT_TOKEN"

    def compute(self, reference: Any, candidate: Any, context: Any) -> float:
        np = _np()
        values = _records().kl_per_token(reference, candidate)
        if not _finite(values):
            return float("nan")
        return float(np.mean(values))


class NextTokenAgreement(_OnRecord):
    """Share of scored tokens (teacher-forced) where the candidate's top-1 next token is the reference's."""

    record = "NEXT_TOKEN"

    def compute(self, reference: Any, candidate: Any, context: Any) -> float:
        np = _np()
        records = _records()
        return float(np.mean(records.columns(reference).top1 == records.columns(candidate).top1))


class GreedyAgreement(_OnRecord):
    """Mean share of the new tokens a greedy continuation keeps equal to the reference's before the first
    difference (tokens equal before it, over the tokens generated)."""

    record = "GREEDY"

    def compute(self, reference: Any, candidate: Any, context: Any) -> float:
        np = _np()
        return float(np.mean(_records().prefix_lengths(reference, candidate)) / reference.shape[-1])


def _metric(name: str, description: str, factory, higher_is_better: bool = True, relative: bool = False) -> MetricSpec:
    return MetricSpec(name=name, description=description, factory=factory, requires=("numpy",), install="numpy",
                      higher_is_better=higher_is_better, decoder=True, relative=relative)


@hookimpl
def register_metrics() -> list[MetricSpec]:
    return [
        _metric("perplexity", "Perplexity on the corpus windows (exp of the mean negative log-likelihood of the "
                "scored tokens); drop = candidate / reference - 1.", Perplexity, higher_is_better=False,
                relative=True),
        _metric("kl", "KL divergence of the candidate's next-token distribution from the reference's, mean over "
                "scored tokens, in nats; drop = value.", KLDivergence, higher_is_better=False),
        _metric("next_token_agreement", "Share of scored tokens (teacher-forced) whose top-1 next token is the "
                "reference's; drop = 1 - value.", NextTokenAgreement),
        _metric("greedy_agreement", "Greedy continuations of each window's first tokens: share of the new tokens "
                "equal to the reference's before the first difference, mean over prompts; drop = 1 - value.",
                GreedyAgreement),
    ]
