"""The parsers every command shares, case by case: --input specs, --max-drop budgets and the sweep's
manifest (the property tests in test_parsers_property.py drive them from the CLI): pure, fast unit tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from onnxlite.errors import UsageError
from onnxlite.evaluation.metrics import ResolvedMetric, budget_items, parse_budget, parse_budgets
from onnxlite.inputs import normalize_dtype, parse_input_spec
from onnxlite.sweeps.manifest import parse_manifest

pytestmark = pytest.mark.unit


# -- --input NAME:DTYPE[dims]=VALUE ------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "name", "dtype", "shape", "value"), [
    ("input_ids:int64[batch,seq]", "input_ids", "int64", ("batch", "seq"), None),
    ("x:float32[batch,3,224,224]", "x", "float32", ("batch", 3, 224, 224), None),
    (" x : float [ 1 , 8 ] ", "x", "float32", (1, 8), None),
    ("sr:int64[]=16000", "sr", "int64", (), 16000),
    ("scale:double[]=0.5", "scale", "float64", (), 0.5),
    ("m:half[b,4]", "m", "float16", ("b", 4), None),
    ("flag:bool[batch]", "flag", "bool", ("batch",), None),
])
def test_input_specs_parse(text, name, dtype, shape, value):
    spec = parse_input_spec(text)
    assert (spec.name, spec.dtype, spec.shape, spec.value) == (name, dtype, shape, value)


def test_parsed_specs_guess_their_role():
    assert parse_input_spec("attention_mask:int64[batch,seq]").role == "mask"


@pytest.mark.parametrize(("text", "reason"), [
    ("x", "expected NAME:DTYPE"), ("x:float32", "expected NAME:DTYPE"), ("x:complex64[1]", "unknown dtype"),
    ("x:float32[0,3]", "dims must be positive"), ("x:float32[1,-3]", "bad dim"), ("x:float32[1,3.5]", "bad dim"),
    ("x:float32[1,²]", "bad dim"), ("x:float32[9999999999999999999]", "too large"),
    ("sr:int64[]=abc", "is not a int64 number"), ("sr:int64[]=1.5", "is not a int64 number"),
])
def test_bad_input_specs_are_one_line_usage_errors(text, reason):
    with pytest.raises(UsageError, match=reason) as caught:
        parse_input_spec(text)
    assert "\n" not in str(caught.value) and str(caught.value).startswith("--input")


@pytest.mark.parametrize(("alias", "dtype"), [("float", "float32"), ("long", "int64"), ("int", "int32"),
                                               ("double", "float64"), ("UINT8", "uint8")])
def test_dtype_aliases(alias, dtype):
    assert normalize_dtype(alias) == dtype


# -- --max-drop ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("raw", "value"), [("0.01", 0.01), ("1%", 0.01), (" 2.5 % ", 0.025), (0, 0.0),
                                            (0.5, 0.5), ("0", 0.0)])
def test_budgets_read_numbers_and_percentages(raw, value):
    assert parse_budget(raw) == pytest.approx(value)


@pytest.mark.parametrize("raw", ["-1%", "abc", "nan", "inf", "%", ""])
def test_bad_budgets_name_the_flag(raw):
    with pytest.raises(UsageError, match=r"^--max-drop"):
        parse_budget(raw)


def test_budget_items_accept_every_form():
    assert budget_items("1%") == [(None, "1%")]
    assert budget_items(["1%", "cosine_mean=0.002"]) == [(None, "1%"), ("cosine_mean", "0.002")]
    assert budget_items({"y.accuracy": 0.01}) == [("y.accuracy", 0.01)]


def _metric(output: str, name: str, default_budget: float | None = None) -> ResolvedMetric:
    return ResolvedMetric(output, name, None, True, default_budget=default_budget)


METRICS = [_metric("logits", "top1_agreement"), _metric("logits", "cosine_mean"),
           _metric("boxes", "cosine_mean"), _metric("boxes", "slice_rel_error_max", default_budget=0.05)]


def test_a_bare_budget_goes_to_the_primary_and_kind_defaults_stay():
    budgets = parse_budgets("1%", METRICS, "logits.top1_agreement")
    assert budgets == {"logits.top1_agreement": 0.01, "boxes.slice_rel_error_max": 0.05}


def test_a_metric_name_covers_every_output_it_judges_and_a_key_one_output():
    budgets = parse_budgets(["cosine_mean=0.002", "boxes.slice_rel_error_max=0.1"], METRICS, "logits.top1_agreement")
    assert budgets == {"logits.cosine_mean": 0.002, "boxes.cosine_mean": 0.002, "boxes.slice_rel_error_max": 0.1}


def test_no_max_drop_budgets_nothing():
    assert parse_budgets(None, METRICS, "logits.top1_agreement") == {}


def test_a_budget_on_a_metric_not_in_the_comparison_lists_the_metrics():
    with pytest.raises(UsageError, match=r"--max-drop accuracy: no metric 'accuracy' in this comparison"):
        parse_budgets(["accuracy=1%"], METRICS, "logits.top1_agreement")


# -- the sweep's manifest -----------------------------------------------------------------------------------

def test_a_manifest_fills_defaults_names_models_and_resolves_paths(tmp_path: Path):
    (tmp_path / "m.onnx").write_bytes(b"")
    doc = {"sweep": {"output": "out"}, "defaults": {"max_drop": "1%", "strategies": "dynamic, static"},
           "models": [{"source": "m.onnx"}, {"source": "hub/model-id", "name": "hub", "max_drop": "2%"}]}
    manifest = parse_manifest(doc, tmp_path / "zoo.toml")
    first, second = manifest.models
    assert (first.name, second.name) == ("m", "hub")
    assert first.options["source"] == str(tmp_path.resolve() / "m.onnx")
    assert second.options["source"] == "hub/model-id"            # not a file here: a hub id stays as written
    assert first.options["strategies"] == ["dynamic", "static"] and second.options["max_drop"] == "2%"
    assert manifest.sweep["output"] == str(tmp_path.resolve() / "out")


@pytest.mark.parametrize(("doc", "reason"), [
    ({"models": []}, "needs at least one"),
    ({"models": [{"name": "x"}]}, "needs a source"),
    ({"models": [{"source": "a"}, {"source": "b", "name": "a"}]}, "two models are named 'a'"),
    ({"models": [{"source": "a", "name": "../up"}]}, "must be letters, digits"),
    ({"models": [{"source": "a", "max_dorp": "1%"}]}, r"unknown key 'max_dorp' \(did you mean max_drop\?\)"),
    ({"models": [{"source": "a", "runs": 0}]}, "runs must be at least 1"),
    ({"models": [{"source": "a", "partial": "yes"}]}, "partial must be true/false"),
    ({"defaults": {"source": "a"}, "models": [{"source": "a"}]}, "cannot set source"),
    ({"sweep": {"executor": "slurm"}, "models": [{"source": "a"}]}, "expected local or ray"),
    ({"extra": {}, "models": [{"source": "a"}]}, "unknown key 'extra'"),
])
def test_bad_manifests_name_the_file_and_the_entry(tmp_path: Path, doc, reason):
    with pytest.raises(UsageError, match=reason) as caught:
        parse_manifest(doc, tmp_path / "zoo.toml")
    assert str(caught.value).startswith(str(tmp_path / "zoo.toml"))
