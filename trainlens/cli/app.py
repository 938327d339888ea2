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
