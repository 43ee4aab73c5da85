"""Which quantized node hurts: error attributed node by node (``onnxlite compare --per-node``).

A node's *own quantization* is what the QDQ candidate adds around it: the DequantizeLinear of its
weights and bias, and the QuantizeLinear/DequantizeLinear pair on its output.  For each quantized node
this module measures

- ``qdq_sqnr``: the signal-to-quantization-noise ratio (dB) that the Q/DQ on its output alone adds, and
  ``float_sqnr``: the same tensor in the candidate against the float model (everything before it
  included).  onnxruntime's ``qdq_loss_debug`` collects and pairs these activations;
- ``drop_alone``: the primary metric's end-to-end drop when only this node is quantized (every other
  Q/DQ removed), and ``drop_float``: the drop when only this node is left float.  ``recovered`` is the
  candidate's drop minus ``drop_float``: what keeping it float buys.

Nodes are ranked worst first by ``drop_alone``, then by ``recovered``, then by the lowest SQNR.  This is
the one implementation: ``compare --per-node`` prints it, and a fallback or mixed-precision search ranks
nodes with :func:`rank_nodes` (the same measurement, names worst first).
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from ..ops import QDQ_OPS
from .qdq_graph import QUANTIZED_SUFFIX, folded_bounds, qdq_groups, without_qdq

if TYPE_CHECKING:
    from .judge import Judge

Progress = Callable[[str], None]


@dataclass(frozen=True)
class NodeError:
    """One quantized node's share of the error (None: not measured)."""

    node: str
    op_type: str
    output: str
    qdq_sqnr: float | None = None
    float_sqnr: float | None = None
    drop_alone: float | None = None
    drop_float: float | None = None
    recovered: float | None = None
    #: every metric's drop with only this node quantized, and with only it left float (by metric key)
    alone_drops: dict[str, float] = field(default_factory=dict)
    float_drops: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        def clean(v: Any) -> Any:
            if isinstance(v, dict):
                return {k: clean(x) for k, x in v.items()}
            return None if isinstance(v, float) and not math.isfinite(v) else v

        return {k: clean(v) for k, v in self.__dict__.items()}


@dataclass(frozen=True)
class PerNodeResult:
    """Every quantized node of one candidate, worst first."""

    reference: str
    candidate: str
    metric: str
    #: the continuous metric that breaks ties of the primary one (a rate such as top-1 agreement moves in
    #: whole samples, so many nodes share a value), or None
    tiebreak: str | None
    candidate_drop: float
    samples: int
    activation_samples: int
    nodes: tuple[NodeError, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        return {"reference": self.reference, "candidate": self.candidate, "metric": self.metric,
                "tiebreak": self.tiebreak,
                "candidate_drop": self.candidate_drop, "samples": self.samples,
                "activation_samples": self.activation_samples, "nodes": [n.to_dict() for n in self.nodes],
                "notes": list(self.notes)}

    def table_lines(self, limit: int | None = 20) -> list[str]:
        """A plain table at most 80 columns wide, worst first (``limit`` rows; None: all)."""
        head = f"{'node':<28} {'op':<7} {'alone':>7} {'cos':>7} {'float':>7} {'recov':>7} {'qdq dB':>6}"
        lines = [f"per-node error of {Path(self.candidate).name}: {self.metric} drop {self.candidate_drop:+.4f} "
                 f"on {self.samples} samples"[:80], head, "-" * len(head)]
        for n in self.nodes[:limit]:
            name = n.node if len(n.node) <= 28 else "…" + n.node[-27:]
            cos = n.alone_drops.get(self.tiebreak) if self.tiebreak else None
            lines.append(f"{name:<28} {n.op_type[:7]:<7} {_num(n.drop_alone, 3):>7} {_num(cos, 3):>7} "
                         f"{_num(n.drop_float, 3):>7} {_num(n.recovered, 3):>7} {_num(n.qdq_sqnr, 1):>6}")
        if limit is not None and len(self.nodes) > limit:
            lines.append(f"... {len(self.nodes) - limit} more (--json for all)")
        lines.append("alone: drop with only this node quantized (cos: of the mean cosine, which breaks")
        lines.append("ties); float: drop with only it left float; recov: candidate drop minus float;")
        lines.append("qdq dB: the SQNR its output's Q/DQ adds")
        return lines

    def markdown(self, limit: int = 20) -> str:
        lines = [f"Primary metric `{self.metric}`; the candidate drops {self.candidate_drop:+.4f} on "
                 f"{self.samples} samples (SQNR on {self.activation_samples}). Worst first:", ""]
        for n in self.nodes[:limit]:
            lines.append(f"- `{n.node}` ({n.op_type}): alone {_num(n.drop_alone)}, left float "
                         f"{_num(n.drop_float)} (recovers {_num(n.recovered)}), output Q/DQ {_num(n.qdq_sqnr, 1)} dB, "
                         f"against float {_num(n.float_sqnr, 1)} dB")
        lines += [""] + [f"- {note}" for note in self.notes]
        return "\n".join(lines)

    def chart_svg(self, limit: int = 20, width: int = 760) -> str:
        """Horizontal bars: the drop with only each node quantized (dark) and what leaving it float recovers."""
        from html import escape

        rows = self.nodes[:limit]
        values = [max(0.0, n.drop_alone or 0.0) for n in rows] + [max(0.0, n.recovered or 0.0) for n in rows]
        top = max(values + [1e-9])
        bar, left, height = 16, 260, 26 + 22 * len(rows)
        out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" role="img" '
               f'aria-label="per-node drops">']
        for i, n in enumerate(rows):
            y = 20 + 22 * i
            alone = max(0.0, n.drop_alone or 0.0) / top * (width - left - 70)
            rec = max(0.0, n.recovered or 0.0) / top * (width - left - 70)
            out.append(f'<text x="{left - 6}" y="{y + 12}" text-anchor="end" font-size="11">'
                       f'{escape(n.node[-38:])}</text>')
            out.append(f'<rect x="{left}" y="{y}" width="{alone:.1f}" height="{bar / 2}" fill="#3b6fb6"/>')
            out.append(f'<rect x="{left}" y="{y + bar / 2}" width="{rec:.1f}" height="{bar / 2}" fill="#e39b3a"/>')
            out.append(f'<text x="{left + max(alone, rec) + 4:.1f}" y="{y + 12}" font-size="10">'
                       f'{_num(n.drop_alone)} / {_num(n.recovered)}</text>')
        out.append(f'<text x="{left}" y="12" font-size="11">blue: drop with only this node quantized; '
                   'orange: drop recovered by leaving it float</text></svg>')
        return "".join(out)


def _num(value: float | None, digits: int = 4) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    return f"{value:.{digits}f}" if digits < 3 else f"{value:+.{digits}f}"


# -- the measurement -----------------------------------------------------------------------------------------


def activation_sqnr(float_model: str, qdq_model: str, feeds: Sequence[dict[str, Any]], work: Path,
                    folded: dict[str, tuple[float, float]] | None = None) -> dict[str, dict[str, float]]:
    """Per activation tensor: ``qdq`` (pre vs post Q/DQ) and ``float`` (float model vs post Q/DQ) SQNR, dB.

    onnxruntime's ``qdq_loss_debug`` augments both models, collects the activations and pairs them.
    ``folded``: tensors whose Q took over a Relu/Clip, with its (low, high) bounds; the tensor before
    the Q is clipped to them first, so the SQNR measures rounding, not the activation.
    """
    import numpy as np
    from onnxruntime.quantization.qdq_loss_debug import (
        collect_activations,
        compute_signal_to_quantization_noice_ratio,
        create_activation_matching,
        modify_model_output_intermediate_tensors,
    )

    from ..runtime import quiet_root_logging

    with quiet_root_logging():
        found = {}
        for tag, path in (("qdq", qdq_model), ("float", float_model)):
            augmented = work / f"augmented_{tag}.onnx"
            modify_model_output_intermediate_tensors(path, augmented)
            found[tag] = collect_activations(str(augmented), list(feeds))
        matching = create_activation_matching(found["qdq"], found["float"])
    errors: dict[str, dict[str, float]] = {}
    for name, match in matching.items():
        pre = match["pre_qdq"]
        if folded and name in folded:
            pre = [np.clip(a, *folded[name]) for a in pre]
        errors[name] = {"qdq": compute_signal_to_quantization_noice_ratio(pre, match["post_qdq"])}
        if match.get("float"):
            errors[name]["float"] = compute_signal_to_quantization_noice_ratio(match["float"], match["post_qdq"])
    return errors


def _activation_qdq(qdq: Any) -> set[str]:
    """The Q/DQ nodes on activations (not on weights): every pair that goes when one node is measured alone,
    the graph inputs' too (they have no owner node)."""
    weights = {i.name for i in qdq.graph.initializer}
    return {n.name for n in qdq.graph.node if n.op_type in QDQ_OPS and n.input[0] not in weights}


def _drops_without(qdq: Any, drop: set[str], reference: Any, judge: Judge, path: Path) -> dict[str, float]:
    """The judge's drops for ``qdq`` with the Q/DQ nodes ``drop`` removed (written to ``path``)."""
    import onnx

    onnx.save(without_qdq(qdq, drop, reference), str(path))
    return judge.drops(judge.score(path))


def per_node_errors(float_model: str | os.PathLike[str], candidate: str | os.PathLike[str], judge: Judge, *,
                    activation_samples: int = 8, isolate: bool = True,
                    progress: Progress | None = None) -> PerNodeResult:
    """Attribute ``candidate``'s error (a QDQ model quantized from ``float_model``) node by node.

    ``judge`` holds the samples and the reference's outputs (its primary metric gives the drops).
    ``isolate=False`` skips the two end-to-end runs per node (SQNR only: seconds instead of minutes).
    """
    import numpy as np
    import onnx

    from ..data.dataset import take_rows

    say = progress or (lambda _msg: None)
    float_model, candidate = str(float_model), str(candidate)
    qdq = onnx.load(candidate)
    groups = qdq_groups(qdq)
    if not groups.nodes:
        raise UsageError(f"{candidate}: no QuantizeLinear/DequantizeLinear nodes; --per-node needs a QDQ "
                         "candidate (quantize with --option format=QDQ)")
    reference = onnx.load(float_model)
    notes = []
    primary = judge.primary
    candidate_drop = judge.drops(judge.score(candidate))[primary]
    count = min(max(1, activation_samples), judge.samples)
    say(f"collecting activations on {count} samples")
    rows = [take_rows(judge.feeds, i, i + 1, judge.batch_axes) for i in range(count)]
    with tempfile.TemporaryDirectory(prefix="onnxlite-per-node-") as tmp:
        work = Path(tmp)
        sqnr = activation_sqnr(float_model, candidate, rows, work, folded_bounds(reference))
        every = _activation_qdq(qdq)
        alone: dict[str, dict[str, float]] = {}
        left_float: dict[str, dict[str, float]] = {}
        if isolate:
            total = len(groups.nodes)
            for k, (name, _op, _out) in enumerate(groups.nodes, 1):
                say(f"node {k} of {total}: {name}")
                own = set(groups.own[name])
                for tag, drop, into in (("alone", every - own, alone), ("float", own, left_float)):
                    into[name] = _drops_without(qdq, drop, reference, judge, work / f"{tag}.onnx")
    float_names = {i.name for i in reference.graph.initializer}
    unmatched = [i.name for i in qdq.graph.initializer if i.name.endswith(QUANTIZED_SUFFIX)
                 and i.name[: -len(QUANTIZED_SUFFIX)] not in float_names]
    if unmatched:
        notes.append(f"{len(unmatched)} quantized weight(s) have no float weight of that name in the reference "
                     f"(such as {unmatched[0]}; onnxruntime's pre-processing renames what it merges): measured "
                     "float, they keep their dequantized values")
    tiebreak = next((m.key for m in judge.metrics if m.key != primary and "cosine_mean" in m.key), None)
    nodes = []
    for name, op, out in groups.nodes:
        errs = sqnr.get(out, {})
        mine, kept = alone.get(name, {}), left_float.get(name, {})
        recovered = candidate_drop - kept[primary] if primary in kept else None
        nodes.append(NodeError(node=name, op_type=op, output=out, qdq_sqnr=errs.get("qdq"),
                               float_sqnr=errs.get("float"), drop_alone=mine.get(primary),
                               drop_float=kept.get(primary), recovered=recovered, alone_drops=dict(mine),
                               float_drops=dict(kept)))

    def high(value: float | None) -> float:
        return -value if value is not None and math.isfinite(value) else np.inf

    def worst(n: NodeError) -> tuple[float, ...]:
        return (high(n.drop_alone), high(n.alone_drops.get(tiebreak) if tiebreak else None), high(n.recovered),
                n.qdq_sqnr if n.qdq_sqnr is not None else np.inf)

    nodes.sort(key=worst)
    return PerNodeResult(reference=float_model, candidate=candidate, metric=primary, tiebreak=tiebreak,
                         candidate_drop=candidate_drop,
                         samples=judge.samples, activation_samples=count, nodes=tuple(nodes), notes=tuple(notes))


def rank_nodes(float_model: str | os.PathLike[str], candidate: str | os.PathLike[str], judge: Judge, *,
               isolate: bool = True, progress: Progress | None = None) -> list[str]:
    """Quantized node names, worst first: the order a fallback or mixed-precision search keeps nodes float."""
    return [n.node for n in per_node_errors(float_model, candidate, judge, isolate=isolate, progress=progress).nodes]


def drops_alone(float_model: str | os.PathLike[str], candidate: str | os.PathLike[str], judge: Judge,
                nodes: Sequence[str], metric: str, seconds: float | None = None,
                progress: Progress | None = None) -> list[dict[str, Any]] | None:
    """``compare --per-node``'s ``alone`` column for ``nodes``, as a search's sensitivity sweep needs it.

    Each node of a QDQ ``candidate`` is measured with only its own Q/DQ kept (the same graph surgery as
    :func:`per_node_errors`), so nothing is quantized again: one judged run per node.  Returns
    ``[{"node", "drop"}]`` worst first by ``metric``'s drop, or None when ``candidate`` has no Q/DQ nodes
    (a QOperator or dynamic model: the caller re-quantizes instead).  Nodes the candidate did not quantize,
    and nodes left when ``seconds`` ran out, are not in the list.
    """
    import time

    import onnx

    qdq = onnx.load(str(candidate))
    groups = qdq_groups(qdq)
    if not groups.nodes:
        return None
    reference = onnx.load(str(float_model))
    every = _activation_qdq(qdq)
    wanted = [n for n in nodes if n in groups.own]
    started = time.monotonic()
    found: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="onnxlite-per-node-") as tmp:
        path = Path(tmp) / "alone.onnx"
        for k, name in enumerate(wanted, 1):
            if seconds is not None and found and time.monotonic() - started > seconds:
                break
            if progress:
                progress(f"node {k} of {len(wanted)}: {name} alone")
            drop = _drops_without(qdq, every - set(groups.own[name]), reference, judge, path).get(metric, math.nan)
            found.append({"node": name, "drop": drop})
    found.sort(key=lambda e: -float(e["drop"]) if math.isfinite(e["drop"]) else math.inf)
    return found


def per_node_compare(reference: str | os.PathLike[str], candidate: str | os.PathLike[str], data: Any = None, *,
                     metrics: Sequence[str] | None = None, activation_samples: int = 8, isolate: bool = True,
                     progress: Progress | None = None, **options: Any) -> PerNodeResult:
    """:func:`per_node_errors` from paths and data, as ``compare --per-node`` takes them.

    ``reference`` must be the float ONNX model ``candidate`` was quantized from: its tensors and weights are
    matched by name.  ``options``: how the samples are read and run, the fields of
    :class:`~onnxlite.evaluation.judge.ReferenceOptions` as keywords (``settings=``, ``samples=``...).
    """
    from .judge import Judge

    if not str(reference).lower().endswith(".onnx") or not Path(reference).is_file():
        raise UsageError(f"--per-node: REFERENCE {reference} must be the float .onnx model the candidate was "
                         "quantized from (its tensors and weights are matched by name)")
    judge = Judge.from_reference(str(reference), data, str(candidate), metrics=metrics, progress=progress, **options)
    return per_node_errors(reference, candidate, judge, activation_samples=activation_samples, isolate=isolate,
                           progress=progress)
