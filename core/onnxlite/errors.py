"""Errors that the CLI turns into one actionable line.

Anything raised as an :class:`OnnxliteError` is the user's to fix (or an honest
failure such as a verification mismatch); the CLI prints ``Error: <message>``
and exits with ``exit_code``, showing a traceback only under ``--debug``.
"""

from __future__ import annotations


class OnnxliteError(Exception):
    """A failure with a message meant for the user."""

    exit_code = 1


class UsageError(OnnxliteError):
    """Bad input from the user: a missing file, an unknown name, a malformed option."""

    exit_code = 2


class UnknownNameError(UsageError):
    """A framework, strategy, provider or metric name that no plugin provides."""


class MissingDependencyError(UsageError):
    """A plugin needs a module that is not installed."""


class PluginConflictError(OnnxliteError):
    """Two plugins register the same name for the same kind."""


class VerificationError(OnnxliteError):
    """A model's outputs differ from the reference beyond tolerance."""


def one_line(exc: BaseException | str, limit: int = 300, kind: bool = False) -> str:
    """``exc``'s message on one line (whitespace collapsed), cut at ``limit`` characters.

    With ``kind``, the exception's type name goes first (``ValueError: ...``): for
    errors from a library, where the type says more than the message.
    """
    text = " ".join(str(exc).split())[:limit] or "(no message)"
    return f"{type(exc).__name__}: {text}" if kind and isinstance(exc, BaseException) else text
