"""Paths a file names, kept inside the tree the user gave.

A checkpoint index names its shards, DCP's ``.metadata`` its storage files, a ``latest``
file the folder to resume from; a folder may hold a symlink. Each is input: an index
whose ``weight_map`` names ``../../etc/passwd`` or ``/proc/self/environ`` would
otherwise have its "shard" opened and its first bytes printed back as a header length.
:func:`confine` is the one rule every reader and the checkpoint audit ask before they
open (or even stat) such a path:

- an absolute name is refused (a file written inside a tree names its neighbours
  relative to itself; every real writer does: HF's ``weight_map``, DCP's
  ``relative_path``, DeepSpeed's ``latest``);
- the name joined to the base and normalised must stay inside the base (a ``..`` that
  climbs out is refused before anything outside is looked at);
- then resolved through symlinks (:func:`os.path.realpath`, which follows links with
  ``lstat``/``readlink`` only and opens nothing), it must still be inside the resolved
  base: a link inside the tree pointing out of it is refused;
- what it reaches, when it exists, must be a regular file or a folder: a FIFO blocks
  the reader forever, a device reads without end.

Not covered: a link swapped between this check and the open (the tree would have to be
rewritten while it is read, by someone who can write into it: that writer could as well
put the outside file's bytes into the tree).

What kind of thing a path the user named is, asked before anything opens it, lives here
too: trainlens reads regular files and folders, nothing else. A FIFO (named pipe), a
socket or a character/block device (``/dev/zero``, ``/dev/stdin``) is refused by name:
opening a FIFO for reading blocks until a writer comes (``analyze`` and ``checkpoints``
hung on one for ever), and a device never ends. So the question is asked with
``os.stat`` (``DirEntry.stat`` inside folders), which never opens the file.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from trainlens.core.errors import UnreadableInputError

__all__ = [
    "OutsideTree",
    "confine",
    "confined",
    "is_inside",
    "kind_of_mode",
    "link_leads_out",
    "require_file_or_folder",
    "special_file_error",
    "special_file_sentence",
    "special_kind",
]

#: what a special file is, in the words a message uses
_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


class OutsideTree(ValueError):
    """A name refused by :func:`confine`; ``reason`` completes a sentence about it
    ("``'../x'`` climbs out of the folder with '..'")."""

    def __init__(self, named: str, reason: str) -> None:
        super().__init__(f"{named!r} {reason}")
        self.named = named
        self.reason = reason


def is_inside(base: str, path: str) -> bool:
    """Whether ``path`` is ``base`` or under it (both absolute and normalised alike)."""
    return path == base or path.startswith(base.rstrip(os.sep) + os.sep)


def confine(base: str | os.PathLike[str], named: str | os.PathLike[str]) -> Path:
    """The resolved path of ``named`` (relative to ``base``), when it stays inside
    ``base`` after symlinks and is no special file; else :class:`OutsideTree`.

    A name that does not exist is returned (resolved as far as it goes): whether it is
    missing is the caller's finding, and it is inside the tree either way."""
    text = os.fspath(named)
    if "\0" in text:
        raise OutsideTree(text, "holds a NUL byte")
    if not text:
        raise OutsideTree(text, "is empty")
    if os.path.isabs(text):
        raise OutsideTree(text, "is an absolute path, outside the folder")
    root = os.path.abspath(os.fspath(base))
    joined = os.path.normpath(os.path.join(root, text))
    if not is_inside(root, joined):
        raise OutsideTree(text, "climbs out of the folder with '..'")
    real_root = os.path.realpath(root)
    real = os.path.realpath(joined)
    if not is_inside(real_root, real):
        raise OutsideTree(text, "leads out of the folder through a symlink")
    try:
        mode = os.stat(real).st_mode
    except OSError:  # missing, or a dangling link that stayed inside: the caller says so
        return Path(real)
    what = kind_of_mode(mode)
    if what is not None:
        raise OutsideTree(text, f"is {what}, not a regular file")
    return Path(real)


def confined(base: str | os.PathLike[str], named: str | os.PathLike[str]) -> Path | None:
    """:func:`confine`, or None when the name is refused."""
    try:
        return confine(base, named)
    except OutsideTree:
        return None


def link_leads_out(base: str | os.PathLike[str], path: str | os.PathLike[str]) -> str | None:
    """For ``path``, an entry listed under ``base``: why it may not be read (a symlink
    that leads out of ``base``, a special file), or None. Only links and special files
    cost a system call: a regular entry of a real folder under ``base`` is inside it."""
    try:
        confine(base, os.path.relpath(os.fspath(path), os.fspath(base)))
    except OutsideTree as exc:
        return exc.reason
    return None


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
