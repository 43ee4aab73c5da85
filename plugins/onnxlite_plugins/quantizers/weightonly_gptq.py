"""GPTQ through onnxruntime's own ``gptq_quantize``, with the nodes it must leave alone named to it.

``MatMulNBitsQuantizer`` hands its GPTQ pass the weight table of every MatMul
with a constant weight and drops ``nodes_to_exclude`` on that path (only its
RTN pass reads it), so an excluded or 8-bit MatMul came out 4-bit GPTQ all the
same.  ``gptq_quantize`` skips exactly the nodes its table marks ``"fp32"``,
and finds nodes by name: every node must have a name of its own first
(:func:`.common.name_nodes`).
"""

from __future__ import annotations

import contextlib
import io
from typing import Any

NC_LOGGER = "onnxruntime.quantization.neural_compressor.weight_only"


def run_gptq(proto, s: dict[str, Any], chosen: list[str], calibration: list[dict]):
    """4-bit GPTQ on the MatMuls named in ``chosen``, every other MatMul left as it is; returns the new proto."""
    from onnxruntime.quantization.matmul_nbits_quantizer import GPTQWeightOnlyQuantConfig
    from onnxruntime.quantization.neural_compressor import gptq_quantize

    from onnxlite.runtime import quiet_root_logging

    defaults = GPTQWeightOnlyQuantConfig(calibration_data_reader=None)
    picked = set(chosen)
    config: dict[str, Any] = {
        node.name: ({"bits": 4, "group_size": s["block_size"], "scheme": "sym" if s["symmetric"] else "asym"}
                    if node.name in picked else "fp32")
        for node in proto.graph.node if node.op_type == "MatMul"}
    # it prints a progress bar to stdout, which belongs to onnxlite's own output
    with quiet_root_logging(40, NC_LOGGER), contextlib.redirect_stdout(io.StringIO()):
        quantized = gptq_quantize(model=proto, dataloader=((feed, None) for feed in calibration),
                                  weight_config=config, num_bits=4, group_size=s["block_size"],
                                  scheme="sym" if s["symmetric"] else "asym", n_samples=-1,
                                  percdamp=defaults.percdamp, blocksize=defaults.block_size,
                                  actorder=defaults.actorder, mse=defaults.mse, perchannel=defaults.perchannel,
                                  accuracy_level=s["accuracy_level"])
    return quantized.model
