"""Collects the specs every plugin returns and looks them up by kind and name."""

from __future__ import annotations

import difflib
import importlib.util
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Generic, Literal, TypeVar, overload

from .errors import MissingDependencyError, PluginConflictError, UnknownNameError
from .plugins import BrokenPlugin, PluginHost, PluginInfo, get_plugin_host, owner
from .specs import SPEC_TYPES, FrameworkSpec, MetricSpec, ProviderSpec, QuantizerSpec, Spec

#: kind -> hook that registers it
HOOKS = {
    "framework": "register_frameworks",
    "quantizer": "register_quantizers",
    "provider": "register_providers",
    "metric": "register_metrics",
}

#: what the CLI calls each kind
KIND_LABELS = {"framework": "frameworks", "quantizer": "strategies", "provider": "providers", "metric": "metrics"}

#: the spec type a :class:`Registered` holds (``registry.get("quantizer", ...)`` is a ``Registered[QuantizerSpec]``)
SpecT = TypeVar("SpecT", bound=Spec)


def _module_missing(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is None
    except (ImportError, ValueError):
        return True


def _distribution_installed(name: str) -> bool:
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        distribution(name)
    except PackageNotFoundError:
        return False
    return True


@dataclass(frozen=True)
class Registered(Generic[SpecT]):
    """A spec together with the plugin that gave it."""

    spec: SpecT
    plugin: PluginInfo

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def kind(self) -> str:
        return self.spec.kind

    def unavailable_reason(self) -> str | None:
        """None when usable here, else why not and how to fix it (cheap: imports nothing heavy)."""
        missing = [m for m in self.spec.requires if _module_missing(m)]
        if missing:
            hint = f": pip install '{self.spec.install}'" if self.spec.install else ""
            verb = "is" if len(missing) == 1 else "are"
            return f"{', '.join(missing)} {verb} not installed{hint}"
        if isinstance(self.spec, ProviderSpec) and self.spec.platforms:
            if not sys.platform.startswith(self.spec.platforms):
                return f"{self.spec.ort_name} only exists on {', '.join(self.spec.platforms)} (this is {sys.platform})"
        if isinstance(self.spec, ProviderSpec) and self.spec.packages:
            if not any(_distribution_installed(p) for p in self.spec.packages):
                return (f"{self.spec.ort_name} ships in {' or '.join(self.spec.packages)}: "
                        f"pip install {self.spec.packages[0]}")
        return None

    @property
    def available(self) -> bool:
        return self.unavailable_reason() is None

    def create(self) -> Any:
        """Build the worker object, or explain why it cannot be built here."""
        reason = self.unavailable_reason()
        if reason:
            raise MissingDependencyError(f"{self.kind} {self.name!r} is not available: {reason}")
        return self.spec.factory()


class Registry:
    """Specs keyed by kind and name, plus the plugins that could not be used."""

    def __init__(self, host: PluginHost) -> None:
        self.host = host
        self._items: dict[str, dict[str, Registered[Any]]] = {kind: {} for kind in HOOKS}
        #: names claimed twice: two plugins' specs (both withdrawn), or a plugin's spec that a built-in's
        #: name refused (the built-in stays in use; see :meth:`conflict_message`)
        self.conflicts: dict[tuple[str, str], list[Registered[Any]]] = {}
        for kind, hook in HOOKS.items():
            for info, result in host.call(hook):
                self._add(kind, info, result)

    @property
    def broken(self) -> list[BrokenPlugin]:
        return self.host.broken

    def _add(self, kind: str, info: PluginInfo, result: Any) -> None:
        spec_type = SPEC_TYPES[kind]
        hook = HOOKS[kind]
        if result is None:
            return
        if not isinstance(result, (list, tuple)):
            self.host.broken.append(BrokenPlugin(info.name, info.distribution, info.version,
                                                 f"{hook}() must return a list of {spec_type.__name__}, "
                                                 f"got {type(result).__name__}"))
            return
        for spec in result:
            if not isinstance(spec, spec_type) or not spec.name or not callable(spec.factory):
                self.host.broken.append(BrokenPlugin(info.name, info.distribution, info.version,
                                                     f"{hook}() returned {spec!r}, expected a {spec_type.__name__} "
                                                     "with a name and a callable factory"))
                continue
            entry: Registered[Any] = Registered(spec, info)
            existing = self._items[kind].get(spec.name)
            if existing is not None and existing.plugin.builtin != entry.plugin.builtin:
                # Built-in names stay with the built-ins: a plugin cannot withdraw (or replace) ``dynamic``.
                # The refused newcomer is listed among the conflicts; the name keeps working.
                kept, refused = (existing, entry) if existing.plugin.builtin else (entry, existing)
                self._items[kind][spec.name] = kept
                self.conflicts.setdefault((kind, spec.name), []).append(refused)
                continue
            if existing is not None or (kind, spec.name) in self.conflicts:
                clash = self.conflicts.setdefault((kind, spec.name), [existing] if existing else [])
                clash.append(entry)
                self._items[kind].pop(spec.name, None)
                continue
            self._items[kind][spec.name] = entry

    @overload
    def all(self, kind: Literal["framework"]) -> list[Registered[FrameworkSpec]]: ...
    @overload
    def all(self, kind: Literal["quantizer"]) -> list[Registered[QuantizerSpec]]: ...
    @overload
    def all(self, kind: Literal["provider"]) -> list[Registered[ProviderSpec]]: ...
    @overload
    def all(self, kind: Literal["metric"]) -> list[Registered[MetricSpec]]: ...
    @overload
    def all(self, kind: str) -> list[Registered[Any]]: ...

    def all(self, kind: str) -> list[Registered[Any]]:
        return sorted(self._items[kind].values(), key=lambda r: r.name)

    def names(self, kind: str) -> list[str]:
        return sorted(self._items[kind])

    def __iter__(self) -> Iterator[Registered[Any]]:
        for kind in HOOKS:
            yield from self.all(kind)

    def _kept(self, kind: str, name: str) -> Registered[Any] | None:
        """The built-in that kept ``name`` when a plugin also claimed it, else None."""
        entry = self._items[kind].get(name)
        return entry if entry is not None and entry.plugin.builtin else None

    def conflict_message(self, kind: str, name: str) -> str:
        kept = self._kept(kind, name)
        if kept is not None:
            who = " and ".join(f"{r.plugin.name} ({owner(r.plugin)})" for r in self.conflicts[(kind, name)])
            return (f"{kind} {name!r} of {who} is ignored: the name belongs to the built-in {kind} "
                    f"({owner(kept.plugin)}), which stays in use; the plugin should pick another name")
        who = " and ".join(f"{r.plugin.name} ({r.plugin.distribution} {r.plugin.version})"
                           for r in self.conflicts[(kind, name)])
        return (f"{kind} {name!r} is provided by more than one plugin: {who}; "
                "uninstall or block one (ONNXLITE_BLOCK_PLUGINS)")

    @overload
    def get(self, kind: Literal["framework"], name: str) -> Registered[FrameworkSpec]: ...
    @overload
    def get(self, kind: Literal["quantizer"], name: str) -> Registered[QuantizerSpec]: ...
    @overload
    def get(self, kind: Literal["provider"], name: str) -> Registered[ProviderSpec]: ...
    @overload
    def get(self, kind: Literal["metric"], name: str) -> Registered[MetricSpec]: ...
    @overload
    def get(self, kind: str, name: str) -> Registered[Any]: ...

    def get(self, kind: str, name: str) -> Registered[Any]:
        """Look up by name; unknown names get a "did you mean" suggestion."""
        if (kind, name) in self.conflicts and not self._kept(kind, name):
            raise PluginConflictError(self.conflict_message(kind, name))
        try:
            return self._items[kind][name]
        except KeyError:
            pass
        known = self.names(kind)
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        listing = f" (known: {', '.join(known)})" if known else " (none installed)"
        raise UnknownNameError(f"unknown {kind} {name!r}{hint}{listing}") from None

    def create(self, kind: str, name: str) -> Any:
        return self.get(kind, name).create()


def get_registry() -> Registry:
    """The process-wide registry over the process-wide plugin host.

    Keyed by the host, so that ``plugins.reset()`` (a new host) brings a new registry
    without the plugin module having to know this one (no import cycle).
    """
    return _registry_for(get_plugin_host())


@lru_cache(maxsize=1)
def _registry_for(host: PluginHost) -> Registry:
    return Registry(host)
