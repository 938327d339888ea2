"""Following an MLflow store: one follower per run, re-read when that run changed.

The MLflow reader reads a store whole (it has no cursor), so a run is re-read through it
(``ReadOptions.runs`` = its id) only when a file under the run's folder changed (the file
store: the client appends ``timestamp value step`` lines to ``metrics/<key>``) or, for the
SQLite backend, when the ``metrics`` table gained rows (its largest rowid moved: a look-up
of one index entry). Only the values after those passed before are passed on, metric by
metric (:class:`~trainlens.watch.follow.RereadFollower`). The database is opened read-only
(``file:…?mode=ro``) without waiting: a database locked by the writer is looked at again
next poll, never an error.

Runs that appear later are found by :class:`MlflowStore`: the file store's run folders, or
the database's count of runs; the store is read whole only when those changed, for the
names ``trainlens.read`` gives its runs.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from trainlens.core.errors import TrainlensError
from trainlens.readers import ReadOptions, read_runs
from trainlens.watch.follow import Follower, RereadFollower, folder_state


def _sqlite_query(db: Path, sql: str) -> Any:
    """One value from the database opened read-only; None when it cannot be read now."""
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=0)
    except sqlite3.Error:
        return None
    try:
        row = con.execute(sql).fetchone()
        return row[0] if row else None
    except sqlite3.Error:  # locked by the writer, a table not created yet: next poll
        return None
    finally:
        con.close()


def _run_folders(store: Path) -> tuple[str, ...]:
    """The file store's run folders under ``store`` (the root, one experiment or one run)."""
    if (store / "meta.yaml").is_file() and (store / "metrics").is_dir():
        return (str(store),)
    out: list[str] = []
    for level in (store.glob("*/meta.yaml"), store.glob("*/*/meta.yaml")):
        out.extend(str(m.parent) for m in level if (m.parent / "metrics").is_dir())
    return tuple(sorted(out))


class MlflowRunFollower(RereadFollower):
    """One MLflow run (see the module docstring)."""

    def __init__(
        self, store: Path, options: ReadOptions, name: str, run_id: str, folder: Path | None
    ) -> None:
        super().__init__(store, "mlflow", options, name)
        self.run_id = run_id
        self.folder = folder
        if folder is not None:
            self.paths = [folder]

    def _state(self) -> Any:
        if self.path.is_file():
            return _sqlite_query(self.path, "SELECT max(rowid) FROM metrics")
        if self.folder is None:
            return super()._state()
        return folder_state(self.folder)

    def _read_whole(self) -> Any:
        try:
            runs = read_runs(self.path, format="mlflow", options=self._options(runs=[self.run_id]))
        except (TrainlensError, OSError, sqlite3.Error):
            return None
        if not runs:
            return None
        self.source = runs[0].source
        return runs[0]


class MlflowStore:
    """An MLflow store (a folder or a database) whose runs appear while it is watched."""

    def __init__(self, path: Path, options: ReadOptions, name: str | None = None) -> None:
        self.path = path
        self.options = options
        self.name = name
        self.seen: Any = None
        self.known: set[str] = set()

    def _state(self) -> Any:
        if self.path.is_file():
            return _sqlite_query(self.path, "SELECT count(*) FROM runs")
        return _run_folders(self.path)

    def new_runs(self) -> list[Follower]:
        state = self._state()
        if state is None or state == self.seen:
            return []
        try:
            runs = read_runs(self.path, format="mlflow", options=self.options)
        except (TrainlensError, OSError, sqlite3.Error):
            return []  # nothing readable yet: looked at again when the store changes
        count = state if isinstance(state, int) else len(state)
        if len(runs) >= count:
            # (a run that has logged nothing yet may be left out: looked at again until
            # every run of the store is followed)
            self.seen = state
        folders = (
            {Path(f).name: Path(f) for f in _run_folders(self.path)} if self.path.is_dir() else {}
        )
        out: list[Follower] = []
        for run in runs:
            rid = str(run.metadata.get("run_id") or run.name)
            if rid in self.known:
                continue
            self.known.add(rid)
            # a store found in a folder: ``<store>/<run>`` as the gate names a store of several
            # runs, also while it has one (more may start: a name does not change mid-watch)
            name = f"{self.name}/{run.name}" if self.name else run.name
            out.append(MlflowRunFollower(self.path, self.options, name, rid, folders.get(rid)))
        return out
