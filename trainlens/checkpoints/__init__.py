"""Checkpoints: find a run's checkpoints and audit them without running anything in them.

``inventory(path)`` finds the checkpoints beside a run (or under a folder) and audits
each: step, wall time, size, kind, integrity (``ok`` / ``truncated`` / ``corrupt`` /
``missing`` / ``unsafe``, each problem naming the file and member), and whether the
optimizer state a resume needs is saved. :func:`~trainlens.checkpoints.findings.findings`
turns an inventory into CKPT findings.

Nothing is ever unpickled: pickles (torch's ``data.pkl``, Lightning's ``.ckpt``, DCP's
``.metadata``) are read as opcodes (:mod:`pickletools`), never executed. See
docs/checkpoints.md.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from trainlens.checkpoints._model import Checkpoint, Inventory, Pointer, Problem

# (imported here, not lazily: ``findings`` is both this submodule and its function, and
# the package attribute must stay the function)
from trainlens.checkpoints.findings import CODES, Params, RunSteps, findings

if TYPE_CHECKING:
    from trainlens.checkpoints._budget import PickleBudget
    from trainlens.checkpoints._files import CRC_BUDGET
    from trainlens.checkpoints._inventory import audit, audited, inventory

__all__ = [
    "CODES",
    "CRC_BUDGET",
    "Checkpoint",
    "Inventory",
    "Params",
    "PickleBudget",
    "Pointer",
    "Problem",
    "RunSteps",
    "audit",
    "audited",
    "findings",
    "inventory",
]

#: names imported on first use (PEP 562): the audit's modules cost start-up that reading
#: a run with no checkpoint beside it does not need (see :mod:`._inventory`)
_LAZY = {
    "CRC_BUDGET": "trainlens.checkpoints._files",
    "PickleBudget": "trainlens.checkpoints._budget",
    "audit": "trainlens.checkpoints._inventory",
    "audited": "trainlens.checkpoints._inventory",
    "inventory": "trainlens.checkpoints._inventory",
    "run_steps_of": "trainlens.checkpoints._inventory",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'trainlens.checkpoints' has no attribute {name!r}")
    return getattr(import_module(module), name)
