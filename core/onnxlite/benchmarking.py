"""Moved to :mod:`onnxlite.benchmark.bench`; this path works for one release."""
from .benchmark.bench import *  # noqa: F401,F403
