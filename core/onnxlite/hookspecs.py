"""The hooks a plugin can implement.

Every hook returns a list of frozen specs (see :mod:`onnxlite.specs`); the host
collects them from all plugins and keys them by name.  Built-in plugins use
exactly these hooks, nothing private.  ``docs/plugins.md`` documents each one
and a test keeps that page in step with this module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from .specs import FrameworkSpec, MetricSpec, ProviderSpec, QuantizerSpec

hookspec = pluggy.HookspecMarker("onnxlite")
hookimpl = pluggy.HookimplMarker("onnxlite")


@hookspec
def register_frameworks() -> list[FrameworkSpec]:
    """Return the source frameworks this plugin can export to ONNX.

    Each :class:`~onnxlite.specs.FrameworkSpec` names a framework (``pytorch``,
    ``tensorflow``...), a cheap ``detect(source)`` used by ``--framework auto``,
    and a factory for an :class:`~onnxlite.protocols.Exporter`.
    """


@hookspec
def register_quantizers() -> list[QuantizerSpec]:
    """Return the lightweighting strategies this plugin offers.

    Each :class:`~onnxlite.specs.QuantizerSpec` declares its options, whether
    it needs calibration data, which graphs it applies to, and a small option
    grid for ``lighten``; its factory builds a :class:`~onnxlite.protocols.Quantizer`.
    """


@hookspec
def register_providers() -> list[ProviderSpec]:
    """Return the ONNX Runtime execution providers this plugin knows.

    Each :class:`~onnxlite.specs.ProviderSpec` gives onnxruntime's provider
    name, the pip packages that ship it, its default provider options and the
    quantization formats it runs fast; its factory builds a
    :class:`~onnxlite.protocols.Provider`.
    """


@hookspec
def register_metrics() -> list[MetricSpec]:
    """Return the accuracy metrics this plugin adds to ``compare`` and ``lighten``.

    Each :class:`~onnxlite.specs.MetricSpec` says whether higher is better;
    its factory builds a :class:`~onnxlite.protocols.Metric`.
    """
