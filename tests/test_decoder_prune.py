"""A decoder's candidates judged on a few confirm windows first (jobs.pruning): one far over its KL
budget is dropped there, one within it goes on to the full judge.  The judge is saved and read back as a
candidate's worker reads it."""

from __future__ import annotations

import pytest
from decoder_models import decoder_pair, word_corpus

pytestmark = pytest.mark.slow   # runs onnxruntime-genai's builder on a tiny LLaMA


def test_decoder_candidates_are_pruned_on_eight_windows_only_when_clearly_over(tmp_path):
    from onnxlite.evaluation.decoder_judge import DecoderJudge, DecoderOptions
    from onnxlite.jobs.candidate import load_judge, save_judge
    from onnxlite.jobs.pruning import DECODER_PRUNE_WINDOWS, prune
    from onnxlite.search.confidence import configure_judge

    fp32, noisy, _hf = decoder_pair(tmp_path)
    corpus = word_corpus(tmp_path / "corpus.txt", documents=40)
    options = DecoderOptions(window=24, stride=8, prompt_tokens=8, new_tokens=8)
    judge = DecoderJudge.from_decoders(fp32, str(corpus), max_drop="kl=0.0005", options=options)
    configure_judge(judge, 0.95)
    assert judge.parts is not None and len(judge.parts.confirm) >= 2 * DECODER_PRUNE_WINDOWS
    loaded = load_judge(save_judge(judge, tmp_path / "judge"), {})
    dropped = prune(loaded, noisy / "model.onnx", DECODER_PRUNE_WINDOWS)
    assert dropped is not None and dropped.samples == DECODER_PRUNE_WINDOWS
    assert any("kl" in f and "pruned early" in f for f in dropped.failures)
    # the subset's drop is the candidate's own on those windows: the full judge says it is over budget too
    full = loaded.evaluate(noisy / "model.onnx")
    key = next(k for k in full.drops if k.endswith(".kl"))
    assert full.drops[key] > 0.0005 and dropped.drops[key] > 0.0005 and not full.passed
    assert prune(loaded, fp32 / "model.onnx", DECODER_PRUNE_WINDOWS) is None   # the reference itself: no drop
