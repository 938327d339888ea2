"""The typer application object; command modules register on it."""

from __future__ import annotations

from typing import Any

import typer
import typer.core

from trainlens.cli import _coerce


def _plain_metavars() -> None:
    """Help in the convention of click and ruff (``--gpu GPU``, ``PATHS...``), not typer's
    Python types (``--gpu <str>``, ``--select <list[str]>``, ``{paths}...``), which read as
    code to a user. typer has no setting for it; these three methods are where it writes
    them (typer 0.2x), and tests/test_user_mistakes.py fails if a typer release moves them."""
    core = typer.core

    def option_metavar(self: Any, ctx: Any) -> str | None:
        if self.metavar is not None:
            return str(self.metavar)
        return (self.name or "value").upper()

    def argument_metavar(self: Any, ctx: Any) -> str | None:
        return None  # the name column already says it

    def argument_name(self: Any) -> str:
        name = str(self.metavar or (self.name or "value").upper())
        if self.nargs != 1:
            name += "..."
        return name if self.required else f"[{name}]"

    def argument_column(self: Any) -> str:
        name = str(self.metavar or (self.name or "value").upper())
        return name + "..." if self.nargs != 1 else name

    if hasattr(core.TyperOption, "display_type_rich"):
        core.TyperOption.display_type_rich = option_metavar  # type: ignore[method-assign]
    if hasattr(core.TyperArgument, "display_type_rich"):
        core.TyperArgument.display_type_rich = argument_metavar  # type: ignore[method-assign]
    if hasattr(core.TyperArgument, "_usage_display_name"):
        core.TyperArgument._usage_display_name = argument_name  # type: ignore[method-assign]
    if hasattr(core.TyperArgument, "_rich_display_name"):
        core.TyperArgument._rich_display_name = argument_column  # type: ignore[method-assign]


_plain_metavars()
_coerce.install(typer.core)  # plain types converted without importing pydantic

app = typer.Typer(
    name="trainlens",
    help=(
        "Read the metrics a training run logged and tell what went wrong, when, "
        "and what moved first. (--debug, or TRAINLENS_DEBUG=1: show the traceback of "
        "an internal error.)"
    ),
    no_args_is_help=True,
    # `trainlens --install-completion` / `--show-completion` (bash, zsh, fish, PowerShell)
    add_completion=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _print_version(value: bool) -> None:
    if value:
        from trainlens import __version__

        typer.echo(f"trainlens {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: bool = typer.Option(
        False,
        "--version",
        "-V",
        help="Print trainlens' version and exit.",
        callback=_print_version,
        is_eager=True,
    ),
) -> None:
    """Read the metrics a training run logged and tell what went wrong, when, and what
    moved first. (--debug, or TRAINLENS_DEBUG=1: show the traceback of an internal
    error.)"""
