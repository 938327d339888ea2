"""Command line: ``main(argv) -> int``. Library errors become one sentence and exit 2 here,
and only here. Command modules import the library lazily so ``--help`` stays instant."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import click

from trainlens.cli.app import app
from trainlens.core.errors import TrainlensError

# importing a command module registers its commands on ``app``
from trainlens.cli import analyze as _analyze  # noqa: E402,F401,I001
from trainlens.cli import calc as _calc  # noqa: E402,F401


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        result = app(args=args, prog_name="trainlens", standalone_mode=False)
    except TrainlensError as exc:
        click.echo(f"trainlens: error: {exc}", err=True)
        return exc.exit_code
    except click.exceptions.Abort:
        click.echo("trainlens: aborted", err=True)
        return 130
    except click.exceptions.ClickException as exc:
        exc.show()
        return 2 if exc.exit_code not in (0, 1) else exc.exit_code
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        click.echo("trainlens: interrupted", err=True)
        return 130
    return int(result) if isinstance(result, int) else 0


def entry() -> None:  # pragma: no cover - console script shim
    sys.exit(main())
