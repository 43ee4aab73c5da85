"""Built-in strategies ``weightonly``, ``gptq`` and ``int4``: onnxruntime's block-wise weight-only quantization.

onnxruntime's ``MatMulNBitsQuantizer`` replaces a MatMul whose second input is
a constant 2-D weight ``[K, N]`` by a ``MatMulNBits`` node holding 4- or 8-bit
weights in blocks of ``block_size`` along K, each block with its own scale
(and zero point unless symmetric).  Activations stay float; ``accuracy_level``
tells the CPU kernel what to compute in (4: int8, which quantizes the
activations per block at run time and is the fast path).  onnxlite only
composes onnxruntime's pieces:

* ``algorithm=rtn``: ``DefaultWeightOnlyQuantConfig`` (round to nearest, in C++);
* ``algorithm=hqq``: ``HQQWeightOnlyQuantConfig`` (half-quadratic fitting of
  scales and zero points, needs torch; 4 bits only, see below);
* ``algorithm=kquant``: ``KQuantWeightOnlyQuantConfig`` (llama.cpp-style k-quant search);
* strategy ``gptq``: onnxruntime's ``gptq_quantize`` with the calibration data
  (second-order error compensation; 4 bits only; see ``weightonly_gptq``).

Embedding tables (``Gather`` of a constant) are half of a BERT-style encoder's
bytes and MatMulNBits leaves them float.  ``gather=int4`` uses the same
quantizer's ``GatherBlockQuantized`` (onnxruntime 1.32 writes only 4-bit
tables); ``gather=int8`` runs ``quantize_dynamic`` on the Gathers alone
(int8 table, one ``DequantizeLinear`` after each lookup).

Measured on all-MiniLM-L6-v2 (see docs/quantize.md): 8 bits are near-lossless,
4 bits cost it about 0.03 of pooled cosine whatever the algorithm.  ``int4``
is the 4-bit preset kept under its old name.

What it cannot touch (said instead of pretending): ``Gemm`` nodes (what
torch exports for ``nn.Linear`` on 2-D inputs), MatMuls whose weight is an
activation (attention scores), and weights with batch dimensions.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from onnxlite import Option, QuantizeOutcome, QuantizerSpec, UsageError, hookimpl

from .common import CalibrationReader, expand_node_patterns, name_nodes
from .decoder import is_decoder, with_empty_past
from .weightonly_gptq import run_gptq
from .weightonly_plan import DECODER_GRID, GPTQ_DECODER_GRID, plan_bits, share_tied, with_plan

LOGGER = "onnxruntime.quantization.matmul_nbits_quantizer"
NC_LOGGER = "onnxruntime.quantization.neural_compressor.weight_only"
GATHER_CHOICES = ("float", "int8", "int4")
LM_HEAD_CHOICES = ("same", "float", "int8", "int4")


def _weight_shapes(model) -> dict[str, list[int]]:
    return {init.name: list(init.dims) for init in model.graph.initializer}


def survey(model, block_size: int) -> dict[str, list[str]]:
    """MatMul/Gemm/Gather nodes by what MatMulNBits (and its Gather quantizer) can do with them."""
    shapes = _weight_shapes(model)
    floats = {init.name for init in model.graph.initializer if init.data_type in (1, 10, 16)}
    found: dict[str, list[str]] = {"eligible": [], "short_k": [], "no_const_weight": [], "batched": [], "gemm": [],
                                   "tables": []}
    for node in model.graph.node:
        if node.op_type == "Gemm":
            found["gemm"].append(node.name)
        if node.op_type == "Gather" and node.input and node.input[0] in floats \
                and len(shapes[node.input[0]]) == 2:
            found["tables"].append(node.name)
        if node.op_type != "MatMul":
            continue
        dims = shapes.get(node.input[1]) if len(node.input) > 1 else None
        if dims is None:
            found["no_const_weight"].append(node.name)
        elif len(dims) < 2 or any(d != 1 for d in dims[:-2]):
            found["batched"].append(node.name)
        else:
            found["eligible"].append(node.name)
            if dims[-2] < block_size:
                found["short_k"].append(node.name)
    return found


def why_nothing(found: dict[str, list[str]], only_skipped: bool = False) -> str:
    parts = []
    if found["gemm"]:
        parts.append(f"{len(found['gemm'])} Gemm node(s) (MatMulNBits covers MatMul only; torch exports nn.Linear "
                     "on 2-D inputs as Gemm; try --strategy dynamic)")
    if found["no_const_weight"]:
        parts.append(f"{len(found['no_const_weight'])} MatMul(s) multiply two activations")
    if found["batched"]:
        parts.append(f"{len(found['batched'])} MatMul(s) with batched (N-D) weights")
    if not only_skipped and found["eligible"]:
        parts.append(f"all {len(found['eligible'])} eligible MatMul(s) excluded by --option exclude")
    return "; ".join(parts) or "the model has no MatMul with a constant weight"


def skip_reason(model) -> str | None:
    found = survey(model, 32)
    return None if found["eligible"] else "nothing to quantize: " + why_nothing(found)


def gptq_skip_reason(model) -> str | None:
    """GPTQ is opt-in for a search: it runs the model once per MatMul over the calibration data
    (24 s for 16 sentences on MiniLM, 2 loaded cores) and its 4 bits lost 0.02 of MiniLM's cosine."""
    return skip_reason(model) or ("slow (runs the model once per MatMul on the calibration data) and 4-bit only: "
                                  "name it in --strategies to try it")


def _check_block(name: str, block: int) -> None:
    if block < 16 or block & (block - 1):
        raise UsageError(f"--option {name}={block}: must be a power of two, 16 or more (e.g. 32, 64, 128)")


def _settings(options: Mapping[str, Any], algorithm: str, bits: int) -> dict[str, Any]:
    """The options checked against what onnxruntime 1.32 can build and run on the CPU."""
    if bits not in (4, 8):
        raise UsageError(f"--option bits={bits}: expected 4 or 8 (MatMulNBits' CPU kernel runs 4- and 8-bit weights)")
    _check_block("block_size", int(options["block_size"]))
    _check_block("gather_block_size", int(options.get("gather_block_size", 32)))
    level = int(options["accuracy_level"])
    if level not in (0, 1, 2, 3, 4):
        raise UsageError(f"--option accuracy_level={level}: expected 0 (unset) or 1-4 "
                         "(1 fp32, 2 fp16, 3 bf16, 4 int8 compute)")
    if algorithm == "hqq" and bits != 4:
        raise UsageError("--option bits=8 with algorithm=hqq: HQQ stores float zero points and onnxruntime's CPU "
                         "MatMulNBits refuses 8-bit weights with float zero points; use algorithm=rtn or kquant")
    if algorithm == "gptq" and bits != 4:
        raise UsageError("--option bits=8 with gptq: onnxruntime 1.32's GPTQ writes MatMulNBits only for 4 bits "
                         "(8 bits would stay float and shrink nothing); use --strategy weightonly for 8 bits")
    if algorithm == "hqq" and importlib.util.find_spec("torch") is None:
        raise UsageError("--option algorithm=hqq needs torch (onnxruntime's HQQ runs on it): pip install "
                         "'onnxlite[torch]'")
    return {"bits": bits, "block_size": int(options["block_size"]), "accuracy_level": level,
            "symmetric": bool(options["symmetric"]), "gather": options.get("gather", "float"),
            "gather_block_size": int(options.get("gather_block_size", 32)),
            "lm_head": options.get("lm_head", "same"), "keep8": tuple(options.get("keep8", ())),
            "sensitive8": int(options.get("sensitive8", 0)),
            "sensitive8_share": float(options.get("sensitive8_share", 0.0))}


def _algo_config(algorithm: str, s: dict[str, Any], eligible: list[str]):
    from onnxruntime.quantization import matmul_nbits_quantizer as mq

    matmul = ("MatMul",)
    if algorithm == "rtn":
        return mq.DefaultWeightOnlyQuantConfig(block_size=s["block_size"], is_symmetric=s["symmetric"],
                                               accuracy_level=s["accuracy_level"] or None, bits=s["bits"],
                                               op_types_to_quantize=matmul)
    if algorithm == "hqq":
        return mq.HQQWeightOnlyQuantConfig(block_size=s["block_size"], bits=s["bits"], op_types_to_quantize=matmul)
    # The k-quant path takes its bits per node from this table (its template says 4).
    return mq.KQuantWeightOnlyQuantConfig(op_types_to_quantize=matmul,
                                          customized_weight_config={n: {"bits": s["bits"]} for n in eligible})


def _run_nbits(proto, config, s: dict[str, Any], exclude: list[str]):
    """One ``MatMulNBitsQuantizer`` pass, without onnxruntime's INFO lines and k-quant progress bars
    (they print to stdout, which belongs to onnxlite's own output)."""
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    from onnxlite.runtime import quiet_root_logging

    quantizer = MatMulNBitsQuantizer(proto, bits=s["bits"], block_size=s["block_size"], is_symmetric=s["symmetric"],
                                     accuracy_level=s["accuracy_level"] or None, nodes_to_exclude=exclude,
                                     algo_config=config)
    # ERROR, not WARNING: int4 tables make it warn that it raises the opset to 21; the notes say so instead.
    with quiet_root_logging(40, LOGGER, NC_LOGGER), contextlib.redirect_stdout(io.StringIO()):
        quantizer.process()
    return quantizer.model.model


def _gather_int8(model: Path, named, work: Path, exclude: list[str], external: bool):
    """The constant-table Gathers through ``quantize_dynamic`` alone: int8 tables, lookups dequantized after.

    ``named``: the model with the names :func:`.common.name_nodes` gave, written for ``quantize_dynamic``
    to read (``exclude`` names them); ``None`` when the file at ``model`` has them all already.
    """
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.quantization.onnx_model import ONNXModel

    from onnxlite.runtime import quiet_root_logging

    staged = work / "gather-int8.onnx"
    if named is not None:
        model = work / "named.onnx"
        ONNXModel(named).save_model_to_file(str(model), external)
    with quiet_root_logging():
        quantize_dynamic(str(model), str(staged), op_types_to_quantize=["Gather"], weight_type=QuantType.QInt8,
                         nodes_to_exclude=exclude, use_external_data_format=external)
    return onnx.load(str(staged))


class WeightOnlyQuantizer:
    """``weightonly`` (and its presets): ``algorithm`` and ``bits`` come from the options unless fixed."""

    def __init__(self, name: str = "weightonly", algorithm: str | None = None, bits: int | None = None) -> None:
        self.name, self.algorithm, self.bits = name, algorithm, bits

    def quantize(self, model: Path, output: Path, options: Mapping[str, Any], context) -> QuantizeOutcome:
        import onnx

        from onnxlite.modelio import load_external_data, quantized_ops, uses_external_data

        algorithm = self.algorithm or str(options["algorithm"])
        s = _settings(options, algorithm, self.bits or int(options["bits"]))
        proto = onnx.load(str(model), load_external_data=False)
        external = uses_external_data(proto)
        renamed = name_nodes(proto)   # before anything goes by name: the survey, exclusions, onnxruntime's tables
        found = survey(proto, s["block_size"])
        tables = found["tables"] if s["gather"] != "float" else []
        what = "MatMul node with a constant weight" + (" or Gather of a constant table" if tables else "")
        exclude = expand_node_patterns(found["eligible"] + tables, options["exclude"], what=what)
        matmuls = [n for n in found["eligible"] if n not in exclude]
        gathers = [n for n in tables if n not in exclude]
        if not matmuls and not gathers:
            raise UsageError(f"{model}: nothing for {self.name} to quantize: {why_nothing(found)}")
        proto = load_external_data(proto, model)
        plan = plan_bits(proto, model, s, algorithm, matmuls)
        calibration = self._calibration(proto, options, context) if algorithm == "gptq" else None

        if gathers and s["gather"] == "int8":
            # the host always gives a scratch folder
            work = Path(context.workdir) if context.workdir else output.parent
            proto = _gather_int8(model, proto if renamed else None, work, [n for n in exclude if n in tables],
                                 external)
        if gathers and s["gather"] == "int4":
            from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig

            table = dict(s, bits=4, block_size=s["gather_block_size"], accuracy_level=0)
            proto = _run_nbits(proto, DefaultWeightOnlyQuantConfig(
                block_size=table["block_size"], is_symmetric=s["symmetric"], bits=4, op_types_to_quantize=("Gather",)),
                table, [n for n in exclude if n in tables])
        for bits in (s["bits"], 12 - s["bits"]):
            chosen = [n for n in matmuls if plan.get(n) == bits]
            if chosen:
                how = algorithm if bits == 4 or algorithm in ("rtn", "kquant") else "rtn"   # hqq, gptq: 4 bits
                step = dict(s, bits=bits)
                if how == "gptq" and calibration is not None:
                    proto = run_gptq(proto, step, chosen, calibration)
                else:
                    proto = _run_nbits(proto, _algo_config(how, step, chosen), step,
                                       [n for n in found["eligible"] if n not in chosen])
        shared = share_tied(proto, s, plan)
        if algorithm == "hqq":
            s["accuracy_level"] = 0   # onnxruntime's HQQ writes none: its float zero points run in float
        from onnxruntime.quantization.onnx_model import ONNXModel

        ONNXModel(proto).save_model_to_file(str(output), external)
        kept = [n for n in matmuls if plan.get(n) is None]
        outcome = self._outcome(proto, quantized_ops(proto), found, s, algorithm, exclude + kept,
                                [n for n in matmuls if n not in kept], gathers,
                                calibration, int(options["accuracy_level"]))
        return with_plan(outcome, s, plan, shared)

    def _calibration(self, proto, options: Mapping[str, Any], context) -> list[dict]:
        from itertools import islice

        if context.calibration is None:
            raise UsageError(f"--strategy {self.name} needs calibration data: --calibration PATH")
        limit = max(0, int(options["calibration_samples"]))
        names = [i.name for i in proto.graph.input]
        decoder = is_decoder(proto)
        # A list, not the Dataset: GPTQ deep-copies its reader and reads it once per pass.
        feeds = list(islice(CalibrationReader(context.calibration, 1, limit, names=None if decoder else names),
                            limit or None))
        if decoder:    # token windows: the cache starts empty, as in a prompt's first pass
            feeds = with_empty_past(proto, feeds)
        if not feeds:
            raise UsageError(f"{self.name}: the calibration data has no samples")
        return feeds

    def _outcome(self, proto, ops: dict[str, int], found, s, algorithm, exclude, matmuls, gathers, calibration,
                 asked_level: int) -> QuantizeOutcome:
        levels = sorted({a.i for n in proto.graph.node if n.op_type == "MatMulNBits"
                         for a in n.attribute if a.name == "accuracy_level"})
        done = ops.get("MatMulNBits", 0)
        scheme = ("asymmetric" if algorithm in ("hqq", "kquant") or not s["symmetric"] else "symmetric")
        notes = [f"{algorithm} {scheme} {s['bits']}-bit blocks of {s['block_size']} along K on {done} MatMul(s)"
                 + (f", accuracy_level {s['accuracy_level']}" if s["accuracy_level"] else "")]
        if algorithm == "hqq" and asked_level:
            notes.append(f"accuracy_level {asked_level} not applied: onnxruntime's HQQ writes float zero points, "
                         "which the CPU kernel computes in float")
        if algorithm in ("hqq", "kquant") and s["symmetric"]:
            notes.append(f"{algorithm} always fits zero points: symmetric=true has no effect")
        if done < len(matmuls):
            notes.append(f"onnxruntime quantized {done} of the {len(matmuls)} MatMul(s) it was given")
        if gathers:
            how = ("int8 (quantize_dynamic, DequantizeLinear after each lookup)" if s["gather"] == "int8"
                   else f"int4 blocks of {s['gather_block_size']} (GatherBlockQuantized; onnxruntime raises the "
                        "opset to 21 and the IR version to 10 for int4 tensors)")
            notes.append(f"{len(gathers)} embedding table(s) {how}")
        if found["short_k"]:
            notes.append(f"{len(found['short_k'])} MatMul(s) have K < block_size {s['block_size']}; onnxruntime pads "
                         "each to a whole block, so they shrink less")
        skipped = {k: len(v) for k, v in found.items() if k in ("no_const_weight", "batched", "gemm") and v}
        if skipped:
            notes.append("left in float: " + why_nothing(found, only_skipped=True))
        details: dict[str, Any] = {
            "algorithm": algorithm, "bits": s["bits"], "block_size": s["block_size"],
            "symmetric": scheme == "symmetric",
            "accuracy_level": levels[0] if len(levels) == 1 else (levels or 0),
            "gather": s["gather"] if gathers else "float",
            "eligible_matmuls": len(found["eligible"]), "quantized_matmuls": done,
            "quantized_tables": len(gathers), "left_in_float": skipped}
        if calibration is not None:
            details["calibration_samples"] = len(calibration)
        return QuantizeOutcome(excluded_nodes=exclude, notes=notes, details=details)


def _options(bits: int | None, block: int, symmetric: bool, level: int,
             algorithms: tuple[str, ...]) -> tuple[Option, ...]:
    found: list[Option] = []
    if bits is None:
        found.append(Option("bits", int, 8, "Weight bits per value: 8 (near-lossless) or 4 (half the bytes, "
                                            "less exact)."))
    found += [
        Option("block_size", int, block, "Weights per block along K (power of two, >= 16); smaller blocks keep "
                                         "more accuracy, larger ones shrink more."),
        Option("symmetric", bool, symmetric, "Symmetric blocks (no zero points; rtn and gptq only)."),
        Option("accuracy_level", int, level, "Compute type for the CPU kernel: 0 unset, 1 fp32, 2 fp16, 3 bf16, "
                                             "4 int8 (fastest, least exact)."),
    ]
    if len(algorithms) > 1:
        found.append(Option("algorithm", str, algorithms[0], "How the weights are rounded: rtn (round to nearest), "
                                                              "hqq (needs torch, 4 bits) or kquant.",
                            choices=algorithms))
    if "gptq" in algorithms:
        found.append(Option("calibration_samples", int, 32, "Calibration samples GPTQ runs the model on (0: all)."))
    found += [
        Option("gather", str, "float", "Embedding tables (Gather of a constant): float, int8 (quantize_dynamic) "
                                       "or int4 (GatherBlockQuantized).", choices=GATHER_CHOICES),
        Option("gather_block_size", int, 32, "Values per block of an int4 embedding table."),
        Option("lm_head", str, "same", "The LM head (the MatMul writing the logits): same (as the others), float, "
                                       "int8 or int4 (MatMulNBits).", choices=LM_HEAD_CHOICES),
        Option("keep8", str, (), "With bits=4: MatMul names or glob patterns quantized at 8 bits instead.",
               multiple=True),
        Option("sensitive8", int, 0, "With bits=4: this many MatMuls with the largest 4-bit weight error go to "
                                     "8 bits (mixed precision per layer)."),
        Option("sensitive8_share", float, 0.0, "With bits=4: this share of the MatMuls (those with the largest 4-bit "
                                               "weight error) go to 8 bits; the larger of it and sensitive8 counts."),
        Option("exclude", str, (), "MatMul (or, with gather, Gather) node names or glob patterns to keep in float.",
               multiple=True),
    ]
    return tuple(found)


@hookimpl
def register_quantizers():
    common: dict[str, Any] = {"requires": ("onnxruntime", "onnx"), "install": "onnxlite[cpu]",
                              "applies_to": ("matmul", "transformer"),
                              "skip_reason": skip_reason}
    return [
        QuantizerSpec(
            name="weightonly",
            exclude_option="exclude",
            description="Weight-only 8- or 4-bit blocks for MatMul weights (MatMulNBits; rtn, hqq or kquant), "
                        "optionally int8/int4 embedding tables; activations float, no calibration.",
            factory=WeightOnlyQuantizer,
            needs_calibration=False,
            options=_options(None, 128, False, 4, ("rtn", "hqq", "kquant")),
            # 8 bits is where a small encoder keeps its answers; 4 bits (the int4 preset's grid) is for big
            # decoders.  The last entry is the lightest scheme: 4-bit MatMuls and 4-bit tables.
            grid=({}, {"gather": "int8"}, {"gather": "int4"}, {"bits": 4, "block_size": 32, "gather": "int4"}),
            family_grids={"decoder": DECODER_GRID},
            **common,
        ),
        QuantizerSpec(
            name="gptq",
            exclude_option="exclude",
            description="Weight-only 4-bit MatMulNBits blocks rounded by GPTQ on calibration data "
                        "(second-order error compensation); activations float.",
            factory=lambda: WeightOnlyQuantizer("gptq", algorithm="gptq", bits=4),
            needs_calibration=True,
            options=_options(4, 32, False, 4, ("gptq",)),
            grid=({},),
            family_grids={"decoder": GPTQ_DECODER_GRID},
            **(common | {"skip_reason": gptq_skip_reason}),
        ),
        QuantizerSpec(
            name="int4",
            exclude_option="exclude",
            description="Weight-only 4-bit blocks for MatMul weights (MatMulNBits), activations float. "
                        "For large LLM-style linear layers; the 4-bit preset of weightonly.",
            factory=lambda: WeightOnlyQuantizer("int4", bits=4),
            needs_calibration=False,
            options=_options(4, 32, True, 0, ("rtn", "hqq", "kquant")),
            grid=({}, {"block_size": 128}, {"accuracy_level": 4}),
            # weightonly's decoder grid holds these points (and more): on a decoder they would only repeat them
            avoid=("decoder",),
            **common,
        ),
    ]
