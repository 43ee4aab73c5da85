"""``onnxlite.compare``: score candidate ONNX models against a reference in one call.

The reference is an ONNX model or any source a framework plugin loads
(:mod:`~onnxlite.evaluation.reference`); the scoring is a
:class:`~onnxlite.evaluation.judge.Judge`, the same one ``lighten`` uses.
This module holds the one-call :func:`compare` the CLI uses and its result.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from ..stats import DEFAULT_CONFIDENCE
from .judge import (
    CandidateResult,
    Judge,
    Progress,
    ReferenceOptions,
    _clean,
    _split_batches,
)

if TYPE_CHECKING:
    from ..report.model import Report
    from ..runtime import SessionSettings

# -- results -------------------------------------------------------------------------------------------


@dataclass
class CompareResult:
    """What ``compare`` found: the reference's own scores and each candidate's."""

    reference: str
    framework: str
    primary_metric: str
    reference_metrics: dict[str, float]
    candidates: list[CandidateResult]
    metrics: dict[str, dict[str, Any]]
    samples: int
    data: str
    settings: dict[str, Any] = field(default_factory=dict)
    reference_size_bytes: int | None = None
    #: budgets hold at this one-sided confidence (None: at the measured drop, no intervals)
    confidence: float | None = None
    #: budgets the samples cannot resolve at ``confidence`` (``stats.Resolution.to_dict()`` by metric key):
    #: held to their measured drop, as ``lighten`` holds them
    unresolved: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: one line per unresolvable budget, for the table and the report
    notes: list[str] = field(default_factory=list)
    #: the CPU it was judged on (onnxlite.hardware.Hardware.to_dict())
    hardware: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool | None:
        """None without budgets, else whether every candidate passed."""
        verdicts = [c.passed for c in self.candidates]
        if all(v is None for v in verdicts):
            return None
        return all(v is not False for v in verdicts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "reference": self.reference, "framework": self.framework, "primary_metric": self.primary_metric,
            "samples": self.samples, "data": self.data, "settings": dict(self.settings),
            "reference_size_bytes": self.reference_size_bytes,
            "reference_metrics": _clean(self.reference_metrics), "metrics": self.metrics,
            "candidates": [c.to_dict() for c in self.candidates], "passed": self.passed,
            "confidence": self.confidence, "unresolved": dict(self.unresolved), "notes": list(self.notes),
            "hardware": dict(self.hardware),
        }

    def to_report(self) -> Report:
        """The shared report model (``--report DIR``)."""
        from ..figures import figures_of
        from ..report.model import ModelRow, Report

        rows = [ModelRow(name="reference", path=self.reference, size_bytes=self.reference_size_bytes,
                         metrics=dict(self.reference_metrics), status="reference",
                         note=f"{self.framework} reference")]
        for c in self.candidates:
            status = "failed" if c.passed is False else "ok"
            note = "; ".join(c.failures + c.notes)
            rows.append(ModelRow(name=c.name, path=c.path, status=status, note=note, **figures_of(c)))
        settings = dict(self.settings) | {"data": self.data, "samples": self.samples}
        if self.confidence is not None:
            settings["confidence"] = self.confidence
        return Report(title=f"Accuracy against {Path(self.reference).name}", kind="compare", rows=rows,
                      settings=settings, primary_metric=self.primary_metric,
                      sections=[("Drops", self._drops_markdown()), ("Metrics", self._metrics_markdown())])

    def _drops_markdown(self) -> str:
        keys = list(self.metrics)
        lines = ["Drop = how far each candidate falls from the reference's own score (positive is worse; "
                 "see docs/metrics.md)."]
        if self.confidence is not None:
            lines[0] += (f" In brackets its two-sided {self.confidence:.0%} interval, then its one-sided "
                         f"{self.confidence:.0%} upper bound (≤): a budget (max) holds when that bound is within it.")
        lines += [f"- {note}" for note in self.notes]
        lines += ["", "| metric | " + " | ".join(c.name for c in self.candidates) + " |",
                  "|---|" + "---:|" * len(self.candidates)]
        for key in keys:
            cells = []
            for c in self.candidates:
                value = c.drops.get(key)
                text = "-" if value is None else f"{value:.4g}"
                interval = c.intervals.get(key) or {}
                if value is not None and interval.get("upper") is not None:
                    text += f" [{interval['low']:.4g}, {interval['high']:.4g}] ≤{interval['upper']:.4g}"
                if key in c.budgets:
                    text += f" (max {c.budgets[key]:.4g}{', measured drop' if key in self.unresolved else ''})"
                cells.append(text)
            lines.append(f"| `{key}` | " + " | ".join(cells) + " |")
        return "\n".join(lines)

    def _metrics_markdown(self) -> str:
        return "\n".join(f"- `{key}`: {info['description']}" for key, info in self.metrics.items())


# -- the judge -----------------------------------------------------------------------------------------


# -- the reference ---------------------------------------------------------------------------------------


# -- one call ----------------------------------------------------------------------------------------------

def compare(reference: Any, candidates: Sequence[str | os.PathLike[str]] | str | os.PathLike[str],
            data: Any = None, metrics: Sequence[str] | None = None, max_drop: Any = None,
            settings: SessionSettings | None = None, *, primary: str | None = None, placement: bool | None = None,
            confidence: float | None = DEFAULT_CONFIDENCE, progress: Progress | None = None,
            **reference_options: Any) -> CompareResult:
    """Score each candidate ONNX model against ``reference``.

    ``metrics``: metric names (``top1_agreement``) or keys
    (``logits.top1_agreement``); default: the ones that suit each output.
    ``max_drop``: a budget for the primary metric (``0.01`` or ``"1%"``), or
    ``METRIC=VALUE`` strings / a mapping for specific metrics; candidates over
    budget get ``passed=False``.  ``confidence``: every drop gets an interval
    and a budget holds when the one-sided upper bound of the drop at this
    confidence is within it, the rule ``lighten`` applies
    (:func:`onnxlite.evaluation.intervals.judge_outputs`); a budget the samples
    cannot resolve at all is held to the measured drop and named in ``notes``;
    None judges by the measured drop alone.  ``placement``: report nodes that
    fall back to the CPU (default: whenever ``settings`` asks for a non-CPU provider).
    ``reference_options``: how the reference loads and which samples it runs on, the fields of
    :class:`~onnxlite.evaluation.judge.ReferenceOptions` (``framework``, ``source_options``,
    ``data_options``, ``inputs``, ``samples``, ``batch_size``, ``seq_len``, ``seed``).
    """
    from ..hardware import detect, measured_here
    from ..modelio import check_model, model_size
    from ..runtime import SessionSettings, resolve_providers

    how = ReferenceOptions.of(None, reference_options)   # an unknown keyword fails before any work
    if isinstance(candidates, (str, os.PathLike)):
        candidates = [candidates]
    candidates = [str(c) for c in candidates]
    if not candidates:
        raise UsageError("give at least one candidate ONNX model")
    if confidence is not None and not 0 < confidence < 1:
        raise UsageError(f"--confidence: expected a fraction between 0 and 1 (such as 0.95), got {confidence}")
    from .decoder_compare import DecoderRequest, is_decoder_compare

    paths = [str(c) for c in candidates]
    if is_decoder_compare(reference, paths):
        return _compare_decoders(reference, paths, DecoderRequest(data, metrics, max_drop, primary, how.data_options,
                                                                  how.samples),
                                 settings or SessionSettings(), confidence, progress)
    for c in candidates:
        # unreadable or invalid candidates (an unknown operator) stop us before any work, worded as quantize
        # and export word them; the header parse is shared with every later look at the file
        check_model(c)
    settings = settings or SessionSettings()
    resolve_providers(settings)  # an unavailable provider is an error before the reference runs
    say = progress or (lambda _msg: None)
    how = ReferenceOptions.of(how, {"settings": settings})
    judge = Judge.from_reference(reference, data, candidates[0], metrics=metrics, max_drop=max_drop,
                                 primary=primary, progress=say, how=how)
    unresolved, notes = _set_confidence(judge, confidence)
    notes = budget_notes(judge.budgets) + label_notes(judge) + notes
    for path in candidates:
        check_same_inputs(judge, path, reference)
    names = _names(candidates)
    check_placement = settings.provider != "cpu" if placement is None else placement
    results = []
    for name, path in zip(names, candidates):
        say(f"scoring {name}")
        result = judge.evaluate(path, name)
        _add_placement(result, path, settings, judge, check_placement)
        results.append(result)
    # Only an ONNX reference has an ONNX size; a .keras/.pt file is not a ModelProto.
    ref_size = (model_size(judge.reference_path) if judge.framework == "onnx" and judge.reference_path
                and Path(judge.reference_path).is_file() else None)
    named = str(reference) if isinstance(reference, (str, os.PathLike)) else judge.reference_name
    return CompareResult(reference=named,
                         framework=judge.framework, primary_metric=judge.primary,
                         reference_metrics=judge.reference_scores, candidates=results, metrics=judge.metric_info(),
                         samples=judge.samples, data=judge.data_description,
                         settings=settings.to_dict() | {"batch_size": judge.batch_size}
                         | measured_here(candidates, settings.provider),
                         reference_size_bytes=ref_size, confidence=confidence,
                         unresolved={k: v.to_dict() for k, v in unresolved.items()}, notes=notes,
                         hardware=detect(settings.provider).to_dict())


def _compare_decoders(reference: Any, candidates: list[str], request: Any, settings: SessionSettings,
                      confidence: float | None, progress: Progress | None) -> CompareResult:
    """:func:`compare` of decoder language models (:mod:`onnxlite.evaluation.decoder_compare`)."""
    from ..decoding import model_file
    from ..hardware import detect, measured_here
    from .decoder_compare import decoder_judge, reference_size, score_decoder

    say = progress or (lambda _msg: None)
    judge = decoder_judge(reference, candidates, request, settings, say)
    unresolved, notes = _set_confidence(judge, confidence)
    results = []
    for name, path in zip(_names(candidates), candidates):
        say(f"scoring {name}")
        results.append(score_decoder(judge, path, name))
    measured = measured_here([str(model_file(c)) for c in candidates], settings.provider)
    return CompareResult(reference=str(reference), framework=judge.framework, primary_metric=judge.primary,
                         reference_metrics=judge.reference_scores, candidates=results, metrics=judge.metric_info(),
                         samples=judge.samples, data=judge.data_description,
                         settings=settings.to_dict() | judge.settings_dict() | measured,
                         reference_size_bytes=reference_size(reference), confidence=confidence,
                         unresolved={k: v.to_dict() for k, v in unresolved.items()},
                         notes=budget_notes(judge.budgets) + notes, hardware=detect(settings.provider).to_dict())


#: a budget this large lets almost anything pass: ``--max-drop 1`` means 100%, not 1%
LARGE_BUDGET = 0.5


def budget_notes(budgets: Mapping[str, float]) -> list[str]:
    """A warning per budget of at least 50%: ``--max-drop 1`` reads as 100% (write ``1%`` for one point)."""
    return [f"the {key} budget is {budget:.0%} (--max-drop {budget:g}): nearly any candidate passes; "
            f"a bare number is a fraction, so write {budget * 100:g}% only if you mean it (1% is 0.01)"
            for key, budget in budgets.items() if budget >= LARGE_BUDGET]


def label_notes(judge: Judge) -> list[str]:
    """Labels that fit no classification output (an index beyond its classes, or negative) leave the accuracy
    metric out; say so instead of ignoring them."""
    import numpy as np

    if judge.labels is None:
        return []
    labels = np.asarray(judge.labels)
    if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer) or labels.size == 0:
        return []
    notes = []
    for name, output in judge.reference_outputs.items():
        if output.ndim == 2 and np.issubdtype(output.dtype, np.floating) and output.shape[0] == labels.shape[0] \
                and (labels.min() < 0 or labels.max() >= output.shape[1]):
            notes.append(f"labels range over [{labels.min()}, {labels.max()}] but output {name!r} has "
                         f"{output.shape[1]} classes (0 to {output.shape[1] - 1}): accuracy is not computed on it")
    return notes


def check_same_inputs(judge: Judge, path: str | os.PathLike[str], reference: Any) -> None:
    """A candidate must take the inputs the reference was run on; when it does not, say that the two models
    take different inputs (not that the data lacks one)."""
    from ..inputs import specs_from_onnx
    from ..modelio import read_header

    takes = [s.name for s in specs_from_onnx(read_header(path))]     # the shared parse: no second read
    missing = [n for n in takes if n not in judge.feeds]
    if missing:
        given = ", ".join(sorted(judge.feeds)) or "none"
        named = f" {reference}" if isinstance(reference, (str, os.PathLike)) else ""
        raise UsageError(f"{path}: the reference and this candidate take different inputs (the candidate takes "
                         f"{', '.join(takes)}; the reference{named} was run on {given})")


def _set_confidence(judge: Judge, confidence: float | None) -> tuple[dict[str, Any], list[str]]:
    """Judge by ``lighten``'s confidence rule (no select part: compare chooses nothing); every metric gets an
    interval.  A budget on a rate metric that the samples cannot resolve is held to its measured drop, and said."""
    if confidence is None:
        return {}, []
    unresolved = judge.set_confidence(confidence, extra_intervals=[m.key for m in judge.metrics])
    notes = [f"{judge.samples} samples cannot resolve the {key} budget ({judge.budgets[key]:.3g}) at "
             f"{confidence:.0%} confidence: {found.reason}; {key} is held to its measured drop"
             for key, found in unresolved.items()]
    return unresolved, notes


def _names(paths: Sequence[str | os.PathLike[str]]) -> list[str]:
    stems = [Path(p).stem for p in paths]
    return [stem if stems.count(stem) == 1 else os.fspath(p) for stem, p in zip(stems, paths)]


def _add_placement(result: CandidateResult, path: str | os.PathLike[str], settings: SessionSettings, judge: Judge,
                   check: bool) -> None:
    from ..placement import format_advice, model_format

    result.format = model_format(path)
    if settings.provider == "cpu" and not check:
        return
    advice = format_advice(settings.provider, result.format)
    if advice:
        result.notes.append(advice)
    if check:
        from ..placement import cpu_fallback_nodes

        # the judge's first batch of the user's samples, each input cut on its own sample axis
        first = _split_batches(judge.feeds, judge.batch_size, judge.batch_axes)[0]
        fallback = cpu_fallback_nodes(path, settings, first)
        result.cpu_fallback = fallback
        if fallback:
            ops = sorted(set(fallback.values()))
            result.notes.append(f"{len(fallback)} node(s) fell back to the CPU ({', '.join(ops[:8])}"
                                f"{'...' if len(ops) > 8 else ''})")

