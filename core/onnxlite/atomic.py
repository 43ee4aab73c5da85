"""Atomic outputs: write beside the target, then rename, so a failed run leaves nothing half-written."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path in ``target``'s folder; on success it replaces ``target``."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        # mkstemp creates files readable by the owner only; give the result the usual umask permissions.
        os.chmod(tmp_path, 0o666 & ~_umask())
        os.replace(tmp_path, target)
    finally:
        tmp_path.unlink(missing_ok=True)


def _umask() -> int:
    """The process umask.

    Reading it with ``os.umask`` means setting it for a moment, and a file
    another thread created in that moment would get that mode; Linux reports
    it in /proc without touching it.
    """
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_text(target: str | os.PathLike[str], text: str) -> Path:
    with atomic_path(target) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(target)


@contextlib.contextmanager
def scratch_dir(near: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary folder next to ``near`` (same filesystem, so renames out of it are atomic)."""
    parent = Path(near).parent
    parent.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix=f".{Path(near).name}.", suffix=".work", dir=parent))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
