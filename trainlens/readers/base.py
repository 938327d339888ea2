"""What every reader shares: options, the reader protocol, and helpers for messages."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from trainlens.core.dataclass import dataclass, field
from trainlens.core.errors import UnreadableInputError
from trainlens.core.names import AliasTable
from trainlens.core.run import DataIssue, Run

HEAD_BYTES = 4096


@dataclass
class ReadOptions:
    """How to read: user aliases, which runs of a multi-run store, a custom log regex."""

    aliases: AliasTable = field(default_factory=AliasTable)
    runs: list[str] | None = None  # MLflow run ids or names to keep (None: all)
    regex: str | None = None  # text logs: a regex with named groups step and metrics
    start_offset: int = 0  # resume: byte offset already read (streaming readers)


class Reader(Protocol):
    """One module per format exposes these three names."""

    FORMAT: str

    def sniff(self, path: Path, head: bytes) -> bool:
        """True when the file (or directory, head=b"") looks like this format."""
        ...

    def read(self, path: Path, opts: ReadOptions) -> list[Run]:
        """Read every run at ``path``; raise UnreadableInputError when nothing usable."""
        ...


def read_head(path: Path, n: int = HEAD_BYTES) -> bytes:
    with path.open("rb") as fh:
        return fh.read(n)


#: file names that say what a file is, not which run: the run is named after its folder
#: (issue 26: Ultralytics' results.csv, timm's summary.csv, Ray's and SB3's progress.csv,
#: fastai's history.csv)
GENERIC_STEMS = frozenset(
    {
        "metrics",
        "trainer_state",
        "log",
        "train",
        "events",
        "results",
        "summary",
        "progress",
        "history",
    }
)


def run_name_for(path: Path) -> str:
    """A readable default run name: the file's stem, or the folder's name."""
    if path.is_dir():
        return path.resolve().name
    stem = path.name
    for suffix in (".jsonl", ".ndjson", ".json", ".csv", ".tsv", ".log", ".txt"):
        if stem.endswith(suffix):
            stem = stem[: -len(suffix)]
            break
    if stem in GENERIC_STEMS and path.parent.name:
        return path.parent.resolve().name
    return stem


def no_metrics(path: Path, what: str = "no metrics") -> UnreadableInputError:
    return UnreadableInputError(f"{path}: {what} found")


def as_utf8(data: bytes, source: str) -> tuple[bytes, list[DataIssue]]:
    """``data`` itself when it is UTF-8; otherwise with the bad bytes replaced and a note
    that says at which line the first one was."""
    try:
        if not data.isascii():  # ASCII (the usual log) is UTF-8: no need to decode it
            data.decode("utf-8")
        return data, []
    except UnicodeDecodeError as exc:
        line_no = data.count(b"\n", 0, exc.start) + 1
        issue = DataIssue(
            kind="encoding",
            source=source,
            location=f"line {line_no}",
            message=f"bytes that are not UTF-8 (first at line {line_no}) were replaced",
        )
        return data.decode("utf-8", errors="replace").encode("utf-8"), [issue]


def readable_runs(path: Path, runs: list[Run], unreadable: list[UnreadableInputError]) -> list[Run]:
    """The runs read from the parts of ``path`` (a folder of runs), the parts that could
    not be read each a note on the first run; the first error when none could be read."""
    if not runs:
        raise unreadable[0]
    for err in unreadable:
        runs[0].data_quality.append(
            DataIssue(kind="unreadable-run", source=str(path), message=f"left out: {err}")
        )
    return runs
