"""Files that shrink while they are read (private to the readers).

A job that still writes a log may truncate it (a restart that rewrites it, a logger that
opens it with ``"w"``) while trainlens reads it. A reader that maps the file (the compiled
lanes, the numpy TensorBoard reader, polars reading from a path) would then touch pages
past the new end, and the process would die by SIGBUS, with no message: 9 of 19 tries on
a 274 MB events file or a 134 MB JSONL cut while ``analyze`` read it.

So a mapped read runs inside :func:`guard` (the C guard ``_mapguard``: a page cut from
under a mapping becomes a zero page instead of a signal); when the guard saw a page cut,
the result of that read is thrown away and the file read again by copying it
(:func:`read_copy`), up to where it now ends, with the note :func:`shrank` says. Where
the guard is not built (no C compiler at install), the readers copy instead of mapping.

A file that grows while read is read up to its size when it was opened; the rest is for
the next read (``watch``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from trainlens.core.dataclass import dataclass
from trainlens.core.run import DataIssue

try:
    from trainlens.readers import _mapguard
except ImportError:  # not built: the readers copy files instead of mapping them
    _mapguard = None  # type: ignore[assignment]

#: mapped reads are safe from a file cut short meanwhile
GUARDED: bool = _mapguard is not None and bool(_mapguard.AVAILABLE)

KIND = "file-shrank"
_BLOCK = 1 << 30  # bytes per read call (Linux returns at most ~2 GiB from one)


class Guard:
    """Whether ``path`` was cut while the guard was held: a page of a mapping was cut
    from under it (a zero page stands there), or the file is shorter than when the guard
    was taken (a cut inside the last page mapped reads as zeros without any fault).
    ``size`` is its size when the guard was taken."""

    def __init__(self, path: Path | str) -> None:
        self.path = path
        self.size = _size(path)
        self._before = _patched()
        self.cut = False

    def _done(self) -> None:
        # (a cut in another thread's mapping counts too: then a read is made again by
        # copying for nothing, which costs time, never a wrong value)
        self.cut = _patched() != self._before or _size(self.path) < self.size


def _patched() -> int:
    return int(_mapguard.patched()) if _mapguard is not None else 0


def _size(path: Path | str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:  # gone (being replaced): as cut to nothing
        return 0


@contextmanager
def guard(path: Path | str) -> Iterator[Guard]:
    """Hold the guard while mapped bytes of ``path`` are read; then ask the Guard whether
    the file was cut meanwhile (read it again with :func:`read_copy` when it was)."""
    g = Guard(path)
    if _mapguard is not None:
        _mapguard.enter()
    try:
        yield g
    finally:
        if _mapguard is not None:
            _mapguard.leave()
        g._done()


@dataclass
class Copy:
    """A file's bytes from ``start``, read into memory: ``size`` is its size at open
    (bytes past it, appended meanwhile, are left for the next read)."""

    data: bytes
    start: int
    size: int

    @property
    def end(self) -> int:
        """Offset in the file up to which bytes were read."""
        return self.start + len(self.data)


def fill(fh: BinaryIO, view: memoryview) -> int:
    """Read into ``view`` until it is full or the file ends; the bytes read."""
    got = 0
    while got < len(view):
        n = fh.readinto(view[got : got + _BLOCK])  # type: ignore[attr-defined]
        if not n:
            break
        got += n
    return got


def read_copy(path: Path | str, start: int = 0) -> Copy:
    """The bytes of ``path`` from ``start`` up to its size now, copied (never mapped)."""
    with open(path, "rb", buffering=0) as fh:
        size = os.fstat(fh.fileno()).st_size
        want = max(0, size - start)
        fh.seek(start)
        parts = []
        left = want
        while left > 0:
            part = fh.read(min(left, _BLOCK))  # (one part: no copy to join them)
            if not part:
                break
            parts.append(part)
            left -= len(part)
    data = parts[0] if len(parts) == 1 else b"".join(parts)
    return Copy(data, start, size)


def shrank(path: Path | str, upto: int, size: int) -> DataIssue:
    """The note for a file that was ``size`` bytes when reading began and ended at byte
    ``upto`` when it was read again: every value before ``upto`` is kept."""
    return DataIssue(
        kind=KIND,
        source=str(path),
        location=f"byte {upto}",
        message=f"file shrank while read; read up to byte {upto} (it had {size} bytes)",
        details={"read_to": upto, "size_at_open": size},
    )


def note_if_shrank(path: Path | str, upto: int, size: int) -> list[DataIssue]:
    """[the note] when the bytes read (to ``upto``) fall short of the ``size`` the file
    had when reading began, else []."""
    return [shrank(path, upto, size)] if upto < size else []
