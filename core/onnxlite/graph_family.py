"""What kind of network an ONNX graph is, from its operators and weights.

``lighten`` matches a strategy's ``applies_to`` against :func:`model_family`,
and strategies use :func:`weight_share` to warn when they are the wrong tool
(dynamic int8 on a CNN).  Everything here reads the graph only; it never runs it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

# FUSED_TRANSFORMER_OPS: their presence alone means someone already fused a transformer.
from .ops import CONV_OPS, FUSED_TRANSFORMER_OPS, MATMUL_OPS

if TYPE_CHECKING:
    import onnx

#: a conv-heavy graph keeps at least this share of its weights in convolutions.
CONV_HEAVY_SHARE = 0.5


@dataclass(frozen=True)
class WeightShare:
    """Weight elements held by each family of weighted operator."""

    conv: int
    matmul: int
    other: int

    @property
    def total(self) -> int:
        return self.conv + self.matmul + self.other

    @property
    def conv_fraction(self) -> float:
        weighted = self.conv + self.matmul
        return self.conv / weighted if weighted else 0.0

    @property
    def conv_heavy(self) -> bool:
        return self.conv > 0 and self.conv_fraction >= CONV_HEAVY_SHARE


def as_model(model: Any) -> onnx.ModelProto:
    import onnx

    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (str, os.PathLike)):
        from .modelio import read_header

        # Shapes and op types are all we need: leave external weights on disk (and parse once).
        return read_header(model)
    raise TypeError(f"expected an onnx.ModelProto or a path, got {type(model).__name__}")


def _initializer_sizes(model: onnx.ModelProto) -> dict[str, int]:
    sizes = {}
    for init in model.graph.initializer:
        n = 1
        for d in init.dims:
            n *= d
        sizes[init.name] = n
    return sizes


def _all_nodes(model: onnx.ModelProto):
    yield from model.graph.node
    for function in model.functions:
        yield from function.node


def weight_share(model: Any) -> WeightShare:
    """How many weight elements sit in convolutions, in MatMul/Gemm, and elsewhere."""
    model = as_model(model)
    sizes = _initializer_sizes(model)
    conv = matmul = 0
    used: set[str] = set()
    for node in _all_nodes(model):
        weights = [name for name in node.input if name in sizes and name not in used]
        if node.op_type in CONV_OPS:
            conv += sum(sizes[w] for w in weights)
        elif node.op_type in MATMUL_OPS:
            matmul += sum(sizes[w] for w in weights)
        else:
            continue
        used.update(weights)
    other = sum(n for name, n in sizes.items() if name not in used)
    return WeightShare(conv=conv, matmul=matmul, other=other)


def _is_transformer(model: onnx.ModelProto, ops: Mapping[str, int]) -> bool:
    if FUSED_TRANSFORMER_OPS & set(ops):
        return True
    if not ops.get("Softmax"):
        return False
    # Unfused attention multiplies two activations (Q by K^T, then by V): a MatMul without a weight.
    produced_by_weights = {init.name for init in model.graph.initializer}
    activation_matmuls = sum(
        1 for node in model.graph.node
        if node.op_type == "MatMul" and len(node.input) == 2
        and not any(name in produced_by_weights for name in node.input)
    )
    has_norm = bool(ops.get("LayerNormalization") or ops.get("SimplifiedLayerNormalization")
                    or (ops.get("ReduceMean") and ops.get("Sqrt")))
    return activation_matmuls >= 2 and has_norm


#: input-name prefixes of a key/value cache, as optimum, onnxruntime-genai and torch exports spell them
PAST_PREFIXES = ("past_key_values", "past.", "past_")


def is_decoder(model: Any) -> bool:
    """A causal decoder with a key/value cache: a ``past_key_values.*`` (or ``past.*``) input, or grouped-query
    attention (onnxruntime-genai's fused decoder attention)."""
    model = as_model(model)
    if any(i.name.startswith(PAST_PREFIXES) for i in model.graph.input):
        return True
    return any(n.op_type == "GroupQueryAttention" for n in model.graph.node)


def model_family(model: Any) -> set[str]:
    """The graph families a model belongs to: any of ``"transformer"``, ``"decoder"``, ``"conv"``, ``"matmul"``.

    ``"transformer"``: attention (fused, or Softmax between weightless MatMuls next to
    layer norms).  ``"decoder"``: a causal decoder with a cache (:func:`is_decoder`); its
    strategies take their ``family_grids["decoder"]``.  ``"conv"``: convolutions hold most of the weights.
    ``"matmul"``: MatMul/Gemm hold weights.  An empty set means none of these fit (no weighted ops).
    """
    model = as_model(model)
    from .modelio import op_counts

    ops = op_counts(model)
    share = weight_share(model)
    family: set[str] = set()
    if _is_transformer(model, ops):
        family.add("transformer")
    if is_decoder(model):
        family.update(("decoder", "transformer"))
    if share.conv_heavy:
        family.add("conv")
    if share.matmul > 0:
        family.add("matmul")
    return family


def matches(applies_to: tuple[str, ...] | list[str], family: set[str]) -> bool:
    """Whether a strategy declaring ``applies_to`` suits a model of ``family``."""
    return "any" in applies_to or bool(set(applies_to) & family)
