"""Followers: what each watched source gained since the last poll.

A follower reads incrementally from a cursor, so a poll of a million-step file that grew by
100 steps reads the 100 steps:

- **JSONL** and **one TensorBoard event file** are read from ``ReadOptions.start_offset``
  (the previous ``Run.cursor``: the end of the last complete line or record);
- **text logs** (Megatron, llm.c, …) and **CSV** tables are read as the complete lines added
  since the cursor (for a CSV with its header line before them), handed to the reader's
  public path in a scratch file of the same name (:mod:`._follow_lines`): the text reader
  reads a last line without a line end and leaves its cursor before it (its values would be
  passed on twice), and the CSV reader has no ``start_offset``;
- a **TensorBoard run folder** follows each of its event files from its cursor, and a new
  event file (a restarted ``SummaryWriter``) joins the run (:mod:`._follow_tb`);
- an **MLflow** store gives one follower per run, re-read only when that run's files (or the
  database's metrics table) changed (:mod:`._follow_mlflow`);
- sources rewritten whole (HF ``trainer_state.json``, a Keras history) are re-read when
  their size or time changes and only the values after those passed before are passed on
  (:class:`RereadFollower`).

A partial last line or record is not an error while watching: it is left for the next poll,
when its writer has finished it (a half-written JSON document likewise). A file that was
replaced (another inode), truncated (shorter than what was read) or rewritten (a CSV whose
header changed: Lightning's CSVLogger rewrites ``metrics.csv`` when a metric appears) is
read again from its start, and the chunk says so (``replaced``: a resumed job). Line and
record numbers in the notes of a chunk are the file's, not the chunk's.

Every follower's rows are the rows ``trainlens.read`` gives for the finished file: same
names, aliases and values (tests follow files while real writers write them and compare).
"""

from __future__ import annotations

import re
from dataclasses import field, replace
from pathlib import Path
from typing import Any

import polars as pl

from trainlens.core.dataclass import dataclass
from trainlens.core.errors import TrainlensError
from trainlens.core.run import DataIssue, Run
from trainlens.core.runstate import RunEnd, run_end
from trainlens.readers import ReadOptions, read_runs
from trainlens.readers._run_end import jsonl_end, only_end_records, text_end

#: Formats whose end is read from the file's last bytes each time it changed (the others'
#: from what the last read of the source said: HF's state, W&B's exit record).
END_PROBES = {"jsonl": jsonl_end, "text": text_end}

#: Formats whose readers take ``ReadOptions.start_offset`` and set ``Run.cursor`` to the end
#: of the last complete line or record, and leave a partial one out.
OFFSET_FORMATS = ("jsonl", "tensorboard")
#: Line formats read as their new complete lines (see the module docstring).
LINE_FORMATS = ("text", "csv")
#: Notes that only say the last line or record is still being written.
WAITING_KINDS = frozenset({"truncated-line", "truncated-record", "partial-record"})


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


def folder_state(folder: Path) -> tuple[tuple[str, int, float], ...] | None:
    """The names, sizes and times of the files under ``folder``: what changes when it
    gained data (None: it cannot be looked at now)."""
    try:
        return tuple(
            sorted(
                (str(p), st.st_size, st.st_mtime)
                for p in folder.rglob("*")
                if p.is_file() and (st := p.stat())
            )
        )
    except OSError:
        return None


def _waiting(issue: DataIssue) -> bool:
    return issue.kind in WAITING_KINDS


#: Notes about the whole run that :class:`~trainlens.watch.live.LiveRun` makes over all the
#: chunks (a chunk's reader saw only its own rows: its restarts are LiveRun's too).
WHOLE_RUN_KINDS = frozenset({"restart", "duplicate-step"})


_LINE = re.compile(r"\b(lines?|records?) (\d+)(\.\.|-| to )?(\d+)?(?: after byte \d+)?")


def renumber(issues: list[DataIssue], lines: int = 0, records: int = 0) -> list[DataIssue]:
    """The notes of a chunk read from an offset, with its line (record) numbers made the
    file's: ``lines`` (``records``) came before the chunk's first one."""
    if not lines and not records:
        return issues

    def shift(m: re.Match[str]) -> str:
        by = lines if m.group(1).startswith("line") else records
        a = int(m.group(2)) + by
        rest = f"{m.group(3)}{int(m.group(4)) + by}" if m.group(4) else ""
        return f"{m.group(1)} {a}{rest}"

    return [
        replace(
            i,
            location=_LINE.sub(shift, i.location) if i.location else i.location,
            message=_LINE.sub(shift, i.message),
        )
        for i in issues
    ]


def empty_frame() -> pl.DataFrame:
    return pl.DataFrame(
        schema={
            "step": pl.Int64,
            "metric": pl.Categorical,
            "value": pl.Float64,
            "wall_time": pl.Float64,
        }
    )


run_frame_empty = empty_frame  # (the name the first version used)


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
        self._told: set[str] = set()  # kinds of summary notes passed on
        self._end: RunEnd | None = None
        self._end_of: tuple[int, int, float] | None = None  # the file the end was read from

    def run_end(self) -> RunEnd | None:
        """How the run ended, as its writer's last mark says; None: no end (yet), or not
        known. A file's last bytes are looked at again only when it changed."""
        probe = END_PROBES.get(self.format)
        if probe is None or not self.path.is_file():
            return self._end
        sig = _signature(self.path)
        if sig is not None and sig != self._end_of:
            self._end_of, self._end = sig, probe(self.path)
        return self._end

    def poll(self, final: bool = False) -> Chunk | None:  # pragma: no cover - subclasses
        """What the source gained since the last poll; None: nothing new. ``final``: the
        watch ends, so a last line without its line end is read too (a finished log need
        not end in one; ``trainlens.read`` reads it)."""
        raise NotImplementedError

    def read_whole(self) -> Run | None:
        """The source as ``trainlens.read`` gives it now (what judging reads), or None
        while nothing complete is there."""
        return self._read(0)

    def _notes(self, issues: list[DataIssue]) -> list[DataIssue]:
        """The notes of one read worth passing on: not a wait, not a whole-run note, and
        a summary note (``info``: 20 histograms skipped) once per kind, not per poll."""
        out = []
        for i in issues:
            if _waiting(i) or i.kind in WHOLE_RUN_KINDS:
                continue
            if i.severity == "info":
                if i.kind in self._told:
                    continue
                self._told.add(i.kind)
            out.append(i)
        return out

    def _options(self, start: int = 0, runs: list[str] | None = None) -> ReadOptions:
        return ReadOptions(
            aliases=self.options.aliases,
            runs=runs if runs is not None else self.options.runs,
            regex=self.options.regex,
            start_offset=start,
        )

    def _read(self, start: int = 0, path: Path | None = None) -> Run | None:
        try:
            runs = read_runs(path or self.path, format=self.format, options=self._options(start))
        except (TrainlensError, OSError) as exc:
            # nothing complete yet (an empty file, one partial line, a half-written JSON
            # document, a database being written, a file being replaced): next poll tells;
            # what the reader said is kept, and told once if it stays (an LFS pointer)
            self.error = str(exc)
            return None
        self.error = None
        if not runs:
            return None
        run = runs[0]
        if path is None:
            self.name, self.source = self.fixed_name or run.name, run.source
            if self.format not in END_PROBES:
                self._end = run_end(run.metadata)
        return run


class OffsetFollower(Follower):
    """A JSONL file or one TensorBoard event file, read from its cursor."""

    def __init__(self, path: Path, fmt: str, options: ReadOptions, name: str | None = None) -> None:
        super().__init__(path, fmt, options, name)
        self.cursor = 0
        self.inode: int | None = None
        self.lines = 0  # lines (records) before the cursor: the chunk's notes count from here

    def poll(self, final: bool = False) -> Chunk | None:
        sig = _signature(self.path)
        if sig is None:
            return None
        inode, size, _ = sig
        replaced = self.inode is not None and (inode != self.inode or size < self.cursor)
        if replaced:
            self.cursor = self.lines = 0
        self.inode = inode
        if size <= self.cursor:
            return None
        start = self.cursor
        run = self._read(start)
        ends = self._only_ends(start, size) if run is None and self.format == "jsonl" else None
        if ends is not None:
            # the writer's end record after its last flush: no metric, nothing to tell
            self.error, self.cursor = None, ends
            self.lines += _count_lines(self.path, start, ends)
            return None
        if run is None:
            return Chunk(empty_frame(), replaced=replaced) if replaced else None
        new_cursor = run.cursor.get(str(self.path), size)
        if new_cursor <= start and not replaced:
            return None  # only a partial line or record so far
        issues = self._notes(run.data_quality)
        if self.format == "tensorboard":
            issues = renumber(issues, records=self.lines)
            self.lines += sum(run.metadata.get("records", {}).values())
        else:
            issues = renumber(issues, lines=self.lines)
            self.lines += _count_lines(self.path, start, new_cursor)
        self.cursor = new_cursor
        return Chunk(run.frame, issues, replaced=replaced, metadata=run.metadata)

    def _only_ends(self, start: int, size: int) -> int | None:
        """The offset after the complete lines from ``start`` when they are all end
        records, else None."""
        if size - start > 1 << 16:
            return None
        try:
            with self.path.open("rb") as fh:
                fh.seek(start)
                data = fh.read(size - start)
        except OSError:
            return None
        complete = data[: data.rfind(b"\n") + 1]
        return start + len(complete) if only_end_records(complete) else None


def _count_lines(path: Path, start: int, end: int) -> int:
    """Line ends between two offsets (the bytes just read: they are in the page cache)."""
    n = 0
    with path.open("rb") as fh:  # (just read by the reader: an error here is a real one)
        fh.seek(start)
        left = end - start
        while left > 0:
            block = fh.read(min(left, 1 << 20))
            if not block:
                break
            n += block.count(b"\n")
            left -= len(block)
    return n


class RereadFollower(Follower):
    """A source rewritten whole (HF ``trainer_state.json``, a Keras history), or a store
    read whole: re-read when it changes; pass on the values after those passed before, per
    metric (a store's rows come metric by metric, so a new value of the first metric is not
    at the end of the frame). When the values passed before changed, the run was rewritten:
    all of it again, ``replaced``."""

    def __init__(self, path: Path, fmt: str, options: ReadOptions, name: str | None = None) -> None:
        super().__init__(path, fmt, options, name)
        self.seen: Any = None
        self.emitted: pl.DataFrame | None = None  # what was passed on, with "_k" per metric
        self.reported: set[tuple[str, str | None, str]] = set()

    def _state(self) -> Any:
        """What changes when the source gained data (None: cannot be looked at now)."""
        if self.path.is_file():
            return _signature(self.path)
        return folder_state(self.path)

    def _read_whole(self) -> Run | None:
        return self._read()

    def read_whole(self) -> Run | None:
        return self._read_whole()  # one MLflow run of a store, not the store's first

    def poll(self, final: bool = False) -> Chunk | None:
        state = self._state()
        if state is None or state == self.seen:
            return None
        run = self._read_whole()
        if run is None:
            return None  # half-written: the state is looked at again next poll
        self.seen = state
        frame = run.frame.drop("superseded", strict=False).with_columns(
            pl.int_range(pl.len()).over("metric").alias("_k")
        )
        issues = self._new_issues(run.data_quality)
        before, self.emitted = self.emitted, frame
        if before is None:
            return Chunk(frame.drop("_k"), issues, metadata=run.metadata)
        counts = before.group_by(pl.col("metric").cast(pl.String)).len()
        keyed = frame.with_columns(pl.col("metric").cast(pl.String).alias("_m")).join(
            counts.rename({"metric": "_m", "len": "_n"}), on="_m", how="left"
        )
        old = keyed.filter(pl.col("_k") < pl.col("_n").fill_null(0))
        if _same_values(old, before):
            new = keyed.filter(pl.col("_k") >= pl.col("_n").fill_null(0))
            return Chunk(
                new.select(run.frame.drop("superseded", strict=False).columns),
                issues,
                metadata=run.metadata,
            )
        self.reported.clear()
        self._told.clear()
        issues = self._new_issues(run.data_quality)
        return Chunk(frame.drop("_k"), issues, replaced=True, metadata=run.metadata)

    def _new_issues(self, issues: list[DataIssue]) -> list[DataIssue]:
        """Each note once: a re-read reports again what the last one did."""
        out = []
        for i in issues:
            key = (i.kind, i.location, i.message)
            if key not in self.reported:
                self.reported.add(key)
                out.append(i)
        return self._notes(out)


def _same_values(old: pl.DataFrame, before: pl.DataFrame) -> bool:
    if old.height != before.height:
        return False
    cols = ["step", "value", "_k"]
    a = old.select(pl.col("_m").alias("metric"), *cols).sort("metric", "_k")
    b = before.select(pl.col("metric").cast(pl.String), *cols).sort("metric", "_k")
    return a.equals(b)
