"""Built-in strategy ``dynamic``: onnxruntime's ``quantize_dynamic`` with settings that keep answers.

Weights become int8 ahead of time; activations are quantized on the fly, so no
calibration data is needed.  Per-channel int8 on MatMul/Gemm is the default
because per-tensor scales cost all-MiniLM-L6-v2 a lot of accuracy (mean cosine
vs PyTorch 0.956 per-tensor, 0.992 per-channel, same speed).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from onnxlite import QuantizeOutcome, QuantizerSpec, hookimpl

from .common import (
    WITH_EMBEDDINGS,
    common_options,
    run_excluding,
    saturation_free,
    select_nodes,
    weights_note,
)


def conv_warning(model: Any, op_types: Iterable[str]) -> str | None:
    """Why dynamic int8 is the wrong tool for a conv-heavy model, or None."""
    from onnxlite.graph_family import weight_share

    share = weight_share(model)
    if not share.conv_heavy:
        return None
    pct = round(100 * share.conv_fraction)
    if "Conv" in set(op_types):
        return (f"this model is conv-heavy ({pct}% of MatMul/Gemm/Conv weights are in convolutions): dynamic "
                "quantization turns Conv into ConvInteger, which has no fast (for some type pairs, no) CPU kernel "
                "in onnxruntime; use --strategy static (QDQ, per-channel) for CNNs")
    return (f"this model is conv-heavy ({pct}% of MatMul/Gemm/Conv weights are in convolutions) and dynamic "
            "quantization leaves Conv in float (ConvInteger is slow or missing on CPU), so little will shrink; "
            "use --strategy static (QDQ, per-channel) for CNNs")


class DynamicQuantizer:
    def quantize(self, model: Path, output: Path, options: Mapping[str, Any], context) -> QuantizeOutcome:
        import onnx

        proto = onnx.load(str(model), load_external_data=False)
        op_types, targets, exclude = select_nodes(proto, options)
        warning = conv_warning(proto, op_types)
        if warning:
            context.warn(warning)
        if not targets:
            context.warn(f"the model has no {'/'.join(op_types)} nodes: nothing to quantize "
                         f"(it has {', '.join(sorted({n.op_type for n in proto.graph.node})[:12])})")
        from onnxlite.modelio import uses_external_data

        run_excluding(model, output, options, targets, exclude, uses_external_data(proto))
        return QuantizeOutcome(excluded_nodes=exclude, notes=[weights_note(options, op_types)],
                               details={"candidate_nodes": len(targets)})


@hookimpl
def register_quantizers():
    return [
        QuantizerSpec(
            name="dynamic",
            exclude_option="exclude",
            description="Int8 weights, activations quantized at run time (no calibration); "
                        "per-channel MatMul/Gemm by default. Best first try for transformers and MLPs on CPU.",
            factory=DynamicQuantizer,
            requires=("onnxruntime", "onnx"),
            install="onnxlite[cpu]",
            applies_to=("transformer", "matmul"),
            # a decoder's search has weightonly's 8-bit point as its int8 baseline, smaller and faster per decoded
            # token; named in --strategies it still runs
            avoid=("decoder",),
            needs_calibration=False,
            options=common_options(),
            grid=({}, {"op_types": ("MatMul", "Gemm", "Gather")}, {"reduce_range": True}),
            output_format="qoperator",   # MatMulInteger / ConvInteger
            # Where U8S8 kernels saturate (x86 without VNNI): 7-bit weights, or U8U8, each with int8 embeddings
            # (reduce_range alone above keeps them float, so far less shrinks).
            isa_grid=({"op_types": WITH_EMBEDDINGS, "reduce_range": True},
                      {"op_types": WITH_EMBEDDINGS, "weight_type": "quint8"}),
            saturation_free=saturation_free,
        )
    ]
