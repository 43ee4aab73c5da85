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

from onnxlite import OnnxliteError, Option, QuantizeContext, QuantizeOutcome, QuantizerSpec, UsageError, hookimpl
from onnxlite.errors import one_line

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

    The calibrator keeps all of them for every sample of a stride (a few-MB detector at 480x640
    reaches gigabytes on a handful of images), so this sets how many samples a stride may hold.
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


def _input_channels(node: Any, inits: Mapping[str, Any]) -> tuple[int, int] | None:
    """(axis, size) of the channel axis of ``node``'s input 0, read from its weight's shape."""
    weight = inits.get(node.input[1])
    if weight is None or len(weight.dims) < 2:
        return None
    attrs = {a.name: a.i for a in node.attribute}
    if node.op_type == "Conv":
        return 1, int(weight.dims[1]) * int(attrs.get("group", 1))
    if node.op_type == "ConvTranspose":
        return 1, int(weight.dims[0])
    return (0 if attrs.get("transA") else 1), int(weight.dims[1] if attrs.get("transB") else weight.dims[0])


def keep_excluded_float(path: Path, excluded: list[str]) -> tuple[list[str], list[str]]:
    """Rewrite ``path`` so that onnxruntime does not quantize the excluded nodes at session start.

    quantize_static leaves an excluded Conv / ConvTranspose / Gemm in float, but when it sits between a
    DequantizeLinear and a QuantizeLinear (an excluded depthwise conv inside a quantized network),
    onnxruntime's WeightBiasQuantization pass gives it per-tensor int8 weights when the session starts
    (the conditions: :func:`onnxlite.claims.weight_bias_quantization_inputs`).  That pass only takes a
    per-tensor input DequantizeLinear, so the node gets its own DequantizeLinear with the same scale and
    zero point repeated along the channel axis: the same values, and the pass leaves the node alone.
    Reading the float tensor before the Q instead would be unsound: QDQ drops a Relu/Clip after a
    quantized node and lets the Q's range clip, so that tensor is not the activation.  The producer's Q
    stays, so it still fuses.  Returns (nodes rewritten, nodes that could not be).
    """
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    from onnxlite.claims import weight_bias_quantization_inputs

    proto = onnx.load(str(path))
    targets = weight_bias_quantization_inputs(proto)
    wanted = [n for n in excluded if n in targets]
    if not wanted:
        return [], []
    graph = proto.graph
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 0)
    inits = {i.name: i for i in graph.initializer}
    by_name = {n.name: n for n in graph.node}
    added: dict[str, Any] = {}      # float node name -> its own DequantizeLinear, placed just before it
    left = []
    for name in wanted:
        node, dq = by_name[name], targets[name]
        channels = _input_channels(node, inits)
        zero = dq.input[2] if len(dq.input) > 2 and dq.input[2] else None
        if (opset < 13 and dq.domain in ("", "ai.onnx")) or channels is None or dq.input[1] not in inits \
                or (zero is not None and zero not in inits):
            left.append(name)       # per-axis DequantizeLinear needs opset 13 and constant parameters
            continue
        axis, size = channels
        ins = [dq.input[0]]
        for tensor, tag in ((dq.input[1], "scale"), (zero, "zero_point")):
            if tensor is None:
                continue
            value = numpy_helper.to_array(inits[tensor]).reshape(-1)[:1]
            graph.initializer.append(numpy_helper.from_array(np.repeat(value, size), f"{name}_float_input_{tag}"))
            ins.append(f"{name}_float_input_{tag}")
        added[name] = helper.make_node("DequantizeLinear", ins, [f"{name}_float_input"],
                                       name=f"{name}_float_input_DequantizeLinear", domain=dq.domain, axis=axis)
        node.input[0] = f"{name}_float_input"
    if added:
        nodes = [m for n in graph.node for m in ((added[n.name], n) if n.name in added else (n,))]
        # drop what now feeds nothing (the old DequantizeLinear, an Identity after it)
        outputs = {o.name for o in graph.output}
        while True:
            used = {i for n in nodes for i in n.input} | outputs
            # the two kinds of node the rewrite can orphan (not an operator vocabulary: onnxlite.ops has those)
            dead = [n for n in nodes if (n.op_type == "DequantizeLinear" or n.op_type == "Identity")
                    and not any(o in used for o in n.output)]
            if not dead:
                break
            nodes = [n for n in nodes if n not in dead]
        del graph.node[:]
        graph.node.extend(nodes)
        onnx.save(proto, str(path))
        still = weight_bias_quantization_inputs(proto)
        left += [n for n in added if n in still]
    return [n for n in added if n not in left], left


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
    Option("op_types", str, (), "quantize only these op types (comma-separated; default: all supported); "
           "a weighted op brings Relu and Clip, whose range its output then takes", multiple=True),
    Option("calibration_samples", int, 256, "calibrate on at most this many samples (0: all)"),
    Option("calibration_batch_size", int, 16, "samples per calibration run for MinMax (histogram methods "
           "always use 1)"),
    Option("chunk", int, 64, "samples whose activations are held at once; bounds calibration memory"),
)


def with_range_activations(op_types: Any) -> list[str]:
    """``op_types`` and, when it names a weighted op, the activations that only clip a range (Relu, Clip).

    onnxruntime folds a Relu or Clip into the quantized conv before it only when it quantizes the activation
    too; otherwise the conv's output is quantized over its pre-clip range (-32..30 for EfficientNet-Lite0's
    stem, not 0..6). On Lite0, ``op_types=Conv`` alone kept 13 of 32 unseen views' answers; with Relu and
    Clip, 24, as many as quantizing every op.
    """
    from onnxlite.ops import RANGE_ACTIVATIONS, WEIGHTED_OPS

    wanted = list(op_types)
    if any(op in WEIGHTED_OPS for op in wanted):
        wanted += sorted(RANGE_ACTIVATIONS - set(wanted))
    return wanted


def _extra_options(opts: Mapping[str, Any], reader: CalibrationReader, batches: int,
                   chunk_batches: int) -> dict[str, Any]:
    """quantize_static's ``extra_options`` for these options (the percentile checked, strided calibration)."""
    extra: dict[str, Any] = {"ActivationSymmetric": bool(opts["symmetric_activations"])}
    if opts["method"] == "Percentile":
        if not 0 < float(opts["percentile"]) <= 100:
            raise UsageError(f"static: percentile={opts['percentile']}: expected a value in (0, 100]")
        extra["CalibPercentile"] = float(opts["percentile"])
    if batches > chunk_batches:
        # ORT wants the count to divide by the stride; our reader clamps the last stride.
        reader.set_count(-(-batches // chunk_batches) * chunk_batches)
        extra["CalibStridedMinMax"] = chunk_batches
    if "16" in opts["activation_type"] or "16" in opts["weight_type"]:
        # Standard QuantizeLinear only gained 16-bit types in opset 21.
        extra["UseQDQContribOps"] = True
    return extra


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

            extra = _extra_options(opts, reader, batches, chunk_batches)
            op_types = with_range_activations(opts["op_types"])
            activation = QuantType[TYPES[opts["activation_type"]]]
            weight = QuantType[TYPES[opts["weight_type"]]]

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
                        op_types_to_quantize=op_types or None,
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

            rewritten, requantized = keep_excluded_float(quantized, excluded) if excluded else ([], [])
            if requantized:
                # not float where it runs: say so, and do not report them as excluded
                excluded = [n for n in excluded if n not in requantized]
                context.warn(f"static: onnxruntime re-quantizes {len(requantized)} excluded node(s) at session start "
                             f"(WeightBiasQuantization), so they are not kept in float: {', '.join(requantized[:4])}"
                             f"{', ...' if len(requantized) > 4 else ''}")

            from onnxlite.modelio import publish_model

            publish_model(quantized, output)

        outcome.excluded_nodes = excluded
        outcome.details = {
            "format": opts["format"], "per_channel": bool(per_channel), "method": method,
            "activation_type": opts["activation_type"], "weight_type": opts["weight_type"],
            "calibration_samples": reader.samples_seen,
            "calibration_batch_size": batch_size,
            "calibration_memory": memory,
            # excluded nodes given their own per-axis input DequantizeLinear, so onnxruntime keeps them float
            "float_input_dequantize": rewritten,
        }
        if op_types:
            outcome.details["op_types_quantized"] = op_types
        if method == "Percentile":
            outcome.details["percentile"] = float(opts["percentile"])
        outcome.notes.append(f"calibrated with {method} on {outcome.details['calibration_samples']} samples")
        return outcome


def static_saturation_free(options: Mapping[str, Any]) -> bool:
    """7-bit weights, uint8 activations with uint8 weights (U8U8), or 16-bit types (not run as int8 kernels)."""
    types = (options.get("activation_type"), options.get("weight_type"))
    return (bool(options.get("reduce_range")) or types == ("uint8", "uint8")
            or any(t in ("int16", "uint16") for t in types))


@hookimpl
def register_quantizers():
    return [QuantizerSpec(
        name="static",
        exclude_option="exclude",
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
            # (a YOLOv8n-style detector keeps its detections with Conv only, and loses them all with every op).
            {"method": "MinMax", "per_channel": True, "format": "QDQ", "op_types": ("Conv",)},
        ),
        # Where U8S8 kernels saturate (x86 without VNNI): 7-bit weights, or uint8 weights (U8U8).
        isa_grid=(
            {"method": "MinMax", "per_channel": True, "format": "QDQ", "reduce_range": True},
            {"method": "MinMax", "per_channel": True, "format": "QDQ", "weight_type": "uint8"},
        ),
        saturation_free=static_saturation_free,
    )]
