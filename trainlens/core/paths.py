"""What kind of thing a path is, asked before anything opens it.

trainlens reads regular files and folders, nothing else. A FIFO (named pipe), a socket
or a character/block device (``/dev/zero``, ``/dev/stdin``) is refused by name: opening
a FIFO for reading blocks until a writer comes (``analyze`` and ``checkpoints`` hung on
one for ever), and a device never ends (``/dev/zero``). So the question is asked with
``os.stat`` (``DirEntry.stat`` inside folders), which never opens the file.
"""

from __future__ import annotations

import os
import stat

from trainlens.core.errors import UnreadableInputError

_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def kind_of_mode(mode: int) -> str | None:
    """``"a FIFO"``, ``"a socket"``, … for a ``st_mode`` that is neither a regular file
    nor a folder; None for those two."""
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    return next((name for test, name in _KINDS if test(mode)), "a special file")


def special_kind(path: str | os.PathLike[str] | os.DirEntry[str]) -> str | None:
    """What ``path`` is when it is neither a regular file nor a folder (a symbolic link
    is judged by what it points to); None for a file, a folder, or a path that cannot be
    looked at (missing, a dangling link, no permission: whoever reads it says so)."""
    try:
        st = path.stat() if isinstance(path, os.DirEntry) else os.stat(path)
    except (OSError, ValueError):  # (ValueError: a NUL byte in the name)
        return None
    return kind_of_mode(st.st_mode)


def special_file_sentence(path: str | os.PathLike[str], kind: str) -> str:
    """The one sentence for a path that is no file or folder (refused or skipped)."""
    return f"{os.fspath(path)} is {kind}, not a file or folder trainlens can read"


def special_file_error(path: str | os.PathLike[str], kind: str) -> UnreadableInputError:
    return UnreadableInputError(special_file_sentence(path, kind))


def require_file_or_folder(path: str | os.PathLike[str]) -> None:
    """Raise :class:`UnreadableInputError` when ``path`` is a FIFO, a socket or a device."""
    kind = special_kind(path)
    if kind is not None:
        raise special_file_error(path, kind)
