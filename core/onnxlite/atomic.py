"""Atomic outputs: write beside the target, then rename, so a failed run leaves nothing half-written."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

from .errors import UsageError


def check_writable(target: str | os.PathLike[str], flag: str = "-o") -> Path:
    """Refuse, before any work, an output that cannot be written; one line names the path.

    ``target`` (a file or a folder to create) goes beside its scratch files in
    ``target``'s parent: that parent, or its nearest existing ancestor when it
    is still to be made, must be a writable folder.  A path through a file
    (``-o model.onnx/out.onnx``) or into a read-only folder is the user's to
    fix, so it is a :class:`UsageError` (exit 2), not a ``PermissionError``
    in the middle of the run.
    """
    target = Path(target)
    where = f"{flag} {target}" if flag else str(target)
    folder = target.parent
    while not folder.exists():
        if folder == folder.parent:
            break
        folder = folder.parent
    if not folder.is_dir():
        raise UsageError(f"{where}: {folder} is a file, not a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        reason = "read-only file system" if _read_only_fs(folder) else "permission denied"
        raise UsageError(f"{where}: cannot write in {folder} ({reason})")
    return target


def _read_only_fs(folder: Path) -> bool:
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):
        return False


def _make_parents(folder: Path, where: str) -> list[Path]:
    """Create ``folder`` and missing ancestors; return those created (deepest first) to undo on failure."""
    missing = []
    probe = folder
    while not probe.exists() and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    try:
        for path in reversed(missing):
            path.mkdir(exist_ok=True)
    except OSError as exc:
        _remove_empty(missing)
        raise _unwritable(where, exc) from None
    return missing


def _remove_empty(folders: list[Path]) -> None:
    """Undo :func:`_make_parents` after a failure: a failed run leaves no empty folders behind."""
    for path in folders:
        try:
            path.rmdir()
        except OSError:
            break   # not empty (someone else's file) or already gone: keep it and its parents


def _unwritable(where: str, exc: OSError) -> UsageError:
    if isinstance(exc, (FileExistsError, NotADirectoryError)):
        return UsageError(f"{where}: a path component is a file, not a folder")
    return UsageError(f"{where}: cannot write there ({exc.strerror or type(exc).__name__})")


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path in ``target``'s folder; on success it replaces ``target``."""
    target = Path(target)
    created = _make_parents(target.parent, str(target))
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as exc:
        _remove_empty(created)
        raise _unwritable(str(target), exc) from None
    os.close(fd)
    tmp_path = Path(tmp)
    done = False
    try:
        yield tmp_path
        # mkstemp creates files readable by the owner only; give the result the usual umask permissions.
        os.chmod(tmp_path, 0o666 & ~_umask())
        os.replace(tmp_path, target)
        done = True
    finally:
        tmp_path.unlink(missing_ok=True)
        if not done:
            _remove_empty(created)


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
    """A temporary folder next to ``near`` (same filesystem, so renames out of it are atomic).

    Folders made for it are removed again when the block fails, so a failed
    run into a new folder leaves nothing behind; on success they stay (the
    output is in them).
    """
    parent = Path(near).parent
    created = _make_parents(parent, str(near))
    try:
        path = Path(tempfile.mkdtemp(prefix=f".{Path(near).name}.", suffix=".work", dir=parent))
    except OSError as exc:
        _remove_empty(created)
        raise _unwritable(str(near), exc) from None
    done = False
    try:
        yield path
        done = True
    finally:
        shutil.rmtree(path, ignore_errors=True)
        if not done:
            _remove_empty(created)


def replace_dir(staged: Path, target: Path) -> None:
    """``staged`` becomes ``target``; an old ``target`` is removed only once the new one is in place."""
    backup = None
    if target.exists():
        backup = target.with_name(f".{target.name}.old-{uuid.uuid4().hex[:8]}")
        os.replace(target, backup)
    os.replace(staged, target)
    if backup is not None:
        shutil.rmtree(backup, ignore_errors=True)


def replace_set(moves: Sequence[tuple[Path, Path]], drop: Sequence[Path] = ()) -> None:
    """Move each ``(staged, target)`` into place as one set; the last pair is the file that names the others.

    A model and its external data cannot be renamed in one step, so the old set
    (every existing target, and ``drop``: old files the new set no longer has)
    is first moved aside, the file that names the others first.  At every
    moment ``target`` is then the old set, absent, or the new set: never a model
    beside another model's data.  A failure puts the old set back.
    """
    tag = uuid.uuid4().hex[:8]
    old = [target for _staged, target in reversed(moves)] + list(drop)
    aside: list[tuple[Path, Path]] = []
    placed: list[Path] = []
    try:
        for path in dict.fromkeys(old):
            if path.exists() or path.is_symlink():
                backup = path.with_name(f".{path.name}.old-{tag}")
                os.replace(path, backup)
                aside.append((backup, path))
        for staged, target in moves:
            os.replace(staged, target)
            placed.append(target)
    except BaseException:
        for target in placed:
            target.unlink(missing_ok=True)
        for backup, path in reversed(aside):
            os.replace(backup, path)
        raise
    for backup, _path in aside:
        backup.unlink(missing_ok=True)
