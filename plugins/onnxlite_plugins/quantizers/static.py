"""Built-in plugin: ``static`` int8 quantization with calibration data.

onnxruntime does the work: ``quant_pre_process`` (graph optimization and
shape inference, so every tensor has a type and conv+BN are folded) and then
``quantize_static``, whose calibrator runs the model on representative data
to fix activation ranges.  What we add is the adapter from our
:class:`~onnxlite.data.Dataset` to onnxruntime's ``CalibrationDataReader``,
batch sizes each calibration method tolerates, bounded memory, and node
exclusion by glob pattern.
"""

from __future__ import annotations

import contextlib
import fnmatch
import sys
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from onnxlite import OnnxliteError, Option, QuantizeContext, QuantizeOutcome, QuantizerSpec, UsageError, hookimpl

METHODS = ("MinMax", "Entropy", "Percentile", "Distribution")
#: Histogram calibrators stack every collected output with ``np.asarray``, so a
#: shorter last batch (or samples of different lengths) breaks them: feed one sample at a time.
HISTOGRAM_METHODS = frozenset({"Entropy", "Percentile", "Distribution"})
TYPES = {"int8": "QInt8", "uint8": "QUInt8", "int16": "QInt16", "uint16": "QUInt16"}

OPTIONS = (
    Option("format", str, "QDQ", "QDQ (Quantize/DequantizeLinear pairs, fastest on CPU) or QOperator "
           "(QLinearConv and friends)", choices=("QDQ", "QOperator")),
    Option("per_channel", bool, None, "one scale per output channel of each weight (default: on when the "
           "graph has convolutions)"),
    Option("method", str, "MinMax", "calibration method", choices=METHODS),
    Option("percentile", float, 99.999, "Percentile method: the percentile of |activation| kept in range"),
    Option("activation_type", str, "uint8", "type of quantized activations", choices=tuple(TYPES)),
    Option("weight_type", str, "int8", "type of quantized weights", choices=tuple(TYPES)),
    Option("reduce_range", bool, False, "7-bit weights (helps CPUs without VNNI)"),
    Option("symmetric_activations", bool, False, "symmetric activation ranges (zero point 0)"),
    Option("exclude", str, (), "node names or glob patterns to leave in float (comma-separated)",
           multiple=True),
    Option("op_types", str, (), "quantize only these op types (comma-separated; default: all supported)",
           multiple=True),
    Option("calibration_samples", int, 256, "calibrate on at most this many samples (0: all)"),
    Option("calibration_batch_size", int, 16, "samples per calibration run for MinMax (histogram methods "
           "always use 1)"),
    Option("chunk", int, 64, "samples whose activations are held at once; bounds calibration memory"),
)


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
        self._start, self._end = 0, None
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


def _match_nodes(patterns: Iterable[str], names: list[str]) -> tuple[list[str], list[str]]:
    """Node names matched by exact names or glob patterns, and the patterns that matched nothing."""
    matched: list[str] = []
    unmatched: list[str] = []
    for pattern in patterns:
        hits = [n for n in names if n == pattern or fnmatch.fnmatchcase(n, pattern)]
        if not hits:
            unmatched.append(pattern)
        matched += [h for h in hits if h not in matched]
    return matched, unmatched


class StaticQuantizer:
    def quantize(self, model: Path, output: Path, options: Mapping[str, Any],
                 context: QuantizeContext) -> QuantizeOutcome:

        import onnx
        from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static
        from onnxruntime.quantization.shape_inference import quant_pre_process

        from onnxlite.atomic import scratch_dir
        from onnxlite.inputs import specs_from_onnx

        opts = {o.name: o.default for o in OPTIONS} | dict(options)
        if context.calibration is None:
            raise UsageError("static quantization needs calibration data: --calibration PATH")
        method = opts["method"]
        outcome = QuantizeOutcome()

        with scratch_dir(output) as own_work:
            work = Path(context.workdir) if context.workdir else own_work
            prepared = work / "preprocessed.onnx"
            try:
                quant_pre_process(str(model), str(prepared), auto_merge=True)
            except Exception as exc:
                # Preprocessing is an optimization; quantize_static copes without it.
                context.warn(f"static: pre-processing failed, quantizing the model as is "
                             f"({type(exc).__name__}: {' '.join(str(exc).split())[:160]})")
                prepared = Path(model)
            prepared_proto = onnx.load(str(prepared), load_external_data=False)
            graph = prepared_proto.graph
            specs = specs_from_onnx(prepared_proto)
            node_names = [n.name for n in graph.node]

            per_channel = opts["per_channel"]
            if per_channel is None:
                per_channel = any(n.op_type in {"Conv", "ConvTranspose"} for n in graph.node)
            excluded, unmatched = _match_nodes(opts["exclude"], node_names)
            for pattern in unmatched:
                context.warn(f"static: exclude {pattern!r} matches no node of the model")

            histogram = method in HISTOGRAM_METHODS
            first_dims = [s.shape[0] for s in specs if s.shape]
            fixed_batch = any(isinstance(d, int) for d in first_dims)
            batch_size = 1 if (histogram or fixed_batch) else max(1, int(opts["calibration_batch_size"]))
            samples = max(0, int(opts["calibration_samples"]))
            reader = CalibrationReader(context.calibration, batch_size, samples, uniform=histogram,
                                       names=[s.name for s in specs])
            chunk_batches = max(1, int(opts["chunk"]) // batch_size)
            batches = len(reader)
            if batches == 0:
                raise UsageError("static: the calibration data has no samples")

            extra: dict[str, Any] = {"ActivationSymmetric": bool(opts["symmetric_activations"])}
            if method == "Percentile":
                if not 0 < float(opts["percentile"]) <= 100:
                    raise UsageError(f"static: percentile={opts['percentile']}: expected a value in (0, 100]")
                extra["CalibPercentile"] = float(opts["percentile"])
            if batches > chunk_batches:
                # ORT wants the count to divide by the stride; our reader clamps the last stride.
                reader._count = -(-batches // chunk_batches) * chunk_batches
                extra["CalibStridedMinMax"] = chunk_batches
            activation = QuantType[TYPES[opts["activation_type"]]]
            weight = QuantType[TYPES[opts["weight_type"]]]
            if "16" in opts["activation_type"] or "16" in opts["weight_type"]:
                # Standard QuantizeLinear only gained 16-bit types in opset 21.
                extra["UseQDQContribOps"] = True

            if method == "Distribution":
                context.warn("static: Distribution calibration is meant for float8 types; with int8 it can "
                             "cost a lot of accuracy (compare the result before keeping it)")
            quantized = work / "quantized.onnx"
            from onnxlite.quantizing import quiet_root_logging

            try:
                # quantize_static logs a pre-processing hint at WARNING even after quant_pre_process ran, and
                # the histogram calibrators print progress to stdout, which must stay clean for --json.
                with quiet_root_logging(), contextlib.redirect_stdout(sys.stderr):
                    quantize_static(
                        str(prepared), str(quantized), reader,
                        quant_format=QuantFormat.QDQ if opts["format"] == "QDQ" else QuantFormat.QOperator,
                        op_types_to_quantize=list(opts["op_types"]) or None,
                        per_channel=bool(per_channel),
                        reduce_range=bool(opts["reduce_range"]),
                        activation_type=activation,
                        weight_type=weight,
                        nodes_to_exclude=excluded or None,
                        calibrate_method=CalibrationMethod[method],
                        extra_options=extra,
                    )
            except UsageError:
                raise
            except ValueError as exc:
                raise UsageError(f"static: {' '.join(str(exc).split())[:300]}") from None
            except Exception as exc:
                raise OnnxliteError(f"static: quantize_static failed ({type(exc).__name__}: "
                                    f"{' '.join(str(exc).split())[:300]})") from exc

            from onnxlite.modelio import publish_model

            publish_model(quantized, output)

        outcome.excluded_nodes = excluded
        outcome.details = {
            "format": opts["format"], "per_channel": bool(per_channel), "method": method,
            "activation_type": opts["activation_type"], "weight_type": opts["weight_type"],
            "calibration_samples": reader.samples_seen,
            "calibration_batch_size": batch_size,
        }
        if method == "Percentile":
            outcome.details["percentile"] = float(opts["percentile"])
        outcome.notes.append(f"calibrated with {method} on {outcome.details['calibration_samples']} samples")
        return outcome


@hookimpl
def register_quantizers():
    return [QuantizerSpec(
        name="static",
        description="int8 weights and activations, activation ranges calibrated on representative data "
                    "(onnxruntime quant_pre_process + quantize_static)",
        factory=StaticQuantizer,
        requires=("onnxruntime", "onnx"),
        install="onnxruntime",
        options=OPTIONS,
        needs_calibration=True,
        applies_to=("conv", "any"),
        # On all-MiniLM-L6-v2, static QDQ kept a pooled cosine of only 0.39 (0.92 with op_types=MatMul)
        # where dynamic int8 kept 0.993: calibrated per-tensor activation ranges do not survive attention.
        avoid=("transformer",),
        grid=(
            {"method": "MinMax", "per_channel": True, "format": "QDQ"},
            {"method": "Percentile", "per_channel": True, "format": "QDQ"},
            # QOperator stores fewer scale/zero-point tensors (smaller on small CNNs) and runs fast on CPU.
            {"method": "MinMax", "per_channel": True, "format": "QOperator"},
        ),
    )]
