"""Built-in strategy ``fp16``: float32 weights and compute converted to float16.

Uses onnxruntime's own converter (``onnxruntime.transformers.float16``), keeping
float32 inputs/outputs by default so callers need not change, and leaving ops
that lose too much in half precision (onnxruntime's default block list plus
any you add) in float32 behind Cast nodes.

Honest expectations: the file halves, but the speed-up is a GPU thing (tensor
cores, CUDA/TensorRT/DirectML providers).  On the CPU provider most kernels
have no float16 implementation, so onnxruntime computes in float32 between
inserted casts and the model is often *slower* than fp32.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from onnxlite import Option, QuantizeOutcome, QuantizerSpec, hookimpl

from .common import expand_node_patterns


class Fp16Converter:
    def quantize(self, model: Path, output: Path, options: Mapping[str, Any], context) -> QuantizeOutcome:
        import onnx
        from onnxruntime.transformers.float16 import DEFAULT_OP_BLOCK_LIST, convert_float_to_float16

        from onnxlite.modelio import load_external_data, uses_external_data
        from onnxlite.runtime import quiet_root_logging

        proto = onnx.load(str(model), load_external_data=False)
        external = uses_external_data(proto)
        keep = expand_node_patterns((n.name for n in proto.graph.node), options["exclude"])
        block_ops = sorted(set(DEFAULT_OP_BLOCK_LIST) | set(options["op_block_list"]))
        casts_before = sum(1 for n in proto.graph.node if n.op_type == "Cast")
        load_external_data(proto, model)
        before = sum(1 for t in proto.graph.initializer if t.data_type == onnx.TensorProto.FLOAT)
        with quiet_root_logging():
            converted = convert_float_to_float16(proto, keep_io_types=bool(options["keep_io_types"]),
                                                 op_block_list=block_ops, node_block_list=keep or None)
        after = sum(1 for t in converted.graph.initializer if t.data_type == onnx.TensorProto.FLOAT16)
        onnx.save_model(converted, str(output), save_as_external_data=external, all_tensors_to_one_file=True,
                        location=f"{output.name}.data")
        if after == 0:
            context.warn("no float32 initializer was converted: the model has no float weights outside the blocked ops")
        casts = sum(1 for n in converted.graph.node if n.op_type == "Cast") - casts_before
        notes = [f"{after} of {before} float32 initializers now float16; {max(casts, 0)} Cast nodes added",
                 "inputs/outputs stay float32" if options["keep_io_types"] else "inputs/outputs are float16 now",
                 "fp16 mainly pays off on GPU providers; on CPU expect the same speed or slower"]
        return QuantizeOutcome(excluded_nodes=keep, notes=notes,
                               details={"fp16_initializers": after, "added_casts": max(casts, 0),
                                        "blocked_op_types": len(block_ops)})


@hookimpl
def register_quantizers():
    return [
        QuantizerSpec(
            name="fp16",
            exclude_option="exclude",
            description="Convert float32 weights and compute to float16 (half the size). "
                        "Pays off on GPUs; on CPU it is usually no faster.",
            factory=Fp16Converter,
            requires=("onnxruntime", "onnx"),
            install="onnxlite[cpu]",
            applies_to=("any",),
            needs_calibration=False,
            gpu_only_gain=True,
            output_format="fp16",
            options=(
                Option("keep_io_types", bool, True, "Keep float32 model inputs and outputs (Casts at the edges)."),
                Option("op_block_list", str, (), "More op types to keep in float32, on top of onnxruntime's "
                                                 "default block list.", multiple=True),
                Option("exclude", str, (), "Node names or glob patterns to keep in float32.", multiple=True),
            ),
            grid=({},),
        )
    ]
