"""How deep JSON nests, measured on the bytes before any parser sees them.

A JSON line nested 700 deep crashes polars' reader (a segfault: no message at all), one
nested 250 deep takes it over a minute, and 5,000 deep is a RecursionError in Python's
``json``. Logs nest a few levels (a W&B summary, a config); so a container deeper than
:data:`MAX_DEPTH` is reported and left out before a parser sees it. Measured on one line
beside flat ones, the whole read: 32 levels 0.1 s, 64 levels 0.4 s, 128 levels 3.6 s.

The checks are vectorized: :func:`lines_with_many_opens` finds, in one numpy pass of
blocks, the few lines that hold at least ``MAX_DEPTH`` opening brackets (a line cannot
nest deeper than it has brackets); only those are measured exactly (:func:`max_depth`).
"""

from __future__ import annotations

import mmap
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

MAX_DEPTH = 32
_BLOCK = 1 << 20
_SMALL = 1 << 20  # below this, a plain loop over lines (no numpy import for a small log)
_QUOTE, _BACKSLASH = 0x22, 0x5C
_OPENS = (0x7B, 0x5B)  # { [
_CLOSES = (0x7D, 0x5D)  # } ]
_NOT_OPENS_OR_NEWLINES = bytes(b for b in range(256) if b not in (*_OPENS, 0x0A))


def lines_with_many_opens(data: bytes | mmap.mmap, limit: int = MAX_DEPTH) -> list[int]:
    """0-based numbers of the lines holding ``limit`` or more ``{``/``[`` bytes (inside
    strings too: a superset of the lines nested deeper than ``limit``)."""
    if len(data) < _SMALL:
        small = bytes(data)
        if small.count(b"{") + small.count(b"[") < limit:
            return []
        # only the brackets and newlines kept (one C pass): each line is then its count
        # of opens, so the loop is over short lines (a count per line cost ~5x more)
        kept = small.translate(None, _NOT_OPENS_OR_NEWLINES)
        return [n for n, opens in enumerate(kept.split(b"\n")) if len(opens) >= limit]
    import numpy as np

    arr = np.frombuffer(data, dtype=np.uint8)
    found: list[int] = []
    carry = np.empty(0, dtype=np.int64)  # line numbers of the last opens seen
    lines_before = 0
    try:
        for i in range(0, arr.size, _BLOCK):
            block = arr[i : i + _BLOCK]
            opens = np.flatnonzero((block == _OPENS[0]) | (block == _OPENS[1]))
            newlines = np.flatnonzero(block == 0x0A)
            if opens.size:
                line_of = lines_before + np.searchsorted(newlines, opens)
                seq = np.concatenate([carry, line_of]) if carry.size else line_of
                if seq.size >= limit:
                    # sorted line numbers: a line holds >= limit opens exactly when an
                    # entry equals the one limit-1 places on
                    same = seq[: seq.size - limit + 1] == seq[limit - 1 :]
                    if same.any():
                        found.extend(int(n) for n in np.unique(seq[: same.size][same]))
                carry = seq[-(limit - 1) :] if limit > 1 else carry[:0]
            lines_before += newlines.size
    finally:
        del arr
    return sorted(set(found))


def structure(data: bytes) -> tuple[np.ndarray, np.ndarray]:
    """The positions of the brackets outside strings, and the depth after each."""
    import numpy as np

    arr = np.frombuffer(data, dtype=np.uint8)
    quotes = np.flatnonzero(arr == _QUOTE)
    if quotes.size:
        slashes = np.flatnonzero(arr == _BACKSLASH)
        if slashes.size:
            # a quote after an odd run of backslashes is escaped: not a string's end
            breaks = np.flatnonzero(np.diff(slashes) != 1)
            ends = np.append(slashes[breaks], slashes[-1])
            starts = np.insert(slashes[breaks + 1], 0, slashes[0])
            odd_ends = ends[(ends - starts) % 2 == 0]
            quotes = quotes[~np.isin(quotes - 1, odd_ends)]
    brackets = np.flatnonzero(
        (arr == _OPENS[0]) | (arr == _OPENS[1]) | (arr == _CLOSES[0]) | (arr == _CLOSES[1])
    )
    outside = np.searchsorted(quotes, brackets) % 2 == 0
    brackets = brackets[outside]
    kind = arr[brackets]
    delta = np.where((kind == _OPENS[0]) | (kind == _OPENS[1]), 1, -1)
    return brackets, np.cumsum(delta)


def max_depth(data: bytes) -> int:
    """How deep ``data`` (one JSON text) nests: 0 for a bare number, 1 for ``{"a": 1}``."""
    _, depth = structure(data)
    return int(depth.max()) if depth.size else 0


def too_deep_containers(
    data: bytes, at_depth: int, limit: int = MAX_DEPTH
) -> list[tuple[int, int]]:
    """(start, end) byte spans of the containers opened at ``at_depth`` whose contents
    nest deeper than ``limit`` (``end`` is one past the closing bracket, or the end of
    ``data`` when it never closes)."""
    import numpy as np

    positions, depth = structure(data)
    if not depth.size or int(depth.max()) <= limit:
        return []
    previous = np.concatenate([[0], depth[:-1]])
    opens_here = np.flatnonzero((depth == at_depth) & (previous == at_depth - 1))
    spans: list[tuple[int, int]] = []
    for d in np.flatnonzero(depth > limit):
        if spans and positions[d] < spans[-1][1]:
            continue  # inside the span already found
        k = int(np.searchsorted(opens_here, d, side="right")) - 1
        if k < 0:
            continue
        start = int(opens_here[k])
        closed = np.flatnonzero(depth[start + 1 :] == at_depth - 1)
        end = int(positions[start + 1 + closed[0]]) + 1 if closed.size else len(data)
        spans.append((int(positions[start]), end))
    return spans
