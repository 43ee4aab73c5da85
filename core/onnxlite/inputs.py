"""Input specs (``NAME:DTYPE[dim,...]``) and sample inputs generated from them.

Symbolic dims (``batch``, ``seq``) are dynamic axes.  Samples stay in each
input's valid range: token ids below the vocabulary size, attention masks of
0/1 with real padding, token type ids of 0.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from .errors import UsageError

if TYPE_CHECKING:
    import numpy as np
    import onnx

Dim = int | str

DTYPES = ("float32", "float16", "float64", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool")
_SPEC_RE = re.compile(r"^\s*([^:\s]+)\s*:\s*([A-Za-z0-9_]+)\s*\[(.*)\]\s*(?:=\s*(\S+))?\s*$")
_DTYPE_ALIASES = {"float": "float32", "double": "float64", "long": "int64", "int": "int32", "half": "float16",
                  "fp32": "float32", "fp16": "float16"}


@dataclass(frozen=True)
class InputSpec:
    """One model input.  ``shape`` holds ints for fixed dims and names for dynamic ones.

    ``value_range`` is ``(low, high)`` (high exclusive) for integer inputs such
    as token ids; ``role`` is ``"ids"``, ``"mask"``, ``"type_ids"`` or None and
    steers sample generation.  ``value`` makes the input a constant (a sample
    rate, ``sr:int64[]=16000``): generated samples hold it, and it has no batch
    axis.  :attr:`batch_axis` says which axis holds the samples: not always the
    first (a streaming model's state ``[2, batch, 128]``), and none for scalars.
    """

    name: str
    dtype: str
    shape: tuple[Dim, ...]
    value_range: tuple[int, int] | None = None
    role: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False)
    value: float | int | None = None

    @property
    def dynamic_axes(self) -> dict[int, str]:
        return {i: d for i, d in enumerate(self.shape) if isinstance(d, str)}

    @property
    def batch_axis(self) -> int | None:
        """The sample axis; None for scalars and constants.

        The dim named like a batch; else axis 0 when it is dynamic or 1 (a fixed batch of one); else
        the first dynamic axis (a state ``[2, ?, 128]`` batches on axis 1); else 0.
        """
        if not self.shape or self.value is not None:
            return None
        named = [i for i, d in enumerate(self.shape) if isinstance(d, str) and _is_batch_name(d)]
        if named:
            return named[0]
        if isinstance(self.shape[0], str) or self.shape[0] == 1:
            return 0
        dynamic = list(self.dynamic_axes)
        return dynamic[0] if dynamic else 0

    def __str__(self) -> str:
        text = f"{self.name}:{self.dtype}[{','.join(str(d) for d in self.shape)}]"
        return text if self.value is None else f"{text}={self.value}"

    def with_role(self) -> InputSpec:
        return self if self.role else replace(self, role=guess_role(self.name))


def _is_batch_name(dim: str) -> bool:
    lowered = dim.lower()
    return lowered in {"n", "b", "bs"} or "batch" in lowered


def batch_axes(specs: Sequence[InputSpec]) -> dict[str, int | None]:
    """Each input's sample axis (None: a scalar or constant, passed whole with every batch)."""
    return {spec.name: spec.batch_axis for spec in specs}


def with_batch_axes(specs: Sequence[InputSpec], axes: Mapping[str, int | None]) -> list[InputSpec]:
    """``specs`` with the sample axis ``axes`` gives (the user's ``--input``) where their own dims say another.

    A model's state ``["layers", "frames", 8]`` reads as batched on axis 0; the user's
    ``state:float32[2,batch,8]`` says axis 1.  That axis is renamed ``batch`` (and a batch-named dim
    elsewhere loses the name), so data loaded against these specs is cut where the user said.
    """
    out = []
    for spec in specs:
        axis = axes.get(spec.name, spec.batch_axis)
        if axis is None or axis == spec.batch_axis or not 0 <= axis < len(spec.shape):
            out.append(spec)
            continue
        shape = [f"dim{i}" if isinstance(d, str) and _is_batch_name(d) else d for i, d in enumerate(spec.shape)]
        shape[axis] = "batch"
        out.append(replace(spec, shape=tuple(shape)))
    return out


def guess_role(name: str) -> str | None:
    lowered = name.lower()
    if "mask" in lowered:
        return "mask"
    if "token_type" in lowered or "segment" in lowered:
        return "type_ids"
    if lowered.endswith("ids") or lowered.endswith("_id"):
        return "ids"
    return None


def normalize_dtype(dtype: str, where: str = "--input") -> str:
    value = _DTYPE_ALIASES.get(dtype.lower(), dtype.lower())
    if value not in DTYPES:
        raise UsageError(f"{where}: unknown dtype {dtype!r}; use one of {', '.join(DTYPES)}")
    return value


def parse_input_spec(text: str) -> InputSpec:
    """Parse ``NAME:DTYPE[dim,...]``, e.g. ``input_ids:int64[batch,seq]`` or ``x:float32[batch,3,224,224]``."""
    match = _SPEC_RE.match(text)
    if not match:
        raise UsageError(f"--input {text!r}: expected NAME:DTYPE[dim,...], for example input_ids:int64[batch,seq]")
    name, dtype, dims_text, value_text = match.groups()
    dims: list[Dim] = []
    for raw in (d.strip() for d in dims_text.split(",") if d.strip()):
        if re.fullmatch(r"[0-9]+", raw):   # ASCII digits only: str.isdigit() also accepts "²", which int() refuses
            if len(raw.lstrip("0")) > 18:
                raise UsageError(f"--input {text!r}: dim {raw} is too large")
            if int(raw) <= 0:
                raise UsageError(f"--input {text!r}: dims must be positive, got {raw}")
            dims.append(int(raw))
        elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", raw):
            dims.append(raw)
        else:
            raise UsageError(f"--input {text!r}: bad dim {raw!r}; use a positive integer or a name such as batch")
    dtype = normalize_dtype(dtype, f"--input {text!r}")
    value: float | int | None = None
    if value_text is not None:
        try:
            value = float(value_text) if dtype.startswith(("float", "bfloat")) else int(value_text)
        except ValueError:
            raise UsageError(f"--input {text!r}: constant {value_text!r} is not a {dtype} number") from None
    return InputSpec(name, dtype, tuple(dims), value=value).with_role()


def specs_from_onnx(model: Any) -> list[InputSpec]:
    """Input specs of an ONNX model (a path or a ``ModelProto``), initializers excluded."""
    import onnx
    from onnx import helper

    if not isinstance(model, onnx.ModelProto):
        from .modelio import read_header

        model = read_header(model)
    initializers = {init.name for init in model.graph.initializer}
    vocab = _vocabulary_sizes(model)
    specs = []
    for value in model.graph.input:
        if value.name in initializers:
            continue
        tensor = value.type.tensor_type
        dtype = helper.tensor_dtype_to_np_dtype(tensor.elem_type).name
        dims: list[Dim] = []
        for i, dim in enumerate(tensor.shape.dim):
            if dim.HasField("dim_value") and dim.dim_value > 0:
                dims.append(int(dim.dim_value))
            else:
                dims.append(dim.dim_param or ("batch" if i == 0 else f"dim{i}"))
        spec = InputSpec(value.name, dtype, tuple(dims)).with_role()
        if spec.role == "ids" and spec.name in vocab:
            spec = replace(spec, value_range=(0, vocab[spec.name]))
        specs.append(spec)
    return specs


def _vocabulary_sizes(model: onnx.ModelProto) -> dict[str, int]:
    """Rows of the embedding table each integer input indexes (a Gather, or a fused EmbedLayerNormalization),
    so that generated ids stay in range for small vocabularies."""
    sizes = {init.name: list(init.dims) for init in model.graph.initializer}
    found: dict[str, int] = {}
    for node in model.graph.node:
        if node.op_type == "Gather" and len(node.input) == 2 and node.input[0] in sizes and sizes[node.input[0]]:
            found.setdefault(node.input[1], int(sizes[node.input[0]][0]))
        if node.op_type == "EmbedLayerNormalization" and len(node.input) > 2:
            for ids, table in ((node.input[0], node.input[2]),
                               (node.input[1], node.input[4] if len(node.input) > 4 else "")):
                if ids and table in sizes and sizes[table]:
                    found.setdefault(ids, int(sizes[table][0]))
    return found


def resolve_shape(spec: InputSpec, batch: int, seq: int, sizes: Mapping[str, int] | None = None) -> tuple[int, ...]:
    """Concrete shape: a dynamic batch axis gets ``batch``, other dynamic axes ``seq``
    (or the size given for that dim name in ``sizes``)."""
    sizes = dict(sizes or {})
    shape = []
    for i, dim in enumerate(spec.shape):
        if isinstance(dim, int):
            shape.append(dim)
        elif i == spec.batch_axis:   # before sizes: unnamed dims are called dim1, dim2... in every input
            shape.append(batch)
        elif dim in sizes:
            shape.append(sizes[dim])
        else:
            shape.append(seq)
    return tuple(shape)


#: generated samples may take at most this share of the memory available: the model's activations and
#: outputs on them, and the other sample sets, need several times as much again
FEEDS_MEMORY_SHARE = 0.25


def _itemsize(dtype: str) -> int:
    return {"float64": 8, "int64": 8, "float32": 4, "int32": 4, "bfloat16": 4,   # bfloat16 is fed as float32
            "float16": 2, "int16": 2}.get(dtype, 1)


def feeds_bytes(specs: Sequence[InputSpec], batch: int = 2, seq: int = 8,
                sizes: Mapping[str, int] | None = None) -> int:
    """Bytes :func:`make_feeds` would allocate for ``specs``, worked out without allocating anything."""
    total = 0
    for spec in specs:
        count = 1
        for dim in resolve_shape(spec, batch, seq, sizes):
            count *= int(dim)
        total += count * _itemsize(spec.dtype)
    return total


def available_memory() -> int | None:
    """Bytes of memory available now (Linux ``MemAvailable``), or None when the system does not say."""
    try:
        with open("/proc/meminfo") as info:
            for line in info:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def check_feeds_fit(specs: Sequence[InputSpec], batch: int = 2, seq: int = 8,
                    sizes: Mapping[str, int] | None = None, count: int = 1) -> int:
    """Refuse generated samples that cannot fit in memory, before allocating them (one line, exit 2).

    ``count`` sets of ``batch`` samples are estimated together; the limit is
    :data:`FEEDS_MEMORY_SHARE` of the memory available now.  Returns the bytes.
    """
    need = feeds_bytes(specs, batch, seq, sizes) * max(1, count)
    available = available_memory()
    if available is not None and need > available * FEEDS_MEMORY_SHARE:
        biggest = max(specs, key=lambda s: feeds_bytes([s], batch, seq, sizes))
        shape = list(resolve_shape(biggest, batch, seq, sizes))
        raise UsageError(f"input {biggest}: generated samples of shape {shape} would take {_human(need)} "
                         f"({f'{count} sets of ' if count > 1 else ''}batch {batch}), more than "
                         f"{int(FEEDS_MEMORY_SHARE * 100)}% of the "
                         f"{_human(available)} of memory available; give smaller dims (--input) or real data")
    return need


def _human(count: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if count < 1024 or unit == "PB":
            return f"{count:.1f} {unit}" if unit != "B" else f"{int(count)} B"
        count /= 1024
    return f"{count:.1f} PB"


def has_sequence_axis(specs: Sequence[InputSpec]) -> bool:
    """Whether any input has a dynamic axis besides its sample axis, the one ``seq``/``--seq-len`` sizes
    (token ids ``[batch, seq]``); an MLP's ``[batch, 64]`` or a CNN's ``[batch, 3, 224, 224]`` has none."""
    return any(axis != spec.batch_axis for spec in specs if spec.value is None for axis in spec.dynamic_axes)


def make_feeds(specs: Sequence[InputSpec], batch: int = 2, seq: int = 8, seed: int = 0,
               pad: bool = True, sizes: Mapping[str, int] | None = None) -> dict[str, np.ndarray]:
    """Random but valid inputs for ``specs``.

    With ``pad=True`` and a mask input, row ``i`` of a batch is shorter than
    row 0 (never below one token): masks are 0 and ids are the pad id 0 there,
    so padded batches are exercised, not just full ones.  Samples that would
    not fit in memory are refused first (:func:`check_feeds_fit`).
    """
    import numpy as np

    check_feeds_fit(specs, batch, seq, sizes)
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    lengths = None
    for spec in specs:
        shape = resolve_shape(spec, batch, seq, sizes)
        role = spec.role or guess_role(spec.name)
        np_dtype = np.dtype("float32") if spec.dtype == "bfloat16" else np.dtype(spec.dtype)
        if spec.value is not None:
            feeds[spec.name] = np.full(shape, spec.value, dtype=np_dtype)
            continue
        if role in {"mask", "ids", "type_ids"} and len(shape) >= 2 and lengths is None:
            full = shape[1]
            lengths = [full if (i == 0 or not pad) else max(1, full - (i * max(1, full // 4)) % full)
                       for i in range(shape[0])]
        if np_dtype.kind == "f":
            array = rng.standard_normal(shape).astype(np_dtype)
        elif np_dtype.kind == "b":
            array = rng.integers(0, 2, shape).astype(bool)
        elif role == "mask":
            array = np.ones(shape, dtype=np_dtype)
        elif role == "type_ids":
            array = np.zeros(shape, dtype=np_dtype)
        else:
            low, high = spec.value_range or (0, 100 if role == "ids" else 10)
            array = rng.integers(low, high, shape).astype(np_dtype)
        feeds[spec.name] = array
    if pad and lengths is not None:
        for spec in specs:
            array = feeds[spec.name]
            role = spec.role or guess_role(spec.name)
            if role not in {"mask", "ids", "type_ids"} or array.ndim < 2 or array.shape[0] != len(lengths):
                continue
            for row, length in enumerate(lengths):
                array[row, length:] = 0
    return feeds
