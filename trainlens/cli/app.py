"""The typer application object; command modules register on it."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="trainlens",
    help=(
        "Read the metrics a training run logged and tell what went wrong, when, "
        "and what moved first. (--debug, or TRAINLENS_DEBUG=1: show the traceback of "
        "an internal error.)"
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
