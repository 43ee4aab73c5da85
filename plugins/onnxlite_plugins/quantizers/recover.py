"""Built-in strategy ``recover``: static int8 with accuracy recovery for CNNs (CLE, bias correction, AdaRound).

The float model is prepared as ``static`` prepares it (onnxruntime's
``quant_pre_process``), BatchNorm is folded, then on the ONNX graph with numpy:

1. ``cle``: cross-layer equalization of consecutive conv / depthwise-conv
   pairs (:mod:`.equalize`);
2. ``adaround``: each conv's int8 weights learned on its calibration inputs
   (:mod:`.rounding`; torch, imported only then), else round-to-nearest;
3. ``bias_correction``: each conv's bias corrected by the expected output
   shift its weight rounding causes.

Steps 2 and 3 write the chosen weights back on onnxruntime's own int8 grid, so
the ``static`` strategy (reached through the registry, as any plugin would)
stores exactly those integers, and the output is a QDQ or QOperator model like
``static``'s, with the same options.  The float model is the teacher: no labels,
no source framework.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from onnxlite import Option, QuantizeContext, QuantizeOutcome, QuantizerSpec, UsageError, hookimpl
from onnxlite.errors import one_line

from .common import CalibrationReader, expand_node_patterns

#: options handed on to ``static`` unchanged (per-channel int8 weights are what recovery works on)
STATIC_OPTIONS = ("format", "method", "percentile", "activation_type", "symmetric_activations", "exclude",
                  "op_types", "calibration_samples")

OPTIONS = (
    Option("cle", bool, False, "cross-layer equalization of conv pairs through Relu/Relu6 (off by default: "
           "on EfficientNet-Lite0 with per-channel weights it cost answers, docs/benchmarks.md)"),
    Option("clip6", str, "bounded", "a Relu6 (Clip 0..6) between an equalized pair: scale only as far as the "
           "calibration data keeps it exact (bounded), replace it by a Relu as AIMET and Quark do (relu; float "
           "outputs change above 6), or skip such pairs", choices=("bounded", "relu", "skip")),
    Option("bias_correction", bool, True, "correct each conv's bias by the expected output shift of its rounding"),
    Option("adaround", bool, False, "learn each conv's int8 rounding on its calibration inputs (needs torch)"),
    Option("adaround_steps", int, 200, "AdaRound optimisation steps per conv"),
    Option("float_depthwise", bool, False, "keep depthwise convs (group > 1) float: 9-25 weights per channel are too "
           "few for int8 rounding noise to average out; about 4% of a MobileNet/EfficientNet's weights"),
    Option("recovery_samples", int, 16, "calibration samples whose conv inputs AdaRound and bias correction use"),
    Option("format", str, "QDQ", "as static's", choices=("QDQ", "QOperator")),
    Option("method", str, "MinMax", "calibration method, as static's",
           choices=("MinMax", "Entropy", "Percentile", "Distribution")),
    Option("percentile", float, 99.999, "as static's"),
    Option("activation_type", str, "uint8", "as static's", choices=("int8", "uint8", "int16", "uint16")),
    Option("symmetric_activations", bool, False, "as static's"),
    Option("exclude", str, (), "node names or glob patterns to leave in float (comma-separated)", multiple=True),
    Option("op_types", str, (), "as static's", multiple=True),
    Option("calibration_samples", int, 256, "as static's"),
)


def _prepare(model: Path, work: Path, warn: Any) -> Any:
    import onnx
    from onnxruntime.quantization.shape_inference import quant_pre_process

    prepared = work / "recover.prepared.onnx"
    try:
        quant_pre_process(str(model), str(prepared), auto_merge=True)
        return onnx.load(str(prepared))
    except Exception as exc:    # noqa: BLE001 - an optimization, as in static
        warn(f"recover: pre-processing failed, working on the model as is ({one_line(exc, 160, kind=True)})")
        return onnx.load(str(model))


def _depthwise(proto: Any) -> list[str]:
    """Names of the grouped convs (depthwise: one group per channel, or any group count above 1)."""
    return [n.name for n in proto.graph.node if n.op_type == "Conv" and n.name
            and any(a.name == "group" and a.i > 1 for a in n.attribute)]


def _convs(proto: Any, excluded: set[str]) -> list[Any]:
    """Convs with a constant, unshared 4-D weight, not excluded, whose padding torch can express."""
    from .rounding import conv_args

    inits = {i.name: i for i in proto.graph.initializer}
    uses: dict[str, int] = {}
    for n in proto.graph.node:
        for i in n.input:
            uses[i] = uses.get(i, 0) + 1
    found = []
    for n in proto.graph.node:
        if n.op_type != "Conv" or n.name in excluded or n.input[1] not in inits or uses[n.input[1]] != 1 \
                or len(inits[n.input[1]].dims) != 4:
            continue
        try:
            conv_args(n)
        except ValueError:
            continue
        found.append(n)
    return found


def recover_weights(proto: Any, convs: list[Any], feeds: list[dict[str, Any]], adaround: bool, correct: bool,
                    steps: int) -> list[Any]:
    """Choose each conv's int8 weights (AdaRound or nearest), correct its bias; in place. Returns LayerRounding."""
    from onnx import numpy_helper

    from .equalize import ensure_bias
    from .rounding import LayerRounding, bias_shift, conv_args, conv_inputs, layer_error, nearest, weight_scale
    from .rounding import adaround as learn

    inits = {i.name: i for i in proto.graph.initializer}
    inputs = conv_inputs(proto, convs, feeds)
    done = []
    for conv in convs:
        weight = numpy_helper.to_array(inits[conv.input[1]]).astype("float64")
        scale, args = weight_scale(weight), conv_args(conv)
        near = nearest(weight)
        chosen = near
        x = inputs[conv.name]
        if adaround:
            learned = learn(x, weight, args, steps=steps)
            before, after = layer_error(x, weight, near * scale, args), layer_error(x, weight, learned * scale, args)
            if after < before:      # never worse than nearest on the data it learned from
                chosen = learned
            done.append(LayerRounding(conv.name, before, min(before, after), int((chosen != near).sum())))
        new_weight = chosen * scale
        inits[conv.input[1]].CopyFrom(numpy_helper.from_array(new_weight.astype("float32"), conv.input[1]))
        if correct:
            name = ensure_bias(proto, conv, weight.shape[0])
            inits = {i.name: i for i in proto.graph.initializer}
            bias = numpy_helper.to_array(inits[name]).astype("float64")
            shift = bias_shift(weight, new_weight, x.mean(axis=(0, 2, 3)), args["groups"])
            inits[name].CopyFrom(numpy_helper.from_array((bias - shift).astype("float32"), name))
    return done


class RecoverQuantizer:
    def quantize(self, model: Path, output: Path, options: Mapping[str, Any],
                 context: QuantizeContext) -> QuantizeOutcome:
        import onnx

        from onnxlite.atomic import scratch_dir
        from onnxlite.registry import get_registry
        from onnxlite.specs import parse_spec_options

        from .equalize import clip_inputs, equalize, fold_batchnorm
        from .rounding import collect

        opts = {o.name: o.default for o in OPTIONS} | dict(options)
        if context.calibration is None:
            raise UsageError("recover needs calibration data: --calibration PATH")
        import importlib.util

        if opts["adaround"] and importlib.util.find_spec("torch") is None:
            raise UsageError("recover: adaround=true needs torch: pip install 'onnxlite[torch]'")
        if opts["adaround_steps"] < 1 or opts["recovery_samples"] < 1:
            raise UsageError("recover: adaround_steps and recovery_samples must be at least 1")
        with scratch_dir(output) as own_work:
            work = Path(context.workdir) if context.workdir else own_work
            proto = _prepare(Path(model), work, context.warn)
            excluded = set(expand_node_patterns([n.name for n in proto.graph.node], opts["exclude"]))
            depthwise = _depthwise(proto) if opts["float_depthwise"] else []
            excluded |= set(depthwise)
            details: dict[str, Any] = {"batchnorm_folded": fold_batchnorm(proto)}
            notes = []
            names = [i.name for i in proto.graph.input]
            feeds = list(CalibrationReader(context.calibration, 1, int(opts["recovery_samples"]), names=names))
            if not feeds:
                raise UsageError("recover: the calibration data has no samples")
            if opts["cle"]:
                maxima = None
                if opts["clip6"] == "bounded" and clip_inputs(proto):
                    found = collect(proto, clip_inputs(proto), feeds)
                    maxima = {k: v.max(axis=tuple(i for i in range(v.ndim) if i != 1)) for k, v in found.items()}
                pairs = equalize(proto, clip6=opts["clip6"], maxima=maxima)
                relu6 = sum(1 for p in pairs if p.through == "Clip")
                details["cle_pairs"] = [p.__dict__ for p in pairs]
                notes.append(f"cross-layer equalization of {len(pairs)} conv pair(s)"
                             + (f" ({relu6} through Relu6, {opts['clip6']})" if relu6 else ""))
            if opts["adaround"] or opts["bias_correction"]:
                convs = _convs(proto, excluded)
                rounding = recover_weights(proto, convs, feeds, bool(opts["adaround"]), bool(opts["bias_correction"]),
                                           int(opts["adaround_steps"]))
                if opts["adaround"]:
                    gain = [r.nearest_error / r.chosen_error for r in rounding if r.chosen_error > 0]
                    details["adaround"] = [r.__dict__ for r in rounding]
                    mean_gain = sum(gain) / len(gain) if gain else 1.0
                    notes.append(f"AdaRound on {len(rounding)} conv(s), {len(feeds)} samples: layer output error "
                                 f"{mean_gain:.2f}x lower than round-to-nearest on average")
                if opts["bias_correction"]:
                    notes.append(f"bias correction of {len(convs)} conv(s) on {len(feeds)} samples")
            recovered = work / "recover.float.onnx"
            onnx.save(proto, str(recovered))
            static = get_registry().get("quantizer", "static")
            forwarded = {k: opts[k] for k in STATIC_OPTIONS}
            forwarded |= {"per_channel": True, "weight_type": "int8", "reduce_range": False}
            if depthwise:
                forwarded["exclude"] = tuple(opts["exclude"]) + tuple(depthwise)
                notes.append(f"{len(depthwise)} depthwise conv(s) kept float")
            outcome = static.create().quantize(recovered, output, parse_spec_options(static.spec, forwarded), context)
        outcome = outcome or QuantizeOutcome()
        outcome.details = {**outcome.details, "recovery": details}
        outcome.notes = notes + list(outcome.notes)
        return outcome


@hookimpl
def register_quantizers():
    return [QuantizerSpec(
        name="recover",
        description="static int8 for CNNs with accuracy recovery: cross-layer equalization, bias correction, "
                    "AdaRound (numpy/torch on the ONNX graph, the float model as teacher)",
        factory=RecoverQuantizer,
        requires=("onnxruntime", "onnx"),
        install="onnxlite[cpu]",
        options=OPTIONS,
        needs_calibration=True,
        applies_to=("conv",),
        avoid=("transformer",),
        output_format=lambda options: "qoperator" if str(options.get("format")).lower() == "qoperator" else "qdq",
        # bias correction alone is the step that helped on EfficientNet-Lite0 (docs/benchmarks.md); CLE is the
        # second point for graphs with per-tensor weight ranges to even out.  AdaRound stays opt-in until it is
        # measured: on two loaded cores it took more than 20 minutes on Lite0's 49 convs.
        grid=(
            {"cle": False, "bias_correction": True},
            {"cle": True, "bias_correction": True},
            # the accuracy point (benchmarks/recovery.py): int8 weights, 16-bit activations, depthwise convs
            # float.  Still >= 3x smaller, but onnxruntime has no 16-bit conv kernels: slower than fp32 on CPU
            {"cle": False, "bias_correction": True, "activation_type": "uint16", "float_depthwise": True},
        ),
    )]
