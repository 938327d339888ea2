"""Long JSON lines whose bytes are lists of numbers: the lists emptied before a parser
builds them.

A list is never a metric (the readers keep scalars; a list column is named in a
"not metrics" note), yet parsing one costs many times its text: polars' ndjson reader,
inferring the schema of a 16 MB line that is one list of 800k floats, took 145 MB on top
of the bytes, and a 314 MB line of that kind took 1.9 GB (issue 23). So in each line
longer than :data:`LONG_LINE`, every list of numbers at least :data:`MIN_LIST` bytes long
and outside any string becomes ``[]``: the parser then sees the same keys with the same
kind of value (a list), and the frame, the notes and the line numbers are what they were.

A list is emptied only when it is valid JSON: its text is checked by ``json`` in pieces
of :data:`PIECE` bytes (so a malformed list still makes its line a bad line, and the check
holds at most a piece's numbers at a time). Lists of strings, of objects or of lists are
left as they are (their inner lists of numbers are emptied one by one).
"""

from __future__ import annotations

import json
import re

LONG_LINE = 1 << 20  # shorter lines cost a parser little: left as they are
MIN_LIST = 256  # (a list's text; the scan costs about a microsecond per list it looks at)
PIECE = 1 << 20  # bytes of a list checked by json at a time (~1.7 MB of floats held)
_BLOCK = 1 << 20  # bytes per numpy pass (a bool per byte of it is held)
_ESCAPED = re.compile(rb"\\.")


def empty_long_lists(data: bytes) -> tuple[bytes, int]:
    """``data`` with the long numeric lists of its long lines emptied (``data`` itself
    when there are none), and how many bytes left the last line when it has no newline
    (a line still being written is reported with its own length)."""
    lines = _long_lines(data)
    if not lines:
        return data, 0
    parts: list[bytes] = []
    last = 0
    from_tail = 0
    tail_start = data.rfind(b"\n") + 1
    for start, end in lines:
        for a, b in _numeric_lists(data, start, end):
            parts += [data[last:a], b"[]"]
            last = b
            if a >= tail_start:
                from_tail += b - a - 2
    if not parts:
        return data, 0
    parts.append(data[last:])
    return b"".join(parts), from_tail


def _long_lines(data: bytes) -> list[tuple[int, int]]:
    """(start, end) of every line longer than LONG_LINE (end at its newline, or the end)."""
    if len(data) <= LONG_LINE:
        return []
    import numpy as np

    arr = np.frombuffer(data, dtype=np.uint8)
    spans: list[tuple[int, int]] = []
    line_start = 0
    try:
        for i in range(0, arr.size, _BLOCK):
            ends = np.flatnonzero(arr[i : i + _BLOCK] == 0x0A) + i
            if not ends.size:
                continue
            starts = np.concatenate([[line_start], ends[:-1] + 1])
            long = np.flatnonzero(ends - starts > LONG_LINE)
            spans += [(int(starts[k]), int(ends[k])) for k in long]
            line_start = int(ends[-1]) + 1
    finally:
        del arr
    if len(data) - line_start > LONG_LINE:
        spans.append((line_start, len(data)))
    return spans


def _numeric_lists(data: bytes, start: int, end: int) -> list[tuple[int, int]]:
    """(start, end) spans, end past the ``]``, of the lists to empty in ``data[start:end]``."""
    spans: list[tuple[int, int]] = []
    in_string = False
    pos = start
    while True:
        a = data.find(b"[", pos, end)
        if a < 0:
            return spans
        # (bytes between candidates are few: the line's bulk is in its lists)
        in_string ^= bool(_ESCAPED.sub(b"", data[pos:a]).count(b'"') % 2)
        b = data.find(b"]", a, end)
        if b < 0:
            return spans
        if (
            not in_string
            and b - a >= MIN_LIST
            and data.find(b"[", a + 1, b) < 0
            and data.find(b'"', a + 1, b) < 0
            and data.find(b"{", a + 1, b) < 0
            and _valid_numbers(data, a + 1, b)
        ):
            spans.append((a, b + 1))
            pos = b + 1
        else:
            pos = a + 1  # (what follows the '[' is scanned as the next stretch)


def _valid_numbers(data: bytes, start: int, end: int) -> bool:
    """Whether ``data[start:end]`` is the inside of a valid JSON list (of scalars)."""
    pos = start
    while pos < end:
        cut = data.find(b",", pos + PIECE, end) if end - pos > PIECE else -1
        stop = cut if cut >= 0 else end
        try:
            json.loads(b"[" + data[pos:stop] + b"]")
        except (ValueError, RecursionError):
            return False
        pos = stop + 1
        if cut >= 0 and pos >= end:
            return False  # a trailing comma
    return True
