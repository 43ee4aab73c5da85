"""What the built-in quantization strategies share: node matching, the int8 step, the calibration reader.

Strategies import from here and never from each other, so that each strategy
module is one strategy (a new strategy, such as ``weightonly``, starts from
this module).  Everything here is built on the documented host helpers
(``onnxlite.runtime``, ``onnxlite.modelio``) and onnxruntime itself.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, cast

from onnxlite import Option, UsageError

DEFAULT_OP_TYPES = ("MatMul", "Gemm")


# ---------------------------------------------------------------- node matching


def expand_node_patterns(node_names: Iterable[str], patterns: Iterable[str], option: str = "exclude",
                         what: str = "node") -> list[str]:
    """Node names matching any exact name or glob pattern, in graph order.

    A pattern that matches nothing is a usage error: a typo must not silently
    quantize the layer the user wanted to protect.
    """
    names = [n for n in node_names if n]
    chosen: set[str] = set()
    for pattern in patterns:
        hits = [n for n in names if n == pattern or fnmatch.fnmatchcase(n, pattern)]
        if not hits:
            sample = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
            raise UsageError(f"--option {option}={pattern}: matches no {what} name in the model (names look like: "
                             f"{sample})")
        chosen.update(hits)
    return [n for n in names if n in chosen]



# ---------------------------------------------------------------- the int8 step (quantize_dynamic)


def run_quantize_dynamic(model: str | Path, output: Path, options: Mapping[str, Any], exclude: list[str],
                         external_data: bool) -> None:
    """Call ``quantize_dynamic`` with our option names."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from onnxlite.runtime import quiet_root_logging

    weight_type = QuantType.QUInt8 if options["weight_type"] == "quint8" else QuantType.QInt8
    with quiet_root_logging():
        quantize_dynamic(
            str(model), str(output),
            op_types_to_quantize=list(options["op_types"]),
            per_channel=bool(options["per_channel"]),
            reduce_range=bool(options["reduce_range"]),
            weight_type=weight_type,
            nodes_to_exclude=exclude,
            use_external_data_format=external_data,
        )


def select_nodes(model: Any, options: Mapping[str, Any], what: str = "") -> tuple[list[str], list[Any], list[str]]:
    """The ``op_types`` option (at least one), the graph's nodes of those types, and ``exclude`` expanded on them.

    Only nodes that would be quantized can be excluded; listing others would only blur the report.
    An empty ``op_types`` is refused: ``quantize_dynamic`` would read it as "every type it knows".
    """
    op_types = list(options["op_types"])
    if not op_types:
        raise UsageError("--option op_types: give at least one operator type, e.g. MatMul,Gemm")
    targets = [n for n in model.graph.node if n.op_type in op_types]
    exclude = expand_node_patterns((n.name for n in targets), options["exclude"],
                                   what=what + "/".join(op_types) + " node")
    return op_types, targets, exclude


def weights_note(options: Mapping[str, Any], op_types: Iterable[str]) -> str:
    """How the int8 step quantized the weights, for the result's notes."""
    scheme = "per-channel" if options["per_channel"] else "per-tensor"
    return (f"{scheme} {options['weight_type']} weights on {', '.join(op_types)}"
            + (", 7-bit range" if options["reduce_range"] else ""))


def run_excluding(model: str | Path, output: Path, options: Mapping[str, Any], targets: Iterable[Any],
                  exclude: list[str], external_data: bool) -> None:
    """``run_quantize_dynamic`` with ``exclude`` honoured for Gemm nodes too.

    onnxruntime splits each Gemm into "<name>_MatMul" + "<name>_Add" before it
    checks the exclusion list, so an excluded Gemm must be listed under its
    MatMul's new name as well (onnxruntime 1.32).
    """
    gemms = {n.name for n in targets if n.op_type == "Gemm"}
    run_quantize_dynamic(model, output, options, exclude + [f"{n}_MatMul" for n in exclude if n in gemms],
                         external_data)


def common_options(op_types: tuple[str, ...] = DEFAULT_OP_TYPES) -> tuple[Option, ...]:
    """Options shared with the ``transformer`` strategy, which ends in the same int8 step."""
    return (
        Option("per_channel", bool, True, "One scale per output channel (keeps accuracy; per-tensor is coarser)."),
        Option("weight_type", str, "qint8", "Weight integer type.", choices=("qint8", "quint8")),
        Option("reduce_range", bool, False, "7-bit weights: avoids saturation on CPUs without VNNI, costs accuracy."),
        Option("op_types", str, op_types, "Operator types to quantize (add Gather to store embedding tables "
                                           "in int8: much smaller transformers).", multiple=True),
        Option("exclude", str, (), "Node names or glob patterns (e.g. '*classifier*') to keep in float.",
               multiple=True),
    )



# ---------------------------------------------------------------- calibration data


class CalibrationReader:
    """An onnxruntime ``CalibrationDataReader`` over a Dataset (or any iterable of feed dicts).

    ``len`` and ``set_range`` let ``quantize_static`` calibrate in strides
    (``CalibStridedMinMax``): the calibrator collects one stride, folds it into
    its ranges or histograms and drops the activations before the next, which
    keeps memory bounded however big the calibration set is.
    """

    def __init__(self, data: Any, batch_size: int = 1, limit: int = 0, uniform: bool = False,
                 names: Iterable[str] | None = None) -> None:
        if not (hasattr(data, "take") and hasattr(data, "batches")) and iter(data) is data:
            data = list(data)  # a one-shot iterator: it is read to count it, then again to calibrate
        self.data = data
        self.batch_size = max(1, batch_size)
        self.limit = limit
        self.uniform = uniform
        self.names = list(names) if names is not None else None
        self._iter: Iterator[dict[str, Any]] | None = None
        self._pos = 0
        self._start, self._end = 0, cast("int | None", None)
        self._count: int | None = None
        self._shapes: dict[str, tuple[int, ...]] = {}
        self.samples_seen = 0

    def _all_batches(self) -> Iterator[dict[str, Any]]:
        import numpy as np

        data = self.data
        if hasattr(data, "take") and hasattr(data, "batches"):
            if self.limit:
                data = data.take(self.limit)
            source: Iterable[Mapping[str, Any]] = data.batches(self.batch_size)
        else:
            source = data
        left = self.limit or None
        for feed in source:
            feed = {k: np.asarray(v) for k, v in feed.items()}
            if self.names is not None:
                feed = {k: feed[k] for k in self.names if k in feed}
            if left is not None:
                rows = next(iter(feed.values())).shape[0]
                if rows > left:
                    feed = {k: v[:left] for k, v in feed.items()}
                left -= min(rows, left)
            yield feed
            if left == 0:
                return

    def __len__(self) -> int:
        # quantize_static asks only when striding; a padded count (see StaticQuantizer) may be set.
        if self._count is None:
            self._count = sum(1 for _ in self._all_batches())
        return self._count

    def set_range(self, start_index: int, end_index: int | None) -> None:
        # Strides arrive in order: carry on with the same pass instead of re-reading from the start.
        if self._iter is None or start_index < self._pos:
            self._iter, self._pos = None, 0
        self._start, self._end = start_index, end_index

    def get_next(self) -> dict[str, Any] | None:
        if self._iter is None:
            self._iter, self._pos = self._all_batches(), 0
        while self._pos < self._start:
            if next(self._iter, None) is None:
                return None
            self._pos += 1
        if self._end is not None and self._pos >= self._end:
            return None
        feed = next(self._iter, None)
        if feed is None:
            return None
        self._pos += 1
        self._check_uniform(feed)
        self.samples_seen += next(iter(feed.values())).shape[0]
        return feed

    def _check_uniform(self, feed: Mapping[str, Any]) -> None:
        if not self.uniform:
            return
        for name, array in feed.items():
            seen = self._shapes.setdefault(name, tuple(array.shape))
            if tuple(array.shape) != seen:
                raise UsageError(f"calibration input {name!r}: samples of shape {list(seen)} and "
                                 f"{list(array.shape)}; histogram calibration (Entropy, Percentile, "
                                 "Distribution) needs samples of one shape (pad text to max_length), "
                                 "or use method=MinMax")

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return self

    def __next__(self) -> dict[str, Any]:
        feed = self.get_next()
        if feed is None:
            raise StopIteration
        return feed
