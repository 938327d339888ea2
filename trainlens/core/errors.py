"""Errors whose ``str()`` is written for the person who ran trainlens.

The CLI turns every :class:`TrainlensError` into one sentence on stderr and exit code 2.
Anything else is a bug in trainlens: the CLI says so in one sentence (with where to report
it) and exits 2 as well, never 1 (a finding); ``--debug`` or ``TRAINLENS_DEBUG=1`` shows
its traceback.
"""

from __future__ import annotations

from collections.abc import Iterable


def did_you_mean(key: str, known: Iterable[str]) -> str:
    """ "; did you mean 'x'?" for the closest of ``known`` to a mistyped ``key``, else ""."""
    import difflib  # only for a mistake's message

    close = difflib.get_close_matches(key, list(known), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


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
