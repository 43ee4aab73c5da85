"""Built-in strategy ``dynamic``: onnxruntime's ``quantize_dynamic`` with settings that keep answers.

Weights become int8 ahead of time; activations are quantized on the fly, so no
calibration data is needed.  Per-channel int8 on MatMul/Gemm is the default
because per-tensor scales cost all-MiniLM-L6-v2 a lot of accuracy (mean cosine
vs PyTorch 0.956 per-tensor, 0.992 per-channel, same speed).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from onnxlite import Option, QuantizeOutcome, QuantizerSpec, UsageError, hookimpl

DEFAULT_OP_TYPES = ("MatMul", "Gemm")


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
            raise UsageError(f"--option {option}={pattern}: matches no {what} name in the model (names look like: {sample})")
        chosen.update(hits)
    return [n for n in names if n in chosen]


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


def run_quantize_dynamic(model: str | Path, output: Path, options: Mapping[str, Any], exclude: list[str],
                         external_data: bool) -> None:
    """Call ``quantize_dynamic`` with our option names."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from onnxlite.quantizing import quiet_root_logging

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
            description="Int8 weights, activations quantized at run time (no calibration); "
                        "per-channel MatMul/Gemm by default. Best first try for transformers and MLPs on CPU.",
            factory=DynamicQuantizer,
            requires=("onnxruntime", "onnx"),
            install="onnxruntime",
            applies_to=("transformer", "matmul"),
            needs_calibration=False,
            options=common_options(),
            grid=({}, {"op_types": ("MatMul", "Gemm", "Gather")}, {"reduce_range": True}),
        )
    ]
