"""``onnxlite --list-plugins``: what is installed, where it came from, and what is broken.

The same listing as ``onnxlite plugins``, drawn by the same renderer (:func:`onnxlite.cli.plugins.show`), so
that a description such as ``[batch, frames, classes]`` is shown as written in both (the renderer escapes
rich markup); both print the same ``--json`` (:func:`onnxlite.cli.plugins.describe`).
"""

from __future__ import annotations

from ..registry import Registry
from .common import emit_json
from .plugins import describe
from .plugins import show as render


def show(registry: Registry, as_json: bool) -> None:
    payload = describe(registry)
    if as_json:
        emit_json(payload)
        return
    render(payload)
