"""onnxlite: export, quantize, verify and benchmark models with ONNX Runtime.

The public API is importable from here; heavy pieces load on first use so that
``import onnxlite`` (and the CLI) start fast.
"""

from __future__ import annotations

import importlib
from typing import Any

from .errors import OnnxliteError, UsageError
from .hookspecs import hookimpl
from .protocols import QuantizeContext, QuantizeOutcome
from .specs import FrameworkSpec, MetricSpec, Option, PerNodeSchemes, ProviderSpec, QuantizerSpec

__all__ = [
    "FrameworkSpec", "LightenConfig", "MetricSpec", "OnnxliteError", "Option", "PerNodeSchemes", "ProviderSpec",
    "QuantizeContext", "QuantizeOutcome", "QuantizerSpec", "UsageError", "__version__", "bench", "compare", "export",
    "get_registry", "hookimpl", "lighten", "quantize",
]

#: public name -> (module, attribute), imported on first access
_LAZY = {
    "get_registry": ("registry", "get_registry"),
    "export": ("conversion.export", "export"),
    "quantize": ("quantization.run", "quantize"),
    "compare": ("evaluation.compare", "compare"),
    "bench": ("benchmark.bench", "bench"),
    "lighten": ("search.lighten", "lighten"),
    "LightenConfig": ("search.config", "LightenConfig"),
    "sweep": ("sweeps.run", "sweep"),
}


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from .plugins import _onnxlite_version

        return _onnxlite_version()
    if name in _LAZY:
        module, attr = _LAZY[name]
        return getattr(importlib.import_module(f".{module}", __name__), attr)
    raise AttributeError(f"module 'onnxlite' has no attribute {name!r}")
