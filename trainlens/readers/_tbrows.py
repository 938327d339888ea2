"""What the numpy reader of TensorBoard files passes between its parts: decoded rows, one
file's results, and the files of one run."""

from __future__ import annotations

import numpy as np

from trainlens.core.dataclass import dataclass, field
from trainlens.readers._tbfile import FileInfo


@dataclass
class Rows:
    """Decoded values of some records: one row per value, in record order."""

    record: np.ndarray  # int64 record index within the file
    step: np.ndarray
    wall: np.ndarray
    tag: np.ndarray  # tag id
    value: np.ndarray

    @classmethod
    def empty(cls) -> Rows:
        e_i, e_f = np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64)
        return cls(e_i, e_i, e_f, e_i, e_f)

    @classmethod
    def concat(cls, parts: list[Rows]) -> Rows:
        parts = [p for p in parts if len(p.record)]
        if not parts:
            return cls.empty()
        if len(parts) == 1:
            return parts[0]
        return cls(
            *(
                np.concatenate([getattr(p, f) for p in parts])
                for f in ("record", "step", "wall", "tag", "value")
            )
        )

    def take(self, idx: np.ndarray) -> Rows:
        return Rows(
            self.record[idx], self.step[idx], self.wall[idx], self.tag[idx], self.value[idx]
        )


class RowBuffer:
    """Rows appended chunk by chunk into arrays allocated once (one value per record is
    the usual case; several values per event make it grow)."""

    FIELDS = ("record", "step", "wall", "tag", "value")

    def __init__(self, capacity: int) -> None:
        self.n = 0
        cap = max(capacity, 16)
        self.cols = {
            f: np.empty(cap, dtype=np.float64 if f in ("wall", "value") else np.int64)
            for f in self.FIELDS
        }

    def append(self, rows: Rows) -> None:
        k = len(rows.record)
        if not k:
            return
        cap = len(self.cols["record"])
        if self.n + k > cap:
            new = max(2 * cap, self.n + k)
            for f, col in self.cols.items():
                grown = np.empty(new, dtype=col.dtype)
                grown[: self.n] = col[: self.n]
                self.cols[f] = grown
        for f, col in self.cols.items():
            col[self.n : self.n + k] = getattr(rows, f)
        self.n += k

    def rows(self) -> Rows:
        return Rows(*(self.cols[f][: self.n] for f in self.FIELDS))


@dataclass
class FileData(FileInfo):
    """What one events file yielded, its values included."""

    rows: Rows = field(default_factory=Rows.empty)
    tag_plugins: dict[int, str] = field(default_factory=dict)
    fast_records: int = 0
    cycle_records: int = 0  # of those, decoded a cycle at a time


@dataclass
class RunParts:
    """The files of one run, each with its tag id -> metric renames (None: as logged)."""

    files: list[FileData] = field(default_factory=list)
    renames: list[dict[int, str] | None] = field(default_factory=list)  # tag id -> metric
    logged: dict[str, str] = field(default_factory=dict)  # renamed label -> tag as logged
