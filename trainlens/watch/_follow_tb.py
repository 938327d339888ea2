"""Following a TensorBoard run folder: each event file from its cursor; new files join.

A run folder holds one event file per ``SummaryWriter`` session: a restarted writer (a
resumed job) adds a new file to the same folder, which joins the run, read after the files
before it (the reader's order: the timestamp in the file's name), so a step that goes back
becomes a restart as in ``trainlens.read``. Keras' ``train/`` and ``validation/`` folders
are files of the run too (the reader names and maps a file there as its run would).

Each file is read from its cursor (:class:`~trainlens.watch.follow.OffsetFollower`): a
record the writer has not finished flushing is left for the next poll (the reader's
``truncated-record`` note, which moves no cursor, is a wait); a corrupt record between
sound ones is reported once, with its record number in the file.

``add_scalars`` writes each of its series into a sub-folder of its own, named after the
main tag; the reader folds them back into the run as ``main_tag/key`` only when it reads
the whole folder, so a run with such sub-folders is re-read whole when one of its files
changed (:class:`~trainlens.watch.follow.RereadFollower`) — the one TensorBoard layout not
read incrementally.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import polars as pl

from trainlens.readers import ReadOptions
from trainlens.readers._sniff import is_event_file_name
from trainlens.readers.tensorboard import SPLIT_DIRS
from trainlens.watch.follow import Chunk, Follower, OffsetFollower, RereadFollower

_STAMP = re.compile(r"tfevents\.(\d+)")


def _order(path: Path) -> tuple[str, int, str]:
    """The reader's order of a run's files: by folder, then the time in the name."""
    m = _STAMP.search(path.name)
    return (path.parent.name, int(m.group(1)) if m else 0, path.name)


def _event_files(folder: Path) -> list[Path]:
    try:
        return [
            Path(e.path) for e in os.scandir(folder) if is_event_file_name(e.name) and e.is_file()
        ]
    except OSError:
        return []


class TensorBoardRunFollower(Follower):
    """One TensorBoard run folder (see the module docstring)."""

    def __init__(self, path: Path, fmt: str, options: ReadOptions, name: str | None = None) -> None:
        super().__init__(path, fmt, options, name)
        self.name = name or path.resolve().name
        self.files: dict[Path, OffsetFollower] = {}
        self.whole: RereadFollower | None = None

    def _folders(self) -> list[Path]:
        return [self.path, *(self.path / s for s in SPLIT_DIRS if (self.path / s).is_dir())]

    def _has_folded_series(self) -> bool:
        """Event files in a sub-folder that is not Keras' train/validation: add_scalars."""
        try:
            subs = [e for e in os.scandir(self.path) if e.is_dir() and e.name not in SPLIT_DIRS]
        except OSError:
            return False
        return any(_event_files(Path(e.path)) for e in subs)

    def poll(self, final: bool = False) -> Chunk | None:
        if self.whole is None and self._has_folded_series():
            self.whole = RereadFollower(self.path, self.format, self.options, self.name)
            if self.files:  # what was passed on so far is passed on again, whole
                self.files.clear()
                chunk = self.whole.poll()
                if chunk is not None:
                    chunk.replaced = True
                return chunk
        if self.whole is not None:
            chunk = self.whole.poll()
            self.source = self.whole.source
            return chunk
        return self._poll_files()

    def _poll_files(self) -> Chunk | None:
        for folder in self._folders():
            for f in _event_files(folder):
                if f not in self.files:
                    self.files[f] = OffsetFollower(f, self.format, self.options, self.name)
                    self.paths.append(f)
        chunks = []
        for f in sorted(self.files, key=_order):
            chunk = self.files[f].poll()
            if chunk is not None:
                chunks.append(chunk)
        if not chunks:
            return None
        frames = [c.frame.drop("superseded", strict=False) for c in chunks if c.frame.height]
        frame = (
            pl.concat(
                [fr.with_columns(pl.col("metric").cast(pl.String)) for fr in frames],
                how="diagonal_relaxed",
            )
            if frames
            else chunks[0].frame
        )
        metadata: dict[str, object] = {}
        for c in chunks:
            metadata.update(c.metadata)
        metadata["files"] = [
            f.relative_to(self.path).as_posix() for f in sorted(self.files, key=_order)
        ]
        metadata.pop("records", None)  # (counts of one poll's records: not the run's)
        return Chunk(
            frame,
            [i for c in chunks for i in c.issues],
            replaced=any(c.replaced for c in chunks),
            metadata=metadata,
        )
