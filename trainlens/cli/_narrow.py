"""The app a command line needs: only the command it runs, or only the commands' names.

typer turns every registered command into a click command (each signature read, each
string annotation evaluated) before it runs any: 11 commands and 145 parameters, about
40 ms of CPU (measured, issue 28), for one command or none. The same app narrowed to the
command ``args`` start with runs it the same way: its help, usage line, errors and exit
codes are built from it alone. ``trainlens``, ``--help``, ``-h``, ``--version`` and
``-V`` alone run no command: they get the commands as their names and help text only
(what the listing shows). Anything else — an option before the command, a name
trainlens does not know (did-you-mean needs every name), shell completion — gets the
whole app. tests/test_cli_startup.py holds each of these to the whole app's output."""

from __future__ import annotations

import copy
import os
from collections.abc import Sequence
from typing import Any

import typer
from typer.main import get_command_name

from trainlens.cli.app import app

#: argument lists that show the listing or the version and run no command
NO_COMMAND: tuple[list[str], ...] = ([], ["--help"], ["-h"], ["--version"], ["-V"])

#: set by a shell asking typer to complete a word (typer names it after the program)
COMPLETE_VAR = "_TRAINLENS_COMPLETE"


def app_for(args: Sequence[str]) -> typer.Typer:
    """``app`` narrowed to what ``args`` need (see the module's docstring)."""
    if app.registered_groups or os.environ.get(COMPLETE_VAR):
        return app
    if list(args) in NO_COMMAND:
        return _narrowed([_listed(c) for c in app.registered_commands])
    if args[0].startswith("-"):
        return app
    chosen = [c for c in app.registered_commands if command_name(c) == args[0]]
    return _narrowed(chosen) if len(chosen) == 1 else app


def command_name(command: Any) -> str | None:
    """The name typer gives a registered command (its own, else the function's)."""
    if command.name:
        return str(command.name)
    callback = command.callback
    return None if callback is None else get_command_name(callback.__name__)


def _narrowed(commands: list[Any]) -> typer.Typer:
    narrowed = copy.copy(app)
    narrowed.registered_commands = commands
    return narrowed


def _listed(command: Any) -> Any:
    """``command`` as the listing shows it: its name and help, no parameters to read (it
    is never run: the arguments it is made for run no command)."""

    def listed() -> None:
        raise AssertionError("a listed command is never run")

    callback = command.callback
    listed.__name__ = callback.__name__
    listed.__doc__ = callback.__doc__
    out = copy.copy(command)
    out.callback = listed
    return out
