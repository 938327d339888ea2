"""What a TensorBoard run's metadata and notes need from one events file (no numpy: the
compiled lane's read uses it too)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from trainlens.core.dataclass import dataclass, field
from trainlens.core.run import DataIssue


@dataclass
class FileInfo:
    """What a run's metadata and notes need from one events file."""

    path: Path
    start: int  # byte offset reading started at
    end: int  # byte offset up to which complete records were consumed
    size: int
    records: int
    issues: list[DataIssue] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)
    plugins: set[str] = field(default_factory=set)
    file_version: str | None = None
