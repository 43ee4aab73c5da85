"""tf2onnx's side: importing TensorFlow quietly, converting a ``tf.function``, and what a conversion
left unsupported or unnamed."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from contextlib import contextmanager
from typing import Any

from onnxlite import OnnxliteError


def import_tf():
    # Set before the first import only (setdefault keeps the user's choice).
    # TF_CPP_MIN_LOG_LEVEL alone no longer hides the oneDNN banner, which TF
    # prints before its logging is set up; turning oneDNN's custom kernels off
    # also makes TF a steadier fp32 reference, and TF only serves as that here.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    import tensorflow as tf

    tf.get_logger().setLevel(logging.ERROR)
    return tf



def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")



def convert_function(graph_fn: Any, n_inputs: int, opset: int) -> Any:
    """``tf2onnx.convert.from_function``, except that captured tensors stay constants.

    ``from_function`` makes every non-resource input of the concrete function
    an ONNX graph input, including tensors the function captured from Python
    (a module-level ``tf.constant``); those come after the real arguments, so
    we freeze with the first ``n_inputs`` only and convert the frozen graph.
    """
    import tensorflow as tf
    import tf2onnx
    from tf2onnx import tf_loader

    concrete = graph_fn.get_concrete_function()
    input_names = [t.name for t in concrete.inputs[:n_inputs]]
    if any(t.dtype == tf.dtypes.resource for t in concrete.inputs[:n_inputs]):
        raise OnnxliteError("tf2onnx: unexpected resource input among the model's inputs")
    output_names = [t.name for t in concrete.outputs if t.dtype != tf.dtypes.resource]
    renames = tf2onnx.convert.tensor_names_from_structed(concrete, input_names, output_names)
    with tf.device("/cpu:0"):
        frozen = tf_loader.from_function(concrete, input_names, output_names)
    model, _ = tf2onnx.convert.from_graph_def(frozen, name=concrete.name, input_names=input_names,
                                              output_names=output_names, opset=opset,
                                              tensors_to_rename=renames,
                                              custom_op_handlers=CUSTOM_OP_HANDLERS)
    return model


def _erfc(ctx: Any, node: Any, name: str, args: Any) -> None:
    """TF ``Erfc`` as ONNX ``1 - Erf(x)``.

    TensorFlow's exact GELU (Keras ``activation="gelu"``) became
    ``0.5 * x * erfc(-x / sqrt(2))``, and tf2onnx 1.17 has no mapping for
    ``Erfc`` (onnx/tensorflow-onnx#2347, the rewriter in #2463 is unmerged and
    needs opset 20).  ONNX has ``Erf`` since opset 9.  ``1 - erf`` loses the
    tiny tail ``erfc`` keeps for large arguments, but GELU multiplies that tail
    by ``0.5 * x`` next to the other branch, so the output moves by float32
    rounding only; the export check against TensorFlow says so on every export.
    """
    import numpy as np
    from tf2onnx import utils

    dtype = utils.map_onnx_to_numpy_type(ctx.get_dtype(node.output[0]))
    node.type = "Erf"
    one = ctx.make_const(utils.make_name(f"{name}_one"), np.array(1, dtype=dtype))
    # Consumers of the Erf node now read 1 - Erf(x).
    ctx.insert_new_node_on_output("Sub", node.output[0], name=utils.make_name(f"{name}_one_minus"),
                                  inputs=[one.output[0], node.output[0]])


#: tf2onnx's old-style handlers, ``{tf op: (function, args)}``, for ops it cannot convert itself.
CUSTOM_OP_HANDLERS: dict[str, tuple[Any, list[Any]]] = {"Erfc": (_erfc, [])}


@contextmanager
def captured_tf2onnx_log():
    """Collect tf2onnx's error log lines (unsupported ops, failed nodes) instead of printing them."""
    errors: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.levelno >= logging.ERROR:
                errors.append(record.getMessage().splitlines()[0])

    logger = logging.getLogger("tf2onnx")
    handler = Collect()
    saved = logger.propagate, logger.level
    logger.addHandler(handler)
    logger.propagate = False
    logger.setLevel(logging.ERROR)
    try:
        yield errors
    finally:
        logger.removeHandler(handler)
        logger.propagate, logger.level = saved[0], saved[1]


def raise_on_unsupported(model: Any, errors: Sequence[str], source: str, opset: int, max_opset: int) -> None:
    """tf2onnx continues past ops it cannot map and leaves them in the graph; refuse such a model."""
    import collections

    import onnx

    from onnxlite.subgraphs import iter_graphs

    left: collections.Counter = collections.Counter()
    for graph in iter_graphs(model.graph):
        for node in graph.node:
            if node.domain in ("", "ai.onnx") and not onnx.defs.has(node.op_type):
                left[node.op_type] += 1
    failed = [line for line in errors if line.startswith("Failed to convert node")]
    if not left and not failed:
        return
    parts = []
    if left:
        parts.append("unsupported TensorFlow ops " + ", ".join(f"{op} (x{n})" if n > 1 else op
                                                             for op, n in sorted(left.items())))
    if failed:
        parts.append(f"{len(failed)} node(s) failed to convert: {failed[0]}")
    other = f" another --opset (up to {max_opset})," if opset < max_opset else ""
    raise OnnxliteError(f"{source}: tf2onnx cannot convert {'; '.join(parts)} at opset {opset}; "
                        f"try{other} rewriting the model without them, or a framework plugin "
                        "with tf2onnx custom-op handlers")


def name_input_dims(model: Any, inputs: Sequence[Any]) -> None:
    """tf2onnx names unknown dims ``unk__N``; use the input specs' names (``batch``, ``dim1``)."""
    by_name = {spec.name: spec for spec in inputs}
    for value in model.graph.input:
        spec = by_name.get(value.name)
        if spec is None:
            continue
        dims = value.type.tensor_type.shape.dim
        if len(dims) != len(spec.shape):
            continue
        for dim, want in zip(dims, spec.shape):
            if isinstance(want, str):
                dim.ClearField("dim_value")
                dim.dim_param = want


def name_output_dims(model: Any) -> None:
    """Replace tf2onnx's ``unk__N`` output dims with what ONNX shape inference derives from the inputs.

    The input dims carry the spec names by now, so inference usually finds
    ``batch`` for the outputs' first axis; any dim it cannot tell stays as it was.
    """
    import onnx

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    # Stale tf2onnx shapes would win over the inferred ones.
    del probe.graph.value_info[:]
    for value in probe.graph.output:
        for dim in value.type.tensor_type.shape.dim:
            if dim.dim_param.startswith("unk__"):
                dim.ClearField("dim_param")
    try:
        inferred = onnx.shape_inference.infer_shapes(probe)
    except Exception:  # noqa: BLE001 - names are cosmetic; the model itself is unchanged
        return
    found = {value.name: value for value in inferred.graph.output}
    for value in model.graph.output:
        better = found.get(value.name)
        if better is None:
            continue
        dims, new = value.type.tensor_type.shape.dim, better.type.tensor_type.shape.dim
        if len(dims) != len(new):
            continue
        for dim, other in zip(dims, new):
            if dim.dim_param.startswith("unk__") and (other.dim_param or other.dim_value > 0):
                if other.dim_param:
                    dim.dim_param = other.dim_param
                else:
                    dim.ClearField("dim_param")
                    dim.dim_value = other.dim_value
