"""Builds the plugin manager: built-ins from a tuple, third parties from entry points.

A third-party plugin that fails to import, implements a misspelt hook, or is
blocked never stops the host: it is recorded in :data:`BrokenPlugin` form and
``onnxlite --list-plugins`` shows it.

Environment switches:

* ``ONNXLITE_DISABLE_PLUGIN_AUTOLOAD=1``: do not load entry points at all.
* ``ONNXLITE_BLOCK_PLUGINS=a,b``: skip the named plugins (entry-point names or built-in names).
* ``ONNXLITE_TRACE_HOOKS=1``: log every hook call and its result to stderr.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import pluggy

from . import hookspecs
from .errors import one_line

ENTRY_POINT_GROUP = "onnxlite"

#: Built-in plugins, registered under the name after the last dot.
BUILTIN_PLUGINS: tuple[str, ...] = (
    "onnxlite_plugins.frameworks.onnx_file",
    "onnxlite_plugins.frameworks.pytorch",
    "onnxlite_plugins.frameworks.tensorflow",
    "onnxlite_plugins.quantizers.dynamic",
    "onnxlite_plugins.quantizers.static",
    "onnxlite_plugins.quantizers.transformer",
    "onnxlite_plugins.quantizers.smoothquant",
    "onnxlite_plugins.quantizers.fp16",
    "onnxlite_plugins.quantizers.weightonly",
    "onnxlite_plugins.quantizers.gguf_carry",
    "onnxlite_plugins.quantizers.mixed",
    "onnxlite_plugins.quantizers.recover",
    "onnxlite_plugins.quantizers.qat",
    "onnxlite_plugins.providers.onnxruntime_eps",
    "onnxlite_plugins.metrics.builtin",
    "onnxlite_plugins.metrics.sequence",
    "onnxlite_plugins.metrics.decoder",
)


@dataclass(frozen=True)
class PluginInfo:
    """Where a registered plugin came from."""

    name: str
    distribution: str
    version: str
    builtin: bool


@dataclass(frozen=True)
class BrokenPlugin:
    """A plugin that could not be used, with the one-line reason."""

    name: str
    distribution: str
    version: str
    error: str


def _onnxlite_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("onnxlite")
    except PackageNotFoundError:  # running from a source tree without install
        return "0+unknown"


def _blocked() -> set[str]:
    return {n.strip() for n in os.environ.get("ONNXLITE_BLOCK_PLUGINS", "").split(",") if n.strip()}


def _truthy(var: str) -> bool:
    return os.environ.get(var, "").strip().lower() in {"1", "true", "yes", "on"}


def owner(info: PluginInfo) -> str:
    """``acme-quant 1.2`` or ``onnxlite 0.1.0 (built-in)``: who a name belongs to, for messages."""
    return f"{info.distribution} {info.version}" + (" (built-in)" if info.builtin else "")


class PluginHost:
    """The pluggy manager plus what we learnt while loading plugins."""

    def __init__(self) -> None:
        self.pm = pluggy.PluginManager("onnxlite")
        self.pm.add_hookspecs(hookspecs)
        self.info: dict[str, PluginInfo] = {}
        self.broken: list[BrokenPlugin] = []
        self.tracing = _truthy("ONNXLITE_TRACE_HOOKS")
        if self.tracing:
            self.pm.trace.root.setwriter(lambda msg: sys.stderr.write(f"[onnxlite] {msg}"))
            self.pm.enable_tracing()

    def register(self, module: object, name: str, distribution: str, version: str, builtin: bool) -> None:
        """Register one plugin module, or record why it cannot be used."""
        try:
            self.pm.register(module, name=name)
        except Exception as exc:  # pluggy's PluginValidationError, duplicate names...
            self.broken.append(BrokenPlugin(name, distribution, version, one_line(exc, 1000, kind=True)))
            return
        try:
            # Catches hooks whose names match no spec (misspelt hooks).
            self.pm.check_pending()
        except pluggy.PluginValidationError as exc:
            self.pm.unregister(module)
            self.broken.append(BrokenPlugin(name, distribution, version, one_line(exc, 1000, kind=True)))
            return
        self.info[name] = PluginInfo(name, distribution, version, builtin)

    def load_builtins(self) -> None:
        blocked = _blocked()
        version = _onnxlite_version()
        for module_name in BUILTIN_PLUGINS:
            name = module_name.rsplit(".", 1)[-1]
            if name in blocked:
                continue
            try:
                module = importlib.import_module(module_name)
            except Exception as exc:
                self.broken.append(BrokenPlugin(name, "onnxlite", version, one_line(exc, 1000, kind=True)))
                continue
            self.register(module, name, "onnxlite", version, builtin=True)

    def load_entry_points(self) -> None:
        if _truthy("ONNXLITE_DISABLE_PLUGIN_AUTOLOAD"):
            return
        from importlib.metadata import entry_points

        blocked = _blocked()
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            dist = getattr(ep, "dist", None)
            dist_name = dist.name if dist is not None else "?"
            dist_version = dist.version if dist is not None else "?"
            if ep.name in self.info:
                # The first plugin keeps the name (a built-in always does); the newcomer is listed, by package.
                taker = self.info[ep.name]
                self.broken.append(BrokenPlugin(
                    ep.name, dist_name, dist_version,
                    f"plugin name {ep.name!r} of {dist_name} {dist_version} is already taken by {owner(taker)}; "
                    f"{dist_name} was not loaded (rename its entry point, or uninstall one)"))
                continue
            if ep.name in blocked:
                continue
            try:
                module = ep.load()
            except BaseException as exc:  # a plugin calling sys.exit must not stop us either
                if isinstance(exc, KeyboardInterrupt):
                    raise
                self.broken.append(BrokenPlugin(ep.name, dist_name, dist_version,
                                                f"failed to import: {one_line(exc, 1000, kind=True)}"))
                continue
            self.register(module, ep.name, dist_name, dist_version, builtin=False)

    def call(self, hook_name: str) -> Iterator[tuple[PluginInfo, Any]]:
        """Call one hook on every plugin separately, yielding ``(plugin name, result)``.

        Calling each implementation on its own means one plugin that raises is
        recorded as broken and the others still count.
        """
        caller = getattr(self.pm.hook, hook_name)
        for impl in reversed(caller.get_hookimpls()):  # registration order
            info = self.info[impl.plugin_name]
            try:
                result = impl.function()
            except Exception as exc:
                self.broken.append(BrokenPlugin(info.name, info.distribution, info.version,
                                                f"{hook_name}() raised {one_line(exc, 1000, kind=True)}"))
                continue
            if self.tracing:
                sys.stderr.write(f"[onnxlite] {impl.plugin_name}.{hook_name}() -> {result!r}\n")
            yield info, result


@lru_cache(maxsize=1)
def get_plugin_host() -> PluginHost:
    """The process-wide plugin host (built once)."""
    host = PluginHost()
    host.load_builtins()
    host.load_entry_points()
    return host


def get_plugin_manager() -> pluggy.PluginManager:
    """The pluggy manager, for plugins and tests that want the raw thing."""
    return get_plugin_host().pm


def reset() -> None:
    """Forget loaded plugins (tests use this after changing the environment)."""
    get_plugin_host.cache_clear()  # the registry is keyed by the host, so it follows
