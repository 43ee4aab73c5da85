"""The mixed-precision planner (onnxlite.search.mixed_plan) on sensitivities written here: pure, fast unit tests."""

from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxlite.search.mixed_plan import (
    BYTES_PER_WEIGHT,
    LIGHTEST_FIRST,
    assignment_options,
    plan,
    promote,
    weighted_nodes,
)

pytestmark = pytest.mark.unit

WEIGHTS = {"a": 1000, "b": 1000, "c": 4000}


def test_schemes_run_from_the_lightest_to_float():
    # block8 and int8 store about a byte a weight each (block8 has finer scales): the order between them
    # is by accuracy, so only the ends are fixed by size
    sizes = {s: BYTES_PER_WEIGHT[s] for s in LIGHTEST_FIRST}
    assert LIGHTEST_FIRST[0] == min(sizes, key=sizes.get) and LIGHTEST_FIRST[-1] == "float" == max(sizes, key=sizes.get)


def test_every_node_takes_its_lightest_scheme_when_the_sum_fits():
    sensitivity = {n: {"block4": 0.001, "block8": 0.0005, "int8": 0.0004, "fp16": 0.0} for n in WEIGHTS}
    chosen = plan(sensitivity, WEIGHTS, 0.01, LIGHTEST_FIRST, BYTES_PER_WEIGHT)
    assert chosen == {"a": "block4", "b": "block4", "c": "block4"}


def test_a_node_whose_every_scheme_is_over_budget_stays_float():
    sensitivity = {"a": {"block4": 0.5, "block8": 0.2, "int8": 0.1, "fp16": 0.05}, "b": {"block4": 0.0}}
    chosen = plan(sensitivity, WEIGHTS, 0.01, LIGHTEST_FIRST, BYTES_PER_WEIGHT)
    assert chosen["a"] == "float" and chosen["b"] == "block4"


@pytest.mark.parametrize("bad", [math.nan, math.inf, None])
def test_a_missing_or_non_finite_drop_counts_as_unusable(bad):
    sensitivity = {"a": {"block4": bad, "int8": 0.001}}
    if bad is None:
        sensitivity = {"a": {"int8": 0.001}}
    assert plan(sensitivity, WEIGHTS, 0.01, LIGHTEST_FIRST, BYTES_PER_WEIGHT)["a"] == "int8"


def test_over_the_margin_the_change_with_most_drop_saved_per_byte_is_made():
    # each fits alone (0.006 <= 0.01) but together they are over 0.7 * 0.01; moving the small node b
    # to int8 saves as much drop as moving c, for a quarter of the bytes
    sensitivity = {"b": {"block4": 0.006, "int8": 0.0}, "c": {"block4": 0.006, "int8": 0.0}}
    chosen = plan(sensitivity, {"b": 1000, "c": 4000}, 0.01, LIGHTEST_FIRST, BYTES_PER_WEIGHT)
    assert chosen == {"b": "int8", "c": "block4"}
    total = sum(sensitivity[n][s] for n, s in chosen.items())
    assert total <= 0.7 * 0.01


def test_the_planned_total_respects_the_margin_given():
    sensitivity = {n: {"block4": 0.004, "block8": 0.002, "int8": 0.001, "fp16": 0.0} for n in WEIGHTS}
    for margin in (1.0, 0.5, 0.1):
        chosen = plan(sensitivity, WEIGHTS, 0.01, LIGHTEST_FIRST, BYTES_PER_WEIGHT, margin=margin)
        assert sum(sensitivity[n].get(s, 0.0) for n, s in chosen.items() if s != "float") <= margin * 0.01


def test_promote_moves_the_node_with_the_largest_measured_drop():
    sensitivity = {"a": {"block4": 0.001}, "b": {"int8": 0.003}, "c": {"block4": 0.002}}
    chosen = {"a": "block4", "b": "int8", "c": "block4"}
    assert promote(chosen, sensitivity, LIGHTEST_FIRST) == {"a": "block4", "b": "fp16", "c": "block4"}
    assert chosen["b"] == "int8"   # the plan given is not changed


def test_promote_returns_none_once_everything_is_float():
    assert promote({"a": "float"}, {}, LIGHTEST_FIRST) is None


def test_assignment_options_take_the_commonest_scheme_as_default():
    options = assignment_options({"a": "int8", "b": "int8", "c": "fp16", "d": "float"})
    assert options == {"default": "int8", "assign": ("c=fp16", "d=float")}
    assert assignment_options({}) == {"default": "float", "assign": ()}


def test_weighted_nodes_reads_which_scheme_can_take_which_node():
    inits = [numpy_helper.from_array(np.ones((4, 4), "float32"), "w2d"),
             numpy_helper.from_array(np.ones((4,), "float32"), "bias")]
    nodes = [helper.make_node("MatMul", ["x", "w2d"], ["m"], name="mm"),
             helper.make_node("Gemm", ["m", "w2d", "bias"], ["g"], name="gemm"),
             helper.make_node("MatMul", ["g", "x2"], ["y"], name="dynamic_mm"),
             helper.make_node("Relu", ["y"], ["z"], name="relu")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4]),
                                           helper.make_tensor_value_info("x2", TensorProto.FLOAT, [4, 4])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 4])], inits)
    found = weighted_nodes(helper.make_model(graph))
    assert found["block4"] == found["block8"] == {"mm"}       # blocks: MatMul with a constant 2-D weight
    assert found["int8"] == {"mm", "gemm"}                    # int8: MatMul/Gemm with a constant weight
    assert found["fp16"] == found["float"] == {"mm", "gemm"}
