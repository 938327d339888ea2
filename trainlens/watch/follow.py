"""Followers: what each watched source gained since the last poll.

A follower reads incrementally from a cursor, so a poll of a million-step file that grew by
100 steps reads the 100 steps:

- **JSONL** and **one TensorBoard event file** are read from ``ReadOptions.start_offset``
  (the previous ``Run.cursor``: the end of the last complete line or record);
- **text logs** (Megatron, llm.c, …) and **CSV** tables are read as the complete lines added
  since the cursor (for a CSV with its header line before them), handed to the reader's
  public path in a scratch file of the same name (:class:`LinesFollower`): the text reader
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

import math
import os
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import polars as pl

from trainlens.core.errors import TrainlensError
from trainlens.core.run import DataIssue, Run
from trainlens.readers import ReadOptions, detect_format, read_runs

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
        self._told: set[str] = set()  # kinds of summary notes passed on

    def poll(self, final: bool = False) -> Chunk | None:  # pragma: no cover - subclasses
        """What the source gained since the last poll; None: nothing new. ``final``: the
        watch ends, so a last line without its line end is read too (a finished log need
        not end in one; ``trainlens.read`` reads it)."""
        raise NotImplementedError

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
        except (TrainlensError, OSError):
            # nothing complete yet (an empty file, one partial line, a half-written JSON
            # document, a database being written, a file being replaced): next poll tells
            return None
        if not runs:
            return None
        run = runs[0]
        if path is None:
            self.name, self.source = self.fixed_name or run.name, run.source
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


#: Text shapes with real steps: once one is in a log, the reader leaves out the DeepSpeed
#: engine lines and printed Trainer dicts anywhere in it (they record the same steps).
STEPPED_SHAPES = ("megatron", "key_value", "nanogpt", "torchtitan", "build_nanogpt")
#: How many of the last lines of a chunk are tried as its log's anchor line.
ANCHOR_TRIES = 64
#: A text log's lines that give no value are read again with the next ones, up to this
#: many bytes: some values take two lines (DeepSpeed-Chat's ``Evaluating perplexity``
#: banner, then ``ppl: …``), and a poll between the two lost the value.
HOLD_BYTES = 1 << 20
#: Steps of DeepSpeed engine lines (printed dicts) held back before a log counts as one
#: of that shape alone (see ``LinesFollower._hold``).
HOLD_STEPS = 3


class LinesFollower(Follower):
    """A text log or a CSV table: the complete lines added since the cursor are read by the
    format's reader from a scratch file of the same name. A line without its line end
    waits. A CSV's chunk has its header line before it; a CSV whose header line changed
    was rewritten (Lightning adds a column by rewriting the file): it is read again whole,
    and only values after those passed on are passed on when the rest are the same.

    A text log's chunk has its **anchor** before it: one line of the log's stepped shape
    (a Megatron ``iteration`` line, an llm.c ``s:N`` line), read alone once. The reader
    decides from the whole file which lines count — Megatron-DeepSpeed prints DeepSpeed
    engine lines beside its own, which the reader leaves out when Megatron lines are in
    the file, and a chunk holding only engine lines would otherwise be read as a DeepSpeed
    log (its ``lr`` twice, measured on Microsoft's Megatron-DeepSpeed MoE log). The
    anchor's own rows come first in the chunk's frame (rows are in line order) and are
    dropped. Before the first stepped line, values of a shape it would overrule are held
    back for up to ``HOLD_STEPS`` steps: Megatron-DeepSpeed prints its engine line just
    before its iteration line."""

    def __init__(self, path: Path, fmt: str, options: ReadOptions, name: str | None = None) -> None:
        super().__init__(path, fmt, options, name)
        self.cursor = 0
        self.inode: int | None = None
        self.lines = 0  # lines before the cursor
        self.header = b""  # a CSV's header line, with its line end
        self.anchor = b""  # a text log's anchor line (see the class docstring)
        self.anchor_rows = 0
        self.pinned = False  # the anchor is a line of the log's stepped shape
        self.committed = False  # a text log of an overrulable shape alone (see _hold)
        self.deepspeed = False  # a DeepSpeed log: chunks end at a step line (_to_last_step)
        self._scratch: tempfile.TemporaryDirectory[str] | None = None
        self.passed = _Passed()

    def _restart(self) -> None:
        self.cursor = self.lines = self.anchor_rows = 0
        self.header = self.anchor = b""
        self.committed = self.deepspeed = self.pinned = False

    def poll(self, final: bool = False) -> Chunk | None:
        sig = _signature(self.path)
        if sig is None:
            return None
        inode, size, _ = sig
        replaced = self.inode is not None and (
            inode != self.inode or size < self.cursor or not self._same_header()
        )
        if replaced:
            self._restart()
        self.inode = inode
        if size <= self.cursor:
            return None
        data = self._complete_lines(size, final)
        if data is None:
            return None  # only a partial line so far
        if self.cursor == 0 and self.format == "csv":
            self.header = data[: data.index(b"\n") + 1]
        prefix = (self.header or self.anchor) if self.cursor else b""
        last = None
        if self.deepspeed and not final:
            last = self._to_last_step(data)
            if last is None:
                return None  # no step line yet after the lines that wait for one
            data = last[0]
        skip = self.anchor_rows if prefix and self.anchor else 0
        # the chunk's lines are numbered after the prefix's line in the scratch file
        shift = self.lines - (1 if prefix else 0)
        run = self._read_lines(prefix + data)
        if run is not None and not final and self._hold(run):
            return None
        if run is None and self.format == "text" and not final and len(data) < HOLD_BYTES:
            return None  # no value yet: read again with the next lines (see HOLD_BYTES)
        if run is not None and not final and self._deepspeed_found(run):
            return self.poll()  # read again, cut at its last step line
        self.cursor = min(self.cursor + len(data), size)  # (final: the line end we added)
        self.lines += data.count(b"\n")
        if run is None:
            return Chunk(empty_frame(), replaced=True) if replaced else None
        frame = run.frame.slice(skip) if skip else run.frame
        if self.format == "text" and not self.pinned:
            self._pin(run, data)
        if last is not None and not self.pinned:
            # a DeepSpeed log's next chunk is read after this one's last step line: its
            # evaluation lines are counted at the step before them
            self.anchor, self.anchor_rows = last[1], last[2]
        if replaced:
            # Lightning's CSVLogger rewrites the whole file when a metric appears: the values
            # passed on before are all there again, and only those after them are new
            tail = self.passed.tail(frame)
            if tail is not None:
                frame, replaced = tail, False
            else:
                self.passed = _Passed()
        self.passed.add(frame)
        scratch = self._scratch.name if self._scratch else ""
        issues = [_at(i, scratch, self.source) for i in self._notes(run.data_quality)]
        if skip:  # (a note about the anchor line was told with the chunk it came in)
            issues = [i for i in issues if i.location != "line 1"]
        issues = renumber(issues, lines=max(shift, 0))
        return Chunk(frame, issues, replaced=replaced, metadata=run.metadata)

    def _hold(self, run: Run) -> bool:
        """Wait with the first values of a shape a stepped one overrules (DeepSpeed's
        engine line comes just before Megatron's iteration line of the same step): read
        with the next lines, the reader leaves them out as it does in the whole file."""
        if self.format != "text" or self.pinned or self.committed:
            return False
        shapes = set(run.metadata.get("text_shapes", {}))
        if not shapes or shapes & set(STEPPED_SHAPES):
            return False
        if run.frame.get_column("step").n_unique() < HOLD_STEPS:
            return True
        self.committed = True  # a log of that shape alone: no stepped line came
        return False

    def _deepspeed_found(self, run: Run) -> bool:
        """True the first time a log without a stepped shape shows DeepSpeed lines."""
        if self.format != "text" or self.pinned or self.deepspeed:
            return False
        shapes = run.metadata.get("text_shapes", {})
        self.deepspeed = any(k.startswith("deepspeed") for k in shapes)
        return self.deepspeed

    def _to_last_step(self, data: bytes) -> tuple[bytes, bytes, int] | None:
        """The lines up to the last one that logs a step, that line and its rows read
        alone. DeepSpeed's overflow lines carry no step and are counted at the next
        logged step, which later lines hold (cut after them, they were counted at the step
        before). None: no such line in the last ``ANCHOR_TRIES`` lines."""
        lines = data.splitlines(keepends=True)
        cut = len(data)
        for line in reversed(lines[-ANCHOR_TRIES:]):
            alone = self._read_lines(line)
            if alone is not None and alone.frame.height:
                return data[:cut], line, alone.frame.height
            cut -= len(line)
        return None

    def _pin(self, run: Run, data: bytes) -> None:
        """Find the anchor in the chunk that holds the log's first stepped lines."""
        if not set(run.metadata.get("text_shapes", {})) & set(STEPPED_SHAPES):
            return
        lines = data.splitlines(keepends=True)
        for line in reversed(lines[-ANCHOR_TRIES:]):
            if not any(c.isdigit() for c in line.decode("utf-8", "replace")):
                continue
            alone = self._read_lines(line)
            got = set(alone.metadata.get("text_shapes", {})) if alone is not None else set()
            if alone is not None and alone.frame.height and got <= set(STEPPED_SHAPES):
                self.anchor, self.anchor_rows, self.pinned = line, alone.frame.height, True
                return

    def _same_header(self) -> bool:
        if not self.header:
            return True
        try:
            with self.path.open("rb") as fh:
                return fh.read(len(self.header)) == self.header
        except OSError:
            return True  # gone for a moment (being replaced): looked at next poll

    def _complete_lines(self, size: int, final: bool = False) -> bytes | None:
        try:
            with self.path.open("rb") as fh:
                fh.seek(self.cursor)
                data = fh.read(size - self.cursor)
        except OSError:
            return None  # gone for a moment (being replaced): looked at next poll
        if final and data.strip() and not data.endswith(b"\n"):
            return data + b"\n"
        end = data.rfind(b"\n") + 1
        return data[:end] if end else None

    def _read_lines(self, data: bytes) -> Run | None:
        """The reader's run of ``data`` as if it were the file: same name, same source."""
        if self._scratch is None:
            self._scratch = tempfile.TemporaryDirectory(prefix="trainlens-watch-")
        scratch = Path(self._scratch.name) / self.path.name
        scratch.write_bytes(data)
        try:
            run = self._read(path=scratch)
        finally:
            scratch.unlink(missing_ok=True)
        if run is None:
            return None
        if self.fixed_name is None and self.cursor == 0:
            from trainlens.readers.base import run_name_for

            self.name = run_name_for(self.path)
        return run


class _Passed:
    """How many values of each metric were passed on, and the last one's (step, value):
    enough to tell a file rewritten with the same values first (pass on the rest) from
    one rewritten with others (a resumed job: all of it again)."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.last: dict[str, tuple[int, float]] = {}

    def add(self, frame: pl.DataFrame) -> None:
        if not frame.height:
            return
        per = frame.group_by(pl.col("metric").cast(pl.String)).agg(
            pl.len(), pl.col("step").last(), pl.col("value").last()
        )
        for metric, n, step, value in per.iter_rows():
            self.counts[metric] = self.counts.get(metric, 0) + n
            self.last[metric] = (step, value)

    def tail(self, frame: pl.DataFrame) -> pl.DataFrame | None:
        """The rows of ``frame`` after those passed on; None when those are not its first."""
        keyed = frame.with_columns(
            pl.col("metric").cast(pl.String).alias("_m"),
            pl.int_range(pl.len()).over("metric").alias("_k"),
        )
        for metric, n in self.counts.items():
            rows = keyed.filter((pl.col("_m") == metric) & (pl.col("_k") == n - 1))
            if not rows.height:
                return None
            step, value = self.last[metric]
            got = rows.row(0, named=True)
            same = got["value"] == value or (math.isnan(got["value"]) and math.isnan(value))
            if got["step"] != step or not same:
                return None
        n_of = pl.col("_m").replace_strict(self.counts, default=0, return_dtype=pl.Int64)
        return keyed.filter(pl.col("_k") >= n_of).drop("_m", "_k")


def _at(issue: DataIssue, scratch: str, source: str) -> DataIssue:
    """A note about the scratch file, said about the watched file."""
    where = str(Path(scratch) / Path(source).name)
    return replace(issue, source=source, message=issue.message.replace(where, source))


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
        try:  # a folder: the names, sizes and times of the files in it
            return tuple(
                sorted(
                    (str(p), st.st_size, st.st_mtime)
                    for p in self.path.rglob("*")
                    if p.is_file() and (st := p.stat())
                )
            )
        except OSError:
            return None

    def _read_whole(self) -> Run | None:
        return self._read()

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


def follower_for(path: Path, fmt: str, options: ReadOptions, name: str | None = None) -> Follower:
    if path.is_file():
        if fmt in OFFSET_FORMATS:
            return OffsetFollower(path, fmt, options, name)
        if fmt in LINE_FORMATS:
            return LinesFollower(path, fmt, options, name)
    elif fmt == "tensorboard":
        from trainlens.watch._follow_tb import TensorBoardRunFollower

        return TensorBoardRunFollower(path, fmt, options, name)
    return RereadFollower(path, fmt, options, name)


class Discovery:
    """The sources under the watched paths, found as they appear: a file that is created
    after the watch began, a folder whose runs (Lightning versions, TensorBoard runs,
    metrics files) appear one by one, an MLflow store's runs."""

    def __init__(self, paths: Sequence[Path], *, format: str | None, options: ReadOptions) -> None:
        self.paths = list(paths)
        self.format = format
        self.options = options
        self.known: set[str] = set()
        self.stores: dict[str, Any] = {}  # MLflow stores: their runs appear one by one

    def poll(self) -> list[Follower]:
        found: list[Follower] = []
        for path in self.paths:
            for source, fmt, name in self._sources(path):
                key = os.path.realpath(source)
                if fmt == "mlflow":
                    found.extend(self._store(key, source, name).new_runs())
                    continue
                if key in self.known:
                    continue
                self.known.add(key)
                found.append(follower_for(source, fmt, self.options, name))
        return found

    def _store(self, key: str, source: Path, name: str | None) -> Any:
        from trainlens.watch._follow_mlflow import MlflowStore

        if key not in self.stores:
            self.stores[key] = MlflowStore(source, self.options, name)
        return self.stores[key]

    def _sources(self, path: Path) -> list[tuple[Path, str, str | None]]:
        if path.is_file():
            fmt = self.format or _format_or_none(path)
            return [(path, fmt, None)] if fmt else []
        if not path.is_dir():
            return []
        from trainlens.gate.discover import discover, is_run_store

        fmt = _format_or_none(path)
        # the folder is one run (a run's logdir, a store, a version_N) unless it is a
        # TensorBoard logdir whose sub-folders are the runs: those are walked, each a run
        if fmt and (fmt != "tensorboard" or is_run_store(path)):
            return [(path, self.format or fmt, None)]
        out: list[tuple[Path, str, str | None]] = []
        try:
            found = discover([str(path)])
        except TrainlensError:
            return []  # no run in it yet: looked at again next time
        for src in found:
            sfmt = self.format or _format_or_none(Path(src.path))
            if sfmt:
                out.append((Path(src.path), sfmt, src.name))
        return out


def _format_or_none(path: Path) -> str | None:
    try:
        return detect_format(path)
    except (TrainlensError, OSError):
        return None  # nothing to tell yet (an empty file): looked at again next poll
