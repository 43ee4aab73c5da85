"""Moved to :mod:`onnxlite.report.html`; this path works for one release."""
from .report.html import *  # noqa: F401,F403
