"""One budget for reading a checkpoint's pickles: bytes, opcodes, memo entries, seconds.

Shared by every pickle of one checkpoint (each member of a zip, each file of a folder),
so a checkpoint of many members cannot multiply it; a fresh one for the next checkpoint.
When any part runs out the walk stops where it is, the checkpoint is reported as not
audited (CKPT011) and the audit goes on to the next checkpoint.

The defaults rest on real files and on the walk's measured cost (about 0.4 µs of CPU an
opcode, bench/pickle_walk.py): a torch ``data.pkl`` costs 25-30 opcodes and 8 memo
entries a tensor (a 3,000-tensor state dict: 90,017 opcodes, 24,006 memo entries), so
4 million opcodes is over 130,000 tensors in one checkpoint and about 1.6 s of CPU; a
pickle that needs more is a memo or opcode bomb (a 64 MiB member of MEMOIZE holds 67
million) or is no checkpoint. Measured on such bombs: docs/checkpoints.md.
"""

from __future__ import annotations

import time

from trainlens.core.dataclass import dataclass, field


@dataclass(frozen=True)
class PickleBudget:
    #: pickle bytes read (a torch ``data.pkl`` holds the object tree only: KBs to MBs;
    #: tensors live in other members)
    bytes: int = 256 * 2**20
    #: opcodes walked
    opcodes: int = 4_000_000
    #: memo entries kept (the walk keeps one slot each: 8 B for a dense memo)
    memo: int = 2_000_000
    #: wall-clock seconds (a slow disk or a loaded machine; the other limits come first
    #: on any file the walk reads at its usual speed)
    seconds: float = 20.0


@dataclass
class Spend:
    """What one checkpoint has used of its budget, and the first limit it ran into."""

    budget: PickleBudget = field(default_factory=PickleBudget)
    bytes: int = 0
    opcodes: int = 0
    memo: int = 0
    started: float = field(default_factory=time.monotonic)
    spent: str | None = None  # e.g. "4,000,000 opcodes"
    where: str | None = None  # the file (and member) the walk was in when it ran out

    def message(self) -> str:
        return (
            f"the audit stopped at {self.spent}, this checkpoint's budget for its pickles: "
            "the rest is not read, so it is not known to be safe to load"
        )

    def out_of_time(self) -> bool:
        if time.monotonic() - self.started > self.budget.seconds:
            self.spent = f"{self.budget.seconds:g} s"
        return self.spent is not None

    def bytes_left(self) -> int:
        return max(0, self.budget.bytes - self.bytes)
