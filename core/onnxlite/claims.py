"""What a quantized model really holds, checked against what its quantizer plugin said.

A plugin reports the nodes it kept in float (``QuantizeOutcome.excluded_nodes``),
and ``lighten``'s partial fallback asks for nodes to stay float through the
strategy's ``exclude`` option.  Neither is taken on trust: onnxruntime's
``quantize_dynamic`` 1.32, for one, quantizes a Gemm whatever
``nodes_to_exclude`` says.  The host reads the written model and, for every
weighted node of the input, looks for positive evidence that it was quantized:

- a node with its name (or its name as a prefix, as onnxruntime names what it
  puts in a node's place: ``X_quant``, ``X_MatMul_quant``, ``X_Q4``) whose
  operator is a quantized one (``MatMulInteger``, ``QLinearConv``,
  ``MatMulNBits``, ...);
- or the node itself, same name and operator, reading a weight through
  ``DequantizeLinear`` (QDQ) or from an initializer of another type (fp16).

A node that vanished (fused into another operator) gives no evidence either
way and is never called a lie.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .ops import REPLACEMENT_OPS, WEIGHTED_OPS

if TYPE_CHECKING:
    import onnx

# Only REPLACEMENT_OPS are evidence by name. QuantizeLinear/DequantizeLinear are not: QDQ names them after
# *tensors* ("<node>_output_0_QuantizeLinear"), so a float node whose output feeds a quantized one has them too.


@dataclass(frozen=True)
class ClaimCheck:
    """The weighted nodes of the input: which were quantized, which stayed float, and what contradicts the plugin."""

    quantized: tuple[str, ...]
    kept_float: tuple[str, ...]
    unknown: tuple[str, ...]                      # gone from the output (fused): no evidence either way
    claimed_float_but_quantized: tuple[str, ...]  # the plugin said float; the model says quantized
    requested_float_but_quantized: tuple[str, ...]  # asked to stay float (exclude=...), yet quantized

    @property
    def ok(self) -> bool:
        return not self.claimed_float_but_quantized and not self.requested_float_but_quantized

    def message(self, strategy: str) -> str:
        """One line naming what does not match ('' when everything does)."""
        parts = []
        if self.claimed_float_but_quantized:
            parts.append(f"reported {_names(self.claimed_float_but_quantized)} as kept in float, "
                         "but the written model has them quantized")
        if self.requested_float_but_quantized:
            parts.append(f"was asked to keep {_names(self.requested_float_but_quantized)} in float, "
                         "but the written model has them quantized")
        if not parts:
            return ""
        return f"strategy {strategy!r} " + "; and ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {"quantized": len(self.quantized), "kept_float": len(self.kept_float), "unknown": len(self.unknown),
                "claimed_float_but_quantized": list(self.claimed_float_but_quantized),
                "requested_float_but_quantized": list(self.requested_float_but_quantized)}


def _names(nodes: Sequence[str], limit: int = 4) -> str:
    shown = ", ".join(nodes[:limit])
    return f"{len(nodes)} node(s) ({shown}{', ...' if len(nodes) > limit else ''})"


def node_states(source: onnx.ModelProto, output: onnx.ModelProto) -> dict[str, bool | None]:
    """Each weighted node of ``source``: True (quantized), False (still float), None (gone: fused or renamed)."""
    from onnx import TensorProto

    inits = {i.name: i.data_type for i in source.graph.initializer}
    out_inits = {i.name: i.data_type for i in output.graph.initializer}
    produced_by = {o: n for n in output.graph.node for o in n.output}
    by_name = {n.name: n for n in output.graph.node if n.name}
    floats = {TensorProto.FLOAT, TensorProto.DOUBLE}
    states: dict[str, bool | None] = {}
    for node in source.graph.node:
        if node.op_type not in WEIGHTED_OPS or not node.name:
            continue
        weights = [i for i in node.input if i in inits and inits[i] in floats]
        if not weights:
            continue
        prefix = node.name + "_"
        related = [n for n in output.graph.node if n.name == node.name or n.name.startswith(prefix)]
        if any(n.op_type in REPLACEMENT_OPS for n in related):
            states[node.name] = True
            continue
        same = by_name.get(node.name)
        if same is None or same.op_type != node.op_type:
            states[node.name] = None
            continue
        converted = False
        for name in same.input:
            producer = produced_by.get(name)
            if producer is not None and producer.op_type == "DequantizeLinear" and producer.input \
                    and producer.input[0] in out_inits:
                converted = True       # QDQ: a quantized initializer, dequantized on the way in
            elif name in out_inits and name in inits and out_inits[name] != inits[name]:
                converted = True       # the weight itself changed type (fp16)
        if not converted and any(w not in same.input for w in weights):
            # the weight was swapped for another tensor: look at what feeds it now
            converted = any(out_inits.get(i) not in (None, *floats) for i in same.input)
        states[node.name] = converted
    return states


def check_claims(source: onnx.ModelProto, output: onnx.ModelProto, claimed_float: Sequence[str] = (),
                 requested_float: Sequence[str] = ()) -> ClaimCheck:
    """Compare what the plugin claimed (``claimed_float``) and what was asked (``requested_float``) with the model."""
    states = node_states(source, output)
    quantized = tuple(n for n, s in states.items() if s is True)
    kept = tuple(n for n, s in states.items() if s is False)
    unknown = tuple(n for n, s in states.items() if s is None)
    hit = set(quantized)
    claimed = tuple(dict.fromkeys(n for n in claimed_float if n in hit))
    requested = tuple(dict.fromkeys(n for n in requested_float if n in hit and n not in claimed))
    return ClaimCheck(quantized, kept, unknown, claimed, requested)


def requested_float_nodes(source: onnx.ModelProto, patterns: Sequence[str]) -> list[str]:
    """The source's node names that ``exclude``-style patterns (exact names or globs) ask to keep float."""
    from fnmatch import fnmatchcase

    names = [n.name for n in source.graph.node if n.name]
    return [n for n in names if any(n == p or fnmatchcase(n, p) for p in patterns)]
