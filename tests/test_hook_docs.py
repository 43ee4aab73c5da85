"""Every hook is documented in docs/plugins.md and implemented by a built-in plugin (datasette's rule)."""

from __future__ import annotations

import inspect
import re

import pytest

from onnxlite import hookspecs

from conftest import ROOT

pytestmark = pytest.mark.unit

HOOKS = sorted(name for name, fn in inspect.getmembers(hookspecs, inspect.isfunction)
               if hasattr(fn, "onnxlite_spec"))
DOC = (ROOT / "docs" / "plugins.md").read_text()


def test_there_are_hooks():
    assert HOOKS == ["register_frameworks", "register_metrics", "register_providers", "register_quantizers"]


@pytest.mark.parametrize("hook", HOOKS)
def test_hook_is_documented(hook):
    assert f"### {hook}()" in DOC, f"docs/plugins.md has no '### {hook}()' section"
    assert inspect.getdoc(getattr(hookspecs, hook)), f"hookspecs.{hook} has no docstring"


def test_documented_hooks_exist():
    documented = set(re.findall(r"^### (\w+)\(\)", DOC, flags=re.M))
    assert documented == set(HOOKS)


@pytest.mark.parametrize("hook", HOOKS)
def test_hook_is_implemented_by_a_builtin_plugin(hook, fresh_plugins):
    fresh_plugins.setenv("ONNXLITE_DISABLE_PLUGIN_AUTOLOAD", "1")
    from onnxlite.plugins import get_plugin_host

    host = get_plugin_host()
    implementers = [impl.plugin_name for impl in getattr(host.pm.hook, hook).get_hookimpls()]
    assert implementers, f"no built-in plugin implements {hook}"
    assert all(host.info[name].builtin for name in implementers)


# -- signatures, after datasette: the docs show each hook and each plugin method as it is called -------------

PLUGIN_DOCS = DOC + (ROOT / "docs" / "metrics.md").read_text()
#: what each hook's factory returns, and the objects those return (onnxlite.protocols)
PROTOCOLS = ("Exporter", "SourceModel", "Quantizer", "Provider", "Metric")


def _section(hook: str) -> str:
    return DOC.split(f"### {hook}(", 1)[1].split("\n### ", 1)[0].split("\n## ", 1)[0]


@pytest.mark.parametrize("hook", HOOKS)
def test_hook_heading_shows_its_signature_and_the_section_its_return_type(hook):
    signature = inspect.signature(getattr(hookspecs, hook))
    params = ", ".join(signature.parameters)
    assert f"### {hook}({params})" in DOC, f"docs/plugins.md: the heading must read '### {hook}({params})'"
    returned = re.fullmatch(r"list\[(\w+)\]", str(signature.return_annotation))
    assert returned, f"hookspecs.{hook} must be annotated to return list[SomeSpec]"
    assert f"Returns `{returned.group(1)}`s" in _section(hook)


@pytest.mark.parametrize("hook", HOOKS)
def test_every_field_of_the_spec_a_hook_returns_is_documented(hook):
    import dataclasses

    from onnxlite import specs

    spec = getattr(specs, re.fullmatch(r"list\[(\w+)\]", str(inspect.signature(getattr(hookspecs, hook))
                                                            .return_annotation)).group(1))
    missing = [f.name for f in dataclasses.fields(spec) if not re.search(rf"`{f.name}\b", DOC)]
    assert missing == [], f"docs/plugins.md does not name these {spec.__name__} fields"


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_every_plugin_method_is_documented_with_its_parameters(protocol):
    """``name(p1, p2...)`` as the protocol declares them (``self`` optional), in docs/plugins.md or metrics.md."""
    from onnxlite import protocols

    cls = getattr(protocols, protocol)
    methods = {name: fn for name, fn in vars(cls).items() if inspect.isfunction(fn) and not name.startswith("_")}
    assert methods, protocol
    for name, fn in methods.items():
        params = [p for p in inspect.signature(fn).parameters if p != "self"]
        pattern = (re.escape(name) + r"\((?:self,\s*)?" + r",\s*".join(re.escape(p) + r"(?::[^,)]*)?" for p in params)
                   + r"\)")
        assert re.search(pattern, PLUGIN_DOCS), f"document {protocol}.{name}({', '.join(params)})"
