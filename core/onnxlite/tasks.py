"""Moved to :mod:`onnxlite.search.tasks`; this path works for one release."""
from .search.tasks import *  # noqa: F401,F403
