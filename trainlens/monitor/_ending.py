"""The end record of a run that dies of an exception nobody caught.

A plain loop closes its monitor in a ``with`` block (``__exit__`` sees the exception) and
Lightning calls ``on_exception``; HF's Trainer has no such event: an exception leaves
``Trainer.train()`` with the callback's monitor open. So every open monitor is tracked,
and ``sys.excepthook`` (called by Python for an exception that ends the program, before
the interpreter shuts down) closes each with that exception: the run's file ends with a
``crashed`` record naming its type. The hook chains to the one installed before it.
A process killed by a signal (SIGKILL, the OOM killer) runs no Python at all: its run
just stops, and ``trainlens watch`` calls it stalled.
"""

from __future__ import annotations

import contextlib
import sys
import weakref
from types import TracebackType
from typing import Any

_OPEN: weakref.WeakSet[Any] = weakref.WeakSet()
_installed = False


def track(monitor: Any) -> None:
    """``monitor`` is open: closed with the exception if one ends the program."""
    global _installed
    _OPEN.add(monitor)
    if not _installed:
        _installed = True
        previous = sys.excepthook

        def hook(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
            for mon in list(_OPEN):
                # (the user's traceback matters more than our record)
                with contextlib.suppress(Exception):
                    mon.close(error=value)
            previous(kind, value, tb)

        sys.excepthook = hook


def untrack(monitor: Any) -> None:
    _OPEN.discard(monitor)
