"""Where a read of a text log starts and ends: the resume cursor, and the text's lines.

``start_offset`` resumes reading at a byte offset; ``run.cursor[path]`` is the offset just
past the last complete line. A last line without a line end is read but left for the next
read, which may see it finished. A file shorter than the offset was replaced or truncated
(log rotation) and is read again from the start. A live ``watch`` reads the file again from
each cursor.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import polars as pl

from trainlens.core.dataclass import dataclass
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


def split_lines(text: str, *, redraws: bool = False) -> pl.Series:
    """The lines, without line ends: CRLF line ends; a bare CR (a progress bar redrawn)
    keeps what was written after it (``redraws``: the line keeps every drawn state, CRs
    between them, for the reader to pick); terminal colours removed (torchtitan colours
    each field of its metrics line)."""
    parts = text.split("\n")
    if text.endswith("\n"):
        parts.pop()
    lines = pl.Series("line", parts, dtype=pl.String)
    del parts
    if "\r" in text:
        lines = lines.str.strip_chars_end("\r")
        if not redraws:
            lines = lines.str.replace(r"^[^\n]*\r", "")
    if "\x1b" in text:
        lines = lines.str.replace_all(ANSI, "")
    return lines


def strip_ansi(text: str) -> str:
    return re.sub(ANSI, "", text) if "\x1b" in text else text


# ---- the file in pieces ---------------------------------------------------------------

# bytes read at a time; each piece is cut at its last line end. The whole file as one
# piece held its bytes, its text, a Python string per line and every field's strings at
# once: a 289 MB Megatron log peaked at 2.9 GB over the imports (10x; bench/memory.py).
# A piece's strings take up to ~13x the piece: at 4 MB a 48 MB log peaked 200 MB over the
# imports (8 MB: 270 MB), for the same CPU time (2.8 s; the calls per piece are few).
PIECE_BYTES = 4 << 20


@dataclass
class Pieces:
    """What reading the pieces from ``start`` saw: the resume cursor (just past the last
    line end), line ends, the unfinished last line, bytes that are not UTF-8."""

    start: int
    cursor: int = 0
    newlines: int = 0
    tail: int = 0  # bytes after the last line end that are not white space
    text_seen: bool = False  # anything but white space
    bad_line: int | None = None  # the first line with bytes that are not UTF-8
    bad_offset: int = 0
    replaced: int = 0

    def note(self, notes: Notes) -> None:
        """The notes :func:`read_chunk` and :func:`decode` give for the whole text."""
        if self.tail:
            notes.add(
                "unterminated-line",
                f"the last line ({self.tail} bytes) has no line end — a run still being "
                "written? Its values were read, but the resume cursor stays before it",
                line=self.newlines + 1,
                byte_offset=self.cursor,
            )
        if self.bad_line is not None:
            notes.add(
                "encoding",
                f"bytes that are not UTF-8 (first at {notes.line(self.bad_line)}) were "
                "replaced; the lines around them were read as far as they parse",
                line=self.bad_line,
                count=max(self.replaced, 1),
                first_byte_offset=self.bad_offset,
            )


def pieces(path: Path, seen: Pieces) -> Iterator[tuple[str, bool]]:
    """The text from ``seen.start`` in pieces of about PIECE_BYTES, each ending at a line
    end but the last, and whether it is the last; ``seen`` learns as it goes."""
    seen.cursor = seen.start
    with path.open("rb") as fh:
        fh.seek(seen.start)
        rest = b""
        offset = seen.start  # where ``rest`` starts in the file
        first = True
        while True:
            more = fh.read(PIECE_BYTES)
            buf = rest + more if rest else more
            if not more:
                if buf.strip():
                    seen.tail = len(buf)
                yield _decode_piece(buf, offset, seen, first), True
                return
            end = buf.rfind(b"\n") + 1
            if end == 0:
                rest = buf  # (a line longer than a piece: read on to its end)
                continue
            piece, rest = buf[:end], buf[end:]
            seen.cursor = offset + end
            yield _decode_piece(piece, offset, seen, first), False
            offset += end
            first = False


def _decode_piece(data: bytes, offset: int, seen: Pieces, first: bool) -> str:
    seen.text_seen = seen.text_seen or (bool(data) and not data.isspace())
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        text = data.decode("utf-8", errors="replace")
        if seen.bad_line is None:
            seen.bad_line = seen.newlines + data.count(b"\n", 0, exc.start) + 1
            seen.bad_offset = offset + exc.start
        seen.replaced += text.count("\ufffd") - data.count("\ufffd".encode())
    seen.newlines += data.count(b"\n")
    return text.removeprefix("\ufeff") if first else text
