"""The oldest onnxruntime a model loads in, and keeping a model to a target runtime.

onnxruntime refuses a model outright when its IR version or an opset is newer
than the ONNX release it was built with (``Unsupported model IR version`` in
``model.cc``, ``ValidateOpsetForDomain`` for opsets), and a contrib operator
(``com.microsoft``) it has no schema for fails at load.  onnx 1.23's helpers
stamp IR 14 by default, which onnxruntime 1.24 to 1.31 (and the
onnxruntime-openvino 1.24 build) cannot read, although nothing in a typical
model needs more than IR 8-10.

:data:`RUNTIMES` and :data:`CONTRIB_SINCE` are measured, not copied: each
onnxruntime release from PyPI was loaded with tiny models stamped with rising
IR versions and opsets, and its contrib schemas were listed with
``onnxruntime.capi.onnxruntime_pybind11_state.get_all_operator_schema()``
(docs/providers.md has the probe).  A release between two rows is assumed to
load no more than the older row, which can only err on the safe side.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .errors import OnnxliteError, UsageError
from .subgraphs import iter_graphs

if TYPE_CHECKING:
    import onnx

#: onnxruntime (major, minor) -> (newest IR version it loads, newest ai.onnx opset it loads); measured.
RUNTIMES: dict[tuple[int, int], tuple[int, int]] = {
    (1, 18): (10, 21), (1, 19): (10, 21), (1, 20): (10, 21), (1, 21): (10, 22), (1, 22): (10, 22),
    (1, 23): (11, 23), (1, 24): (13, 25), (1, 25): (13, 26), (1, 26): (13, 26), (1, 27): (13, 26),
    (1, 28): (13, 26), (1, 29): (13, 26), (1, 30): (13, 26), (1, 31): (13, 26), (1, 32): (14, 28),
}
#: The oldest onnxruntime onnxlite supports (pyproject's extras ask for >=1.18).
FLOOR = (1, 18)

#: com.microsoft operators that are newer than FLOOR -> the first release with their schema (measured).
#: Everything else onnxruntime's quantizers write (MatMulNBits, DynamicQuantizeMatMul, QGemm, QAttention,
#: SkipLayerNormalization, Attention, FastGelu...) is in 1.18 already.
CONTRIB_SINCE: dict[str, tuple[int, int]] = {
    "GatherBlockQuantized": (1, 20), "PagedAttention": (1, 23), "CausalConvWithState": (1, 25),
    "LinearAttention": (1, 25), "MatMulNBitsMlp": (1, 27), "MatMulNBitsQkv": (1, 27),
    **{op: (1, 29) for op in ("GatedAdd", "GatedRMSNorm", "LinearAttentionGate", "MRotaryEmbedding",
                              "MatMulBlockQuantizedFp4Weight", "MatMulBlockQuantizedFp8Weight")},
    **{op: (1, 30) for op in ("EngramGate", "GatedDeltaNet", "NGramHashMapping", "VarlenCausalConvWithState")},
    **{op: (1, 31) for op in ("BranchwiseRMSNorm", "DynamicSparseAttention", "HyperConnectionPostMix",
                              "HyperConnectionPreMix", "PackedSparseAttentionIndexer", "ScaledSiLU",
                              "SparseAttentionIndexer", "SparsePagedAttention", "VarlenNGramHashMapping")},
    **{op: (1, 32) for op in ("ConvStateReplay", "GatedDeltaNetStateReplay", "GatherPacked",
                              "HyperConnectionLowRankMix", "Mamba2Verify", "MatMulNBitsQLoRA", "MatMulPacked",
                              "MoEGroupRouter", "MoEPacked", "PackedSparseAttentionIndexerMerge", "RMSNormRotary",
                              "RouterGateUpProj", "SpeculativePrefixCommit", "SwiGLU")},
}

#: TensorProto data types -> the IR version that introduced them (onnx.proto's IR history).
_DTYPE_IR = {17: 9, 18: 9, 19: 9, 20: 9, 21: 10, 22: 10, 23: 11, 24: 12, 25: 13, 26: 13, 27: 14, 28: 14}
#: attributes whose integer value is a data type
_DTYPE_ATTRS = frozenset({"to", "dtype", "output_dtype", "saturate_dtype"})
_CONTRIB = "com.microsoft"

METADATA_KEY = "onnxlite.min_onnxruntime"


def _label(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"


def _release_for(predicate) -> tuple[int, int] | None:
    """The oldest release in :data:`RUNTIMES` whose limits satisfy ``predicate(max_ir, max_opset)``."""
    for version in sorted(RUNTIMES):
        if predicate(*RUNTIMES[version]):
            return version
    return None


@dataclass(frozen=True)
class RuntimeNeeds:
    """What loading a model asks of onnxruntime, and the oldest release that gives it."""

    ir_version: int
    opsets: Mapping[str, int]
    contrib_ops: tuple[str, ...]
    min_onnxruntime: str | None  # None: no release in the table loads it
    reasons: tuple[str, ...] = ()  # what sets the minimum, e.g. "IR 14"
    lowest_ir: int = 3  # the lowest IR this model may be stamped with (its opsets and data types)

    def to_dict(self) -> dict[str, Any]:
        return {"ir_version": self.ir_version, "opsets": dict(self.opsets), "contrib_ops": list(self.contrib_ops),
                "min_onnxruntime": self.min_onnxruntime, "reasons": list(self.reasons),
                "lowest_ir": self.lowest_ir}

    def summary(self) -> str:
        opsets = ", ".join(f"{d or 'ai.onnx'} {v}" for d, v in sorted(self.opsets.items()))
        extra = f"; contrib {', '.join(self.contrib_ops)}" if self.contrib_ops else ""
        floor = f"onnxruntime>={self.min_onnxruntime}" if self.min_onnxruntime else "no known onnxruntime"
        return f"{floor} (IR {self.ir_version}; {opsets}{extra})"


def _nodes(model: onnx.ModelProto) -> Iterator[onnx.NodeProto]:
    for graph in iter_graphs(model.graph):
        yield from graph.node
    for function in model.functions:
        yield from function.node


def _dtypes(model: onnx.ModelProto) -> set[int]:
    """Every tensor element type the model mentions: tensors, value infos and dtype attributes."""
    found: set[int] = set()
    for graph in iter_graphs(model.graph):
        for tensor in graph.initializer:
            found.add(tensor.data_type)
        for info in (*graph.input, *graph.output, *graph.value_info):
            kind = info.type.WhichOneof("value")
            if kind == "tensor_type":
                found.add(info.type.tensor_type.elem_type)
            elif kind == "sparse_tensor_type":
                found.add(info.type.sparse_tensor_type.elem_type)
    for node in _nodes(model):
        for attr in node.attribute:
            if attr.name in _DTYPE_ATTRS and attr.type == attr.INT:
                found.add(attr.i)
            if attr.t.dims or attr.t.data_type:
                found.add(attr.t.data_type)
    return found


def lowest_ir(model: onnx.ModelProto) -> tuple[int, list[str]]:
    """The lowest IR version ``model`` may carry, and what requires it.

    Opsets set a floor (onnx's own table); so do data types added by later IRs
    (int4 needs IR 10, float8 IR 9...) and IR 11's multi-device configuration.
    """
    from onnx import TensorProto, helper

    floor, why = 3, []
    opset_ir = helper.find_min_ir_version_for(list(model.opset_import), ignore_unknown=True)
    if opset_ir > floor:
        floor, why = opset_ir, [f"opsets need IR {opset_ir}"]
    for dtype in sorted(_dtypes(model)):
        need = _DTYPE_IR.get(dtype, 3)
        if need > floor:
            floor, why = need, [f"{TensorProto.DataType.Name(dtype)} needs IR {need}"]
    if len(getattr(model, "configuration", ())) and floor < 11:
        floor, why = 11, ["multi-device configuration needs IR 11"]
    return floor, why


def runtime_needs(model: onnx.ModelProto) -> RuntimeNeeds:
    """The IR version, opsets and contrib ops of ``model``, and the oldest onnxruntime that loads it as saved."""
    opsets = {o.domain if o.domain != "ai.onnx" else "": o.version for o in model.opset_import}
    contrib = sorted({n.op_type for n in _nodes(model) if n.domain == _CONTRIB})
    ir, opset = model.ir_version, opsets.get("", 0)
    base = _release_for(lambda max_ir, max_opset: ir <= max_ir and opset <= max_opset)
    reasons = []
    if base is None:
        minimum = None
        reasons.append(f"IR {ir} / ai.onnx opset {opset} is newer than every onnxruntime onnxlite knows")
    else:
        minimum = max(base, FLOOR)
        if base > FLOOR:
            ir_only = _release_for(lambda max_ir, _: ir <= max_ir)
            reasons.append(f"IR {ir}" if ir_only == base else f"ai.onnx opset {opset}")
        for op in contrib:
            since = CONTRIB_SINCE.get(op, FLOOR)
            if since > minimum:
                minimum, reasons = since, [f"{op} ({_CONTRIB})"]
    low, _ = lowest_ir(model)
    return RuntimeNeeds(ir_version=ir, opsets=opsets, contrib_ops=tuple(contrib),
                        min_onnxruntime=_label(minimum) if minimum else None, reasons=tuple(reasons),
                        lowest_ir=low)


@dataclass(frozen=True)
class TargetRuntime:
    """An onnxruntime release models must load in (``--target-runtime onnxruntime==1.24``)."""

    version: tuple[int, int]
    max_ir: int
    max_opset: int
    text: str = field(default="", compare=False)

    @property
    def label(self) -> str:
        return f"onnxruntime {_label(self.version)}"


def parse_target(text: str, option: str = "--target-runtime") -> TargetRuntime:
    """``onnxruntime==1.24``, ``onnxruntime-openvino==1.24.1`` or ``1.24`` -> its load limits.

    Any onnxruntime build (-gpu, -openvino, -directml) shares the core's limits.
    """
    match = re.fullmatch(r"\s*(?:onnxruntime(?:-[a-z]+)?\s*(?:==|~=|=)\s*)?(\d+)\.(\d+)(?:\.\d+)?\s*", text or "")
    if not match:
        raise UsageError(f"{option} {text!r}: expected a release such as onnxruntime==1.24")
    version = (int(match.group(1)), int(match.group(2)))
    if version < FLOOR:
        raise UsageError(f"{option} {text}: onnxlite supports onnxruntime {_label(FLOOR)} and later")
    known = [v for v in RUNTIMES if v <= version]
    max_ir, max_opset = RUNTIMES[max(known)]
    return TargetRuntime(version=version, max_ir=max_ir, max_opset=max_opset, text=text.strip())


def target_or_none(text: str | None, option: str = "--target-runtime") -> TargetRuntime | None:
    """:func:`parse_target` for an optional setting: None stays None."""
    return parse_target(text, option) if text else None


def problems(model: onnx.ModelProto, target: TargetRuntime) -> list[str]:
    """Why ``target`` would refuse ``model`` as it is (empty: it loads)."""
    found = []
    if model.ir_version > target.max_ir:
        found.append(f"IR {model.ir_version} (loads IR <= {target.max_ir})")
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx") and entry.version > target.max_opset:
            found.append(f"ai.onnx opset {entry.version} (loads <= {target.max_opset})")
    for op in sorted({n.op_type for n in _nodes(model) if n.domain == _CONTRIB}):
        since = CONTRIB_SINCE.get(op, FLOOR)
        if since > target.version:
            found.append(f"{_CONTRIB} {op} (needs onnxruntime {_label(since)})")
    return found


def fit_to_target(model: onnx.ModelProto, target: TargetRuntime) -> list[str]:
    """Make ``model`` (in place) loadable by ``target`` where that is valid; return what changed.

    The IR version is lowered to the target's when nothing in the model needs
    more; an ai.onnx opset above the target's goes through onnx's version
    converter.  What cannot be fitted (a contrib op the target lacks, int4 data
    on an IR-9 runtime...) raises :class:`OnnxliteError` naming it.
    """
    changes = []
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx") and entry.version > target.max_opset:
            from onnx import version_converter

            before = entry.version
            try:
                converted = version_converter.convert_version(model, target.max_opset)
            except Exception as exc:  # onnx raises plain RuntimeError/ValueError for ops it cannot convert
                raise OnnxliteError(f"{target.label} loads ai.onnx opset <= {target.max_opset}; onnx cannot convert "
                                    f"this opset-{before} model ({' '.join(str(exc).split())[:200]})") from None
            model.CopyFrom(converted)
            changes.append(f"ai.onnx opset {before} -> {target.max_opset}")
            break
    if model.ir_version > target.max_ir:
        low, why = lowest_ir(model)
        if low > target.max_ir:
            raise OnnxliteError(f"{target.label} loads IR <= {target.max_ir} but this model needs IR {low} "
                                f"({'; '.join(why)})")
        changes.append(f"IR {model.ir_version} -> {target.max_ir}")
        model.ir_version = target.max_ir
    left = problems(model, target)
    if left:
        raise OnnxliteError(f"{target.label} cannot load this model: {'; '.join(left)}")
    return changes


def unfit_reason(path: str | Any, target: TargetRuntime) -> str | None:
    """Why ``target`` cannot load the model at ``path`` even after :func:`fit_to_target`; None when it can."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)   # the graph is enough: weights never matter here
    try:
        fit_to_target(model, target)
    except OnnxliteError as exc:
        return str(exc)
    return None


def refuse_unfit(rows: list[Any], target: TargetRuntime | None) -> list[Any]:
    """``lighten``'s rule: a candidate ``target`` cannot load fails, with the reason; the others are returned."""
    if target is None:
        return rows
    kept = []
    for row in rows:
        reason = unfit_reason(row.path, target)
        if reason:
            row.status, row.reason = "failed", f"--target-runtime {target.text or target.label}: {reason}"
        else:
            kept.append(row)
    return kept


def stamp(model: onnx.ModelProto) -> RuntimeNeeds:
    """Record the oldest onnxruntime ``model`` needs in its ``metadata_props`` (``onnxlite.min_onnxruntime``)."""
    needs = runtime_needs(model)
    # modelio.save_model calls this, so it sets the entry itself rather than import modelio back
    entry = next((p for p in model.metadata_props if p.key == METADATA_KEY), None) or model.metadata_props.add()
    entry.key, entry.value = METADATA_KEY, needs.summary()
    return needs


def installed_limits() -> tuple[str, int, int]:
    """The installed onnxruntime's version, newest IR and newest ai.onnx opset, found by loading tiny models.

    Used by tests and the second-provider CI job to check :data:`RUNTIMES` against a real build.
    """
    import onnxruntime as ort
    from onnx import TensorProto, helper

    def loads(ir: int, opset: int) -> bool:
        graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "probe",
                                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
        probe = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        probe.ir_version = ir
        try:
            ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
        except Exception:  # noqa: BLE001 - a refusal is the answer we are probing for
            return False
        return True

    max_ir = max(ir for ir in range(3, 21) if loads(ir, 13))
    max_opset = max(opset for opset in range(13, 40) if loads(7, opset))
    return ort.__version__, max_ir, max_opset
