"""Old home of ``quiet_root_logging`` (now :mod:`onnxlite.runtime`), kept for one release."""
from .runtime import quiet_root_logging  # noqa: F401
