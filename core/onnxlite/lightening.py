"""Moved to the :mod:`onnxlite.search` package; this path works for one release."""
from .search.choose import *  # noqa: F401,F403
from .search.lighten import *  # noqa: F401,F403
from .search.results import *  # noqa: F401,F403
