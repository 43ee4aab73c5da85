"""The plugin kernel's specs and its one typed-option parser (onnxlite.specs), and the registry over a
plugin host built here from plain modules (onnxlite.registry): pure, fast unit tests."""

from __future__ import annotations

import types

import pytest

from onnxlite import hookimpl
from onnxlite.errors import MissingDependencyError, PluginConflictError, UnknownNameError, UsageError
from onnxlite.plugins import PluginHost
from onnxlite.registry import Registry
from onnxlite.specs import (
    MetricSpec,
    Option,
    ProviderSpec,
    QuantizerSpec,
    option_pairs,
    parse_options,
    parse_spec_options,
    split_pair,
)

pytestmark = pytest.mark.unit


# -- Option.parse -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("raw", ["1", "true", "TRUE", " yes ", "on", "y", True])
def test_bool_option_reads_true(raw):
    assert Option("flag", bool).parse(raw) is True


@pytest.mark.parametrize("raw", ["0", "false", "False", "no", "off", "n", False])
def test_bool_option_reads_false(raw):
    assert Option("flag", bool).parse(raw) is False


@pytest.mark.parametrize("raw", ["maybe", "2", "", "truthy"])
def test_bool_option_refuses_anything_else(raw):
    with pytest.raises(ValueError, match="expected true or false"):
        Option("flag", bool).parse(raw)


@pytest.mark.parametrize(("kind", "raw", "expected"), [
    (int, "42", 42), (int, " 7 ", 7), (int, 3, 3), (float, "0.5", 0.5), (float, "1e-3", 1e-3),
    (float, 2, 2.0), (str, "text", "text"),
])
def test_typed_option_converts(kind, raw, expected):
    value = Option("x", kind).parse(raw)
    assert value == expected and type(value) is kind


@pytest.mark.parametrize(("kind", "raw"), [(int, "4.5"), (int, "four"), (float, "half"), (int, "")])
def test_typed_option_names_the_type_it_expected(kind, raw):
    with pytest.raises(ValueError, match=f"expected {kind.__name__}"):
        Option("x", kind).parse(raw)


def test_none_stays_none():
    assert Option("x", int).parse(None) is None


def test_choices_are_enforced_after_conversion():
    option = Option("format", str, choices=("QDQ", "QOperator"))
    assert option.parse("QDQ") == "QDQ"
    with pytest.raises(ValueError, match="expected one of QDQ, QOperator"):
        option.parse("qdq")


def test_multiple_splits_on_commas_and_types_each_item():
    option = Option("sizes", int, multiple=True)
    assert option.parse("1,2, 3") == (1, 2, 3)
    assert option.parse([4, "5"]) == (4, 5)
    assert option.parse("") == ()
    with pytest.raises(ValueError):
        option.parse("1,x")


@pytest.mark.parametrize(("option", "text"), [
    (Option("a", int), "int"), (Option("b", str, choices=("x", "y")), "x|y"),
    (Option("c", float, multiple=True), "float[,...]"), (Option("d", bool), "bool"),
])
def test_describe_type(option, text):
    assert option.describe_type() == text


# -- key=value pairs ----------------------------------------------------------------------------------------

def test_split_pair_keeps_everything_after_the_first_equals():
    assert split_pair("exclude=a=b") == ("exclude", "a=b")
    assert split_pair(" key =value") == ("key", "value")
    assert split_pair("key=") == ("key", "")


@pytest.mark.parametrize("text", ["novalue", "=value", " =x"])
def test_split_pair_refuses_a_pair_without_a_key(text):
    with pytest.raises(UsageError, match=r"--data-option .*expected key=value"):
        split_pair(text, "--data-option")


def test_option_pairs_last_one_wins():
    assert option_pairs(["a=1", "b=2", "a=3"]) == {"a": "3", "b": "2"}


# -- parse_options ------------------------------------------------------------------------------------------

OPTIONS = (Option("per_channel", bool, default=True), Option("block_size", int, default=32),
           Option("exclude", str, multiple=True, default=()))


def test_defaults_fill_what_was_not_given():
    assert parse_options(OPTIONS, ["block-size=64"]) == {"per_channel": True, "block_size": 64, "exclude": ()}


def test_without_defaults_only_the_given_options_come_back():
    assert parse_options(OPTIONS, {"per_channel": "false"}, defaults=False) == {"per_channel": False}


def test_dashes_and_underscores_name_the_same_option():
    assert parse_options(OPTIONS, ["per-channel=no"])["per_channel"] is False
    assert parse_options(OPTIONS, ["per_channel=no"])["per_channel"] is False


def test_an_unknown_option_is_named_with_the_valid_ones_and_the_closest():
    with pytest.raises(UsageError) as caught:
        parse_options(OPTIONS, ["blok_size=8"], owner="strategy 'weightonly'")
    message = str(caught.value)
    assert message.startswith("--option blok_size: strategy 'weightonly' has no such option")
    assert "(valid: block_size, exclude, per_channel)" in message and "did you mean block_size?" in message


def test_an_unknown_option_far_from_any_gets_no_suggestion():
    with pytest.raises(UsageError) as caught:
        parse_options(OPTIONS, ["zzz=1"])
    assert "did you mean" not in str(caught.value)


def test_allow_unknown_passes_undeclared_names_through_as_spelt():
    values = parse_options(OPTIONS, ["max-length=64"], defaults=False, allow_unknown=True)
    assert values == {"max-length": "64"}


def test_a_bad_value_names_the_flag_the_pair_and_the_reason():
    with pytest.raises(UsageError, match=r"^--calibration-option block_size=big: expected int"):
        parse_options(OPTIONS, ["block_size=big"], flag="--calibration-option")


def test_no_options_declared_says_none():
    with pytest.raises(UsageError, match=r"\(valid: none\)"):
        parse_options((), ["x=1"])


def test_parse_spec_options_names_the_spec_as_owner():
    spec = QuantizerSpec(name="demo", description="", factory=object, options=OPTIONS)
    with pytest.raises(UsageError, match="quantizer 'demo' has no such option"):
        parse_spec_options(spec, ["nope=1"])
    assert parse_spec_options(spec, None)["block_size"] == 32


def test_spec_option_lookup():
    spec = QuantizerSpec(name="demo", description="", factory=object, options=OPTIONS)
    assert spec.option("exclude") is OPTIONS[2]
    assert spec.option("missing") is None


def test_spec_kinds_and_defaults():
    quantizer = QuantizerSpec(name="q", description="", factory=object)
    assert (quantizer.kind, quantizer.applies_to, tuple(quantizer.grid)) == ("quantizer", ("any",), ({},))
    assert MetricSpec(name="m", description="", factory=object).higher_is_better is True
    assert ProviderSpec(name="p", description="", factory=object).packages == ("onnxruntime",)


def test_specs_are_frozen():
    spec = MetricSpec(name="m", description="", factory=object)
    with pytest.raises(AttributeError):
        spec.name = "other"   # type: ignore[misc]


# -- the registry over a host built from plain modules ------------------------------------------------------

def _plugin(**hooks) -> types.ModuleType:
    module = types.ModuleType("plugin")
    for name, value in hooks.items():
        def hook(value=value):
            return value
        hook.__name__ = name
        setattr(module, name, hookimpl(hook))
    return module


class _Worker:
    pass


def _registry(*plugins: tuple[str, types.ModuleType, bool]) -> Registry:
    host = PluginHost()
    for name, module, builtin in plugins:
        host.register(module, name, f"dist-{name}", "1.0", builtin=builtin)
    return Registry(host)


def _quantizer(name: str, **fields) -> QuantizerSpec:
    return QuantizerSpec(**({"name": name, "description": f"{name} strategy", "factory": _Worker} | fields))


def test_registry_keys_specs_by_kind_and_name_and_builds_workers():
    registry = _registry(("acme", _plugin(register_quantizers=[_quantizer("beta"), _quantizer("alpha")]), False))
    assert registry.names("quantizer") == ["alpha", "beta"]
    assert [r.name for r in registry.all("quantizer")] == ["alpha", "beta"]
    entry = registry.get("quantizer", "alpha")
    assert isinstance(entry.spec, QuantizerSpec) and entry.plugin.distribution == "dist-acme"
    assert entry.available and isinstance(entry.create(), _Worker)
    assert registry.names("metric") == []


def test_an_unknown_name_suggests_the_closest_known_one():
    registry = _registry(("acme", _plugin(register_quantizers=[_quantizer("dynamic")]), False))
    expected = r"unknown quantizer 'dynamc'; did you mean 'dynamic'\? \(known: dynamic\)"
    with pytest.raises(UnknownNameError, match=expected):
        registry.get("quantizer", "dynamc")
    with pytest.raises(UnknownNameError, match=r"\(none installed\)"):
        registry.get("metric", "cosine")


def test_a_missing_requirement_makes_a_spec_unavailable_with_the_install_hint():
    spec = _quantizer("needs", requires=("onnxlite_no_such_module_xyz",), install="onnxlite[extra]")
    entry = _registry(("acme", _plugin(register_quantizers=[spec]), False)).get("quantizer", "needs")
    assert entry.unavailable_reason() == "onnxlite_no_such_module_xyz is not installed: pip install 'onnxlite[extra]'"
    with pytest.raises(MissingDependencyError, match="quantizer 'needs' is not available"):
        entry.create()


def test_a_provider_on_another_platform_is_unavailable():
    spec = ProviderSpec(name="coreml", description="", factory=_Worker, ort_name="CoreMLExecutionProvider",
                        packages=(), platforms=("no-such-platform",))
    entry = _registry(("eps", _plugin(register_providers=[spec]), False)).get("provider", "coreml")
    assert "only exists on no-such-platform" in (entry.unavailable_reason() or "")


def test_two_plugins_claiming_one_name_withdraw_it_and_both_are_named():
    registry = _registry(("one", _plugin(register_quantizers=[_quantizer("dup")]), False),
                         ("two", _plugin(register_quantizers=[_quantizer("dup")]), False))
    assert "dup" not in registry.names("quantizer")
    with pytest.raises(PluginConflictError) as caught:
        registry.get("quantizer", "dup")
    assert "dist-one" in str(caught.value) and "dist-two" in str(caught.value)


def test_a_builtin_name_stays_with_the_builtin():
    registry = _registry(("core", _plugin(register_quantizers=[_quantizer("dynamic")]), True),
                         ("acme", _plugin(register_quantizers=[_quantizer("dynamic", description="x")]), False))
    entry = registry.get("quantizer", "dynamic")
    assert entry.plugin.builtin and entry.spec.description == "dynamic strategy"
    assert "which stays in use" in registry.conflict_message("quantizer", "dynamic")


@pytest.mark.parametrize(("result", "reason"), [
    ("not a list", "must return a list of QuantizerSpec, got str"),
    (["not a spec"], "expected a QuantizerSpec with a name and a callable factory"),
    ([MetricSpec(name="m", description="", factory=_Worker)], "expected a QuantizerSpec"),
])
def test_a_hook_returning_the_wrong_thing_is_recorded_as_broken(result, reason):
    registry = _registry(("bad", _plugin(register_quantizers=result), False))
    assert registry.names("quantizer") == []
    assert [b.name for b in registry.broken] == ["bad"] and reason in registry.broken[0].error


def test_a_hook_that_raises_is_broken_and_the_others_still_count():
    def boom():
        raise RuntimeError("nope")

    module = types.ModuleType("raiser")
    module.register_metrics = hookimpl(boom)   # type: ignore[attr-defined]
    module.register_metrics.__name__ = "register_metrics"
    registry = _registry(("raiser", module, False),
                         ("fine", _plugin(register_metrics=[MetricSpec(name="ok", description="", factory=_Worker)]),
                          False))
    assert registry.names("metric") == ["ok"]
    assert any(b.name == "raiser" and "RuntimeError: nope" in b.error for b in registry.broken)


def test_a_misspelt_hook_unregisters_its_plugin():
    module = types.ModuleType("typo")

    @hookimpl
    def register_quantisers():
        return [_quantizer("x")]

    module.register_quantisers = register_quantisers   # type: ignore[attr-defined]
    registry = _registry(("typo", module, False))
    assert registry.names("quantizer") == [] and [b.name for b in registry.broken] == ["typo"]
