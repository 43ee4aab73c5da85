"""Python references (``path/to/file.py:name`` or ``package.module:name``).

Running a user's code happens only here, and only because the user named it
on the command line or in the API call.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import re
import sys
from pathlib import Path
from typing import Any

from .errors import UsageError

#: a dotted Python name: a module path, or an attribute path inside the module
_DOTTED_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def is_python_ref(text: str) -> bool:
    """Whether ``text`` looks like ``file.py:attr`` or ``pkg.module:attr`` (and is not an existing path)."""
    text = str(text)
    if ":" not in text or Path(text).exists():
        return False
    left, _, right = text.rpartition(":")
    if not _DOTTED_RE.match(right):
        return False
    return left.endswith(".py") or bool(_DOTTED_RE.match(left))


def load_python_ref(ref: str, what: str = "source") -> Any:
    """Import the module (or execute the file) and return the named attribute."""
    left, _, attr = str(ref).rpartition(":")
    if not left or not _DOTTED_RE.match(attr):
        raise UsageError(f"{what} {ref!r}: expected path/to/file.py:name or package.module:name")
    if left.endswith(".py"):
        path = Path(left)
        if not path.is_file():
            raise UsageError(f"{what} {ref!r}: {path}: no such file")
        module_name = f"_onnxlite_user_{abs(hash(str(path.resolve())))}"
        spec = importlib.util.spec_from_file_location(module_name, path)
        if spec is None or spec.loader is None:
            raise UsageError(f"{what} {ref!r}: cannot import {path}")
        module = importlib.util.module_from_spec(spec)
        # Let the file import its neighbours, as `python file.py` would.
        sys.path.insert(0, str(path.resolve().parent))
        sys.modules[module_name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            sys.modules.pop(module_name, None)
            raise UsageError(f"{what} {ref!r}: importing {path} failed: {type(exc).__name__}: {exc}") from exc
        finally:
            sys.path.remove(str(path.resolve().parent))
    else:
        try:
            module = importlib.import_module(left)
        except Exception as exc:
            raise UsageError(f"{what} {ref!r}: cannot import {left}: {type(exc).__name__}: {exc}") from exc
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise UsageError(f"{what} {ref!r}: {left} has no attribute {attr!r}") from None
    return obj


def guess_framework(obj: Any) -> str | None:
    """``"pytorch"`` or ``"tensorflow"`` from the classes an object is built from, without importing either."""
    classes = inspect.getmro(obj if inspect.isclass(obj) else type(obj))
    modules = " ".join(c.__module__ for c in classes)
    if re.search(r"\btorch\b|\btorch\.", modules):
        return "pytorch"
    if re.search(r"\b(tensorflow|keras|tf_keras)\b", modules):
        return "tensorflow"
    return None


def needs_arguments(obj: Any) -> bool:
    """Whether calling ``obj`` requires arguments: a function of the model's inputs, not a zero-argument factory."""
    try:
        params = inspect.signature(obj).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
               for p in params)
