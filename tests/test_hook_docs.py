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
