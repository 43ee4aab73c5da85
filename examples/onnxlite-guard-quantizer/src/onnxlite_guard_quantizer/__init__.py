"""The ``guarded`` strategy: dynamic int8, with the first/last layers and named nodes kept in float.

A plain pluggy plugin: one ``@hookimpl`` that returns a ``QuantizerSpec``.
Nothing here subclasses an onnxlite class; the quantizer object only needs a
``quantize(model, output, options, context)`` method.
"""

from __future__ import annotations

from onnxlite import Option, QuantizeOutcome, QuantizerSpec, hookimpl
from onnxlite.authoring import match_nodes, quiet_onnxruntime

WEIGHTED_OPS = ("MatMul", "Gemm")


def guarded_nodes(graph, keep_first: bool, keep_last: bool, patterns) -> list[str]:
    """Names of the MatMul/Gemm nodes to keep in float, in graph order.

    ``match_nodes`` is the host's pattern check: a pattern that matches no MatMul/Gemm is a usage error
    (exit 2, one line), so a typo never quantizes the layer the user meant to protect.
    """
    weighted = [n.name for n in graph.node if n.op_type in WEIGHTED_OPS]
    keep = set(match_nodes(weighted, patterns, what="MatMul/Gemm node"))
    if weighted and keep_first:
        keep.add(weighted[0])
    if weighted and keep_last:
        keep.add(weighted[-1])
    return [name for name in weighted if name in keep]


def exclusion_list(graph, keep: list[str]) -> list[str]:
    """``keep`` as onnxruntime's ``nodes_to_exclude`` must spell it.

    quantize_dynamic rewrites each Gemm into "<name>_MatMul" + "<name>_Add"
    before it reads ``nodes_to_exclude`` (onnxruntime 1.32), so an excluded
    Gemm is listed under its MatMul's new name too, or it is quantized anyway.
    """
    gemms = {n.name for n in graph.node if n.op_type == "Gemm"}
    return keep + [f"{name}_MatMul" for name in keep if name in gemms]


def still_float(output, keep: list[str]) -> list[str]:
    """The nodes of ``keep`` that really are float MatMul/Gemm nodes in the written model."""
    import onnx

    float_nodes = {n.name for n in onnx.load(str(output), load_external_data=False).graph.node
                   if n.op_type in WEIGHTED_OPS}
    return [name for name in keep if name in float_nodes or f"{name}_MatMul" in float_nodes]


class GuardedQuantizer:
    def quantize(self, model, output, options, context):
        # Heavy imports live here so that `onnxlite --list-plugins` stays fast.
        import onnx
        from onnxruntime.quantization import QuantType, quantize_dynamic

        graph = onnx.load(str(model), load_external_data=False).graph
        unnamed = [n for n in graph.node if n.op_type in WEIGHTED_OPS and not n.name]
        if unnamed:
            context.warn(f"{len(unnamed)} MatMul/Gemm nodes have no name and cannot be guarded by name")
        keep = guarded_nodes(graph, options["keep_first"], options["keep_last"], options["exclude"])
        with quiet_onnxruntime():  # no "consider pre-processing" advice on every run
            quantize_dynamic(
                str(model), str(output),
                weight_type=QuantType.QInt8,
                per_channel=options["per_channel"],
                op_types_to_quantize=list(WEIGHTED_OPS),
                nodes_to_exclude=exclusion_list(graph, keep),
            )
        # Report what the written model holds, not what was asked for.
        kept = still_float(output, keep)
        lost = [name for name in keep if name not in kept]
        if lost:
            context.warn(f"onnxruntime quantized {', '.join(lost)} although it was excluded")
        return QuantizeOutcome(excluded_nodes=kept, notes=[f"kept {len(kept)} node(s) in float"])


@hookimpl
def register_quantizers():
    return [
        QuantizerSpec(
            name="guarded",
            description="Dynamic int8 (per-channel) that keeps the first/last MatMul/Gemm and named nodes in float.",
            factory=GuardedQuantizer,
            requires=("onnxruntime", "onnx"),
            install="onnxlite[cpu]",
            applies_to=("matmul", "transformer"),
            exclude_option="exclude",  # lighten's partial fallback keeps nodes in float through this option
            options=(
                Option("keep_first", bool, True, "Keep the first MatMul/Gemm in float."),
                Option("keep_last", bool, True, "Keep the last MatMul/Gemm in float."),
                Option("exclude", str, (), "More node names or glob patterns to keep in float.", multiple=True),
                Option("per_channel", bool, True, "Per-channel weight scales."),
            ),
            grid=({}, {"keep_first": False}),
        )
    ]
