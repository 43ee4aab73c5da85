"""What the built-in quantization strategies share: node matching, the int8 step, the calibration reader.

Strategies import from here and never from each other, so that each strategy
module is one strategy (a new strategy, such as ``weightonly``, starts from
this module).  Everything here is built on the documented host helpers
(``onnxlite.runtime``, ``onnxlite.modelio``) and onnxruntime itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from onnxlite import Option, UsageError
from onnxlite.authoring import match_nodes
from onnxlite.calibration import CalibrationReader

DEFAULT_OP_TYPES = ("MatMul", "Gemm")


# ---------------------------------------------------------------- node matching


def expand_node_patterns(node_names: Iterable[str], patterns: Iterable[str], option: str = "exclude",
                         what: str = "node") -> list[str]:
    """Node names matching any exact name or glob pattern, in graph order; a pattern that matches nothing is
    a usage error (the host's :func:`onnxlite.authoring.match_nodes`, which third-party plugins use too)."""
    return match_nodes(node_names, patterns, option=option, what=what)


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


__all__ = ["CalibrationReader", "expand_node_patterns", "run_quantize_dynamic", "select_nodes", "weights_note",
           "run_excluding", "common_options", "DEFAULT_OP_TYPES"]   # CalibrationReader: onnxlite.calibration's
