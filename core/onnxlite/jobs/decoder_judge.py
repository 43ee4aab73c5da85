"""A decoder's judge on disk, for the tasks that judge candidates in other processes.

:func:`onnxlite.jobs.candidate.save_judge` writes any judge's reference outputs and feeds; a
:class:`~onnxlite.evaluation.decoder_judge.DecoderJudge`'s are its per-window records and its windows'
token ids, and :func:`saved_fields` adds what rebuilds it (the window plan, the greedy plan, the KL support,
the vocabulary, the threads), which :func:`load_decoder_judge` reads back.  A subset of the windows (the
select part's judge) keeps its own windows: they are the saved ``input_ids``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

    from ..evaluation.decoder_judge import DecoderJudge
    from ..runtime import SessionSettings


def saved_fields(judge: Any) -> dict[str, Any]:
    """The ``decoder`` entry of judge.json for a decoder's judge; empty for any other judge."""
    from ..evaluation.decoder_judge import DecoderJudge

    if not isinstance(judge, DecoderJudge):
        return {}
    windows, greedy = judge.windows, judge.greedy_plan
    return {"decoder": {
        "window": windows.plan.window, "stride": windows.plan.stride, "source": windows.source,
        "documents": windows.documents, "tokens": windows.tokens, "support": judge.support, "vocab": judge.vocab,
        "threads": judge.threads,
        "greedy": None if greedy is None else {"prompt_tokens": greedy.prompt_tokens, "new_tokens": greedy.new_tokens,
                                               "eos": list(greedy.eos), "pad": greedy.pad}}}


def load_decoder_judge(config: Mapping[str, Any], reference: Mapping[str, np.ndarray],
                       feeds: Mapping[str, np.ndarray], settings: SessionSettings) -> DecoderJudge:
    """The decoder judge :func:`saved_fields` described, on the saved records and windows."""
    from ..data.corpus import CorpusWindows, WindowPlan
    from ..evaluation.decoder_judge import DecoderJudge
    from ..evaluation.decoder_run import GreedyPlan

    saved = config["decoder"]
    judge = DecoderJudge(reference, feeds, None, config["metrics"], max_drop=config["budgets"] or None,
                         primary=config["primary"], settings=settings, batch_size=config["batch_size"])
    judge.windows = CorpusWindows(feeds["input_ids"], WindowPlan(int(saved["window"]), int(saved["stride"])),
                                  saved["source"], int(saved["documents"]), int(saved["tokens"]))
    greedy = saved.get("greedy")
    judge.greedy_plan = None if greedy is None else GreedyPlan(int(greedy["prompt_tokens"]), int(greedy["new_tokens"]),
                                                               tuple(greedy["eos"]), int(greedy["pad"]))
    judge.support, judge.vocab, judge.threads = int(saved["support"]), saved.get("vocab"), saved.get("threads")
    return judge


def decoder_subset(judge: Any, reference: Mapping[str, np.ndarray],
                   feeds: Mapping[str, np.ndarray]) -> DecoderJudge | None:
    """A decoder judge on a subset of ``judge``'s windows (their records and feeds, as
    :func:`onnxlite.jobs.pruning.judge_subset` cuts them); None when ``judge`` is not a decoder's."""
    from ..evaluation.decoder_judge import DecoderJudge

    if not isinstance(judge, DecoderJudge):
        return None
    config = {"metrics": [m.key for m in judge.metrics], "budgets": judge.budgets, "primary": judge.primary,
              "batch_size": judge.batch_size} | saved_fields(judge)
    sub = load_decoder_judge(config, reference, feeds, judge.settings)
    sub.batch_axes, sub.output_axes = dict(judge.batch_axes), dict(judge.output_axes)
    return sub
