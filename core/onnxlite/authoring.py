"""What a plugin author needs from the host, documented and stable (docs/plugins.md, "The helper surface").

- :func:`match_nodes`: the exclude-pattern check every built-in strategy applies: exact names or glob patterns
  to node names, and a pattern that matches nothing is a usage error (a typo must not quantize the layer the
  user meant to protect).  The host applies it to a third-party strategy's ``exclude_option`` too.
- :func:`quiet_onnxruntime`: hush onnxruntime's quantization tooling while it runs (its "consider
  pre-processing" advice on the root logger, per-node INFO lines on its own loggers).
- :class:`~onnxlite.calibration.CalibrationReader`: the calibration reader the built-ins use.
- :class:`~onnxlite.protocols.QuantizeContext`: what a quantizer is handed besides the model and options.

Nothing heavy is imported here, so a plugin module may import it at the top.
"""

from __future__ import annotations

import fnmatch
import logging
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from .calibration import CalibrationReader
from .errors import UsageError
from .protocols import QuantizeContext

__all__ = ["CalibrationReader", "QuantizeContext", "match_nodes", "quiet_onnxruntime"]

#: onnxruntime.quantization's own loggers, besides the root logger it also writes to
ORT_LOGGERS = ("onnxruntime", "onnxruntime.quantization")


def match_nodes(node_names: Iterable[str], patterns: Iterable[str], option: str = "exclude",
                what: str = "node") -> list[str]:
    """The names in ``node_names`` that equal or glob-match (``fnmatchcase``) any of ``patterns``, in order.

    Raises :class:`~onnxlite.errors.UsageError` naming ``--option {option}=PATTERN`` and a few real names when
    a pattern matches nothing.
    """
    names = [n for n in node_names if n]
    chosen: set[str] = set()
    for pattern in patterns:
        hits = [n for n in names if n == pattern or fnmatch.fnmatchcase(n, pattern)]
        if not hits:
            sample = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
            raise UsageError(f"--option {option}={pattern}: matches no {what} name in the model "
                             f"(names look like: {sample})")
        chosen.update(hits)
    return [n for n in names if n in chosen]


@contextmanager
def quiet_onnxruntime(level: int = logging.ERROR) -> Iterator[None]:
    """Within the block, onnxruntime's Python tooling logs only at ``level`` and above; restored after."""
    from .runtime import quiet_root_logging

    with quiet_root_logging(level, *ORT_LOGGERS):
        yield
