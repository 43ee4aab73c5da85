"""One walk over a model's nested graphs (onnxlite.subgraphs) and the readers built on it: a Loop inside an
If, each branch holding what the readers count: pure, fast unit tests."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxlite.normalize import count_constant_tensors
from onnxlite.runtime_compat import runtime_needs
from onnxlite.subgraphs import iter_graphs

pytestmark = pytest.mark.unit


def _const(name: str, value: float) -> object:
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.array([value], np.float32)))


def nested_model():
    """main: If(cond) -> then: Loop whose body has a Constant and a contrib op; else: an initializer."""
    body = helper.make_graph(
        [_const("k", 2.0), helper.make_node("Mul", ["v_in", "k"], ["v_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("FastGelu", ["v_out"], ["g"], domain="com.microsoft")],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_in", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_out", TensorProto.FLOAT, [1])])
    then = helper.make_graph(
        [helper.make_node("Loop", ["trip", "", "x"], ["looped"], body=body)], "then", [],
        [helper.make_tensor_value_info("looped", TensorProto.FLOAT, [1])],
        [numpy_helper.from_array(np.array(3, np.int64), "trip")])
    other = helper.make_graph(
        [helper.make_node("Add", ["x", "bias"], ["added"])], "else", [],
        [helper.make_tensor_value_info("added", TensorProto.FLOAT, [1])],
        [numpy_helper.from_array(np.ones(1, np.float16).astype(np.float32), "bias")])
    main = helper.make_graph(
        [_const("c", 1.0), helper.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=other)], "main",
        [helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    return helper.make_model(main, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])


def test_every_graph_is_walked_once_depth_first():
    # attributes in the node's order (helper.make_node sorts them by name: else_branch, then_branch), and the
    # Loop's body right after the branch that holds it
    assert [g.name for g in iter_graphs(nested_model().graph)] == ["main", "else", "then", "body"]


def test_a_flat_graph_is_its_only_graph():
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "flat",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    assert [g.name for g in iter_graphs(graph)] == ["flat"]


def test_constants_are_counted_in_nested_graphs_too():
    # one Constant in the main graph, one in the Loop's body two levels down
    assert count_constant_tensors(nested_model()) == 2


def test_a_contrib_op_inside_a_loop_body_raises_the_runtime_floor():
    needs = runtime_needs(nested_model())
    assert needs.contrib_ops == ("FastGelu",)
