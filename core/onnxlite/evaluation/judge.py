"""The :class:`Judge`: reference outputs on fixed samples, and any number of candidates scored against them.

``lighten`` builds one Judge and scores every candidate it tries;
:func:`onnxlite.evaluation.compare.compare` is the one-call version.  How
metrics are chosen and how a drop is computed is in
:mod:`onnxlite.evaluation.metrics` and docs/metrics.md.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import UsageError, one_line
from ..figures import Figures
from ..protocols import MetricContext
from .metrics import ResolvedMetric, choose_primary, compute, drop, parse_budgets, resolve_metrics
from .reference import ReferenceModel

if TYPE_CHECKING:
    import numpy as np

    from ..inputs import InputSpec
    from ..runtime import SessionSettings
    from ..stats import Resolution

Progress = Callable[[str], None]

#: generated samples when no data is given: enough to see padding and a spread of cosines, still fast
DEFAULT_SAMPLES = 32
DEFAULT_BATCH = 8
DEFAULT_SEQ = 16


@dataclass(frozen=True)
class ReferenceOptions:
    """How :meth:`Judge.run_reference` loads the reference and which samples it runs it on."""

    framework: str = "auto"
    source_options: Mapping[str, Any] | None = None
    data_options: Mapping[str, Any] | None = None
    inputs: Sequence[InputSpec] | None = None
    settings: SessionSettings | None = None
    samples: int | None = None          # at most this many (None: all the data, or the default generated count)
    batch_size: int = DEFAULT_BATCH
    seq_len: int = DEFAULT_SEQ          # generated text inputs' length
    seed: int = 0

    @classmethod
    def of(cls, base: ReferenceOptions | None, overrides: Mapping[str, Any]) -> ReferenceOptions:
        """``base`` (default: all defaults) with ``overrides``, its fields given as keywords."""
        try:
            return replace(base or cls(), **overrides)
        except TypeError:
            unknown = sorted(set(overrides) - {f.name for f in fields(cls)})
            raise TypeError(f"unexpected keyword argument(s): {', '.join(unknown)}") from None


@dataclass
class ReferenceRun:
    """The reference's outputs on the judge's samples, before any candidate exists."""

    outputs: dict[str, np.ndarray]
    feeds: dict[str, np.ndarray]
    labels: Any
    description: str
    name: str
    framework: str
    path: str | None = None
    #: inputs whose sample axis is not 0 (a state [2, batch, 128]: 1), or None for scalars and constants
    batch_axes: dict[str, int | None] = field(default_factory=dict)
    #: outputs whose sample axis is not 0 in the model's own layout (the judge holds them batch-first)
    output_axes: dict[str, int | None] = field(default_factory=dict)
    #: the most samples the model takes at once (a fixed batch axis), or None
    batch_cap: int | None = None


@dataclass
class CandidateResult(Figures):
    """One candidate's scores (its figures: :class:`~onnxlite.figures.Figures`; the intervals when the
    judge has a confidence, and option grids are chosen on ``select_drops``, never on ``drops``).
    ``passed`` is None when no budget was set."""

    name: str
    path: str
    budgets: dict[str, float] = field(default_factory=dict)
    passed: bool | None = None
    failures: list[str] = field(default_factory=list)
    format: str | None = None
    cpu_fallback: dict[str, str] | None = None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "path": self.path, "size_bytes": self.size_bytes, "format": self.format,
            "metrics": _clean(self.metrics), "drops": _clean(self.drops), "budgets": dict(self.budgets),
            "intervals": dict(self.intervals), "select_drops": _clean(self.select_drops),
            "passed": self.passed, "failures": list(self.failures), "cpu_fallback": self.cpu_fallback,
            "notes": list(self.notes),
        }


def _clean(values: Mapping[str, float]) -> dict[str, float | None]:
    return {k: (None if v is None or not math.isfinite(v) else float(v)) for k, v in values.items()}


def _concat(parts: Sequence[Mapping[str, np.ndarray]], what: str,
            axes: Mapping[str, int | None] | None = None) -> dict[str, np.ndarray]:
    """Batches joined on each array's sample axis (``axes``: those not on 0; None keeps a scalar once)."""
    import numpy as np

    from ..data.dataset import axis_of

    if not parts:
        return {}
    out = {}
    for name in parts[0]:
        arrays = [p[name] for p in parts]
        axis = axis_of(name, arrays[0], axes)
        if axis is None:
            out[name] = arrays[0]
            continue
        rest = {tuple(d for i, d in enumerate(a.shape) if i != axis) for a in arrays}
        if len(rest) > 1:
            raise UsageError(f"{what} {name!r}: batches differ in shape beyond the sample axis "
                             f"({sorted({a.shape for a in arrays})}); give samples padded to one length")
        out[name] = np.concatenate(arrays, axis=axis)
    return out


def _split_batches(feeds: Mapping[str, np.ndarray], batch_size: int,
                   axes: Mapping[str, int | None] | None = None) -> list[dict[str, np.ndarray]]:
    from ..data.dataset import count_rows, take_rows

    total = count_rows(feeds, axes) if feeds else 0
    return [take_rows(feeds, i, i + batch_size, axes) for i in range(0, total, batch_size)]


def output_axes(outputs: Mapping[str, np.ndarray], rows: int) -> dict[str, int | None]:
    """Outputs whose sample axis is not 0, found on one batch of ``rows`` samples (a state [2, rows, 128]: 1).
    Axis 0 is kept whenever it matches, so batch-first outputs never move."""
    found: dict[str, int | None] = {}
    for name, array in outputs.items():
        shape = getattr(array, "shape", ())
        if not shape:
            found[name] = None
        elif shape[0] != rows and rows in shape:
            found[name] = list(shape).index(rows)
    return found


def batch_first(outputs: Mapping[str, np.ndarray], axes: Mapping[str, int | None]) -> dict[str, np.ndarray]:
    """Outputs with their sample axis first, as metrics and intervals read them (scalars as they are)."""
    import numpy as np

    return {k: (np.moveaxis(v, axis, 0) if (axis := axes.get(k)) else v) for k, v in outputs.items()}


class Judge:
    """Reference outputs on fixed samples, and the metrics to score candidates with.

    ``reference_outputs`` and ``feeds`` hold all samples on axis 0.  Build it
    once (:meth:`from_reference` runs the reference for you), then call
    :meth:`score` or :meth:`evaluate` for each candidate ONNX model.
    """

    def __init__(self, reference_outputs: Mapping[str, np.ndarray], feeds: Mapping[str, np.ndarray],
                 labels: np.ndarray | None = None, metrics: Sequence[str] | None = None, *,
                 max_drop: Any = None, primary: str | None = None, settings: SessionSettings | None = None,
                 batch_size: int = DEFAULT_BATCH):
        from ..runtime import SessionSettings

        if not reference_outputs:
            raise UsageError("the reference produced no outputs")
        self.reference_outputs = dict(reference_outputs)
        self.feeds = dict(feeds)
        self.labels = labels
        self.settings = settings or SessionSettings()
        self.batch_size = max(1, int(batch_size))
        self.metrics: list[ResolvedMetric] = type(self).bind(self.reference_outputs, self.feeds, labels, metrics)
        self.primary = choose_primary(self.metrics, [primary] if primary else metrics)
        self.budgets = parse_budgets(max_drop, self.metrics, self.primary)
        self.reference_scores = {m.key: compute(m, self.reference_outputs[m.output], self.reference_outputs[m.output],
                                                self.context(m.output)) for m in self.metrics}
        #: with a confidence, budgets hold at that one-sided confidence (evaluation.intervals.judge_outputs)
        self.confidence: float | None = None
        #: select/confirm parts of the samples (evaluation.intervals.Parts), or None: all samples confirm
        self.parts: Any = None
        #: budget keys the samples cannot resolve: held to their measured drop, and said so
        self.estimate_only: tuple[str, ...] = ()
        #: more metric keys that get an interval (the continuous companion that ranks)
        self.extra_intervals: tuple[str, ...] = ()

    @classmethod
    def from_reference(cls, reference: Any, data: Any = None, candidate: str | os.PathLike[str] | None = None, *,
                       metrics: Sequence[str] | None = None, max_drop: Any = None, primary: str | None = None,
                       progress: Progress | None = None, how: ReferenceOptions | None = None,
                       **options: Any) -> Judge:
        """Run ``reference`` (ONNX path, framework source, or a loaded ``SourceModel``) on the data.

        ``data`` is anything :func:`onnxlite.data.load_data` reads, a
        :class:`~onnxlite.data.Dataset`, or None for generated samples (from
        the reference's input specs, or ``candidate``'s when the reference
        cannot describe them).  How the reference loads and which samples it runs on is
        :class:`ReferenceOptions` (``how``), or its fields as keywords (``framework=``, ``samples=``...).
        """
        how = ReferenceOptions.of(how, options)
        run = cls.run_reference(reference, data, candidate, progress=progress, how=how)
        return cls.from_run(run, candidate, metrics=metrics, max_drop=max_drop, primary=primary,
                            settings=how.settings, batch_size=how.batch_size)

    @staticmethod
    def run_reference(reference: Any, data: Any = None, candidate: str | os.PathLike[str] | None = None, *,
                      progress: Progress | None = None, how: ReferenceOptions | None = None,
                      **options: Any) -> ReferenceRun:
        """The first half of :meth:`from_reference`: the reference's outputs on the data, no judge yet.

        ``lighten`` runs it on the loaded source before exporting, and builds the
        judge with :meth:`from_run` once the exported model names the outputs.
        """
        from ..data.dataset import count_rows

        how = ReferenceOptions.of(how, options)
        ref = ReferenceModel.load(reference, how.framework, how.source_options, how.settings, how.inputs)
        specs = ref.specs(candidate)
        axes = {s.name: s.batch_axis for s in specs if s.batch_axis != 0}
        # a fixed batch axis (an Ultralytics export's 1) caps every batch the judge runs
        fixed = [int(s.shape[s.batch_axis]) for s in specs
                 if s.batch_axis is not None and isinstance(s.shape[s.batch_axis], int)]
        cap = min(fixed) if fixed else None
        batch_size = min(how.batch_size, cap) if cap else how.batch_size
        batches, labels, description = _prepare_data(data, specs, how.data_options, how.samples, batch_size,
                                                     how.seq_len, how.seed)
        say = progress or (lambda _msg: None)
        say(f"running the {ref.framework} reference on {description}")
        raw = [ref.run(b) for b in batches]
        found = output_axes(raw[0], count_rows(batches[0], axes)) if raw else {}
        outputs = _concat([batch_first(o, found) for o in raw], "reference output")
        return ReferenceRun(outputs, _concat(batches, "input", axes), labels, description, ref.name, ref.framework,
                            ref.path, batch_axes=axes, output_axes=found, batch_cap=cap)

    @classmethod
    def from_run(cls, run: ReferenceRun, candidate: str | os.PathLike[str] | None = None, *,
                 metrics: Sequence[str] | None = None, max_drop: Any = None, primary: str | None = None,
                 settings: SessionSettings | None = None, batch_size: int = DEFAULT_BATCH) -> Judge:
        """A judge over a :class:`ReferenceRun`, with ``candidate``'s output names when the framework's differ."""
        outputs = _rename_like(run.outputs, candidate) if candidate is not None else run.outputs
        judge = cls(outputs, run.feeds, run.labels, metrics,
                    max_drop=max_drop, primary=primary, settings=settings, batch_size=batch_size)
        judge.reference_name = run.name
        judge.framework = run.framework
        judge.batch_axes, judge.output_axes = dict(run.batch_axes), dict(run.output_axes)
        judge.batch_cap = run.batch_cap
        if run.batch_cap:
            judge.batch_size = min(judge.batch_size, run.batch_cap)
        judge.data_description = run.description
        judge.reference_path = run.path
        return judge

    bind = staticmethod(resolve_metrics)   # metrics bound to the outputs; a decoder's judge binds its own
    reference_name: str = "reference"
    framework: str = "onnx"
    data_description: str = ""
    reference_path: str | None = None
    #: inputs whose sample axis is not 0 (None: scalars and constants), and outputs likewise
    batch_axes: Mapping[str, int | None] = {}
    output_axes: Mapping[str, int | None] = {}
    #: the most samples the model takes at once (a fixed batch axis), or None
    batch_cap: int | None = None

    @property
    def samples(self) -> int:
        from ..data.dataset import count_rows

        return count_rows(self.feeds, self.batch_axes) if self.feeds else 0

    def first_feeds(self, count: int) -> dict[str, np.ndarray]:
        """The first ``count`` samples' feeds, each input cut on its own sample axis (for benchmarks)."""
        from ..data.dataset import take_rows

        return take_rows(self.feeds, 0, count, self.batch_axes)

    def set_confidence(self, confidence: float, parts: Any = None,
                       extra_intervals: Sequence[str] = ()) -> dict[str, Resolution]:
        """Judge at one-sided ``confidence`` on ``parts`` (select/confirm; None: all confirm), intervals for
        ``extra_intervals`` too (``compare`` and ``lighten`` both call it).  Returns the budgets the confirming
        samples cannot resolve, by key: held to their measured drop (``estimate_only``)."""
        from .intervals import resolution

        count = len(parts.confirm) if parts is not None else self.samples
        by_key, unresolved = {m.key: m for m in self.metrics}, {}
        for key, budget in self.budgets.items():
            metric = by_key[key]
            found = resolution(metric, self.reference_outputs[metric.output], self.context(metric.output), budget,
                               count, confidence)
            if found is not None and not found.resolvable:
                unresolved[key] = found
        self.confidence, self.parts, self.extra_intervals = confidence, parts, tuple(extra_intervals)
        self.estimate_only = tuple(unresolved)
        return unresolved

    def context(self, output: str) -> MetricContext:
        return MetricContext(output=output, feeds=self.feeds, labels=self.labels,
                             reference_outputs=self.reference_outputs)

    def run_candidate(self, path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
        """The candidate's outputs on the judge's samples, keyed like the reference's."""
        from ..runtime import create_session, run_session

        session = create_session(path, self.settings)
        outputs = []
        for batch in _split_batches(self.feeds, self.batch_size, self.batch_axes):
            try:
                outputs.append(batch_first(run_session(session, batch), self.output_axes))
            except UsageError as exc:
                raise UsageError(f"{path}: {exc}") from None
            except Exception as exc:
                raise UsageError(f"{path}: onnxruntime failed on the data ({one_line(exc, 300)})") from None
        return self._align(_concat(outputs, f"{path}: output"), path)

    def _align(self, outputs: dict[str, np.ndarray], path: Any) -> dict[str, np.ndarray]:
        wanted = list(self.reference_outputs)
        if all(name in outputs for name in wanted):
            return {name: outputs[name] for name in wanted}
        if len(outputs) == len(wanted) and not set(outputs) & set(wanted):
            # Frameworks and exporters name outputs differently; same count and order is the same model.
            return dict(zip(wanted, outputs.values()))
        missing = [n for n in wanted if n not in outputs]
        raise UsageError(f"{path}: has no output {missing[0]!r} (it has {', '.join(outputs)}; "
                         f"the reference has {', '.join(wanted)})")

    def score_outputs(self, outputs: Mapping[str, np.ndarray]) -> dict[str, float]:
        scores = {}
        for m in self.metrics:
            reference = self.reference_outputs[m.output]
            candidate = outputs[m.output]
            if candidate.shape != reference.shape:
                raise UsageError(f"output {m.output!r}: candidate shape {list(candidate.shape)} differs from the "
                                 f"reference's {list(reference.shape)}")
            scores[m.key] = compute(m, reference, candidate, self.context(m.output))
        return scores

    def score(self, path: str | os.PathLike[str]) -> dict[str, float]:
        """Metric values (``OUTPUT.METRIC`` -> value) of one candidate."""
        return self.score_outputs(self.run_candidate(path))

    def drops(self, scores: Mapping[str, float]) -> dict[str, float]:
        return {m.key: drop(m, self.reference_scores[m.key], scores[m.key]) for m in self.metrics}

    def evaluate(self, path: str | os.PathLike[str], name: str | None = None) -> CandidateResult:
        """Scores, drops and the pass/fail verdict against the budgets."""
        from ..modelio import model_size

        if self.confidence is not None:
            from .intervals import judge_outputs

            verdict = judge_outputs(self, self.run_candidate(path), confidence=self.confidence, parts=self.parts,
                                    estimate_only=self.estimate_only, extra=self.extra_intervals)
            return CandidateResult(name=name or Path(path).stem, path=str(path), metrics=verdict.metrics,
                                   drops=verdict.drops, budgets=dict(self.budgets), passed=verdict.passed,
                                   failures=verdict.failures, size_bytes=model_size(path),
                                   intervals={k: v.to_dict() for k, v in verdict.intervals.items()},
                                   select_drops=verdict.select_drops)
        scores = self.score(path)
        drops = self.drops(scores)
        failures = []
        for key, budget in self.budgets.items():
            value = drops[key]
            if math.isnan(value):
                failures.append(f"{key}: not finite (NaN/inf outputs)")
            elif value > budget + 1e-12:
                failures.append(f"{key}: drop {value:.4g} > max {budget:.4g}")
        passed = None if not self.budgets else not failures
        return CandidateResult(name=name or Path(path).stem, path=str(path), metrics=scores, drops=drops,
                               budgets=dict(self.budgets), passed=passed, failures=failures,
                               size_bytes=model_size(path))

    def metric_info(self) -> dict[str, dict[str, Any]]:
        return {m.key: {"output": m.output, "metric": m.name, "higher_is_better": m.higher_is_better,
                        "description": m.description, "why": m.why} for m in self.metrics}


def _rename_like(outputs: dict[str, np.ndarray], candidate: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """Use the ONNX model's output names when the framework names its outputs otherwise (same count, in order)."""
    from ..modelio import read_header

    names = [o.name for o in read_header(candidate).graph.output]
    if len(names) == len(outputs) and not set(names) & set(outputs):
        return dict(zip(names, outputs.values()))
    return outputs


def _prepare_data(data: Any, specs: Sequence[InputSpec], options: Mapping[str, Any] | None, samples: int | None,
                  batch_size: int, seq_len: int, seed: int) -> tuple[list[dict[str, np.ndarray]], Any, str]:
    """Batches of feeds, labels (or None) and a description of where they came from."""
    from ..data import Dataset, load_data
    from ..inputs import make_feeds

    if data is None:
        total = samples or DEFAULT_SAMPLES
        count = max(1, math.ceil(total / batch_size))
        # exactly ``total`` samples ("at most N" in --samples' help): the last batch holds the remainder
        batches = [make_feeds(specs, batch=min(batch_size, total - i * batch_size), seq=seq_len, seed=seed + i,
                              pad=True) for i in range(count)]
        from ..inputs import has_sequence_axis

        # "seq" only for a model that has a sequence axis (issue 25: not for an MLP or a CNN)
        return batches, None, f"{total} generated samples" + (f" (padded, seq {seq_len})"
                                                             if has_sequence_axis(specs) else "")
    dataset = data if isinstance(data, Dataset) else load_data(data, specs, options)
    if samples and len(dataset) > samples:
        dataset = dataset.take(samples)
    batches = list(dataset.batches(batch_size))
    if not batches:
        raise UsageError(f"{dataset.source or data}: no samples")
    return batches, dataset.labels, f"{len(dataset)} samples from {dataset.source or data}"
