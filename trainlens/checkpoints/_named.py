"""The paths a checkpoint's own files name, and the links in its folder, kept inside it.

An index's ``weight_map`` names shards, DCP's ``.metadata`` names storage files, a
``latest`` file names a folder: each is input, and a loader follows it. One that leads
outside the checkpoint (an absolute path, a ``..`` that climbs out, a symlink pointing
out) is an ``outside`` problem (CKPT010) and is never opened, nor stat'ed: the rule is
:func:`trainlens.core.paths.confine`'s.
"""

from __future__ import annotations

import os

from trainlens.checkpoints._model import Problem
from trainlens.core.paths import OutsideTree, confine, is_inside


def inside(problems: list[Problem], base: str, rel: str, by: str) -> bool:
    """Whether ``rel`` (a path relative to the checkpoint folder ``base``, as the file
    ``by`` names it) stays inside ``base``; if not, an ``outside`` problem says why."""
    try:
        confine(base, rel)
    except OutsideTree as exc:
        problems.append(Problem("outside", rel, f"{by} names it, but it {exc.reason}; not opened"))
        return False
    return True


def listing(folder: str, max_files: int) -> tuple[list[str], list[Problem]]:
    """Every regular file under ``folder`` (relative paths, sorted, at most
    ``max_files``; symlinks not followed), and an ``outside`` problem for each symlink
    that leads out of it (a link inside the folder to a file in it is left alone: the
    file itself is audited)."""
    out: list[str] = []
    links: list[Problem] = []
    real_root = os.path.realpath(folder)
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames.sort()
        for name in dirnames:  # a link to a folder is listed here, and not walked
            if os.path.islink(os.path.join(dirpath, name)):
                _link(folder, real_root, os.path.join(dirpath, name), links)
        for name in sorted(filenames):
            full = os.path.join(dirpath, name)
            if os.path.islink(full):  # before isfile, which would follow it
                _link(folder, real_root, full, links)
            elif os.path.isfile(full):
                out.append(os.path.relpath(full, folder))
                if len(out) >= max_files:
                    return out, links
    return out, links


def _link(folder: str, real_root: str, full: str, links: list[Problem]) -> None:
    rel = os.path.relpath(full, folder)
    if is_inside(real_root, os.path.realpath(full)):
        return
    try:
        target = os.readlink(full)
    except OSError:
        target = "?"
    links.append(
        Problem(
            "outside", rel, f"a symlink leading out of the checkpoint (to {target}); not followed"
        )
    )
