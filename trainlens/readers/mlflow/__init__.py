"""MLflow: the file store (``mlruns/``), the SQLite tracking database, and
mlflow-export-import run exports — read directly, without importing mlflow.

**File store.** ``mlruns/<experiment_id>/<run_id>/metrics/<name>``: one line per logged
value, ``timestamp_ms value step`` (``timestamp value step dataset_name dataset_digest``
when a dataset was attached — read at its step, where MLflow's own reader says step 0;
``timestamp value`` in files from very old MLflow, step 0), values as Python's
``str(float)`` writes them (``nan``, ``inf``, ``-inf`` included).
A ``/`` in a metric name is a sub-folder. ``params/`` and ``tags/`` hold one file per
key; ``meta.yaml`` holds the run's name, status, times and experiment (read by
:mod:`trainlens.core.yamlio`, bounded: one it refuses is a note, and the run is still read
from its metric files). ``.trash`` (deleted
experiments) and ``models`` are not experiments. The path may be the ``mlruns`` root, one
experiment folder or one run folder. Every metric file is parsed by polars' CSV reader
(small files concatenated and parsed in one call); a line it cannot read (a truncated
last line, a non-number) is reported with its file and line number and every good line
is kept.

**SQLite.** Any SQLite file with MLflow's ``metrics`` table (``mlflow.db``), opened
read-only. Values come from ``metrics`` (``is_nan`` rows are NaN; MLflow stores ±inf as
±1.7976931348623157e308, which is read back as ±inf), in insertion (rowid) order, which
is the logging order. ``latest_metrics`` is only a cross-check.

**Export.** A directory (or the file) with mlflow-export-import's ``run.json``:
``{"mlflow": {"info", "params", "metrics": {name: [{"value", "timestamp", "step"}, …]},
"tags"}}`` (mlflow-export-import 1.x), or the older flat layout, with metrics as a list
of ``{"key", "value", "timestamp", "step"}`` or only each metric's last value (read as
one point at step 0, noted); a directory of such run folders (an experiment export,
named by its experiment.json) gives one run each.

One Run per MLflow run, named by its run name (else its id; the short id is added when
two runs share a name). ``ReadOptions.runs`` keeps the runs whose id or name is listed.
Deleted runs are left out unless selected by id or name. Run metadata: ``store``,
``run_id``, ``run_name``, ``experiment_id``, ``experiment``, ``status``,
``lifecycle_stage``, ``start_time`` / ``end_time`` (seconds since the epoch),
``user_id``, ``params`` and ``tags`` (dicts of strings, verbatim).

Modules, one job each: :mod:`._filestore` (which folders are runs and experiments, their
meta.yaml, params and tags), :mod:`._metricfiles` (metric files through polars, bad lines
reported), :mod:`._sqlite`, :mod:`._export`, and :mod:`._runs` (what all three share: run
selection, display names, metadata, the long frame). This module sniffs and dispatches.
"""

from __future__ import annotations

from pathlib import Path

from trainlens.core.errors import UnreadableInputError
from trainlens.core.run import Run
from trainlens.readers import _sniff
from trainlens.readers.base import ReadOptions
from trainlens.readers.mlflow._export import is_export_dir, read_export
from trainlens.readers.mlflow._filestore import is_run_dir, looks_like_file_store, read_file_store
from trainlens.readers.mlflow._runs import FORMAT, read_head
from trainlens.readers.mlflow._sqlite import read_sqlite, sqlite_has_metrics


def sniff(path: Path, head: bytes) -> bool:
    """A file-store folder (root, experiment or run), a folder with an export's run.json,
    a SQLite database with a ``metrics`` table, or an export's ``run.json`` itself."""
    try:
        if path.is_dir():
            return is_export_dir(path) or looks_like_file_store(path)
        says = _sniff.mlflow_file(path, head)
        # (a SQLite file that cannot be looked into is the reader's to explain)
        return sqlite_has_metrics(path) is not False if says is None else says
    except OSError:
        return False


def read(path: Path, opts: ReadOptions) -> list[Run]:
    if path.is_dir():
        if is_export_dir(path):
            return read_export(path, opts)
        if path.name == "metrics" and is_run_dir(path.parent):
            path = path.parent
        return read_file_store(path, opts)
    head = read_head(path)
    if head.startswith(_sniff.SQLITE_MAGIC):
        return read_sqlite(path, opts)
    if path.suffix == ".json":
        return read_export(path, opts)
    raise UnreadableInputError(
        f"{path}: not an MLflow store (an mlruns folder, a SQLite tracking database or an "
        "exported run.json)"
    )


__all__ = ["FORMAT", "read", "sniff"]
