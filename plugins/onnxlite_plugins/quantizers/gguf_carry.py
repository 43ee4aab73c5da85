"""Built-in strategy ``gguf``: a quantized GGUF's blocks written into MatMulNBits as they are, with no second rounding.

A model loaded from a GGUF file (transformers' ``gguf_file=``) holds the file's dequantized values; re-rounding
them to a new 4-bit grid loses what the file's own grid kept.  This strategy reads the file
(``--option gguf=FILE``, with the ``gguf`` package's ``GGUFReader``) and gives each MatMul the file's blocks:

* **Matching** is by value, not by name: every output column of an ONNX MatMul weight ``[K, N]`` must equal a
  dequantized row of a GGUF tensor, bit for bit (rows are hashed, then each node's rows are dequantized again
  and compared whole).  Names differ between exporters and the file: onnxruntime-genai's builder packs
  q/k/v into one ``qkv_proj``, llama.cpp stores q and k with their rows permuted for its rotary layout, and a
  tied LM head is ``token_embd``.  A row permutation moves whole rows of blocks, so it carries exactly too.
* **Q4_0** (a float16 scale per 32, ``w = (q - 8) * d``) is MatMulNBits' symmetric 4-bit form: no zero
  points, the kernel's default is 8.  Exact.
* **Q8_0** (``w = q * d``, int8 q) is 8-bit MatMulNBits with ``q + 128`` and the default zero point 128.  Exact.
* **Q4_1** (scale and minimum per 32, ``w = q * d + m``): its zero point ``-m / d`` is not an integer in general,
  and MatMulNBits' float zero points run a slow float path on the CPU.  So (``q4_1=split``, the default) the
  weight is split exactly, ``q * d + m = (q - 8) * d + (m + 8d)``: symmetric 4-bit MatMulNBits of the file's
  ``q`` and ``d`` (the fast path), plus ``(x summed per block of 32) @ offsets`` by two small float MatMuls.
  ``q4_1=zero_point`` stores float zero points instead (the kernel's ``(q - zp) * d`` differs from
  ``q * d + m`` by float32 rounding; ``accuracy_level`` then has no effect on those nodes).
* The embedding table: a tied one (the builder's ``Transpose`` of the LM head) reads the LM head's blocks
  through ``GatherBlockQuantized``; a separate one becomes ``GatherBlockQuantized`` itself (Q4_0, Q8_0).
  Q4_1 tables (and a tied split Q4_1 head) stay float: GatherBlockQuantized takes integer zero points and no
  offsets.  Said in the notes.

Any other block format in the file (k-quants, IQ, Q5, ...) is refused in one line naming the format and the
tensor; float tensors (norms, an F16/F32 weight) leave their nodes float.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from onnxlite import Option, QuantizeOutcome, QuantizerSpec, UsageError, hookimpl

from .decoder import lm_head, share_tied_table, tied_table
from .weightonly import survey

CARRIED = ("Q4_0", "Q4_1", "Q8_0")
FLOATS = ("F32", "F16", "BF16")
BLOCK = 32


@dataclass(frozen=True)
class GGUFRows:
    """Every 2-D tensor of a GGUF file: its raw blocks per row, and an index from a row's dequantized bytes."""

    names: tuple[str, ...]
    qtypes: tuple[str, ...]
    blocks: tuple[Any, ...]           # per tensor: uint8 [rows, row bytes], or float rows for float tensors
    index: Mapping[int, tuple[int, int]]


def read_gguf(path: Path) -> GGUFRows:
    """The file's 2-D tensors, refused in one line when one of them is a block format this cannot carry."""
    import numpy as np
    from gguf import GGUFReader
    from gguf.quants import dequantize

    reader = GGUFReader(str(path))
    matrices = [t for t in reader.tensors if len([d for d in t.shape if d > 1]) >= 2]
    for tensor in matrices:     # every format checked before any block is read
        if tensor.tensor_type.name not in CARRIED + FLOATS:
            raise UsageError(f"--option gguf={path}: tensor {tensor.name} is {tensor.tensor_type.name}, which gguf "
                             f"cannot carry into MatMulNBits (it carries {', '.join(CARRIED)})")
    names: list[str] = []
    qtypes: list[str] = []
    blocks: list[Any] = []
    index: dict[int, tuple[int, int]] = {}
    for tensor in matrices:
        qtype = tensor.tensor_type.name
        k = int(tensor.shape[0])
        raw = np.asarray(tensor.data)
        rows = raw.reshape(int(tensor.n_elements) // k, -1)
        values = dequantize(rows, tensor.tensor_type).astype(np.float32).reshape(rows.shape[0], k)
        position = len(names)
        for r in range(values.shape[0]):
            index.setdefault(hash(values[r].tobytes()), (position, r))
        names.append(str(tensor.name))
        qtypes.append(qtype)
        blocks.append(rows)
    return GGUFRows(tuple(names), tuple(qtypes), tuple(blocks), index)


@dataclass(frozen=True)
class Match:
    """The GGUF rows equal to a weight's output rows: their raw blocks and formats, in the weight's row order."""

    qtype: str                 # Q4_1 when any row is Q4_1 (Q4_0 rows then take zero point 8), else the one format
    rows: tuple[Any, ...]
    kinds: tuple[str, ...]


def match_rows(rows: GGUFRows, matrix: Any) -> Match | str:
    """The file's rows equal to ``matrix``'s rows (``[N, K]`` float32, bit for bit), or why not (one phrase)."""
    import numpy as np
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize

    hits = [rows.index.get(hash(np.ascontiguousarray(r).tobytes())) for r in matrix]
    missing = sum(h is None for h in hits)
    if missing:
        return f"{missing} of its {len(hits)} rows equal no row of the file"
    found = [h for h in hits if h is not None]
    kinds = [rows.qtypes[t] for t, _ in found]
    kset = set(kinds)
    if kset & set(FLOATS):
        return f"the file stores it as {'/'.join(sorted(kset))}"
    if "Q8_0" in kset and len(kset) > 1:
        return f"its rows mix {', '.join(sorted(kset))} (one MatMulNBits has one bit width)"
    blocks = [rows.blocks[t][r] for t, r in found]
    values = np.empty_like(matrix)
    for qtype in kset:
        picked = [i for i, k in enumerate(kinds) if k == qtype]
        values[picked] = dequantize(np.stack([blocks[i] for i in picked]),
                                    GGMLQuantizationType[qtype]).reshape(len(picked), -1)
    if not np.array_equal(values, matrix):
        return "its values differ from the file's (hash collision)"
    return Match("Q4_1" if "Q4_1" in kset else kinds[0], tuple(blocks), tuple(kinds))


def to_nbits(match: Match, split: bool = True) -> dict[str, Any]:
    """One weight's blocks (rows of ``K/32`` blocks) as MatMulNBits' packed weight, scales and zero points, with
    the weight ``[N, K]`` computed from them (``implied``).  Q4_1 with ``split``: symmetric blocks plus
    ``offsets`` ``[N, K/32]`` (``m + 8d``, added by a small float MatMul); without: float zero points."""
    import numpy as np

    if match.qtype == "Q8_0":
        b = np.stack(match.rows).reshape(len(match.rows), -1, 34)
        d = b[..., :2].copy().view(np.float16).astype(np.float32)[..., 0]
        q = (b[..., 2:].copy().view(np.int8).astype(np.int16) + 128).astype(np.uint8)
        return {"bits": 8, "packed": q, "scales": d, "zero_points": None,
                "implied": ((q.astype(np.float32) - 128) * d[..., None]).reshape(len(match.rows), -1)}
    blocks = [r.reshape(-1, 20 if k == "Q4_1" else 18) for r, k in zip(match.rows, match.kinds)]
    d = np.stack([b[:, :2].copy().view(np.float16).astype(np.float32)[:, 0] for b in blocks])
    m = np.stack([b[:, 2:4].copy().view(np.float16).astype(np.float32)[:, 0] if k == "Q4_1" else -8 * d[i]
                  for i, (b, k) in enumerate(zip(blocks, match.kinds))])
    qs = np.stack([b[:, -16:] for b in blocks])
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=-1)            # GGUF: low nibbles first, then high ones
    zero = offsets = None
    if match.qtype == "Q4_0":
        implied = (q.astype(np.float32) - 8) * d[..., None]
    elif split:
        # q * d + m = (q - 8) * d + (m + 8d): the symmetric blocks MatMulNBits runs fast, plus an offset per block
        offsets = (m + 8 * d).astype(np.float32)
        implied = (q.astype(np.float32) - 8) * d[..., None] + offsets[..., None]
    else:
        flat = d == 0                                            # a constant block: w = m, as (1 - 0) * m
        q = np.where(flat[..., None], 1, q).astype(np.uint8)
        d, zero = np.where(flat, m, d).astype(np.float32), np.where(flat, 0, -m / np.where(flat, 1, d))
        zero = zero.astype(np.float32)
        implied = (q.astype(np.float32) - zero[..., None]) * d[..., None]
    packed = (q[..., 0::2] | (q[..., 1::2] << 4)).astype(np.uint8)
    return {"bits": 4, "packed": packed, "scales": d, "zero_points": zero, "offsets": offsets,
            "implied": implied.reshape(len(match.rows), -1)}


class GGUFQuantizer:
    def quantize(self, model: Path, output: Path, options: Mapping[str, Any], context) -> QuantizeOutcome:
        import numpy as np
        import onnx
        from onnx import helper, numpy_helper
        from onnxruntime.quantization.onnx_model import ONNXModel

        from onnxlite.modelio import load_external_data, uses_external_data

        path = self._path(options)
        level = int(options["accuracy_level"])
        if level not in (0, 1, 2, 3, 4):
            raise UsageError(f"--option accuracy_level={level}: expected 0 (unset) or 1-4")
        proto = onnx.load(str(model), load_external_data=False)
        external = uses_external_data(proto)
        rows = read_gguf(path)
        proto = load_external_data(proto, model)
        found = survey(proto, BLOCK)
        head = lm_head(proto, found["eligible"])
        tied = tied_table(proto, head)
        inits = {i.name: i for i in proto.graph.initializer}
        nodes = {n.name: n for n in proto.graph.node}
        split = options["q4_1"] == "split"
        carried: dict[str, int] = {}
        kinds: dict[str, str] = {}
        left: dict[str, str] = {}
        worst = 0.0
        for name in found["eligible"]:
            node = nodes[name]
            weight = numpy_helper.to_array(inits[node.input[1]]).astype(np.float32)
            got = match_rows(rows, np.ascontiguousarray(weight.T))
            if isinstance(got, str):
                left[name] = got
                continue
            block = to_nbits(got, split)
            kinds[name] = got.qtype
            worst = max(worst, float(np.abs(block["implied"].T - weight).max()))
            self._replace(proto, node, weight.shape, block, level)
            carried[got.qtype] = carried.get(got.qtype, 0) + 1
        if not carried:
            sample = next(iter(left.items()), ("", "it has no MatMul with a constant weight"))
            raise UsageError(f"{model}: no MatMul weight equals a tensor of {path} ({sample[0]}: {sample[1]}); "
                             "quantize the model that was loaded from this file")
        notes = [f"carried {sum(carried.values())} MatMul(s) from {Path(path).name} as they are, no second rounding: "
                 + ", ".join(f"{k} {v}" for k, v in sorted(carried.items()))]
        if "Q4_1" in carried:
            notes.append(("Q4_1 as symmetric blocks plus a float offset per block (m + 8d, one small MatMul)"
                          if split else "Q4_1 as float zero points (-min/scale): the kernel computes those in float")
                         + f"; weights within {worst:.2g} of the file's")
        notes += [f"left float: {n} ({why})" for n, why in list(left.items())[:3]]
        split_head = split and kinds.get(head or "") == "Q4_1"   # its blocks alone miss the offsets
        table = self._table(proto, rows, None if split_head else tied, head, found, notes)
        if split_head and tied is not None:
            notes.append("tied embedding table stays float: the Q4_1 LM head's blocks need their offsets")
            table = "float"
        used = {i for n in proto.graph.node for i in n.input}
        for init in [i for i in proto.graph.initializer if i.name not in used]:
            proto.graph.initializer.remove(init)
        if not any(o.domain == "com.microsoft" for o in proto.opset_import):
            proto.opset_import.append(helper.make_opsetid("com.microsoft", 1))
        ONNXModel(proto).save_model_to_file(str(output), external)
        return QuantizeOutcome(excluded_nodes=list(left), notes=notes, details={
            "gguf": str(path), "carried": carried, "left_in_float": left, "table": table,
            "weight_max_abs_diff": float(f"{worst:.3g}"), "accuracy_level": level})

    @staticmethod
    def _path(options: Mapping[str, Any]) -> Path:
        given = str(options.get("gguf") or "")
        if not given:
            raise UsageError("--strategy gguf needs the file the model was loaded from: --option gguf=FILE.gguf")
        path = Path(given).expanduser()
        if not path.is_file():
            raise UsageError(f"--option gguf={given}: no such file")
        import importlib.util

        if importlib.util.find_spec("gguf") is None:
            raise UsageError("--strategy gguf needs the gguf package: pip install 'onnxlite[gguf]'")
        return path

    @staticmethod
    def _replace(proto, node, shape, block: dict[str, Any], level: int) -> None:
        """``node`` as MatMulNBits on the carried blocks; split Q4_1 adds ``(x summed per block) @ offsets``."""
        import numpy as np
        from onnx import helper, numpy_helper

        k, n = (int(d) for d in shape)
        base = node.input[1]
        packed = block["packed"].reshape(n, k // BLOCK, -1)
        inits = [numpy_helper.from_array(packed, f"{base}_gguf_Q{block['bits']}"),
                 numpy_helper.from_array(block["scales"].reshape(n, -1), f"{base}_gguf_scales")]
        if block["zero_points"] is not None:
            inits.append(numpy_helper.from_array(block["zero_points"].reshape(n, -1), f"{base}_gguf_zero_points"))
        proto.graph.initializer.extend(inits)
        attrs: dict[str, Any] = {"K": k, "N": n, "bits": block["bits"], "block_size": BLOCK}
        if level:
            attrs["accuracy_level"] = level
        out = node.output[0]
        offsets = block.get("offsets")
        new = [helper.make_node("MatMulNBits", [node.input[0]] + [i.name for i in inits],
                                [out if offsets is None else f"{out}_blocks"], name=f"{node.name}_Q{block['bits']}",
                                domain="com.microsoft", **attrs)]
        if offsets is not None:
            names = {i.name for i in proto.graph.initializer}
            ones = f"gguf_block_sums_{k}"
            if ones not in names:   # [K, K/32]: sums each block of 32 inputs (shared by every node of this K)
                proto.graph.initializer.append(numpy_helper.from_array(
                    np.kron(np.eye(k // BLOCK, dtype=np.float32), np.ones((BLOCK, 1), dtype=np.float32)), ones))
            sums = f"{node.input[0]}_gguf_block_sums"
            if not any(sums in x.output for x in proto.graph.node):   # once per input (gate and up share it)
                new.insert(0, helper.make_node("MatMul", [node.input[0], ones], [sums], name=f"{sums}/MatMul"))
            table = numpy_helper.from_array(np.ascontiguousarray(offsets.reshape(n, -1).T), f"{base}_gguf_offsets")
            proto.graph.initializer.append(table)
            new += [helper.make_node("MatMul", [sums, table.name], [f"{out}_offsets"], name=f"{node.name}_offsets"),
                    helper.make_node("Add", [f"{out}_blocks", f"{out}_offsets"], [out], name=f"{node.name}_add")]
        index = list(proto.graph.node).index(node)
        proto.graph.node.remove(node)
        for offset, made in enumerate(new):
            proto.graph.node.insert(index + offset, made)

    @staticmethod
    def _table(proto, rows: GGUFRows, tied, head: str | None, found, notes: list[str]) -> str:
        """The embedding table: tied ones read the LM head's blocks, separate Q4_0/Q8_0 ones become
        GatherBlockQuantized; what stays float is said."""
        import numpy as np
        from onnx import helper, numpy_helper

        if tied is not None and head is not None:
            carried = [n for n in proto.graph.node if n.name in (f"{head}_Q8", f"{head}_Q4")]
            hidden = next((int(a.i) for n in carried for a in n.attribute if a.name == "K"), 0)
            why = share_tied_table(proto, tied.name, head, hidden) if hidden else "the LM head was not carried"
            notes.append(f"tied embedding table: {why}" if why else "tied embedding table reads the LM head's blocks")
            return "float" if why else "shared"
        inits = {i.name: i for i in proto.graph.initializer}
        for name in found["tables"]:
            gather = next(n for n in proto.graph.node if n.name == name)
            table = numpy_helper.to_array(inits[gather.input[0]]).astype(np.float32)
            got = match_rows(rows, table)
            if isinstance(got, str) or got.qtype == "Q4_1":   # GatherBlockQuantized: integer zero points only
                why = got if isinstance(got, str) else "Q4_1: GatherBlockQuantized takes integer zero points"
                notes.append(f"embedding table {name} stays float ({why})")
                return "float"
            block = to_nbits(got)
            data = numpy_helper.from_array(block["packed"].reshape(table.shape[0], -1), f"{gather.input[0]}_gguf")
            scales = numpy_helper.from_array(block["scales"].reshape(table.shape[0], -1), f"{gather.input[0]}_scales")
            proto.graph.initializer.extend([data, scales])
            new = helper.make_node("GatherBlockQuantized", [data.name, gather.input[1], scales.name],
                                   list(gather.output), name=f"{name}/GatherBlockQuantized", domain="com.microsoft",
                                   bits=block["bits"], block_size=BLOCK, gather_axis=0, quantize_axis=1)
            index = list(proto.graph.node).index(gather)
            proto.graph.node.remove(gather)
            proto.graph.node.insert(index, new)
            notes.append(f"embedding table {name}: {got.qtype} blocks (GatherBlockQuantized)")
            return "carried"
        return "none"


@hookimpl
def register_quantizers():
    return [
        QuantizerSpec(
            name="gguf",
            exclude_option=None,
            description="A quantized GGUF's Q4_0/Q4_1/Q8_0 blocks written into MatMulNBits as they are (no second "
                        "rounding), for a model loaded from that file: --option gguf=FILE.",
            factory=GGUFQuantizer,
            requires=("onnxruntime", "onnx", "gguf"),
            install="onnxlite[cpu,gguf]",
            applies_to=("decoder",),
            needs_calibration=False,
            options=(
                Option("gguf", str, "", "The GGUF file the model was loaded from (its blocks are carried)."),
                Option("accuracy_level", int, 4, "Compute type: 0 unset (float), 4 int8 activations (llama.cpp's "
                                                 "way)."),
                Option("q4_1", str, "split", "Q4_1 blocks as symmetric blocks plus a float offset per block "
                                             "(split: fast) or as float zero points (zero_point: onnxruntime's "
                                             "slow float path).", choices=("split", "zero_point")),
            ),
            output_format="int4",
            skip_reason=lambda model: "needs the GGUF file the model was loaded from: name it with "
                                      "--strategies gguf and --option gguf=FILE",
        )
    ]
