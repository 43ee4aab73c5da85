"""Graph normalisation before any strategy: weights as initializers, and an opset that per-channel QDQ accepts.

Exporters other than torch.onnx write graphs that onnxruntime's quantizers do
not expect.  Paddle2ONNX (PP-OCR) stores every weight in a ``Constant`` node
and no initializer at all: ``quantize_dynamic`` then finds no weight to
quantize and says nothing, ``quantize_static`` stops with ``Expected
conv2d_157.w_0 to be an initializer``, and a graph-family check sees an empty
graph.  Old exports (opset 12, Paddle2ONNX's and Ultralytics' default) cannot
hold per-channel ``DequantizeLinear`` (its ``axis`` attribute is opset 13).

:func:`normalize` fixes both with the tools that already do it, and says what
it did so a result can report it:

* ``Constant`` nodes holding tensors become initializers, in the main graph and
  in subgraphs (``If``/``Loop`` bodies), with ``onnx_ir``'s
  ``LiftConstantsToInitializersPass``;
* a default-domain opset below ``min_opset`` is raised with onnx's version
  converter; when the converter cannot, the model keeps its opset and the
  result says per-channel QDQ is off (fall back to per-tensor).

The function never edits its argument and never writes a file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .subgraphs import iter_graphs

if TYPE_CHECKING:
    import onnx

#: ``DequantizeLinear``/``QuantizeLinear`` take ``axis`` (per-channel) from this opset on
PER_CHANNEL_MIN_OPSET = 13


@dataclass(frozen=True)
class Normalization:
    """What :func:`normalize` did.  ``model`` is a new ``ModelProto``; the input is untouched."""

    model: onnx.ModelProto
    lifted_constants: int = 0
    opset_before: int | None = None
    opset_after: int | None = None
    #: False when the opset stayed below ``PER_CHANNEL_MIN_OPSET``: quantize per tensor
    per_channel_ok: bool = True
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def changed(self) -> bool:
        return bool(self.lifted_constants) or self.opset_before != self.opset_after

    def summary(self) -> str:
        """One line for a result table or a log ("" when nothing changed and nothing is worth saying)."""
        return "; ".join(self.notes)


def default_opset(model: onnx.ModelProto) -> int | None:
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx"):
            return int(entry.version)
    return None


def _initializer_count(graph: onnx.GraphProto) -> int:
    return sum(len(g.initializer) for g in iter_graphs(graph))


def lift_constants(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    """``Constant`` tensors to initializers (all graphs).  Returns the new model and how many were lifted.

    Every ``value`` tensor is lifted, however small: onnxruntime's static
    quantizer also wants a Conv's bias as an initializer, and a bias can have
    fewer than the pass's default 16 elements.  ``value_ints`` and friends
    (shapes, axes) stay nodes; nothing quantizes them.
    """
    import onnx_ir as ir
    from onnx_ir.passes.common import LiftConstantsToInitializersPass

    before = _initializer_count(model.graph)
    ir_model = ir.serde.deserialize_model(model)
    LiftConstantsToInitializersPass(lift_all_constants=False, size_limit=0)(ir_model)
    lifted = ir.serde.serialize_model(ir_model)
    return lifted, _initializer_count(lifted.graph) - before


def count_constant_tensors(model: onnx.ModelProto) -> int:
    """How many ``Constant`` nodes hold a tensor (``value``), in every graph: weights an exporter left as nodes."""
    return sum(node.op_type == "Constant" and node.domain in ("", "ai.onnx")
               and any(a.name == "value" for a in node.attribute)
               for graph in iter_graphs(model.graph) for node in graph.node)


def raise_opset(model: onnx.ModelProto, target: int) -> tuple[onnx.ModelProto, str | None]:
    """onnx's version converter to ``target``; on failure the model unchanged and the reason."""
    import onnx
    from onnx import version_converter

    try:
        converted = version_converter.convert_version(model, target)
        onnx.checker.check_model(converted)
    except Exception as exc:   # the converter raises RuntimeError, IndexError, ValidationError... per adapter
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return model, f"{type(exc).__name__}: {reason}"
    return converted, None


def normalize(model: onnx.ModelProto, *, min_opset: int | None = PER_CHANNEL_MIN_OPSET,
              lift: bool = True) -> Normalization:
    """A copy of ``model`` that the quantizers can work on, and what was done to it.

    ``min_opset``: raise a lower default-domain opset to this (None: leave the
    opset alone).  ``lift``: turn ``Constant`` weights into initializers.
    """
    import onnx

    working = onnx.ModelProto()
    working.CopyFrom(model)
    notes: list[str] = []
    lifted = 0
    before = default_opset(working)
    after = before
    per_channel_ok = before is None or before >= PER_CHANNEL_MIN_OPSET
    if min_opset is not None and before is not None and before < min_opset:
        converted, failure = raise_opset(working, min_opset)
        if failure is None:
            working, after = converted, min_opset
            per_channel_ok = after >= PER_CHANNEL_MIN_OPSET
            notes.append(f"opset {before} raised to {after} with onnx's version converter")
        else:
            notes.append(f"opset {before} kept (onnx's version converter failed: {failure})"
                         + ("" if per_channel_ok else "; per-channel QDQ needs opset 13: quantize per tensor"))
    # Lifting comes last: the version converter writes new Constant nodes (opset 13's Squeeze/Split axes).
    if lift and count_constant_tensors(working):
        try:
            working, lifted = lift_constants(working)
        except ImportError:
            notes.append("Constant weights left as nodes: install onnx-ir to lift them to initializers")
        else:
            if lifted:
                notes.append(f"{lifted} Constant tensor(s) lifted to initializers")
    return Normalization(model=working, lifted_constants=lifted, opset_before=before, opset_after=after,
                         per_channel_ok=per_channel_ok, notes=tuple(notes))


def needs_normalization(model: onnx.ModelProto, min_opset: int | None = PER_CHANNEL_MIN_OPSET) -> bool:
    """Whether :func:`normalize` has anything to do (cheap: reads the graph, copies nothing)."""
    opset = default_opset(model)
    return bool(count_constant_tensors(model)) or (min_opset is not None and opset is not None and opset < min_opset)


def normalize_file(path, *, min_opset: int | None = PER_CHANNEL_MIN_OPSET) -> Normalization | None:
    """Normalise the model file at ``path`` in place, atomically; None when nothing needed doing.

    Only for onnxlite's own working copies (quantize's private copy, lighten's
    exported ``fp32.onnx``): a user's file is never written.  The returned
    :class:`Normalization` holds no model (``model`` is None) so callers keep
    only what was done.
    """
    from dataclasses import replace

    from .modelio import load_model, save_model, uses_external_data

    header = load_model(path, load_external_data=False)
    if not needs_normalization(header, min_opset):
        return None
    external = uses_external_data(header)
    full = load_model(path, load_external_data=True) if external else header
    done = normalize(full, min_opset=min_opset)
    if done.changed:
        save_model(done.model, path, external_data=True if external else None)
    return replace(done, model=None)  # type: ignore[arg-type]  # the written file replaces the proto
