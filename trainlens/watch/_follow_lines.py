"""Following a text log or a CSV table by its new complete lines.

The CSV reader has no ``start_offset``, and the text reader reads a last line without its
line end and leaves its cursor before it (its values would be passed on twice), so a
follower reads the lines itself: the complete lines added since its cursor go to the
format's reader (its public ``read_runs``) in a scratch file of the same name, after a
prefix line that gives them their context — a CSV's header, a text log's anchor line (see
:class:`LinesFollower`). Notes are told about the watched file, with its line numbers.
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import replace
from pathlib import Path

import polars as pl

from trainlens.core.run import DataIssue, Run
from trainlens.readers import ReadOptions
from trainlens.watch.follow import Chunk, Follower, _signature, empty_frame, renumber

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
        # a first read of a file that ends in a line end is the reader's read of the file
        # (no scratch copy: 1.9 s of the first 5.2 s poll of a 1M-row CSV went on it)
        run = self._read_lines(prefix + data, direct=not prefix and len(data) == size)
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

    def _read_lines(self, data: bytes, direct: bool = False) -> Run | None:
        """The reader's run of ``data`` as if it were the file: same name, same source.
        ``direct``: ``data`` is the whole file; the file is read where it is, unless it
        grew meanwhile (its cursor tells)."""
        if direct:
            run = self._read()
            if run is not None and run.cursor.get(str(self.path)) == len(data):
                return run
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
