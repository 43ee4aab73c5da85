"""``compare`` for decoder language models: a :class:`DecoderJudge` on a corpus, one candidate after another.

:func:`onnxlite.evaluation.compare.compare` hands over here when the
candidates are decoders with a key/value cache (a folder with ``model.onnx``,
or the file); the result is the same :class:`CompareResult`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..errors import UsageError

if TYPE_CHECKING:
    from ..runtime import SessionSettings
    from .compare import CompareResult
    from .judge import Progress


def is_decoder_compare(reference: Any, candidates: Sequence[str]) -> bool:
    """Whether this comparison is of decoder LMs: the first candidate is an ONNX decoder with a cache."""
    from .decoder_run import _onnx_decoder

    return bool(candidates) and _onnx_decoder(candidates[0])


def compare_decoders(reference: Any, candidates: Sequence[str], data: Any, metrics: Sequence[str] | None,
                     max_drop: Any, settings: SessionSettings, *, primary: str | None, confidence: float | None,
                     progress: Progress | None, data_options: Any = None, samples: int | None = None) -> CompareResult:
    """Each decoder candidate judged against ``reference`` on the corpus ``data``."""
    from ..decoding import model_file
    from ..hardware import detect, measured_here
    from ..modelio import check_model, model_size
    from .compare import CompareResult, _names, _set_confidence, budget_notes
    from .decoder_judge import DecoderJudge, DecoderOptions
    from .decoder_run import _onnx_decoder, is_decoder_source

    if not isinstance(reference, (str, os.PathLike)) or not is_decoder_source(reference):
        raise UsageError(f"{reference}: the candidates are decoder language models, and the reference is not one "
                         "(give the exported fp32 folder, or the transformers folder it was exported from)")
    for c in candidates:
        if not _onnx_decoder(c):
            raise UsageError(f"{c}: not a decoder with a key/value cache, as {candidates[0]} is; compare one kind "
                             "of model at a time")
        check_model(model_file(c))
    options = DecoderOptions.from_data_options(data_options, samples=samples, threads=settings.threads)
    say = progress or (lambda _msg: None)
    judge = DecoderJudge.from_decoders(reference, data, candidates[0], metrics=metrics, max_drop=max_drop,
                                       primary=primary, options=options, settings=settings, progress=say)
    unresolved, notes = _set_confidence(judge, confidence)
    notes = budget_notes(judge.budgets) + notes
    results = []
    for name, path in zip(_names(candidates), candidates):
        say(f"scoring {name}")
        outputs = judge.run_candidate(path)
        result = _evaluate(judge, outputs, path, name)
        line = judge.greedy_note(outputs)
        if line:
            result.notes.append(line)
        results.append(result)
    ref_file = model_file(reference)
    ref_size = model_size(ref_file) if ref_file.is_file() and ref_file.suffix == ".onnx" else None
    return CompareResult(reference=str(reference), framework=judge.framework, primary_metric=judge.primary,
                         reference_metrics=judge.reference_scores, candidates=results, metrics=judge.metric_info(),
                         samples=judge.samples, data=judge.data_description,
                         settings=settings.to_dict() | judge.settings_dict()
                         | measured_here([str(model_file(c)) for c in candidates], settings.provider),
                         reference_size_bytes=ref_size, confidence=confidence,
                         unresolved={k: v.to_dict() for k, v in unresolved.items()}, notes=notes,
                         hardware=detect(settings.provider).to_dict())


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
