"""Followers: what each watched source gained since the last poll.

A follower reads incrementally from a cursor where the format allows it (JSONL, text logs
and a TensorBoard event file are read from the byte after the last complete line or
record: ``ReadOptions.start_offset``), so a poll of a million-step file that grew by 100
steps reads the 100 steps. A partial last line or record is not an error while watching:
it is left for the next poll, when its writer has finished it. A file that was replaced
(another inode) or truncated (shorter than what was read) is read again from its start,
and the chunk says so (``replaced``: a resumed job that rewrote its log).

Formats whose files are rewritten whole (HF ``trainer_state.json``, a Keras history) or
that are stores of their own (CSV tables, MLflow, a TensorBoard logdir) are re-read when
they change and only the rows not emitted before are passed on (:class:`RereadFollower`).

Every follower's rows are the rows ``trainlens.read`` gives for the finished file: same
names, aliases and values (tests follow files while real writers write them and compare).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from trainlens.core.errors import TrainlensError
from trainlens.core.run import DataIssue, Run
from trainlens.readers import ReadOptions, detect_format, read_runs

#: Formats read from a byte offset: their readers take ``ReadOptions.start_offset`` and
#: set ``Run.cursor`` to the end of the last complete line or record.
STREAMING = ("jsonl", "text", "tensorboard")


@dataclass
class Chunk:
    """What one poll of one source found."""

    frame: pl.DataFrame  # new rows in the canonical long schema
    issues: list[DataIssue] = field(default_factory=list)
    replaced: bool = False  # the source was replaced or truncated: these rows restart it
    metadata: dict[str, Any] = field(default_factory=dict)


def _signature(path: Path) -> tuple[int, int, float] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime)


def _waiting(issue: DataIssue) -> bool:
    """A note that only says the last line or record is still being written."""
    return issue.kind in {"truncated-line", "truncated-record", "partial-record"}


class Follower:
    """One source being followed (see the module docstring)."""

    def __init__(self, path: Path, fmt: str, options: ReadOptions, name: str | None = None) -> None:
        self.path = path
        self.format = fmt
        self.options = options
        self.fixed_name = name  # the gate's name for a run found in a folder
        self.name = name or (path.stem if path.is_file() else path.name)
        self.source = str(path)
        self.paths: list[Path] = [path]
        self.error: str | None = None  # why the last read gave nothing, if it failed

    def poll(self) -> Chunk | None:  # pragma: no cover - the subclasses define it
        raise NotImplementedError

    def read_whole(self) -> Run | None:
        """The source as ``trainlens.read`` gives it now (what judging reads), or None
        while nothing complete is there."""
        return self._read(0)

    def _read(self, start: int = 0) -> Run | None:
        opts = ReadOptions(
            aliases=self.options.aliases,
            runs=self.options.runs,
            regex=self.options.regex,
            start_offset=start,
        )
        try:
            runs = read_runs(self.path, format=self.format, options=opts)
        except TrainlensError as exc:
            # nothing complete yet (an empty file, one partial line): the next poll tells;
            # what the reader said is kept, and told once if it stays (an LFS pointer)
            self.error = str(exc)
            return None
        self.error = None
        if not runs:
            return None
        run = runs[0]
        self.name, self.source = self.fixed_name or run.name, run.source
        return run


class OffsetFollower(Follower):
    """A JSONL file, a text log or one TensorBoard event file, read from its cursor."""

    def __init__(self, path: Path, fmt: str, options: ReadOptions, name: str | None = None) -> None:
        super().__init__(path, fmt, options, name)
        self.cursor = 0
        self.inode: int | None = None

    def poll(self) -> Chunk | None:
        sig = _signature(self.path)
        if sig is None:
            return None
        inode, size, _ = sig
        replaced = self.inode is not None and (inode != self.inode or size < self.cursor)
        if replaced:
            self.cursor = 0
        self.inode = inode
        if size <= self.cursor:
            return None
        run = self._read(self.cursor)
        if run is None:
            return Chunk(run_frame_empty(), replaced=replaced) if replaced else None
        new_cursor = run.cursor.get(str(self.path), size)
        if new_cursor <= self.cursor and not replaced:
            return None  # only a partial line or record so far
        self.cursor = new_cursor
        issues = [i for i in run.data_quality if not _waiting(i)]
        return Chunk(run.frame, issues, replaced=replaced, metadata=run.metadata)


class RereadFollower(Follower):
    """A source rewritten whole or a store of its own: re-read when it changes; pass on
    the rows after those passed before (or all of them, ``replaced``, when the earlier
    rows changed: the run was rewritten)."""

    def __init__(self, path: Path, fmt: str, options: ReadOptions, name: str | None = None) -> None:
        super().__init__(path, fmt, options, name)
        self.seen: tuple[Any, ...] | None = None
        self.emitted: pl.DataFrame | None = None

    def _state(self) -> tuple[Any, ...] | None:
        if self.path.is_file():
            return _signature(self.path)
        try:  # a folder: the names, sizes and times of the files in it (one level down too)
            return tuple(
                sorted(
                    (str(p), st.st_size, st.st_mtime)
                    for p in self.path.rglob("*")
                    if p.is_file() and (st := p.stat())
                )
            )
        except OSError:
            return None

    def poll(self) -> Chunk | None:
        state = self._state()
        if state is None or state == self.seen:
            return None
        self.seen = state
        run = self._read()
        if run is None:
            return None
        frame = run.frame.drop("superseded", strict=False)
        before = self.emitted
        self.emitted = frame
        if before is None:
            return Chunk(frame, list(run.data_quality), metadata=run.metadata)
        n = before.height
        if frame.height >= n and frame.slice(0, n).equals(before):
            return Chunk(frame.slice(n), [], metadata=run.metadata)
        return Chunk(frame, list(run.data_quality), replaced=True, metadata=run.metadata)


def run_frame_empty() -> pl.DataFrame:
    return pl.DataFrame(
        schema={
            "step": pl.Int64,
            "metric": pl.Categorical,
            "value": pl.Float64,
            "wall_time": pl.Float64,
        }
    )


def follower_for(path: Path, fmt: str, options: ReadOptions, name: str | None = None) -> Follower:
    if fmt in STREAMING and path.is_file():
        return OffsetFollower(path, fmt, options, name)
    return RereadFollower(path, fmt, options, name)


class Discovery:
    """The sources under the watched paths, found as they appear: a file that is created
    after the watch began, a folder whose runs (Lightning versions, TensorBoard runs,
    metrics files) appear one by one."""

    def __init__(self, paths: Sequence[Path], *, format: str | None, options: ReadOptions) -> None:
        self.paths = list(paths)
        self.format = format
        self.options = options
        self.known: set[str] = set()

    def poll(self) -> list[Follower]:
        found: list[Follower] = []
        for path in self.paths:
            for source, fmt, name in self._sources(path):
                key = os.path.realpath(source)
                if key in self.known:
                    continue
                self.known.add(key)
                found.append(follower_for(source, fmt, self.options, name))
        return found

    def _sources(self, path: Path) -> list[tuple[Path, str, str | None]]:
        if path.is_file():
            fmt = self.format or _format_or_none(path)
            return [(path, fmt, None)] if fmt else []
        if not path.is_dir():
            return []
        from trainlens.gate.discover import discover

        if _format_or_none(path):  # the folder is one run (a logdir, a store, a version_N)
            return [(path, self.format or str(_format_or_none(path)), None)]
        out: list[tuple[Path, str, str | None]] = []
        for src in discover([str(path)]):
            fmt = self.format or _format_or_none(Path(src.path))
            if fmt:
                out.append((Path(src.path), fmt, src.name))
        return out


def _format_or_none(path: Path) -> str | None:
    try:
        return detect_format(path)
    except (TrainlensError, OSError):
        return None  # nothing to tell yet (an empty file): looked at again next poll
