"""``compare`` for decoder language models: a :class:`DecoderJudge` on a corpus, one candidate after another.

:func:`onnxlite.evaluation.compare.compare` uses these when the candidates
are decoders with a key/value cache (a folder with ``model.onnx``, or the
file), and gives the same :class:`CompareResult` as for any model.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import UsageError

if TYPE_CHECKING:
    from ..runtime import SessionSettings
    from .decoder_judge import DecoderJudge
    from .judge import CandidateResult, Progress


def is_decoder_compare(reference: Any, candidates: Sequence[str]) -> bool:
    """Whether this comparison is of decoder LMs: the first candidate is an ONNX decoder with a cache."""
    from .decoder_run import is_onnx_decoder

    return bool(candidates) and is_onnx_decoder(candidates[0])


@dataclass(frozen=True)
class DecoderRequest:
    """What ``compare`` was asked, in the terms a decoder's judge takes."""

    data: Any
    metrics: Sequence[str] | None
    max_drop: Any
    primary: str | None
    data_options: Any = None
    samples: int | None = None


def decoder_judge(reference: Any, candidates: Sequence[str], request: DecoderRequest, settings: SessionSettings,
                  progress: Progress | None) -> DecoderJudge:
    """Check every candidate is a decoder (and the reference one to judge them with), then run the reference."""
    from ..decoding import model_file
    from ..modelio import check_model
    from .decoder_judge import DecoderJudge, DecoderOptions
    from .decoder_run import is_decoder_source, is_onnx_decoder

    if not isinstance(reference, (str, os.PathLike)) or not is_decoder_source(reference):
        raise UsageError(f"{reference}: the candidates are decoder language models, and the reference is not one "
                         "(give the exported fp32 folder, or the transformers folder it was exported from)")
    for c in candidates:
        if not is_onnx_decoder(c):
            raise UsageError(f"{c}: not a decoder with a key/value cache, as {candidates[0]} is; compare one kind "
                             "of model at a time")
        check_model(model_file(c))
    options = DecoderOptions.from_data_options(request.data_options, samples=request.samples,
                                               threads=settings.threads)
    return DecoderJudge.from_decoders(reference, request.data, candidates[0], metrics=request.metrics,
                                      max_drop=request.max_drop, primary=request.primary, options=options,
                                      settings=settings, progress=progress)


def score_decoder(judge: DecoderJudge, path: str, name: str) -> CandidateResult:
    """One candidate decoder's verdict, with its greedy agreement in tokens among its notes."""
    outputs = judge.run_candidate(path)
    result = _evaluate(judge, outputs, path, name)
    line = judge.greedy_note(outputs)
    if line:
        result.notes.append(line)
    return result


def reference_size(reference: Any) -> int | None:
    """The reference's size when it is an ONNX decoder (a transformers folder has none)."""
    from ..decoding import model_file
    from ..modelio import model_size

    file = model_file(reference)
    return model_size(file) if file.is_file() and file.suffix == ".onnx" else None


def _evaluate(judge: Any, outputs: Any, path: str, name: str) -> Any:
    """The judge's verdict on outputs already computed (the greedy note reads them too)."""
    from ..decoding import model_file
    from ..modelio import model_size
    from .intervals import judge_outputs
    from .judge import CandidateResult

    if judge.confidence is not None:
        verdict = judge_outputs(judge, outputs, confidence=judge.confidence, parts=judge.parts,
                                estimate_only=judge.estimate_only, extra=judge.extra_intervals)
        return CandidateResult(name=name, path=str(path), metrics=verdict.metrics, drops=verdict.drops,
                               budgets=dict(judge.budgets), passed=verdict.passed, failures=verdict.failures,
                               size_bytes=model_size(model_file(path)),
                               intervals={k: v.to_dict() for k, v in verdict.intervals.items()})
    scores = judge.score_outputs(outputs)
    drops = judge.drops(scores)
    failures = [f"{key}: drop {drops[key]:.4g} > max {budget:.4g}" for key, budget in judge.budgets.items()
                if not drops[key] <= budget + 1e-12]
    return CandidateResult(name=name, path=str(path), metrics=scores, drops=drops, budgets=dict(judge.budgets),
                           passed=None if not judge.budgets else not failures, failures=failures,
                           size_bytes=model_size(model_file(path)))
