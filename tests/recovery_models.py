"""Small ONNX CNNs built with onnx.helper for the recovery tests (per-node, CLE, AdaRound)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper, save


def conv_chain(path: Path, layers: list[tuple[np.ndarray, np.ndarray, str | None, int]],
               head: np.ndarray | None = None, size: int = 8) -> Path:
    """Convs in a row (weight, bias, activation "Relu"/"Relu6"/None, group), then a global pool and a Gemm head.

    The input is ``x`` [N, C, size, size]; the output ``logits``.
    """
    nodes, inits = [], []
    prev = "x"
    for i, (w, b, act, group) in enumerate(layers, 1):
        inits += [numpy_helper.from_array(w.astype(np.float32), f"w{i}"),
                  numpy_helper.from_array(b.astype(np.float32), f"b{i}")]
        k = w.shape[-1]
        nodes.append(helper.make_node("Conv", [prev, f"w{i}", f"b{i}"], [f"c{i}"], name=f"conv{i}", group=group,
                                      pads=[k // 2] * 4))
        prev = f"c{i}"
        if act == "Relu":
            nodes.append(helper.make_node("Relu", [prev], [f"a{i}"], name=f"relu{i}"))
            prev = f"a{i}"
        elif act == "Relu6":
            inits += [numpy_helper.from_array(np.array(0, np.float32), f"lo{i}"),
                      numpy_helper.from_array(np.array(6, np.float32), f"hi{i}")]
            nodes.append(helper.make_node("Clip", [prev, f"lo{i}", f"hi{i}"], [f"a{i}"], name=f"clip{i}"))
            prev = f"a{i}"
    channels = layers[-1][0].shape[0]
    nodes += [helper.make_node("GlobalAveragePool", [prev], ["pooled"], name="pool"),
              helper.make_node("Flatten", ["pooled"], ["flat"], name="flatten")]
    if head is None:
        head = np.random.default_rng(1).normal(size=(10, channels))
    inits += [numpy_helper.from_array(head.astype(np.float32), "head_w"),
              numpy_helper.from_array(np.zeros(head.shape[0], np.float32), "head_b")]
    nodes.append(helper.make_node("Gemm", ["flat", "head_w", "head_b"], ["logits"], name="head", transB=1))
    inputs = layers[0][0].shape[1] * layers[0][3]
    graph = helper.make_graph(nodes, "chain",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", inputs, size, size])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", head.shape[0]])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    save(model, str(path))
    return path
