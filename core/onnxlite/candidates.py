"""Moved to :mod:`onnxlite.search.candidates`; this path works for one release."""
from .search.candidates import *  # noqa: F401,F403
