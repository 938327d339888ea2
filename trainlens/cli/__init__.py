"""Command line: ``main(argv) -> int``. Library errors become one sentence and exit 2 here,
and only here. Command modules import the library lazily so ``--help`` stays instant.

An unexpected exception is a bug in trainlens, not a finding: it is one sentence on stderr
and exit 2 (exit 1 means "a finding at or above --fail-on", and a crash must not look like
one in CI). ``--debug`` (anywhere before ``--``) or ``TRAINLENS_DEBUG=1`` shows the
traceback instead."""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Sequence
from typing import Any

# The command line's numpy work is elementwise; an OpenBLAS thread pool only spins at
# start-up (0.05-0.1 s of CPU per command, measured). Set before numpy is imported, for
# this process only; a user's own setting wins. The library (import trainlens) leaves
# the host process alone.
if "numpy" not in sys.modules:
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import typer

# importing a command module registers its commands on ``app``
from trainlens.cli import analyze as _analyze  # noqa: F401
from trainlens.cli import calc as _calc  # noqa: F401
from trainlens.cli import calc_gpus as _calc_gpus  # noqa: F401
from trainlens.cli import checkpoints as _checkpoints  # noqa: F401
from trainlens.cli import gate as _gate  # noqa: F401
from trainlens.cli import report as _report  # noqa: F401
from trainlens.cli import watch as _watch  # noqa: F401
from trainlens.cli._narrow import app_for
from trainlens.cli.app import app
from trainlens.core.errors import TrainlensError
from trainlens.core.sanitize import terminal

__all__ = ["ISSUES_URL", "app", "app_for", "entry", "internal_error_message", "main"]


def _click_exception_types() -> tuple[tuple[type[BaseException], ...], ...]:
    """Usage-error, exit and abort types of the click typer runs on: recent typer vendors
    its own copy (``typer._click``) and never raises the click package's, older typer
    uses the click package. The package is imported only when typer has no copy of its
    own: importing it anyway cost 6-7 ms of every command's start-up (issue 28)."""
    used: Any
    try:
        from typer._click import exceptions as used
    except ImportError:  # pragma: no cover - an older typer, on the click package
        from click import exceptions as used
    exits = (typer.Exit, *((used.Exit,) if hasattr(used, "Exit") else ()))
    aborts = (typer.Abort, *((used.Abort,) if hasattr(used, "Abort") else ()))
    return (used.ClickException,), exits, aborts


_CLICK_ERRORS, _EXITS, _ABORTS = _click_exception_types()


DEBUG_ENV = "TRAINLENS_DEBUG"


def _take_debug_flag(args: list[str]) -> tuple[list[str], bool]:
    """``args`` without ``--debug`` (before a ``--``), and whether it was there."""
    end = args.index("--") if "--" in args else len(args)
    found = "--debug" in args[:end]
    kept = [a for a in args[:end] if a != "--debug"] + args[end:]
    return kept, found


def _debug_wanted(flag: bool) -> bool:
    return flag or os.environ.get(DEBUG_ENV, "").strip().lower() in {"1", "true", "yes", "on"}


#: where bugs are reported; the installed package's metadata (pyproject's [project.urls]
#: Issues) is asked first, this is the fallback (a source checkout run without install)
ISSUES_URL = "https://github.com/trainlens/trainlens/issues"


def issues_url() -> str:
    """The issue tracker's address: ``Issues`` in the package metadata, else ISSUES_URL."""
    try:
        from importlib.metadata import metadata

        for entry in metadata("trainlens").get_all("Project-URL") or []:
            label, _, url = str(entry).partition(",")
            if label.strip().lower() == "issues" and url.strip().startswith("https://"):
                return url.strip()
    except Exception:  # said while reporting another error: never raise here
        pass
    return ISSUES_URL


def internal_error_message(exc: BaseException) -> str:
    """One sentence for an exception trainlens did not expect: what it was, that it is a
    bug, and how to report it."""
    detail = " ".join(str(exc).split())  # one line, whatever the exception printed
    if len(detail) > 200:
        detail = detail[:199] + "…"
    what = type(exc).__name__ + (f" ({detail})" if detail else "")
    return (
        f"trainlens: internal error: {what}; this is a bug in trainlens, not a problem with "
        f"your run: please report it at {issues_url()} with this command line, rerun "
        f"with --debug or {DEBUG_ENV}=1 for the traceback"
    )


def main(argv: Sequence[str] | None = None) -> int:
    args, debug_flag = _take_debug_flag(list(sys.argv[1:] if argv is None else argv))
    try:
        return _run(args)
    except Exception as exc:  # anything the library did not turn into a TrainlensError
        if _debug_wanted(debug_flag):
            raise
        typer.echo(terminal(internal_error_message(exc)), err=True)
        return 2


def _run(args: list[str]) -> int:
    try:
        result = app_for(args)(args=args, prog_name="trainlens", standalone_mode=False)
    except TrainlensError as exc:
        # the message names files and records of the input: one line, no control codes
        # (GitHub Actions reads workflow commands from stderr too)
        typer.echo(terminal(f"trainlens: error: {exc}"), err=True)
        return exc.exit_code
    except _ABORTS:
        typer.echo("trainlens: aborted", err=True)
        return 130
    except _CLICK_ERRORS as exc:
        exc.show()  # type: ignore[attr-defined]
        code = int(getattr(exc, "exit_code", 2))
        return code if code in (0, 1) else 2
    except _EXITS as exc:
        return int(getattr(exc, "exit_code", 0) or 0)
    except BrokenPipeError:
        return 0
    except (PermissionError, IsADirectoryError, NotADirectoryError) as exc:
        # the machine said no (a file not readable, a folder where a file should be):
        # the user's to fix, not a bug
        where = f"{exc.filename}: " if exc.filename else ""
        typer.echo(terminal(f"trainlens: error: {where}{exc.strerror or exc}"), err=True)
        return 2
    except SystemExit as exc:
        # typer turns a closed pipe (``| head``) into exit 1; it is not an error here
        if isinstance(exc.__context__, BrokenPipeError):
            return 0
        raise
    except KeyboardInterrupt:
        typer.echo("trainlens: interrupted", err=True)
        return 130
    return int(result) if isinstance(result, int) else 0


#: allocations between two young cyclic collections in the console script (Python's
#: default: 700). An analyze of the 100k-step TensorBoard file ran 127 collections, 34 ms
#: of its 454 (one full one, walking every object the imports made: 16 ms); what it
#: allocates is long-lived (modules, classes) or freed by reference counting (frames,
#: arrays). Cycles are still collected, in a long ``watch`` too; only less often.
#: An ``analyze`` makes ~70,000 objects the collector tracks after ``entry`` starts
#: (69,201 for the 100k-step TensorBoard file, 69,808 for a 100-step JSONL), nearly all
#: of them its imports': at 50,000 one young collection still walked 50,000 of them in
#: the middle of numpy's import and freed 56 (12-20 ms of CPU, most of it cache misses:
#: 25 M instructions). At 200,000, start-up runs none (tests/test_cli_startup.py holds
#: an analyze to no collection, and to under half the threshold).
YOUNG_COLLECTION = 200_000


def entry() -> None:
    """Console script: exit with main's code; a closed pipe (``| head``) is not an error."""
    # (the console script's process only: ``main`` and ``import trainlens`` leave the
    # host's collector as it is)
    gc.set_threshold(YOUNG_COLLECTION, *gc.get_threshold()[1:])
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:
        # as the Python docs advise: point stdout at devnull so the interpreter's own
        # flush at exit does not fail again
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 0
    # The interpreter's last cyclic collection at exit walks every object the imports
    # made: 4.7 % of a 100-step analyze's instructions, 2.4 % of a 100k-step one's
    # (callgrind, issue 28). Frozen objects are left out of it; every output trainlens
    # writes is closed where it is written, so nothing it would free holds unwritten data.
    gc.freeze()
    sys.exit(code)
