"""Built-in strategy ``int4``: weight-only 4-bit block quantization of MatMul weights (MatMulNBits).

onnxruntime's ``MatMulNBitsQuantizer`` replaces a MatMul whose second input
is a constant 2-D weight ``[K, N]`` by a ``MatMulNBits`` node holding 4-bit
weights in blocks of ``block_size`` along K, each block with its own scale
(and zero point unless symmetric).  Activations stay float, so there is no
calibration.  It is made for the large linear layers of LLM-style decoders;
small models shrink less and lose more.

What it cannot touch (and we say so instead of pretending): ``Gemm`` nodes
(what torch exports for ``nn.Linear`` on 2-D inputs), MatMuls whose weight is
an activation (attention scores), and weights with batch dimensions.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from onnxlite import Option, QuantizeOutcome, QuantizerSpec, UsageError, hookimpl

from .common import expand_node_patterns

LOGGER = "onnxruntime.quantization.matmul_nbits_quantizer"


def _weight_shapes(model) -> dict[str, list[int]]:
    return {init.name: list(init.dims) for init in model.graph.initializer}


def survey(model, block_size: int) -> dict[str, list[str]]:
    """MatMul/Gemm nodes by what int4 can do with them."""
    shapes = _weight_shapes(model)
    found: dict[str, list[str]] = {"eligible": [], "short_k": [], "no_const_weight": [], "batched": [], "gemm": []}
    for node in model.graph.node:
        if node.op_type == "Gemm":
            found["gemm"].append(node.name)
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


class Int4Quantizer:
    def quantize(self, model: Path, output: Path, options: Mapping[str, Any], context) -> QuantizeOutcome:
        import onnx
        from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

        from onnxlite.runtime import quiet_root_logging

        block = int(options["block_size"])
        if block < 16 or block & (block - 1):
            raise UsageError(f"--option block_size={block}: must be a power of two, 16 or more (e.g. 32, 64, 128)")
        level = int(options["accuracy_level"])
        if level not in (0, 1, 2, 3, 4):
            raise UsageError(f"--option accuracy_level={level}: expected 0 (unset) or 1-4 "
                             "(1 fp32, 2 fp16, 3 bf16, 4 int8 compute)")
        from onnxlite.modelio import load_external_data, uses_external_data

        proto = onnx.load(str(model), load_external_data=False)
        external = uses_external_data(proto)
        found = survey(proto, block)
        exclude = expand_node_patterns(found["eligible"], options["exclude"], what="MatMul node with a constant weight")
        if not [n for n in found["eligible"] if n not in exclude]:
            raise UsageError(f"{model}: nothing for int4 to quantize: {self.why_nothing(found)}")
        quantizer = MatMulNBitsQuantizer(load_external_data(proto, model), bits=4, block_size=block,
                                         is_symmetric=bool(options["symmetric"]),
                                         accuracy_level=level or None, nodes_to_exclude=exclude,
                                         op_types_to_quantize=("MatMul",))
        with quiet_root_logging(30, LOGGER):
            quantizer.process()
        quantizer.model.save_model_to_file(str(output), external)
        notes = [f"{'symmetric' if options['symmetric'] else 'asymmetric'} 4-bit blocks of {block} along K"
                 + (f", accuracy_level {level}" if level else "")]
        if found["short_k"]:
            notes.append(f"{len(found['short_k'])} MatMul(s) have K < block_size {block}; onnxruntime pads each "
                         "to a whole block, so they shrink less")
        skipped = {k: len(v) for k, v in found.items() if k in ("no_const_weight", "batched", "gemm") and v}
        if skipped:
            notes.append("left in float: " + self.why_nothing(found, only_skipped=True))
        return QuantizeOutcome(excluded_nodes=exclude, notes=notes,
                               details={"eligible_matmuls": len(found["eligible"]), "left_in_float": skipped})

    @staticmethod
    def why_nothing(found: dict[str, list[str]], only_skipped: bool = False) -> str:
        parts = []
        if found["gemm"]:
            parts.append(f"{len(found['gemm'])} Gemm node(s) (int4 covers MatMul only; torch exports nn.Linear "
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
    return None if found["eligible"] else "nothing to quantize: " + Int4Quantizer.why_nothing(found)


@hookimpl
def register_quantizers():
    return [
        QuantizerSpec(
            name="int4",
            description="Weight-only 4-bit blocks for MatMul weights (MatMulNBits), activations float. "
                        "For large LLM-style linear layers.",
            factory=Int4Quantizer,
            requires=("onnxruntime", "onnx"),
            install="onnxruntime",
            applies_to=("matmul", "transformer"),
            needs_calibration=False,
            options=(
                Option("block_size", int, 32, "Weights per block along K (power of two, >= 16); "
                                              "smaller blocks keep more accuracy, larger ones shrink more."),
                Option("symmetric", bool, True, "Symmetric blocks (no zero points)."),
                Option("accuracy_level", int, 0, "Compute type for the CPU kernel: 0 unset, 1 fp32, 2 fp16, "
                                                 "3 bf16, 4 int8 (fastest, least exact)."),
                Option("exclude", str, (), "MatMul node names or glob patterns to keep in float.", multiple=True),
            ),
            grid=({}, {"block_size": 128}, {"accuracy_level": 4}),
            skip_reason=skip_reason,
        )
    ]
