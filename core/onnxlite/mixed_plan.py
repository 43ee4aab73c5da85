"""Moved to :mod:`onnxlite.search.mixed_plan`; this path keeps working for one release (docs/plugins.md)."""
from .search.mixed_plan import *  # noqa: F403
