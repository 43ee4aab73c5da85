"""Moved to the :mod:`onnxlite.report` package (model, text, html, files); this path works for one release."""
from .report.files import REPORT_FILES, write_report  # noqa: F401
from .report.model import *  # noqa: F401,F403
from .report.text import *  # noqa: F401,F403
