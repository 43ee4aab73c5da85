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
import io
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from onnxlite.errors import one_line
from onnxlite import OnnxliteError, Option, QuantizeContext, QuantizeOutcome, QuantizerSpec, UsageError, hookimpl

from .common import CalibrationReader, expand_node_patterns

METHODS = ("MinMax", "Entropy", "Percentile", "Distribution")
#: Histogram calibrators stack every collected output with ``np.asarray``, so a
#: shorter last batch (or samples of different lengths) breaks them: feed one sample at a time.
HISTOGRAM_METHODS = frozenset({"Entropy", "Percentile", "Distribution"})
TYPES = {"int8": "QInt8", "uint8": "QUInt8", "int16": "QInt16", "uint16": "QUInt16"}
#: calibration may hold at most this share of the memory available: lighten runs candidates side by side
CALIBRATION_MEMORY_SHARE = 0.25


def activation_bytes(proto: Any, feed: Mapping[str, Any]) -> int | None:
    """Bytes of every intermediate tensor of one calibration batch: onnx's shape inference at ``feed``'s sizes.

    The calibrator keeps all of them for every sample of a stride (a 4.7 MB detector at 480x640
    reached 8.8 GB on 8 images, issue 12), so this sets how many samples a stride may hold.
    """
    import onnx
    from onnx import helper, shape_inference

    model = onnx.ModelProto()
    model.CopyFrom(proto)
    for value in model.graph.input:
        shape = getattr(feed.get(value.name), "shape", None)
        dims = value.type.tensor_type.shape.dim
        if shape is not None and len(dims) == len(shape):
            for dim, size in zip(dims, shape):
                dim.Clear()
                dim.dim_value = int(size)
    try:
        inferred = shape_inference.infer_shapes(model, data_prop=True)
    except Exception:   # noqa: BLE001 - an estimate only: without it calibration runs unbounded, as before
        return None
    total = 0
    for value in [*inferred.graph.value_info, *inferred.graph.output]:
        tensor = value.type.tensor_type
        if not tensor.HasField("shape") or not tensor.elem_type:
            continue
        dims = [d.dim_value if d.HasField("dim_value") else 0 for d in tensor.shape.dim]
        if all(dims):
            count = 1
            for d in dims:
                count *= d
            total += count * helper.tensor_dtype_to_np_dtype(tensor.elem_type).itemsize
    return total or None


def _memory_bound(prepared_proto: Any, calibration: Any, batch_size: int, chunk: int) -> tuple[int, int, dict | None]:
    """``batch_size`` and stride (samples) lowered so one stride's activations fit the memory available."""
    from onnxlite.inputs import available_memory

    try:
        first = next(iter(calibration.batches(1)))
    except Exception:   # noqa: BLE001 - not a Dataset: no estimate
        return batch_size, chunk, None
    per_sample, available = activation_bytes(prepared_proto, first), available_memory()
    if not per_sample or not available:
        return batch_size, chunk, None
    # the calibrator keeps a stride's outputs while onnxruntime's arena holds one batch's: twice per sample
    fits = max(1, int(available * CALIBRATION_MEMORY_SHARE // (2 * per_sample)))
    record = {"activation_bytes_per_sample": per_sample, "available_bytes": available, "samples_at_once": fits,
              "limited": fits < max(batch_size, chunk)}
    return min(batch_size, fits), min(chunk, fits), record

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
                             f"({one_line(exc, 160, kind=True)})")
                prepared = Path(model)
            prepared_proto = onnx.load(str(prepared), load_external_data=False)
            graph = prepared_proto.graph
            specs = specs_from_onnx(prepared_proto)
            node_names = [n.name for n in graph.node]

            per_channel = opts["per_channel"]
            if per_channel is None:
                per_channel = any(n.op_type in {"Conv", "ConvTranspose"} for n in graph.node)
            # A pattern that matches nothing is refused, as by every other strategy: a typo must not
            # quantize the layer the user meant to protect.  Names are those of the pre-processed graph.
            excluded = expand_node_patterns(node_names, opts["exclude"])

            histogram = method in HISTOGRAM_METHODS
            first_dims = [s.shape[0] for s in specs if s.shape]
            fixed_batch = any(isinstance(d, int) for d in first_dims)
            batch_size = 1 if (histogram or fixed_batch) else max(1, int(opts["calibration_batch_size"]))
            samples = max(0, int(opts["calibration_samples"]))
            batch_size, chunk, memory = _memory_bound(prepared_proto, context.calibration, batch_size,
                                                      max(1, int(opts["chunk"])))
            if memory and memory["limited"]:
                context.warn(f"static: calibration holds {memory['samples_at_once']} sample(s) at once (about "
                             f"{memory['activation_bytes_per_sample'] / 2**20:.0f} MB of activations each, "
                             f"{memory['available_bytes'] / 2**30:.1f} GB available)")
            reader = CalibrationReader(context.calibration, batch_size, samples, uniform=histogram,
                                       names=[s.name for s in specs])
            chunk_batches = max(1, chunk // batch_size)
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
            from onnxlite.runtime import quiet_root_logging

            try:
                # quantize_static logs a pre-processing hint at WARNING even after quant_pre_process ran, and
                # the histogram calibrators print progress to stdout, which must stay clean for --json.
                # ("Collecting tensor data and making histogram ..." is noise beside onnxlite's own progress)
                with quiet_root_logging(), contextlib.redirect_stdout(io.StringIO()):
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
                raise UsageError(f"static: {one_line(exc, 300)}") from None
            except Exception as exc:
                raise OnnxliteError(f"static: quantize_static failed ({type(exc).__name__}: "
                                    f"{one_line(exc, 300)})") from exc

            from onnxlite.modelio import publish_model

            publish_model(quantized, output)

        outcome.excluded_nodes = excluded
        outcome.details = {
            "format": opts["format"], "per_channel": bool(per_channel), "method": method,
            "activation_type": opts["activation_type"], "weight_type": opts["weight_type"],
            "calibration_samples": reader.samples_seen,
            "calibration_batch_size": batch_size,
            "calibration_memory": memory,
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
        install="onnxlite[cpu]",
        options=OPTIONS,
        needs_calibration=True,
        applies_to=("conv", "any"),
        # On all-MiniLM-L6-v2, static QDQ kept a pooled cosine of only 0.39 (0.92 with op_types=MatMul)
        # where dynamic int8 kept 0.993: calibrated per-tensor activation ranges do not survive attention.
        avoid=("transformer",),
        output_format=lambda options: "qoperator" if str(options.get("format")).lower() == "qoperator" else "qdq",
        grid=(
            {"method": "MinMax", "per_channel": True, "format": "QDQ"},
            {"method": "Percentile", "per_channel": True, "format": "QDQ"},
            # QOperator stores fewer scale/zero-point tensors (smaller on small CNNs) and runs fast on CPU.
            {"method": "MinMax", "per_channel": True, "format": "QOperator"},
            # Convolutions only: a detector head that concatenates box pixels with class scores, or an
            # LSTM after a Conv front end, loses its answers when those activations share one int8 scale
            # (YOLOv8n's detection F1 0.00 with every op; 0.84 with Conv only, issue 12).
            {"method": "MinMax", "per_channel": True, "format": "QDQ", "op_types": ("Conv",)},
        ),
    )]
