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
