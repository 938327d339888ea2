"""What an audit says about one checkpoint, and about a ``latest`` pointer."""

from __future__ import annotations

from typing import Any

from trainlens.core.dataclass import dataclass, field

#: integrity states, worst first: code that would run on load beats damage, damage beats
#: a missing piece (a checkpoint with both is reported by the worst); ``outside``: a file
#: of it names a path outside it (or a link leads out), which a loader would read;
#: ``over-budget``: its pickles were not all read (the audit's budget ran out), so it is
#: not known to be safe
STATUSES = (
    "unsafe",
    "outside",
    "over-budget",
    "corrupt",
    "truncated",
    "missing",
    "unreadable",
    "ok",
)


@dataclass(frozen=True)
class Problem:
    """One thing wrong with one file of a checkpoint (``file`` relative to the checkpoint)."""

    status: str  # one of STATUSES except "ok"
    file: str
    message: str

    def text(self) -> str:
        return f"{self.file}: {self.message}" if self.file else self.message


@dataclass
class Checkpoint:
    """One checkpoint: a file (torch ``.pt``, Lightning ``.ckpt``, ``.safetensors``) or a
    folder (HF ``checkpoint-N``, Megatron ``iter_N``, DeepSpeed ``global_stepN``, a DCP
    folder, a sharded safetensors index and its shards)."""

    path: str
    kind: str
    step: int | None
    wall_time: float | None  # newest mtime of its files: when the write finished
    size: int  # bytes, apparent (st_size; a sparse file counts whole)
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what was not checked, and why
    #: whether the optimizer state a resume needs is there (None: cannot tell / no format)
    optimizer: bool | None = None
    #: kept by a metric (Lightning's ModelCheckpoint with a ``monitor``: the top k), not
    #: by cadence: gaps between such saves are by design
    selective: bool = False

    @property
    def status(self) -> str:
        found = {p.status for p in self.problems}
        return next((s for s in STATUSES if s in found), "ok")

    @property
    def intact(self) -> bool:
        return self.status == "ok"

    @property
    def name(self) -> str:
        """The folder or file name; a sharded index goes by its folder's name."""
        parts = self.path.rstrip("/").rsplit("/", 2)
        if self.path.endswith(".safetensors.index.json") and len(parts) > 1:
            return f"{parts[-2]}/{parts[-1]}"
        return parts[-1]

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "name": self.name,
            "kind": self.kind,
            "step": self.step,
            "wall_time": self.wall_time,
            "size": self.size,
            "integrity": self.status,
            "problems": [
                {"status": p.status, "file": p.file, "message": p.message} for p in self.problems
            ],
            "notes": list(self.notes),
            "optimizer": self.optimizer,
            "selective": self.selective,
        }


@dataclass
class Pointer:
    """A ``latest`` file (DeepSpeed ``latest``, Megatron ``latest_checkpointed_iteration.txt``)
    and what it names."""

    path: str
    kind: str
    target: str  # as written in the file
    resolved: str | None  # the checkpoint path it names, None when nothing matches
    #: why the target was not followed (it leads outside the pointer's folder), or None
    refused: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "kind": self.kind,
            "target": self.target,
            "resolved": self.resolved,
            "refused": self.refused,
        }


@dataclass
class Inventory:
    """Every checkpoint found under ``root``, oldest step first, and the pointers."""

    root: str
    checkpoints: list[Checkpoint] = field(default_factory=list)
    pointers: list[Pointer] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def by_path(self, path: str) -> Checkpoint | None:
        return next((c for c in self.checkpoints if c.path == path), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "root": self.root,
            "checkpoints": [c.to_dict() for c in self.checkpoints],
            "pointers": [p.to_dict() for p in self.pointers],
            "notes": list(self.notes),
        }
