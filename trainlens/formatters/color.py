"""Colour by severity in a terminal: ``--color auto|always|never`` and ``NO_COLOR``.

The text renderers write plain lines; colour is laid over them here, by rich, only when it
is wanted: rich's console costs ~28 ms to import (``python -X importtime``, 27.6–28.6 ms
cumulative for ``rich.console`` over three runs on the build machine), so ``--help``,
``--version`` and output to a pipe never import it. The severity words at the start of a
line (``  ERROR    ``) are styled by a regular expression over the finished text: nothing a
run's file named is read as rich markup.
"""

from __future__ import annotations

import os
import shutil
from typing import IO

COLOR_CHOICES = ("auto", "always", "never")
#: the severity word at the start of a finding, incident or run line, and its style
STYLES = {"ERROR": "bold red", "WARNING": "yellow", "INFO": "cyan"}
_PATTERN = r"(?m)(?<=^  )(?:{word})\b|(?<=  )(?:{word})(?=  )"


def color_choice(value: str | None) -> str:
    """``value`` as one of COLOR_CHOICES (default auto); anything else is a usage error."""
    name = (value or "auto").strip().lower()
    if name not in COLOR_CHOICES:
        from trainlens.core.errors import UsageError

        raise UsageError(f"--color must be one of {', '.join(COLOR_CHOICES)}, not {value!r}")
    return name


def _is_tty(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def wants_color(choice: str, stream: IO[str]) -> bool:
    """``always``: yes; ``never``: no; ``auto``: on a terminal, unless ``NO_COLOR`` is set
    and not empty (no-color.org) or ``TERM`` is ``dumb``. An explicit flag overrides
    ``NO_COLOR``, as no-color.org allows."""
    if choice == "always":
        return True
    if choice == "never" or os.environ.get("NO_COLOR"):
        return False
    return _is_tty(stream) and os.environ.get("TERM") != "dumb"


def terminal_width(stream: IO[str]) -> int | None:
    """The terminal's width when ``stream`` is one, else None (pipes and files get whole
    lines, for grep)."""
    if not _is_tty(stream):
        return None
    return shutil.get_terminal_size((100, 24)).columns


def colorize(text: str) -> str:
    """``text`` with each severity word styled, as ANSI escapes (rich, imported here)."""
    from rich.console import Console
    from rich.text import Text

    styled = Text(text)
    for word, style in STYLES.items():
        styled.highlight_regex(_PATTERN.format(word=word), style)
    console = Console(force_terminal=True, color_system="standard", soft_wrap=True, highlight=False)
    with console.capture() as capture:
        console.print(styled, end="")
    return capture.get()
