"""Errors whose ``str()`` is written for the person who ran trainlens.

The CLI turns every :class:`TrainlensError` into one sentence on stderr and exit code 2;
anything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class TrainlensError(Exception):
    """Base class: a problem with the user's input, configuration or arguments."""

    exit_code = 2

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message} ({self.hint})"


class UnreadableInputError(TrainlensError):
    """The input cannot be read at all: missing, empty, unknown format, or no metrics."""


class ConfigError(TrainlensError):
    """The configuration (file or flags) is invalid, e.g. an unknown key."""


class UsageError(TrainlensError):
    """Arguments that make no sense: a negative parameter count, an unknown GPU, ..."""
