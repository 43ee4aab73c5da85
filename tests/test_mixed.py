"""Mixed precision: a scheme per layer beats every uniform scheme on a model with one fragile layer."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto

import onnxlite
from onnxlite.errors import UsageError
from onnxlite.evaluation.judge import Judge
from onnxlite.search import mixed_plan
from onnxlite.search.mixed_plan import BYTES_PER_WEIGHT, LIGHTEST_FIRST

from helpers import FRAGILE_WIDTH, fragile_model

K = FRAGILE_WIDTH
BUDGET = 0.01    # cosine drop


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    import onnxruntime as ort

    folder = tmp_path_factory.mktemp("mixed")
    model = fragile_model(folder / "fragile.onnx")
    x = np.random.default_rng(1).standard_normal((48, K)).astype(np.float32)
    reference = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    judge = Judge({"y": reference}, {"x": x}, metrics=["cosine_mean"], max_drop=BUDGET)
    return folder, model, judge


def _drop(judge, path) -> float:
    value = judge.evaluate(path).drops["y.cosine_mean"]
    return value if np.isfinite(value) else np.inf


def test_every_uniform_scheme_misses_the_budget(setup):
    folder, model, judge = setup
    for i, (strategy, options) in enumerate([("dynamic", {}), ("weightonly", {"bits": 8}),
                                             ("weightonly", {"bits": 4, "block_size": 32}), ("fp16", {})]):
        out = onnxlite.quantize(model, folder / f"uniform{i}.onnx", strategy, **options)
        assert _drop(judge, out.path) > BUDGET, (strategy, options)


def test_planned_mixed_precision_meets_it_and_is_lighter(setup):
    folder, model, judge = setup
    proto = onnx.load(str(model))
    sizes = {i.name[:-2]: int(np.prod(i.dims)) for i in proto.graph.initializer if i.name.endswith("_w")}
    sensitivity: dict[str, dict[str, float]] = {}
    for node in sizes:
        for scheme in LIGHTEST_FIRST[:-1]:
            out = onnxlite.quantize(model, folder / f"sweep-{node}-{scheme}.onnx", "mixed",
                                    default="float", assign=[f"{node}={scheme}"])
            sensitivity.setdefault(node, {})[scheme] = _drop(judge, out.path)
    # the sweep finds both fragile layers: every integer scheme breaks F alone and fp16 does not;
    # fp16 breaks B alone and no integer scheme does; nothing breaks A
    assert all(sensitivity["F"][s] > BUDGET for s in ("block4", "block8", "int8"))
    assert sensitivity["F"]["fp16"] < BUDGET / 10 and sensitivity["B"]["fp16"] > BUDGET
    assert sensitivity["B"]["int8"] < BUDGET and sensitivity["A"]["int8"] < BUDGET / 10
    chosen = mixed_plan.plan(sensitivity, sizes, BUDGET, LIGHTEST_FIRST, BYTES_PER_WEIGHT)
    assert chosen["F"] == "fp16" and chosen["B"] != "fp16" and "float" not in chosen.values(), chosen
    result = onnxlite.quantize(model, folder / "mixed.onnx", "mixed", **mixed_plan.assignment_options(chosen))
    assert _drop(judge, result.path) <= BUDGET
    assert result.size_after < 0.6 * result.size_before
    written = onnx.load(str(result.path))
    assert [i.name for i in written.graph.initializer if i.data_type == TensorProto.FLOAT16] == ["F_w_fp16_F"]


@pytest.mark.unit
def test_promote_moves_the_worst_node_one_scheme_heavier():
    chosen = {"a": "block4", "b": "int8", "c": "float"}
    sensitivity = {"a": {"block4": 0.002}, "b": {"int8": 0.02}, "c": {}}
    assert mixed_plan.promote(chosen, sensitivity, LIGHTEST_FIRST) == {"a": "block4", "b": "fp16", "c": "float"}
    assert mixed_plan.promote({"a": "float"}, {}, LIGHTEST_FIRST) is None


def test_bad_assignments_are_one_line_errors(setup):
    folder, model, _ = setup
    with pytest.raises(UsageError, match="no weighted node 'nope'"):
        onnxlite.quantize(model, folder / "bad.onnx", "mixed", assign=["nope=int8"])
    with pytest.raises(UsageError, match="unknown scheme 'int3'"):
        onnxlite.quantize(model, folder / "bad.onnx", "mixed", assign=["A=int3"])

