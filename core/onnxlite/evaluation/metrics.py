"""Choosing metrics for a model's outputs, and reading drops and budgets.

A metric value is keyed ``OUTPUT.METRIC`` (``logits.top1_agreement``).  The
*drop* of a candidate on a metric is how far it falls from the reference's own
score, in the metric's good direction::

    drop = reference_score - candidate_score    (higher is better)
    drop = candidate_score - reference_score    (lower is better)

where the reference's score is the metric applied to the reference against
itself (1 for similarities and agreements, 0 for differences, the reference's
accuracy for label metrics).  So for cosine the drop is ``1 - cosine``, for
agreement and accuracy it is the loss in points (0.01 = 1 point).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from ..protocols import MetricContext

if TYPE_CHECKING:
    import numpy as np

#: which metric is the headline one when the user names none (first found wins)
PRIMARY_PREFERENCE = ("accuracy", "top1_agreement", "pooled_cosine_mean", "cosine_mean")


#: Default metrics by what an output *is*, not only by its shape (issue 14: a top-1 agreement on a 384-d
#: sentence embedding means nothing).  For each kind: the built-in defaults that are meaningless there
#: (left out) and the off-by-default metrics that see what the defaults miss (brought in when they apply).
#: Third-party default metrics are never left out.
KIND_RULES: dict[str, tuple[tuple[str, ...], tuple[str, ...], str]] = {
    "token embeddings": ((), (), "[batch, seq, hidden] with an attention mask: mean-pooled over real tokens"),
    "classification logits": ((), (), "[batch, classes]: does the candidate pick the same class"),
    "embedding": (("top1_agreement", "top5_agreement", "accuracy"), (),
                  "[batch, dim] named as an embedding, as wide as a [batch, seq, hidden] output beside it, or with "
                  "unit-length rows: argmax means nothing there, direction does"),
    "scalar": (("cosine_mean", "cosine_min"), ("scalar_abs_error",),
               "one value per sample: cosine of one number is its sign, so absolute error"),
    "class sequence": (("top1_agreement", "top5_agreement"),
                       ("frame_agreement", "ctc_agreement", "slice_rel_error_max"),
                       "[batch, frames, classes]: the class of each frame"),
    "sequence": (("top1_agreement", "top5_agreement"), ("slice_rel_error_max",),
                 "[batch, frames, features] without a mask: every frame weighs the same"),
    "mixed-range channels": (("top1_agreement", "top5_agreement"), ("slice_rel_error_max", "slice_rel_error_mean"),
                             "slices along axis 1 differ in range more than 10x (a [batch, 4 + classes, anchors] "
                             "detector head): whole-output cosine sees only the largest, so the worst slice's "
                             "relative error is budgeted too"),
    "tensor": ((), (), "any other float output: cosine and absolute differences"),
}

#: Budgets a kind puts on a metric it brings in, whenever the run is budgeted (``--max-drop`` given, or
#: lighten's default) and the user budgets no such key: a bare ``--max-drop`` still goes to the primary.
#: ``slice_rel_error_max`` 0.5: the worst slice's error at most half its signal (SQNR >= 6 dB).  Measured on
#: YOLOv8n-DocLayNet's [1, 15, 21504] head (docs/metrics.md): int8 candidates that keep detection F1 at
#: 0.997-1.000 reach 0.27 (dynamic) and 0.34 (static, Conv only) on their worst class row, fp16 0.004, while
#: one activation scale over boxes and classes zeroes the class rows, which is exactly 1.0.  5% would reject
#: every int8 candidate that keeps the detections; 0.5 rejects only slices that lose their signal.
KIND_BUDGETS: dict[str, dict[str, float]] = {
    "mixed-range channels": {"slice_rel_error_max": 0.5},
    # A CTC recognizer's probabilities keep a cosine of 0.995 while 8% of its strings change (PP-OCRv4's
    # int4[block_size=128]: string agreement 0.917): the decoded sequences are the answers, so at most 3%
    # of them may change (a user's OCR bar is 97%).
    "class sequence": {"ctc_agreement": 0.03},
}

#: an output is "mixed-range channels" when its smallest non-empty slice along axis 1 has less than this
#: share of the largest slice's norm: its whole energy is then under 1% of that slice's, and a cosine
#: budget of 1% cannot see it vanish.
MIXED_RANGE_RATIO = 0.1
#: slices under this share of the largest norm are empty (padding, dead channels), not small-range
EMPTY_SLICE = 1e-6

_EMBEDDING_NAME = re.compile(r"embed|pool|hidden|feature|sentence|vector|represent|latent|encod", re.I)
_CLASS_NAME = re.compile(r"logit|prob|score|class|softmax|ctc", re.I)


def output_kind(name: str, reference: Any, context: MetricContext) -> str:
    """Which :data:`KIND_RULES` entry an output falls under, from its shape and its name."""
    from ..numerics import is_floating

    if not is_floating(reference):
        return "tensor"
    shape = tuple(reference.shape)
    if len(shape) == 1 or (len(shape) == 2 and shape[1] == 1):
        return "scalar"
    if len(shape) == 2:
        if _CLASS_NAME.search(name):
            return "classification logits"
        if _EMBEDDING_NAME.search(name) or _pooled_by_use(name, reference, context):
            return "embedding"
        return "classification logits"
    if len(shape) == 3 and context.attention_mask(shape[:2]) is not None:
        return "token embeddings"
    if mixed_ranges(reference):
        return "mixed-range channels"
    if len(shape) == 3:
        return "class sequence" if _CLASS_NAME.search(name) else "sequence"
    return "tensor"


def _pooled_by_use(name: str, reference: Any, context: MetricContext) -> bool:
    """A ``[batch, dim]`` output whose name says nothing (``onnx::Shape_422``) is a sentence embedding when the
    model uses it as one: it is as wide as a ``[batch, seq, hidden]`` output beside it (the pooled vector of those
    token embeddings), or every row has unit length (normalised for cosine search).  Logits are neither."""
    import numpy as np

    batch, width = reference.shape
    for other_name, other in (context.reference_outputs or {}).items():
        shape: tuple[int, ...] = tuple(getattr(other, "shape", ()))
        if other_name != name and len(shape) == 3 and shape[0] == batch and shape[2] == width:
            return True
    norms = np.linalg.norm(np.asarray(reference, dtype=np.float64), axis=1)
    return bool(width > 1 and norms.size and np.all(np.abs(norms - 1.0) < 1e-3))


def slice_norm_ratio(reference: Any) -> float:
    """Smallest non-empty slice norm along axis 1 over the largest (1.0 with fewer than two slices)."""
    import numpy as np

    if reference.ndim < 3 or reference.shape[1] < 2:
        return 1.0
    ref = np.moveaxis(np.asarray(reference, dtype=np.float64), 1, 0).reshape(reference.shape[1], -1)
    norms = np.linalg.norm(ref, axis=1)
    if not np.all(np.isfinite(norms)) or norms.max() <= 0:
        return 1.0
    kept = norms[norms > norms.max() * EMPTY_SLICE]
    return float(kept.min() / norms.max()) if len(kept) >= 2 else 1.0


def mixed_ranges(reference: Any) -> bool:
    """Slices along axis 1 of a ``[batch, C, ...]`` output whose norms differ more than 1 / MIXED_RANGE_RATIO.

    Only 3-d and larger outputs: ``[batch, classes]`` logits and ``[batch, 1]`` scalars have their own kinds.
    """
    return slice_norm_ratio(reference) < MIXED_RANGE_RATIO


@dataclass(frozen=True)
class ResolvedMetric:
    """One metric bound to one output."""

    output: str
    name: str
    metric: Any
    higher_is_better: bool
    description: str = ""
    #: why this metric judges this output when nobody named it (its output's kind), else ""
    why: str = ""
    #: the budget its output's kind gives it by default (KIND_BUDGETS), applied when the run is budgeted
    default_budget: float | None = None
    #: its drop is relative to the reference's score (MetricSpec.relative)
    relative: bool = False
    #: False: its per-sample values are means over many tokens, never a rate of samples, even when all are 0 or 1
    rate: bool | None = None

    @property
    def key(self) -> str:
        return f"{self.output}.{self.name}"


def _split_request(request: str, outputs: Sequence[str], known: Sequence[str]) -> tuple[str | None, str]:
    """``METRIC`` or ``OUTPUT.METRIC`` (output names may contain dots themselves)."""
    if request in known:
        return None, request
    head, dot, tail = request.rpartition(".")
    if dot and head in outputs:
        return head, tail
    return None, request


def resolve_metrics(reference_outputs: Mapping[str, np.ndarray], feeds: Mapping[str, np.ndarray],
                    labels: Any = None, requested: Sequence[str] | None = None) -> list[ResolvedMetric]:
    """Bind metrics to outputs.

    With no ``requested`` names, every registered metric marked ``default``
    whose ``applies`` says yes for an output is used on it.  A requested ``METRIC`` goes on every
    output it applies to; ``OUTPUT.METRIC`` forces it onto that output.
    """
    from ..registry import get_registry

    registry = get_registry()
    outputs = list(reference_outputs)
    resolved: dict[str, ResolvedMetric] = {}

    def add(output: str, entry: Any, why: str = "", budget: float | None = None) -> None:
        bound = ResolvedMetric(output, entry.name, entry.create(), entry.spec.higher_is_better, entry.spec.description,
                               why, budget, getattr(entry.spec, "relative", False))
        resolved.setdefault(bound.key, bound)

    def context(output: str) -> MetricContext:
        return MetricContext(output=output, feeds=feeds, labels=labels, reference_outputs=reference_outputs)

    if not requested:
        kinds = {o: output_kind(o, reference_outputs[o], context(o)) for o in outputs}
        for entry in registry.all("metric"):
            if not entry.available or getattr(entry.spec, "decoder", False):
                continue
            metric = None
            for output in outputs:
                if not _default_for(entry, kinds[output]):
                    continue
                metric = metric or entry.create()
                if _applies(metric, entry.name, reference_outputs[output], context(output)):
                    budget = KIND_BUDGETS.get(kinds[output], {}).get(entry.name) if entry.plugin.builtin else None
                    add(output, entry, f"{output} is {kinds[output]} ({KIND_RULES[kinds[output]][2]})", budget)
        if not resolved:
            raise UsageError("no metric applies to the model's outputs "
                             f"({', '.join(outputs)}); name one with --metric OUTPUT.METRIC")
        return _ordered(resolved, outputs)
    for request in requested:
        forced, name = _split_request(request, outputs, registry.names("metric"))
        entry = registry.get("metric", name)
        if getattr(entry.spec, "decoder", False):
            raise UsageError(f"--metric {request}: judges decoder language models (a model with a key/value "
                             "cache), and this model is not one")
        if forced is not None:
            add(forced, entry)
            continue
        metric = entry.create()
        hits = [o for o in outputs if _applies(metric, name, reference_outputs[o], context(o))]
        if not hits:
            raise UsageError(f"--metric {request}: does not apply to any output ({', '.join(outputs)}); "
                             f"force it with --metric OUTPUT.{name}")
        for o in hits:
            add(o, entry)
    return list(resolved.values())


def _default_for(entry: Any, kind: str) -> bool:
    """Whether a registered metric is used by default on an output of ``kind``: a metric marked ``default``
    unless the kind's rule leaves that built-in out, or a non-default built-in the rule brings in."""
    left_out, brought_in, _why = KIND_RULES[kind]
    builtin = entry.plugin.builtin
    if getattr(entry.spec, "default", True):
        return not (builtin and entry.name in left_out)
    return bool(builtin and entry.name in brought_in)


def _applies(metric: Any, name: str, reference: np.ndarray, context: MetricContext) -> bool:
    try:
        return bool(metric.applies(reference, context))
    except Exception as exc:  # a plugin's bug must name the plugin, not crash with a bare traceback
        raise UsageError(f"metric {name!r}: applies() failed on output {context.output!r}: "
                         f"{type(exc).__name__}: {exc}") from exc


def _ordered(resolved: dict[str, ResolvedMetric], outputs: list[str]) -> list[ResolvedMetric]:
    rank = {name: i for i, name in enumerate(PRIMARY_PREFERENCE)}
    return sorted(resolved.values(), key=lambda m: (outputs.index(m.output), rank.get(m.name, len(rank)), m.name))


def choose_primary(metrics: Sequence[ResolvedMetric], requested: Sequence[str] | None = None) -> str:
    """The headline metric key: the first one the user named, else the preferred built-in on the first output."""
    if not metrics:
        raise UsageError("no metrics to compare with")
    if requested:
        first = requested[0]
        for m in metrics:
            if first in (m.key, m.name):
                return m.key
    outputs = list(dict.fromkeys(m.output for m in metrics))
    for output in outputs:
        for name in PRIMARY_PREFERENCE:
            for m in metrics:
                if m.output == output and m.name == name:
                    return m.key
    return metrics[0].key


def compute(metric: ResolvedMetric, reference: np.ndarray, candidate: np.ndarray, context: MetricContext) -> float:
    """Run one metric, turning a plugin failure into a one-line error that names it."""
    try:
        value = metric.metric.compute(reference, candidate, context)
        return float(value)
    except UsageError:
        raise
    except Exception as exc:
        raise UsageError(f"metric {metric.name!r} on output {metric.output!r} failed: "
                         f"{type(exc).__name__}: {exc}") from exc


def drop(metric: ResolvedMetric, reference_score: Any, candidate_score: Any) -> Any:
    """How far the candidate falls from the reference's own score (positive = worse); a ``relative`` metric's
    as a share of the reference's score.  Scores may be arrays (one drop per resample)."""
    loss = reference_score - candidate_score if metric.higher_is_better else candidate_score - reference_score
    if metric.relative:
        return loss / abs(reference_score)
    return loss


def parse_budget(raw: Any, where: str = "--max-drop") -> float:
    """``0.01`` or ``1%`` -> 0.01 (both mean one point for accuracy, 0.01 for similarities)."""
    text = str(raw).strip()
    scale = 1.0
    if text.endswith("%"):
        text, scale = text[:-1].strip(), 0.01
    try:
        value = float(text) * scale
    except ValueError:
        raise UsageError(f"{where} {raw!r}: expected a number such as 0.01 or 1%") from None
    if not math.isfinite(value) or value < 0:
        raise UsageError(f"{where} {raw!r}: must be a non-negative number")
    return value


def budget_items(max_drop: Any) -> list[tuple[str | None, Any]]:
    """``(metric or None, raw value)`` pairs from any form ``max_drop`` takes (see :func:`parse_budgets`)."""
    if isinstance(max_drop, Mapping):
        return [(str(k), v) for k, v in max_drop.items()]
    items: list[tuple[str | None, Any]] = []
    for item in max_drop if isinstance(max_drop, (list, tuple)) else [max_drop]:
        if isinstance(item, str) and "=" in item:
            key, _, value = item.partition("=")
            items.append((key.strip(), value))
        else:
            items.append((None, item))
    return items


def check_budget_values(max_drop: Any) -> None:
    """Fail on malformed budget numbers before any work; metric names can only be checked once outputs exist."""
    for key, value in budget_items(max_drop):
        parse_budget(value, f"--max-drop {key}" if key else "--max-drop")


def parse_budgets(max_drop: Any, metrics: Sequence[ResolvedMetric], primary: str) -> dict[str, float]:
    """Budgets per metric key.

    ``max_drop`` may be a number or string (for the primary metric), a list of
    such items and/or ``METRIC=VALUE`` / ``OUTPUT.METRIC=VALUE`` strings, or a
    mapping of metric name or key to value.  A bare metric name covers every
    output it is used on.  A default metric with a kind's budget (:data:`KIND_BUDGETS`) keeps
    that budget unless ``max_drop`` names its key or name; without ``max_drop`` nothing is budgeted.
    """
    if max_drop is None:
        return {}
    budgets: dict[str, float] = {}
    keys = {m.key for m in metrics}
    for key, value in budget_items(max_drop):
        where = f"--max-drop {key}" if key else "--max-drop"
        budget = parse_budget(value, where)
        if key is None:
            budgets[primary] = budget
            continue
        if key in keys:
            budgets[key] = budget
            continue
        matched = [m.key for m in metrics if m.name == key]
        if not matched:
            known = ", ".join(sorted(keys))
            raise UsageError(f"{where}: no metric {key!r} in this comparison{_kind_hint(key, metrics)} "
                             f"(metrics: {known})")
        for k in matched:
            budgets[k] = budget
    for m in metrics:
        if m.default_budget is not None and m.key not in budgets:
            budgets[m.key] = m.default_budget
    return budgets


def _kind_hint(name: str, metrics: Sequence[ResolvedMetric]) -> str:
    """Why a registered metric is not in a comparison: it judges the other kind of model (decoder or not)."""
    from ..registry import get_registry
    from .decoder_records import GREEDY, NEXT_TOKEN

    registry = get_registry()
    if name not in registry.names("metric"):
        return ""
    wants_decoder = bool(getattr(registry.get("metric", name).spec, "decoder", False))
    is_decoder = any(m.output in (NEXT_TOKEN, GREEDY) for m in metrics)
    if wants_decoder and not is_decoder:
        return ": it judges decoder language models, and this model is not one"
    if is_decoder and not wants_decoder:
        return ": it judges model outputs, and a decoder language model is judged on its corpus"
    return ""
