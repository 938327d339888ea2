"""Where a read of a text log starts and ends: the resume cursor, and the text's lines.

``start_offset`` resumes reading at a byte offset; ``run.cursor[path]`` is the offset just
past the last complete line. A last line without a line end is read but left for the next
read, which may see it finished. A file shorter than the offset was replaced or truncated
(log rotation) and is read again from the start. A live ``watch`` reads the file again from
each cursor.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from trainlens.readers.textlog.notes import Notes
from trainlens.readers.textlog.shapes import ANSI


@dataclass(frozen=True)
class Chunk:
    """The bytes of one read: from ``start`` to the end of the file; ``cursor`` is the
    offset just past its last complete line."""

    data: bytes
    start: int
    cursor: int

    @property
    def resumed(self) -> bool:
        return self.start > 0


def resume_offset(path: Path, start_offset: int, source: str) -> tuple[int, Notes]:
    """The offset to read from, and the read's notes (which count lines from it)."""
    start = max(int(start_offset), 0)
    if start > path.stat().st_size:
        notes = Notes(source, 0)
        notes.add(
            "truncated-file",
            f"the file is shorter than the resume offset {start}; it was read again from the start",
            start_offset=start,
        )
        # (DataIssue's location stays None: the note is about the whole file)
        return 0, notes
    return start, Notes(source, start)


def read_chunk(path: Path, start: int, notes: Notes) -> Chunk:
    """The file's bytes from ``start``, with a note when its last line is unfinished."""
    with path.open("rb") as fh:
        fh.seek(start)
        data = fh.read()
    end = data.rfind(b"\n") + 1
    cursor = start + end
    tail = data[end:]
    if tail.strip():
        notes.add(
            "unterminated-line",
            f"the last line ({len(tail)} bytes) has no line end — a run still being "
            "written? Its values were read, but the resume cursor stays before it",
            line=data.count(b"\n") + 1,
            byte_offset=cursor,
        )
    return Chunk(data, start, cursor)


def decode(data: bytes, notes: Notes) -> str:
    """The text, bytes that are not UTF-8 replaced (with a note at the first)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line_no = data.count(b"\n", 0, exc.start) + 1
        text = data.decode("utf-8", errors="replace")
        n_bad = text.count("\ufffd") - data.count("\ufffd".encode())
        notes.add(
            "encoding",
            f"bytes that are not UTF-8 (first at {notes.line(line_no)}) were "
            "replaced; the lines around them were read as far as they parse",
            line=line_no,
            count=max(n_bad, 1),
            first_byte_offset=notes.start + exc.start,
        )
    return text.removeprefix("\ufeff")


def split_lines(text: str) -> pl.Series:
    """The lines, without line ends: CRLF line ends; a bare CR (a progress bar redrawn)
    keeps what was written after it; terminal colours removed (torchtitan colours each
    field of its metrics line)."""
    parts = text.split("\n")
    if text.endswith("\n"):
        parts.pop()
    lines = pl.Series("line", parts, dtype=pl.String)
    del parts
    if "\r" in text:
        lines = lines.str.strip_chars_end("\r").str.replace(r"^[^\n]*\r", "")
    if "\x1b" in text:
        lines = lines.str.replace_all(ANSI, "")
    return lines


def strip_ansi(text: str) -> str:
    return re.sub(ANSI, "", text) if "\x1b" in text else text
