"""`onnxlite quantize` (filled in by its own capability)."""

from __future__ import annotations

import click

from ..errors import OnnxliteError


@click.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
def quantize() -> None:
    """Not available yet in this build."""
    raise OnnxliteError("'onnxlite quantize' is not available yet in this build")
