"""Find a run's checkpoints: under a folder, or beside a run file.

From the folder (a run file's own folder) down to :data:`MAX_DEPTH` levels; a folder a
layout recognises (``checkpoint-800``, ``iter_0000800``, ``global_step800``, a DCP folder)
is one checkpoint and is not searched further. When nothing is found, the parent folders
are tried (:data:`MAX_UP` levels): HF Trainer logs TensorBoard into
``output_dir/runs/<date>/`` and checkpoints into ``output_dir/checkpoint-N/``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from trainlens.checkpoints import _layouts as L
from trainlens.core.dataclass import dataclass, field

MAX_DEPTH = 3
MAX_UP = 2
MAX_ENTRIES = 50_000  # directory entries looked at, in all (a home folder is not a run)
_SKIP = frozenset({"__pycache__", "node_modules", ".git", "wandb", "mlruns"})


@dataclass
class Found:
    """What discovery found: (path, kind, step) of each checkpoint, and pointer files."""

    folders: list[tuple[str, str, int | None]] = field(default_factory=list)
    files: list[tuple[str, str, int | None]] = field(default_factory=list)
    pointers: list[tuple[str, str]] = field(default_factory=list)  # (path, kind)
    truncated: bool = False

    def __bool__(self) -> bool:
        return bool(self.folders or self.files)


def find(path: str) -> tuple[str, Found]:
    """(the folder searched, what it holds); parents are tried when nothing is found."""
    start = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
    found = Found()
    _walk_once(start, found, [0], MAX_DEPTH)
    root = start
    for _ in range(MAX_UP):
        if found or os.path.dirname(root) == root:
            break
        root = os.path.dirname(root)
        _walk_once(root, found, [0], 0)
    return (root if found else start), found


# Each folder's walk done once while shared_listings() is on (a gate): every run file in a
# folder of N runs walks that folder (its own folder, and the parents above it), so
# without it N runs listed N entries each (and stat'ed each for a DCP file), N**2 in all:
# 300 JSONL runs in one folder spent ~3 ms a run there, 100k runs would spend seconds a
# run. Keyed by (folder, depth searched): what the walk found and how many entries it
# looked at.
_WALKS: dict[tuple[str, int], tuple[Found, int]] | None = None


@contextmanager
def shared_listings() -> Iterator[None]:
    """Within this block each folder is walked once (a gate's runs are judged against one
    state of the tree, as a snapshot)."""
    global _WALKS
    outer, _WALKS = _WALKS, ({} if _WALKS is None else _WALKS)
    try:
        yield
    finally:
        _WALKS = outer


def _walk_once(folder: str, found: Found, seen: list[int], max_depth: int) -> None:
    """:func:`_walk` of ``folder``, its result reused within :func:`shared_listings`. A
    walk that stopped at :data:`MAX_ENTRIES` is not kept, and a kept one is reused only
    where the entries already counted leave room for all of its own: then a fresh walk
    would have found the same, in the same order, and counted as many."""
    if _WALKS is None:
        _walk(folder, 0, found, seen, max_depth)
        return
    key = (folder, max_depth)
    kept = _WALKS.get(key)
    if kept is None:
        fresh, counted = Found(), [0]
        _walk(folder, 0, fresh, counted, max_depth)
        kept = (fresh, counted[0])
        if not fresh.truncated:
            _WALKS[key] = kept
    here, count = kept
    if here.truncated or seen[0] + count > MAX_ENTRIES:
        _walk(folder, 0, found, seen, max_depth)  # (where the budget runs out: as before)
        return
    seen[0] += count
    found.folders += here.folders
    found.files += here.files
    found.pointers += here.pointers


def find_in(shallow: list[str], deep: list[str]) -> Found:
    """What the given folders hold: each ``shallow`` folder's own entries (a checkpoint
    folder, file or pointer directly in it; no subfolder searched), each ``deep`` folder
    searched down :data:`MAX_DEPTH` levels. The folders a run's layout names as its own
    (:mod:`trainlens.checkpoints._owner`); no parent is tried."""
    found = Found()
    seen = [0]
    for folder in shallow:
        _walk_once(folder, found, seen, 0)
    for folder in deep:
        _walk_once(folder, found, seen, MAX_DEPTH)
    return found


def _walk(folder: str, depth: int, found: Found, seen: list[int], max_depth: int) -> None:
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        return
    seen[0] += len(entries)
    if seen[0] > MAX_ENTRIES:
        found.truncated = True
        return
    names = {e.name for e in entries}
    in_index = _shards_of_indexes(folder, names)
    for e in entries:
        if e.is_symlink():
            continue
        if e.is_dir():
            _dir_entry(e, depth, found, seen, max_depth)
        elif e.is_file():
            _file_entry(e, folder, in_index, found)


def _dir_entry(
    e: os.DirEntry[str], depth: int, found: Found, seen: list[int], max_depth: int
) -> None:
    hit = L.folder_kind(e.name)
    if hit is not None:
        found.folders.append((e.path, hit[0], hit[1]))
    elif os.path.isfile(os.path.join(e.path, L.DCP_METADATA)):
        found.folders.append((e.path, "dcp", L.step_in_name(e.name)))
    elif depth < max_depth and not e.name.startswith(".") and e.name not in _SKIP:
        _walk(e.path, depth + 1, found, seen, max_depth)


def _file_entry(e: os.DirEntry[str], folder: str, in_index: set[str], found: Found) -> None:
    name = e.name
    for kind, pointer in L.POINTERS:
        if name == pointer:
            found.pointers.append((e.path, kind))
            return
    if name.endswith(L.INDEX):
        found.files.append(
            (e.path, "safetensors-sharded", L.step_in_name(os.path.basename(folder)))
        )
    elif name.endswith(L.SAFETENSORS) and name not in in_index:
        found.files.append((e.path, "safetensors", L.step_in_name(name)))
    elif name.endswith(".ckpt"):
        found.files.append((e.path, "lightning", L.step_in_name(name)))
    elif name.endswith(L.PICKLED):
        step = L.step_in_name(name)
        if step is not None:  # a .pt without a step is a model file, not a checkpoint
            found.files.append((e.path, "torch", step))


def _shards_of_indexes(folder: str, names: set[str]) -> set[str]:
    """Shard files an index in this folder names (by the HF naming: ``<stem>-000NN-of-000MM``,
    so the index need not be read here; the audit reads it)."""
    stems = [n[: -len(L.INDEX)] for n in names if n.endswith(L.INDEX)]
    return {
        n for n in names if n.endswith(L.SAFETENSORS) and any(n.startswith(s + "-") for s in stems)
    }
