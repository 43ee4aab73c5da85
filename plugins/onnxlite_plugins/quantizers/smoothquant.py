"""Built-in strategy ``smoothquant``: SmoothQuant activation smoothing, then dynamic per-channel int8.

Transformers carry a few activation channels whose values are 10-20x those of
the rest: in all-MiniLM-L6-v2 the FFN inputs reach 30 where the median
channel peaks at 1.7.  Dynamic int8 gives each activation one per-tensor
range, so those few channels squeeze all the others into a handful of levels.
SmoothQuant (Xiao et al., 2023, arXiv:2211.10438) divides input channel k of
a weighted MatMul by ``s_k = max|X_k|**alpha / max|W_k|**(1 - alpha)`` and
multiplies row k of the weight by ``s_k``.  In float the product does not
change; the activation comes out flatter, and the weight, which is quantized
per output channel, absorbs the range.

The maxima come from the calibration data.  The division is a ``Mul`` node in
front of the MatMul.  It is not folded into the LayerNorm before it, because
in BERT-style graphs that LayerNorm's output also feeds the residual.  An
elementwise Mul costs little next to the matmul.  Then ``quantize_dynamic``
runs exactly as in the ``dynamic`` strategy.

Only activations that a normalization layer produces are smoothed by default
(``activations=norm``), as in the paper's reference code (``smooth_ln_fcs``:
the QKV and first FFN projections).  Smoothing the other MatMul inputs too
(the attention output projection, the FFN's second projection after GELU)
made the result depend on the calibration domain.  On all-MiniLM-L6-v2,
calibrated on ``examples/minilm/sentences.txt`` and judged at batch 64 on
``other_domain.txt`` (mean / min pooled cosine vs PyTorch), smoothing every
input scored 0.9880 / 0.9729, 0.9955 / 0.9907 and 0.9893 / 0.9792 at alpha 0.5,
0.65 and 0.8.  Smoothing only the normalization outputs scored
0.9956 / 0.9926, 0.9958 / 0.9906 and 0.9958 / 0.9907, against 0.9924 / 0.9873
for plain dynamic per-channel int8.  It also leaves half as many ``Mul`` nodes.
Smoothing only the other inputs was worse than no smoothing at alpha 0.5
(0.9844 / 0.9675).  When no normalization output feeds a weighted MatMul,
every input is smoothed and the result says so.

onnxruntime's own SmoothQuant (``quantize_static(extra_options={"SmoothQuant": True})``)
calls the ONNX adaptor of Intel Neural Compressor 2.x.  Neither
neural-compressor 3 nor onnx-neural-compressor (which needs numpy<2) installs
beside this stack, and that path feeds only static quantization.  Static int8,
with its per-tensor calibrated ranges, kept only 0.39 pooled cosine on MiniLM.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from onnxlite import Option, QuantizeContext, QuantizeOutcome, QuantizerSpec, UsageError, hookimpl

from .common import CalibrationReader, common_options, run_excluding, saturation_free, select_nodes, weights_note

OP_TYPES = ("MatMul", "Gemm", "Gather")
SMOOTHABLE = ("MatMul", "Gemm")
#: operators whose output is a normalization layer's (onnx and onnxruntime's contrib fusions)
NORM_OPS = frozenset({"LayerNormalization", "SkipLayerNormalization", "SimplifiedLayerNormalization",
                      "SkipSimplifiedLayerNormalization", "RMSNormalization", "EmbedLayerNormalization",
                      "BatchNormalization", "GroupNormalization", "InstanceNormalization"})

OPTIONS = (
    Option("alpha", float, 0.5, "Migration strength in [0, 1]: 0 leaves activations alone, 1 moves all of "
                                "their range into the weights (the paper's default is 0.5)."),
    Option("activations", str, "norm", "Which MatMul inputs to smooth: norm (those a normalization layer "
                                       "produces, as the paper's code does) or all.", choices=("norm", "all")),
    Option("calibration_samples", int, 128, "Samples whose activation maxima set the smoothing scales (0: all)."),
    Option("calibration_batch_size", int, 8, "Samples per calibration run."),
) + common_options(OP_TYPES)


@dataclass(frozen=True)
class Target:
    """One weighted node that reads a smoothable activation."""

    node: Any          # onnx.NodeProto
    weight: str        # its weight initializer
    rows_are_inputs: bool   # False for Gemm with transB=1, whose weight is (out, in)


def smoothing_targets(model: Any, op_types: Iterable[str], exclude: Iterable[str]) -> dict[str, list[Target]]:
    """The weighted MatMul/Gemm nodes to smooth, grouped by the activation they read.

    Each weight must be a 2-D float32 initializer that no other node uses,
    since it is rescaled in place.  Other readers of a smoothed activation (a
    residual Add, an excluded node) keep reading the unscaled original.
    """
    from onnx import TensorProto

    allowed = set(op_types) & set(SMOOTHABLE)
    excluded = set(exclude)
    inits = {i.name: i for i in model.graph.initializer}
    uses: dict[str, int] = {}
    for node in model.graph.node:
        for name in node.input:
            uses[name] = uses.get(name, 0) + 1
    groups: dict[str, list[Target]] = {}
    for node in model.graph.node:
        target = _target(node, inits, uses, allowed, excluded, TensorProto.FLOAT)
        if target is not None and node.input[0] not in inits:
            groups.setdefault(node.input[0], []).append(target)
    return groups


def _target(node, inits, uses, allowed, excluded, float_type) -> Target | None:
    if node.op_type not in allowed or node.name in excluded or len(node.input) < 2:
        return None
    weight = inits.get(node.input[1])
    if weight is None or len(weight.dims) != 2 or weight.data_type != float_type or uses.get(weight.name) != 1:
        return None
    attrs = {a.name: a.i for a in node.attribute if a.type == a.INT}
    if node.op_type == "Gemm" and attrs.get("transA", 0):
        return None
    return Target(node, weight.name, not (node.op_type == "Gemm" and attrs.get("transB", 0)))


def norm_outputs(model: Any, groups: Mapping[str, list[Target]]) -> dict[str, list[Target]]:
    """The groups whose activation a normalization layer produces.

    Opset 17+ exports and onnxruntime's fusions write a normalization operator.  An older export
    spells LayerNorm out, ending ``Div -> Mul(gamma) -> Add(beta)`` after a ``Sqrt``, so that
    tail counts too.
    """
    producer = {o: n for n in model.graph.node for o in n.output}
    return {name: targets for name, targets in groups.items() if _is_norm(producer.get(name), producer)}


def _is_norm(node: Any, producer: Mapping[str, Any], depth: int = 3) -> bool:
    if node is None:
        return False
    if node.op_type in NORM_OPS:
        return True
    if node.op_type == "Div":
        return any(producer.get(i) is not None and producer[i].op_type == "Sqrt" for i in node.input)
    if node.op_type in ("Add", "Mul") and depth > 0:
        return any(_is_norm(producer.get(i), producer, depth - 1) for i in node.input if i in producer)
    return False


def activation_maxima(model: Any, names: list[str], calibration: Any, batch_size: int, limit: int,
                      threads: int | None = None) -> tuple[dict[str, Any], int]:
    """Per-channel max |value| of each activation over the calibration data, and the samples seen.

    Padded positions count too: at run time dynamic quantization takes its
    range over the whole tensor, padding included.
    """
    import numpy as np

    from onnxlite.activations import iter_activations
    from onnxlite.inputs import specs_from_onnx

    reader = CalibrationReader(calibration, batch_size, limit, names=[s.name for s in specs_from_onnx(model)])
    maxima: dict[str, Any] = {}
    for values in iter_activations(model, names, iter(reader.get_next, None), threads):
        for name, value in values.items():
            flat = np.abs(np.asarray(value, dtype=np.float32)).reshape(-1, value.shape[-1]).max(axis=0)
            maxima[name] = flat if name not in maxima else np.maximum(maxima[name], flat)
    return maxima, reader.samples_seen


def smooth(model: Any, groups: Mapping[str, list[Target]], maxima: Mapping[str, Any], alpha: float) -> list[str]:
    """Rescale ``model`` in place as SmoothQuant does; return the activations that were smoothed."""
    import numpy as np
    from onnx import helper, numpy_helper

    inits = {i.name: i for i in model.graph.initializer}
    taken = {o for n in model.graph.node for o in n.output} | {i.name for i in model.graph.input} | set(inits)
    producer = {o: n for n in model.graph.node for o in n.output}
    muls: dict[str, Any] = {}
    for activation, targets in groups.items():
        amax = maxima.get(activation)
        weights = {t.weight: numpy_helper.to_array(inits[t.weight]) for t in targets}
        channels = {w.shape[0] if t.rows_are_inputs else w.shape[1] for t, w in zip(targets, weights.values())}
        if amax is None or channels != {amax.shape[0]}:
            continue
        wmax = np.max([np.abs(w).max(axis=1 if t.rows_are_inputs else 0)
                       for t, w in zip(targets, weights.values())], axis=0)
        scale = np.power(np.maximum(amax, 1e-5), alpha) / np.power(np.maximum(wmax, 1e-5), 1 - alpha)
        # Dead channels (all-zero activations or weights) keep their scale: there is nothing to move.
        scale = np.where((amax > 0) & (wmax > 0), scale, 1.0).clip(1e-4, 1e4).astype(np.float32)
        for target in targets:
            w = weights[target.weight]
            scaled = w * (scale[:, None] if target.rows_are_inputs else scale[None, :])
            inits[target.weight].CopyFrom(numpy_helper.from_array(scaled.astype(w.dtype), target.weight))
        inverse = _fresh(f"{activation}_smoothquant_scale", taken)
        smoothed = _fresh(f"{activation}_smoothed", taken)
        model.graph.initializer.append(numpy_helper.from_array((1.0 / scale).astype(np.float32), inverse))
        origin = producer.get(activation)
        muls[activation] = helper.make_node("Mul", [activation, inverse], [smoothed],
                                            name=_fresh(f"{origin.name if origin else activation}/SmoothQuant_Mul",
                                                        taken))
        for target in targets:
            target.node.input[0] = smoothed
    if muls:
        _insert_after_producers(model, muls, producer)
    return list(muls)


def _fresh(name: str, taken: set[str]) -> str:
    candidate, i = name, 1
    while candidate in taken:
        candidate, i = f"{name}_{i}", i + 1
    taken.add(candidate)
    return candidate


def _insert_after_producers(model: Any, muls: Mapping[str, Any], producer: Mapping[str, Any]) -> None:
    """Each Mul right after the node making its input (graph inputs' Muls first), keeping topological order."""
    ordered = [mul for activation, mul in muls.items() if activation not in producer]
    for node in model.graph.node:
        ordered.append(node)
        ordered.extend(muls[o] for o in node.output if o in muls)
    del model.graph.node[:]
    model.graph.node.extend(ordered)


class SmoothQuantQuantizer:
    def quantize(self, model: Path, output: Path, options: Mapping[str, Any],
                 context: QuantizeContext) -> QuantizeOutcome:
        import onnx

        from onnxlite.modelio import load_external_data, save_model, uses_external_data

        alpha = float(options["alpha"])
        if not 0.0 <= alpha <= 1.0:
            raise UsageError(f"--option alpha={options['alpha']}: expected a number from 0 to 1")
        if context.calibration is None:
            raise UsageError("smoothquant needs calibration data: --calibration PATH")
        proto = onnx.load(str(model), load_external_data=False)
        external = uses_external_data(proto)
        load_external_data(proto, model)   # the weights are rescaled, so they must be in memory
        op_types, targets, exclude = select_nodes(proto, options)
        groups = smoothing_targets(proto, op_types, exclude)
        if not groups:
            context.warn("smoothquant: no MatMul/Gemm with a float weight to smooth; this is plain dynamic int8")
        which = "every MatMul input"
        if options["activations"] == "norm" and groups:
            normed = norm_outputs(proto, groups)
            if normed:
                groups, which = normed, "normalization outputs"
            else:
                which = "every MatMul input (no normalization output feeds one)"
        maxima, seen = activation_maxima(proto, list(groups), context.calibration,
                                         max(1, int(options["calibration_batch_size"])),
                                         max(0, int(options["calibration_samples"])))
        if groups and not seen:
            raise UsageError("smoothquant: the calibration data has no samples")
        smoothed = smooth(proto, groups, maxima, alpha)
        work = context.workdir or output.parent
        staged = save_model(proto, Path(work) / "smoothed.onnx", external_data=external or None)
        run_excluding(staged, output, options, targets, exclude, external)
        notes = [f"smoothed {len(smoothed)} activation(s) ({which}) at alpha {alpha:g} "
                 f"from {seen} calibration samples",
                 weights_note(options, op_types)]
        return QuantizeOutcome(excluded_nodes=exclude, notes=notes,
                               details={"alpha": alpha, "smoothed_activations": len(smoothed),
                                        "calibration_samples": seen, "candidate_nodes": len(targets),
                                        "smoothed_inputs": which})


@hookimpl
def register_quantizers():
    return [
        QuantizerSpec(
            name="smoothquant",
            exclude_option="exclude",
            description="SmoothQuant: calibration data moves activation outliers into the weights, "
                        "then dynamic per-channel int8 (MatMul/Gemm, and Gather for embedding tables).",
            factory=SmoothQuantQuantizer,
            requires=("onnxruntime", "onnx"),
            install="onnxlite[cpu]",
            applies_to=("transformer",),
            # its activation collector feeds every graph input, and token-window data has no cache inputs: on a
            # decoder it fails (KeyError on past_key_values.0.key); weightonly's decoder grid is the tool there
            avoid=("decoder",),
            needs_calibration=True,
            # The outlier channels sit where LayerNorm's gains put them, whatever the tokens: maxima from
            # generated token-id samples smooth MiniLM as well as real sentences do
            # (benchmarks/minilm_other_domain.py).
            calibrates_on_generated=True,
            options=OPTIONS,
            # the paper reports 0.5 for most models and up to 0.75-0.85 for some; all-MiniLM-L6-v2 peaks
            # between them (benchmarks/minilm_other_domain.py), so the grid brackets the peak.
            grid=({"alpha": 0.5}, {"alpha": 0.65}, {"alpha": 0.8}),
            output_format="qoperator",   # smoothed, then quantize_dynamic
            # Where U8S8 kernels saturate (AVX2 without VNNI): 7-bit weights (reduce_range) keep pooled
            # cosines above plain alpha 0.5 there; U8U8 keeps 8-bit weights with exact integer math (the same
            # on every CPU) and keeps more, but runs slower than U8S8 (benchmarks/minilm_other_domain.py
            # and benchmarks/isa_targets.py reproduce both, docs/benchmarks.md gives the figures).  The U8U8
            # points do not pack Q, K and V: on an AVX2-only CPU the packed graph's Split cost more than the
            # wider MatMul saved (benchmarks/int8_profile.py; docs/hardware.md, "Packing Q, K and V").
            isa_grid=({"alpha": 0.5, "reduce_range": True}, {"alpha": 0.8, "reduce_range": True},
                      {"alpha": 0.5, "weight_type": "quint8"}, {"alpha": 0.65, "weight_type": "quint8"}),
            saturation_free=saturation_free,
        )
    ]
