"""The worker side of generation benchmarks: one decoder in its own process, one timed greedy run per command.

:mod:`onnxlite.benchmark.worker` dispatches ``load_decoder`` and ``generate``
here.  A run is :meth:`onnxlite.decoding.DecoderSession.greedy` on seeded
random prompts with no end-of-sequence token, so every row generates exactly
the tokens asked for; the prefill and the decode steps are timed apart inside
that loop, around the onnxruntime runs.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

#: prompt ids are drawn below this (or the vocabulary, when smaller): real token ids, no special ones
PROMPT_ID_RANGE = 1000


class GenerationWorker:
    """``peak_rss`` reads the process's peak resident memory (the worker's own measure)."""

    def __init__(self, peak_rss: Callable[[], int]) -> None:
        self.session: Any = None
        self.vocab = PROMPT_ID_RANGE
        self.peak_rss = peak_rss

    def load(self, msg: dict[str, Any]) -> dict[str, Any]:
        import onnxruntime  # noqa: F401 - imported before the baseline, so it isolates the model

        from ..decoding import DecoderSession
        from ..runtime import SessionSettings

        settings = SessionSettings(**msg["settings"])
        baseline = self.peak_rss()
        start = time.perf_counter()
        self.session = DecoderSession(msg["model"], threads=settings.threads)
        load_seconds = time.perf_counter() - start
        vocab = self.session.layout.vocab_size
        self.vocab = min(vocab, PROMPT_ID_RANGE) if vocab else PROMPT_ID_RANGE
        return {"pid": os.getpid(), "load_seconds": load_seconds, "baseline_rss_bytes": baseline,
                "providers": self.session.session.get_providers()}

    def generate(self, msg: dict[str, Any]) -> dict[str, Any]:
        import numpy as np

        assert self.session is not None, "load_decoder first"
        rng = np.random.default_rng(int(msg.get("seed", 0)))
        prompts = rng.integers(3, self.vocab, size=(int(msg["batch"]), int(msg["prompt"]))).tolist()
        run = self.session.greedy(prompts, int(msg["new_tokens"]), eos_token_id=None, pad_token_id=0)
        return {"prefill_seconds": run.prefill_seconds, "decode_seconds": run.decode_seconds,
                "decode_steps": run.decode_steps, "decode_tokens": run.decode_tokens,
                "first_tokens": len(run.tokens)}
