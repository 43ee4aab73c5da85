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
    exclude = exclude + [f"{n}_MatMul" for n in exclude if n in gemms]
    if not options.get("pack_qkv"):
        run_quantize_dynamic(model, output, options, exclude, external_data)
        return
    import tempfile

    with tempfile.TemporaryDirectory(prefix=".onnxlite-pack-", dir=output.parent) as work:
        staged = packed_copy(model, Path(work) / "packed.onnx", exclude, external_data)
        run_quantize_dynamic(staged, output, options, exclude, external_data)


def packed_copy(model: str | Path, staged: Path, keep_float: list[str], external_data: bool) -> Path:
    """``model`` with the MatMuls that read one activation packed into one (:mod:`.packing`), written to
    ``staged``; ``model`` itself when nothing packs."""
    import onnx

    from .packing import pack_groups

    proto = onnx.load(str(model))
    if not pack_groups(proto, keep_float):
        return Path(model)
    if external_data:
        onnx.save(proto, str(staged), save_as_external_data=True, location=f"{staged.name}.data")
    else:
        onnx.save(proto, str(staged))
    return staged


def saturation_free(options: Mapping[str, Any]) -> bool:
    """Whether ``quantize_dynamic``'s integer math with these options cannot saturate on any CPU.

    It quantizes activations to uint8.  With int8 weights (U8S8) onnxruntime's x86 kernels without VNNI
    add pairs of products in a saturating int16 (``vpmaddubsw``); 7-bit weights (``reduce_range``) keep
    every pair sum within int16, and uint8 weights (U8U8) take a kernel that widens to int16 first.
    onnxruntime's quantization docs recommend either on such CPUs.
    """
    return bool(options.get("reduce_range")) or options.get("weight_type") == "quint8"


#: the saturation-free variants of the int8 step that keep embedding tables in int8 (the ``isa_grid``)
WITH_EMBEDDINGS = ("MatMul", "Gemm", "Gather")


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
        Option("pack_qkv", bool, False, "Pack the MatMuls that read one activation (attention's Q, K and V) "
                                        "into one wider MatMul before quantizing: one int8 MatMul instead of three."),
    )


__all__ = ["CalibrationReader", "expand_node_patterns", "run_quantize_dynamic", "select_nodes", "weights_note",
           "run_excluding", "common_options", "DEFAULT_OP_TYPES"]   # CalibrationReader: onnxlite.calibration's


def name_nodes(model: Any) -> int:
    """Give each unnamed node of ``model``'s graph the name ``<OpType>_<index>`` (its place), in place.

    Exclusions, per-node plans and onnxruntime's own node tables all go by
    name: unnamed nodes would share the name "" and one entry would stand for
    all of them.  Returns how many were named.
    """
    taken = {node.name for node in model.graph.node if node.name}
    named = 0
    for index, node in enumerate(model.graph.node):
        if node.name:
            continue
        name, extra = f"{node.op_type}_{index}", 0
        while name in taken:
            extra += 1
            name = f"{node.op_type}_{index}_{extra}"
        node.name = name
        taken.add(name)
        named += 1
    return named
