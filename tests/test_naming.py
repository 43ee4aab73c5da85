"""How candidates and inputs are named and spelt (onnxlite.search.candidates, onnxlite.inputs): pure, fast
unit tests."""

from __future__ import annotations

import pytest

from onnxlite.errors import UsageError
from onnxlite.inputs import InputSpec, guess_role, with_batch_axes
from onnxlite.search.candidates import Candidate, candidate_name, exclude_option, with_keep_float
from onnxlite.specs import Option, QuantizerSpec

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("strategy", "options", "name"), [
    ("dynamic", {}, "dynamic"),
    ("dynamic", {"per_channel": True}, "dynamic[per_channel=true]"),
    ("static", {"method": "MinMax", "per_channel": False}, "static[method=MinMax,per_channel=false]"),
    ("static", {"op_types": ("MatMul", "Gemm")}, "static[op_types=MatMul,Gemm]"),
    ("weightonly", {"bits": 4, "block_size": 32}, "weightonly[bits=4,block_size=32]"),
])
def test_candidate_names_read_as_the_command_line_would(strategy, options, name):
    assert candidate_name(strategy, options) == name


def _spec(*options: Option, exclude: str | None = None) -> QuantizerSpec:
    return QuantizerSpec(name="demo", description="", factory=object, options=options, exclude_option=exclude)


def test_the_exclusion_option_is_the_one_the_spec_declares():
    assert exclude_option(_spec(Option("exclude", str, multiple=True), exclude="exclude")) == "exclude"
    assert exclude_option(_spec(Option("skip", str, multiple=True), exclude="skip")) == "skip"
    # a name that merely looks like an exclusion option is not one (QuantizerSpec.exclude_option decides)
    assert exclude_option(_spec(Option("exclude", str, multiple=True))) is None
    assert exclude_option(_spec()) is None
    with pytest.raises(ValueError, match="multiple=True"):
        _spec(Option("exclude", str), exclude="exclude")


def test_keeping_nodes_float_adds_them_escaped_and_names_the_candidate():
    spec = _spec(Option("exclude", str, multiple=True), exclude="exclude")
    base = Candidate("dynamic", "dynamic", {"exclude": ("head",)})
    kept = with_keep_float(base, spec, ["/model/fc[0]/MatMul", "a*b?"])
    assert kept.name == "dynamic+float2" and kept.keep_float == ("/model/fc[0]/MatMul", "a*b?")
    # glob characters escaped so each pattern matches only the node it names
    assert kept.options["exclude"] == ("head", "/model/fc[[]0]/MatMul", "a[*]b[?]")
    assert base.options["exclude"] == ("head",)   # the base candidate is unchanged


def test_keeping_nodes_float_needs_an_exclusion_option():
    with pytest.raises(UsageError, match="strategy 'fp16' has no exclusion option"):
        with_keep_float(Candidate("fp16", "fp16", {}), _spec(), ["n"])


def test_candidate_to_dict_round_trips_its_fields():
    candidate = Candidate("n", "s", {"a": 1}, ("x",))
    assert candidate.to_dict() == {"name": "n", "strategy": "s", "options": {"a": 1}, "keep_float": ["x"]}


@pytest.mark.parametrize(("name", "role"), [
    ("input_ids", "ids"), ("attention_mask", "mask"), ("token_type_ids", "type_ids"), ("segment", "type_ids"),
    ("user_id", "ids"), ("pixel_values", None), ("x", None),
])
def test_roles_are_guessed_from_input_names(name, role):
    assert guess_role(name) == role


@pytest.mark.parametrize(("shape", "value", "axis"), [
    (("batch", 3, 224, 224), None, 0), ((1, 3, 224, 224), None, 0), ((2, "batch", 8), None, 1),
    ((2, "n", 8), None, 1), ((4, 16), None, 0), ((2, "frames", 128), None, 1), ((), None, None),
    (("batch",), 16000, None),
])
def test_the_sample_axis_is_read_from_the_dims(shape, value, axis):
    assert InputSpec("x", "float32", shape, value=value).batch_axis == axis


def test_an_input_spec_prints_as_it_is_written():
    assert str(InputSpec("input_ids", "int64", ("batch", "seq"))) == "input_ids:int64[batch,seq]"
    assert str(InputSpec("sr", "int64", (), value=16000)) == "sr:int64[]=16000"


def test_the_users_sample_axis_renames_the_dim_batch():
    specs = [InputSpec("state", "float32", ("layers", "frames", 8)), InputSpec("x", "float32", ("batch", 16))]
    moved = with_batch_axes(specs, {"state": 1})
    assert moved[0].shape == ("layers", "batch", 8) and moved[0].batch_axis == 1
    assert moved[1] is specs[1]
    assert with_batch_axes(specs, {"state": 7})[0] is specs[0]   # an axis the input does not have is ignored
