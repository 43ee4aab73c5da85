"""Moved to :mod:`onnxlite.evaluation.metrics`; this path works for one release."""
from .evaluation.metrics import *  # noqa: F401,F403
