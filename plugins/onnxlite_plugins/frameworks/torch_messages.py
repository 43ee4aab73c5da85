"""What the PyTorch exporters say when they fail: the operators named, the first line, and their
C-level output kept quiet."""

from __future__ import annotations

import contextlib
import os
import re

_OP_RE = re.compile(r"aten(?:::|\.)[A-Za-z_][A-Za-z0-9_]*")


def unsupported_operators(exc: BaseException | None) -> list[str]:
    """Operator names an exporter error mentions (``aten::histc``, ``aten.histc``), deduplicated."""
    texts = []
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        texts.append(str(exc))
        exc = exc.__cause__ or exc.__context__
    found: list[str] = []
    for name in _OP_RE.findall("\n".join(texts)):
        name = name.replace("aten.", "aten::", 1)  # dynamo says aten.histc, torchscript aten::histc
        if name not in found:
            found.append(name)
    return found


def error_summary(exc: BaseException) -> str:
    """The exporter's own first error line.  dynamo's message is a report whose summary reads
    ``<class 'torch._dynamo.exc.Unsupported'>: the reason`` then ``(Refer to the full stack trace above ...)``,
    a trace the user never sees: keep the reason, drop the pointer."""
    text = str(exc)
    marker = "## Exception summary"
    if marker in text:
        text = text.split(marker, 1)[1]
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)
    lines = []
    for line in text.splitlines():
        line = re.sub(r"^<class '[^']*'>:\s*", "", line.strip())
        if line and not line.startswith("(Refer to the full stack trace"):
            lines.append(line)
    if not lines and exc.__cause__ is not None and exc.__cause__ is not exc:
        return error_summary(exc.__cause__)
    first = lines[0] if lines else type(exc).__name__
    return " ".join(first.split())[:240]


@contextlib.contextmanager
def quiet_fds():
    """Silence what the exporters print below Python (the TorchScript exporter writes its IR graph to file
    descriptor 1 when it fails): the host prints its own one line."""
    import sys
    import tempfile

    saved: list[tuple[int, int]] = []
    sink = None
    try:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        sink = tempfile.TemporaryFile()
        for fd in (1, 2):
            saved.append((fd, os.dup(fd)))
            os.dup2(sink.fileno(), fd)
    except (OSError, ValueError):   # no real descriptors (an embedding host): Python-level silencing still applies
        pass
    try:
        yield
    finally:
        for fd, copy in saved:
            os.dup2(copy, fd)
            os.close(copy)
        if sink is not None:
            sink.close()


# --------------------------------------------------------------------------- source models

