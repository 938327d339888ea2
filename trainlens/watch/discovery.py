"""Which sources to follow: the follower for each source, and the sources under the
watched paths as they appear (:class:`Discovery`). Apart from :mod:`.follow` so that the
followers' base classes import none of the format-specific followers built on them."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainlens.core.errors import TrainlensError, UsageError
from trainlens.core.paths import require_file_or_folder
from trainlens.readers import ReadOptions, detect_format
from trainlens.watch._follow_lines import LinesFollower
from trainlens.watch.follow import (
    LINE_FORMATS,
    OFFSET_FORMATS,
    Follower,
    OffsetFollower,
    RereadFollower,
)

if TYPE_CHECKING:
    from trainlens.gate.discover import Skipped


def follower_for(path: Path, fmt: str, options: ReadOptions, name: str | None = None) -> Follower:
    if path.is_file():
        if fmt in OFFSET_FORMATS:
            return OffsetFollower(path, fmt, options, name)
        if fmt in LINE_FORMATS:
            return LinesFollower(path, fmt, options, name)
    elif fmt == "tensorboard":
        from trainlens.watch._follow_tb import TensorBoardRunFollower

        return TensorBoardRunFollower(path, fmt, options, name)
    return RereadFollower(path, fmt, options, name)


class Discovery:
    """The sources under the watched paths, found as they appear: a file that is created
    after the watch began, a folder whose runs (Lightning versions, TensorBoard runs,
    metrics files) appear one by one, an MLflow store's runs."""

    def __init__(self, paths: Sequence[Path], *, format: str | None, options: ReadOptions) -> None:
        self.paths = list(paths)
        self.format = format
        self.options = options
        self.known: set[str] = set()
        self.stores: dict[str, Any] = {}  # MLflow stores: their runs appear one by one
        self._skipped: list[Skipped] = []  # FIFOs, sockets, devices met while walking
        self._told: set[Skipped] = set()

    def new_skipped(self) -> list[Skipped]:
        """The FIFOs, sockets and devices found in the watched folders since the last
        call, each once for the whole watch (they are never opened: a FIFO blocks)."""
        new = [s for s in dict.fromkeys(self._skipped) if s not in self._told]
        self._told.update(new)
        self._skipped.clear()
        return new

    def poll(self) -> list[Follower]:
        found: list[Follower] = []
        for path in self.paths:
            for source, fmt, name in self._sources(path):
                key = os.path.realpath(source)
                if fmt == "mlflow":
                    found.extend(self._store(key, source, name).new_runs())
                    continue
                if key in self.known:
                    continue
                self.known.add(key)
                found.append(follower_for(source, fmt, self.options, name))
        return found

    def _store(self, key: str, source: Path, name: str | None) -> Any:
        from trainlens.watch._follow_mlflow import MlflowStore

        if key not in self.stores:
            self.stores[key] = MlflowStore(source, self.options, name)
        return self.stores[key]

    def _sources(self, path: Path) -> list[tuple[Path, str, str | None]]:
        if path.is_file():
            fmt = self.format or _format_or_none(path)
            return [(path, fmt, None)] if fmt else []
        if not path.is_dir():
            return []
        from trainlens.gate.discover import discover, is_run_store

        fmt = _format_or_none(path)
        # the folder is one run (a run's logdir, a store, a version_N) unless it is a
        # TensorBoard logdir whose sub-folders are the runs: those are walked, each a run
        if fmt and (fmt != "tensorboard" or is_run_store(path)):
            return [(path, self.format or fmt, None)]
        out: list[tuple[Path, str, str | None]] = []
        try:
            found = discover([str(path)], self._skipped)
        except TrainlensError:
            return []  # no run in it yet: looked at again next time
        for src in found:
            sfmt = self.format or _format_or_none(Path(src.path))
            if sfmt:
                out.append((Path(src.path), sfmt, src.name))
        return out


def awaited(paths: Sequence[Path], *, once: bool = False) -> list[Path]:
    """The watched paths that do not exist yet: a watch is started before its job, so it
    waits for them (the loop finds each when it appears, as it finds a folder's new runs).
    It waits only in a folder that exists: a path whose parent is missing too is a
    :class:`UsageError` (a typo in ``rnus/exp1`` would otherwise wait for ever without a
    word), and so is any missing path under ``once``, which reads what is there. A path
    that exists must be a file or a folder (a FIFO would block its first read)."""
    missing: list[Path] = []
    for path in paths:
        if path.exists():
            require_file_or_folder(path)
            continue
        if once:
            raise UsageError(
                f"{path}: no such file or directory (--once reads what is there; "
                "without it, watch waits for it to appear)"
            )
        parent = path.absolute().parent
        if not parent.is_dir():
            where = _nearest_missing(parent)
            raise UsageError(
                f"{path}: no such file or directory, nor is there a folder {where} to wait "
                "for it in (create the folder, or check the path)"
            )
        missing.append(path)
    return missing


def _nearest_missing(folder: Path) -> Path:
    """The highest missing folder of ``folder`` (the one to create first)."""
    while not folder.parent.exists() and folder.parent != folder:
        folder = folder.parent
    return folder


def _format_or_none(path: Path) -> str | None:
    try:
        return detect_format(path)
    except (TrainlensError, OSError):
        return None  # nothing to tell yet (an empty file): looked at again next poll
