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
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import sqlite3
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from trainlens.core.errors import UnreadableInputError
from trainlens.core.run import DataIssue, Run, build_run
from trainlens.core.yamlio import RefusedFile, read_yaml
from trainlens.readers import _sniff
from trainlens.readers._wide import enum_runs
from trainlens.readers.base import ReadOptions

if TYPE_CHECKING:  # numpy is imported where it is used: a file store needs none
    import numpy as np

FORMAT = "mlflow"

_SQLITE_MAGIC = _sniff.SQLITE_MAGIC
_RUN_STATUS = {1: "RUNNING", 2: "SCHEDULED", 3: "FINISHED", 4: "FAILED", 5: "KILLED"}
# folders inside mlruns/ (and inside an experiment) that are not experiments (runs)
_NOT_EXPERIMENTS = {".trash", "models"}
_NOT_RUNS = {"tags", "datasets", "traces", "models"}
_DBL_MAX = 1.7976931348623157e308
_EXACT_IN_FLOAT = float(2**53)
_FETCH_ROWS = 1 << 20  # SQLite rows per fetch: bounds the Python tuples alive at once

# polars reads a metric file; a line it cannot parse becomes a row with nulls
_SCHEMA = {"timestamp": pl.Int64(), "value": pl.Float64(), "step": pl.Int64()}
_BIG_FILE = 1 << 20  # read by path (polars maps and splits it); smaller ones are batched
_BATCH_BYTES = 64 << 20
# precedes each file in a joined buffer: no MLflow line has this step, so the marker rows
# give each file's rows without counting newlines
_MARKER_STEP = -(2**63)
_MARKER_LINE = b"0 0 -9223372036854775808\n"
_METRIC_LINE = re.compile(rb"^\s*-?\d+ \S+( -?\d+)?( \S+ \S+)?\s*$")


def _csv(source: Path | bytes) -> pl.DataFrame:
    return pl.read_csv(
        source,
        separator=" ",
        has_header=False,
        schema=_SCHEMA,
        quote_char=None,
        ignore_errors=True,
        truncate_ragged_lines=True,
        encoding="utf8-lossy",
    )


# ---- sniffing ---------------------------------------------------------------------------


def sniff(path: Path, head: bytes) -> bool:
    """A file-store folder (root, experiment or run), a folder with an export's run.json,
    a SQLite database with a ``metrics`` table, or an export's ``run.json`` itself."""
    try:
        if path.is_dir():
            return _is_export_dir(path) or _looks_like_file_store(path)
        says = _sniff.mlflow_file(path, head)
        return _sqlite_has_metrics(path) if says is None else says
    except OSError:
        return False


_is_export_head = _sniff.is_mlflow_export_head


def _is_export_dir(path: Path) -> bool:
    if (path / "run.json").is_file():
        return _is_export_head(_head(path / "run.json"))
    return (path / "experiment.json").is_file() and any(_export_files(path))


def _head(path: Path, n: int = 4096) -> bytes:
    with path.open("rb") as fh:
        return fh.read(n)


def _meta_head_says(path: Path, *keys: bytes) -> bool:
    meta = path / "meta.yaml"
    if not meta.is_file():
        return False
    head = _head(meta)
    return any(re.search(rb"(?m)^" + k + rb":", head) for k in keys)


def _is_run_dir(path: Path) -> bool:
    if _meta_head_says(path, b"run_id", b"run_uuid"):
        return True
    metrics = path / "metrics"
    if not metrics.is_dir():
        return False
    # no meta.yaml (a copied run folder): the metric files must look like MLflow's
    for root, _dirs, files in os.walk(metrics):
        if files:
            line = _head(Path(root) / sorted(files)[0], 256).split(b"\n", 1)[0]
            return _METRIC_LINE.match(line) is not None
    return False


def _is_experiment_dir(path: Path) -> bool:
    return _meta_head_says(path, b"artifact_location", b"name") and not _meta_head_says(
        path, b"run_id", b"run_uuid"
    )


def _looks_like_file_store(path: Path) -> bool:
    if _is_run_dir(path) or _is_experiment_dir(path):
        return True
    if path.name == "metrics" and _is_run_dir(path.parent):
        return True
    for child in itertools.islice(_subdirs(path), 200):
        if child.name not in _NOT_EXPERIMENTS and _is_experiment_dir(child):
            return True
    return False


def _subdirs(path: Path) -> Iterator[Path]:
    try:
        entries = sorted(os.scandir(path), key=lambda e: e.name)
    except OSError:
        return
    for e in entries:
        if e.is_dir():
            yield Path(e.path)


def _sqlite_has_metrics(path: Path) -> bool:
    try:
        con = _connect(path)
    except sqlite3.Error:
        return False
    try:
        return "metrics" in _tables(con)
    except sqlite3.Error:
        return False
    finally:
        con.close()


# ---- entry point ------------------------------------------------------------------------


def read(path: Path, opts: ReadOptions) -> list[Run]:
    if path.is_dir():
        if _is_export_dir(path):
            return _read_export(path, opts)
        if path.name == "metrics" and _is_run_dir(path.parent):
            path = path.parent
        return _read_file_store(path, opts)
    head = _head(path)
    if head.startswith(_SQLITE_MAGIC):
        return _read_sqlite(path, opts)
    if path.suffix == ".json":
        return _read_export(path, opts)
    raise UnreadableInputError(
        f"{path}: not an MLflow store (an mlruns folder, a SQLite tracking database or an "
        "exported run.json)"
    )


# ---- runs and selection (all stores) ----------------------------------------------------


@dataclass
class _RunInfo:
    run_id: str
    name: str
    source: str
    metadata: dict[str, Any]
    deleted: bool = False
    # file store: the run's metric files (name, path, size)
    files: list[tuple[str, str, int]] = field(default_factory=list)
    # file store: a meta.yaml (the run's or its experiment's) that was refused
    issues: list[DataIssue] = field(default_factory=list)


def _select(runs: list[_RunInfo], opts: ReadOptions, where: Path) -> list[_RunInfo]:
    """The runs to read: all live ones, or those whose id or name ``opts.runs`` lists."""
    if not runs:
        raise UnreadableInputError(f"{where}: no MLflow runs found")
    if not opts.runs:
        live = [r for r in runs if not r.deleted]
        if not live:
            raise UnreadableInputError(
                f"{where}: every MLflow run here is deleted "
                f"({_describe(runs)}); select one by id or name to read it anyway"
            )
        return live
    wanted = [str(w) for w in opts.runs]
    by_key: dict[str, list[_RunInfo]] = {}
    shown = _unique_names(runs)  # "name (short id)" as a previous read displayed it
    for r in runs:
        for key in dict.fromkeys((r.run_id, r.name, shown[r.run_id])):
            by_key.setdefault(key, []).append(r)
    unknown = [w for w in wanted if w not in by_key]
    if unknown:
        raise UnreadableInputError(
            f"{where}: no MLflow run with id or name {', '.join(map(repr, unknown))}; "
            f"available runs: {_describe(runs)}"
        )
    chosen: dict[str, _RunInfo] = {}
    for w in wanted:
        for r in by_key[w]:
            chosen.setdefault(r.run_id, r)
    return list(chosen.values())


def _run_order(r: _RunInfo) -> tuple[int, str, float, str]:
    """Experiment (numeric ids in numeric order), then start time, then run id."""
    exp = str(r.metadata.get("experiment_id") or "")
    return (len(exp), exp, r.metadata.get("start_time") or 0.0, r.run_id)


def _describe(runs: Sequence[_RunInfo], limit: int = 20) -> str:
    items = [
        (f"{r.name} ({r.run_id})" if r.name != r.run_id else r.run_id)
        + (" [deleted]" if r.deleted else "")
        for r in runs[:limit]
    ]
    more = f" and {len(runs) - limit} more" if len(runs) > limit else ""
    return ", ".join(items) + more


def _unique_names(runs: Sequence[_RunInfo]) -> dict[str, str]:
    """run id -> display name; the short id is added where names collide."""
    counts: dict[str, int] = {}
    for r in runs:
        counts[r.name] = counts.get(r.name, 0) + 1
    return {
        r.run_id: (f"{r.name} ({r.run_id[:8]})" if counts[r.name] > 1 else r.name) for r in runs
    }


def _no_metrics(where: Path, runs: Sequence[_RunInfo]) -> UnreadableInputError:
    return UnreadableInputError(
        f"{where}: no metrics logged in the MLflow run(s) {_describe(runs)}"
    )


def _seconds(ms: Any) -> float | None:
    try:
        return None if ms is None or ms == "" else int(ms) / 1000.0
    except (TypeError, ValueError):
        return None


def _status(value: Any) -> str | None:
    if value is None:
        return None
    try:
        return _RUN_STATUS.get(int(value), str(value))
    except (TypeError, ValueError):
        return str(value)


def _metadata(
    *,
    store: str,
    run_id: str,
    run_name: str | None,
    experiment_id: Any,
    experiment: str | None,
    info: Mapping[str, Any],
    params: dict[str, str],
    tags: dict[str, str],
) -> dict[str, Any]:
    return {
        "store": store,
        "run_id": run_id,
        "run_name": run_name,
        "experiment_id": None if experiment_id is None else str(experiment_id),
        "experiment": experiment,
        "status": _status(info.get("status")),
        "lifecycle_stage": info.get("lifecycle_stage"),
        "start_time": _seconds(info.get("start_time")),
        "end_time": _seconds(info.get("end_time")),
        "user_id": info.get("user_id"),
        "artifact_uri": info.get("artifact_uri"),
        "params": params,
        "tags": tags,
    }


def _long_frame(
    names: Sequence[str],
    counts: Sequence[int],
    step: pl.Series,
    value: pl.Series,
    timestamp_ms: pl.Series,
) -> pl.DataFrame:
    """The long frame of one run from per-metric row counts and concatenated columns
    (``metric`` an Enum made of one constant run per metric: no string per row)."""
    if len(set(names)) == len(names):
        metric = enum_runs(list(names), list(counts))
    else:  # a name twice (not expected from MLflow): one string per row
        import numpy as np

        idx = np.repeat(np.arange(len(names), dtype=np.uint32), np.asarray(counts, np.int64))
        metric = pl.Series("metric", list(names), dtype=pl.String()).gather(idx)
    return pl.DataFrame(
        [
            step.alias("step"),
            metric.alias("metric"),
            value.alias("value"),
            (timestamp_ms.cast(pl.Float64) / 1000.0).alias("wall_time"),
            # MLflow keeps no order across metrics but the time each value was logged:
            # a restart is told (and pooled over metrics) in that order
            timestamp_ms.alias("_order"),
        ]
    )


# ---- file store -------------------------------------------------------------------------


def _read_file_store(path: Path, opts: ReadOptions) -> list[Run]:
    runs = _select(_discover(path), opts, path)
    for r in runs:
        r.files = _metric_files(Path(r.source))
    with_metrics = [r for r in runs if r.files]
    if not with_metrics:
        raise _no_metrics(path, runs)
    files = [f for r in with_metrics for f in r.files]
    table, counts, issues_by_file = _parse_metric_files([(p, size) for _n, p, size in files])
    names = _unique_names(with_metrics)
    out: list[Run] = []
    file_pos = row_pos = 0
    for r in with_metrics:
        mine = counts[file_pos : file_pos + len(r.files)]
        file_pos += len(r.files)
        issues = [*r.issues, *(i for _n, p, _s in r.files for i in issues_by_file.get(p, []))]
        rows = table.slice(row_pos, sum(mine))
        row_pos += rows.height
        if rows.height == 0 and not issues:
            continue
        long = _long_frame(
            [n for n, _p, _s in r.files],
            mine,
            rows.get_column("step"),
            rows.get_column("value"),
            rows.get_column("timestamp"),
        )
        out.append(
            build_run(
                long,
                name=names[r.run_id],
                source=r.source,
                fmt=FORMAT,
                aliases=opts.aliases,
                metadata=r.metadata,
                issues=issues,
                blocks=mine,
            )
        )
    if not out:
        raise _no_metrics(path, with_metrics)
    return out


def _discover(path: Path) -> list[_RunInfo]:
    """Every run under ``path``: a run folder, an experiment folder or the mlruns root."""
    if _is_run_dir(path):
        parent = path.parent
        exp_issues: list[DataIssue] = []
        exp = _read_meta(parent, exp_issues) if _is_experiment_dir(parent) else {}
        return [_run_from_dir(path, exp, exp_issues)]
    if _is_experiment_dir(path):
        exp_dirs = [path]
    else:
        exp_dirs = [
            d for d in _subdirs(path) if d.name not in _NOT_EXPERIMENTS and _is_experiment_dir(d)
        ]
        if not exp_dirs:
            raise UnreadableInputError(
                f"{path}: not an MLflow store (no experiment folders with a meta.yaml, and "
                "no run folder with metrics/)"
            )
    runs: list[_RunInfo] = []
    for exp_dir in exp_dirs:
        exp_issues = []
        exp = _read_meta(exp_dir, exp_issues)
        for d in _subdirs(exp_dir):
            if d.name not in _NOT_RUNS and _is_run_dir(d):
                runs.append(_run_from_dir(d, exp, exp_issues))
    runs.sort(key=_run_order)
    return runs


def _run_from_dir(
    run_dir: Path, exp: Mapping[str, Any], exp_issues: Sequence[DataIssue] = ()
) -> _RunInfo:
    issues = list(exp_issues)
    meta = _read_meta(run_dir, issues)
    run_id = str(meta.get("run_id") or meta.get("run_uuid") or run_dir.name)
    tags = _read_kv_dir(run_dir / "tags")
    params = _read_kv_dir(run_dir / "params")
    name = meta.get("run_name") or tags.get("mlflow.runName") or None
    exp_id = meta.get("experiment_id", exp.get("experiment_id"))
    return _RunInfo(
        run_id=run_id,
        name=str(name) if name else run_id,
        source=str(run_dir),
        metadata=_metadata(
            store="file",
            run_id=run_id,
            run_name=str(name) if name else None,
            experiment_id=exp_id,
            experiment=None if exp.get("name") is None else str(exp.get("name")),
            info=meta,
            params=params,
            tags=tags,
        ),
        deleted=meta.get("lifecycle_stage") == "deleted",
        issues=issues,
    )


def _read_kv_dir(folder: Path) -> dict[str, str]:
    """params/ or tags/: one file per key (a '/' in the key is a sub-folder)."""
    out: dict[str, str] = {}
    if not folder.is_dir():
        return out
    for root, _dirs, files in os.walk(folder):
        for name in files:
            full = os.path.join(root, name)
            key = os.path.relpath(full, folder).replace(os.sep, "/")
            with open(full, "rb") as fh:
                out[key] = fh.read().decode("utf-8", errors="replace")
    return dict(sorted(out.items()))


def _metric_files(run_dir: Path) -> list[tuple[str, str, int]]:
    """(metric name, path, size) of every metric file of a run, sorted by name."""
    folder = run_dir / "metrics"
    out: list[tuple[str, str, int]] = []
    if not folder.is_dir():
        return out
    stack = [str(folder)]
    base = len(str(folder)) + 1
    while stack:
        with os.scandir(stack.pop()) as it:
            for e in it:
                if e.is_dir():
                    stack.append(e.path)
                elif e.is_file():
                    out.append((e.path[base:].replace(os.sep, "/"), e.path, e.stat().st_size))
    out.sort()
    return out


def _parse_metric_files(
    files: Sequence[tuple[str, int]],
) -> tuple[pl.DataFrame, list[int], dict[str, list[DataIssue]]]:
    """Parse metric files into one frame (timestamp, value, step), file after file, with
    each file's row count.

    Files of 1 MiB and more are read by path (polars maps them and parses on all
    threads); runs of smaller ones are joined, each behind a marker line, and parsed in
    one call, which saves polars' per-call overhead when runs have hundreds of small
    metric files. Every line becomes one row, so a row with a null is a line polars could
    not read: those are re-read the way MLflow reads a line, kept when MLflow would read
    them, and otherwise reported (file and line number) and dropped.
    """
    pieces: list[pl.DataFrame] = []
    counts: list[int] = []
    issues: dict[str, list[DataIssue]] = {}
    for group in _groups(files):
        if len(group) == 1 and files[group[0]][1] >= _BIG_FILE:
            frame = _read_big(files[group[0]][0])
            sizes = [frame.height]
        else:
            frame, sizes = _read_small(files, group)
        nulls = _null_rows(frame)
        if nulls:
            import numpy as np

            starts = np.cumsum([0, *sizes])
            parts = [frame.slice(int(a), n) for a, n in zip(starts, sizes, strict=False)]
            for k in sorted(set((np.searchsorted(starts, nulls, side="right") - 1).tolist())):
                path = files[group[k]][0]
                parts[k], bad = _repair(path, parts[k])
                if bad:
                    issues[path] = bad
            sizes = [f.height for f in parts]
            frame = pl.concat(parts, how="vertical")
        pieces.append(frame)
        counts.extend(sizes)
    return pl.concat(pieces, how="vertical", rechunk=False), counts, issues


def _groups(files: Sequence[tuple[str, int]]) -> Iterator[list[int]]:
    """Indices of files parsed together: a big file alone, consecutive small ones in
    batches of up to ``_BATCH_BYTES``."""
    batch: list[int] = []
    size = 0
    for i, (_path, n) in enumerate(files):
        if n >= _BIG_FILE:
            if batch:
                yield batch
                batch, size = [], 0
            yield [i]
            continue
        batch.append(i)
        size += n
        if size >= _BATCH_BYTES:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def _read_small(
    files: Sequence[tuple[str, int]], group: Sequence[int]
) -> tuple[pl.DataFrame, list[int]]:
    """Small files joined into one buffer, each behind a marker line, and parsed at once
    (file by file if polars refuses the joined buffer). Returns the rows of all of them,
    markers dropped, and each file's row count."""
    parts: list[bytes] = []
    datas: list[bytes] = []
    for i in group:
        with open(files[i][0], "rb") as fh:
            data = fh.read()
        datas.append(data)
        parts.append(_MARKER_LINE)
        parts.append(data)
        if data and not data.endswith(b"\n"):
            parts.append(b"\n")
    joined = _csv_or_none(b"".join(parts))
    if joined is not None:
        marker = (joined.get_column("step") == _MARKER_STEP).fill_null(False)
        marks = marker.arg_true().to_list()
        if len(marks) == len(group):
            ends = [*marks[1:], joined.height]
            return joined.filter(~marker), [b - a - 1 for a, b in zip(marks, ends, strict=True)]
    frames = [_read_bytes(d) for d in datas]
    return pl.concat(frames, how="vertical"), [f.height for f in frames]


def _null_rows(df: pl.DataFrame) -> list[int]:
    """Positions of rows with a null (lines polars could not read)."""
    if not df.height or not df.null_count().sum_horizontal().item():
        return []
    return df.select(pl.any_horizontal(pl.all().is_null())).to_series().arg_true().to_list()


def _csv_or_none(data: bytes) -> pl.DataFrame | None:
    try:
        return _csv(data)
    except Exception:  # polars refuses the buffer; the caller goes file by file
        return None


def _read_big(path: str) -> pl.DataFrame:
    try:
        return _csv(Path(path))
    except Exception:
        with open(path, "rb") as fh:
            return _read_bytes(fh.read())


def _read_bytes(data: bytes) -> pl.DataFrame:
    """One file's bytes; falls back to a line-by-line read when polars refuses them or
    does not give one row per line (rows must map to line numbers)."""
    if not data:
        return pl.DataFrame(schema=_SCHEMA)
    lines = _lines(data)
    df = _csv_or_none(data)
    if df is not None and df.height == len(lines):
        return df
    ts: list[int | None] = []
    vs: list[float | None] = []
    ss: list[int | None] = []
    for line in lines:  # `timestamp value` lines stay null: _repair decides on those
        got = _mlflow_parse(line, legacy=False)
        t, v, s = got if got is not None else (None, None, None)
        ts.append(t)
        vs.append(v)
        ss.append(s)
    return pl.DataFrame({"timestamp": ts, "value": vs, "step": ss}, schema=_SCHEMA)


def _lines(data: bytes) -> list[bytes]:
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return lines


def _mlflow_parse(line: bytes, *, legacy: bool) -> tuple[int, float, int] | None:
    """A line read the way MLflow's file store reads it (``int``/``float`` of the
    space-separated fields); ``timestamp value`` lines only when the file is legacy."""
    parts = line.decode("utf-8", errors="replace").strip().split(" ")
    if len(parts) not in (3, 5) and not (legacy and len(parts) == 2):
        return None
    try:
        got = int(parts[0]), float(parts[1]), int(parts[2]) if len(parts) > 2 else 0
    except ValueError:
        return None
    # MLflow's columns are 64-bit: a 20-digit step or timestamp is a bad line, reported
    # as one (polars builds no Int64 column from it)
    return got if all(-(2**63) <= x < 2**63 for x in (got[0], got[2])) else None


def _repair(path: str, df: pl.DataFrame) -> tuple[pl.DataFrame, list[DataIssue]]:
    """Rows with nulls: re-read those lines as MLflow would; drop and report the rest."""
    with open(path, "rb") as fh:
        data = fh.read()
    lines = _lines(data)
    if len(lines) != df.height:  # rows no longer map to lines: parse line by line
        df = _read_bytes(data)
        lines = _lines(data)
    rows = _null_rows(df)
    # a file from before steps were logged has only `timestamp value` lines
    legacy = df.get_column("step").null_count() == df.height
    fixed_rows: list[int] = []
    fixed_vals: list[tuple[int, float, int]] = []
    bad: list[int] = []
    for r in rows:
        got = _mlflow_parse(lines[r], legacy=legacy)
        if got is None:
            bad.append(r)
        else:
            fixed_rows.append(r)
            fixed_vals.append(got)
    fixed = df
    if fixed_rows:
        at = pl.Series(fixed_rows, dtype=pl.UInt32())
        fixed = df.with_columns(
            df.get_column(col).scatter(at, pl.Series([v[j] for v in fixed_vals], dtype=dtype))
            for j, (col, dtype) in enumerate(_SCHEMA.items())
        )
    if bad:
        drop = pl.Series(bad, dtype=pl.UInt32())
        fixed = fixed.filter(~pl.int_range(df.height, eager=True).is_in(drop))
    issues: list[DataIssue] = []
    truncated = bool(bad) and bad[-1] == len(lines) - 1 and not data.endswith(b"\n")
    if truncated:
        last = bad.pop()
        issues.append(
            DataIssue(
                kind="truncated-line",
                source=path,
                location=f"line {last + 1}",
                message=(
                    f"the last line ({_show(lines[last])}) is incomplete — a run still being "
                    "written? — and was left out"
                ),
            )
        )
    if bad:
        numbers = [b + 1 for b in bad]
        issues.insert(
            0,
            DataIssue(
                kind="bad-line",
                source=path,
                location=f"line {numbers[0]}",
                message=(
                    f"{len(numbers)} line(s) are not `timestamp value step` and were skipped "
                    f"(line {', '.join(map(str, numbers[:5]))}{'…' if len(numbers) > 5 else ''}"
                    f"; first: {_show(lines[bad[0]])})"
                ),
                count=len(numbers),
                details={"lines": numbers[:100]},
            ),
        )
    return fixed, issues


def _show(line: bytes, n: int = 60) -> str:
    text = line.decode("utf-8", errors="replace").rstrip("\r")
    return repr(text if len(text) <= n else text[:n] + "…")


# ---- meta.yaml --------------------------------------------------------------------------


def _read_meta(folder: Path, issues: list[DataIssue] | None = None) -> dict[str, Any]:
    """A run's or experiment's meta.yaml as a dict ({} when absent or refused: the run is
    still read from its metric files, and a refusal is noted in ``issues``)."""
    path = folder / "meta.yaml"
    if not path.is_file():
        return {}
    try:
        got = read_yaml(path)
    except RefusedFile as exc:
        if issues is not None:
            issues.append(
                DataIssue(
                    kind="bad-metadata",
                    source=str(path),
                    message=f"{exc.reason}; the run is read without its name and status",
                )
            )
        return {}
    return got if isinstance(got, dict) else {}


# ---- SQLite -----------------------------------------------------------------------------


def _connect(path: Path) -> sqlite3.Connection:
    uri = path.resolve().as_uri() + "?mode=ro"
    return sqlite3.connect(uri, uri=True)


def _tables(con: sqlite3.Connection) -> set[str]:
    return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def _columns(con: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')]


def _read_sqlite(path: Path, opts: ReadOptions) -> list[Run]:
    try:
        con = _connect(path)
    except sqlite3.Error as exc:
        raise UnreadableInputError(f"{path}: cannot open the SQLite database: {exc}") from None
    try:
        return _read_sqlite_con(con, path, opts)
    except sqlite3.DatabaseError as exc:
        raise UnreadableInputError(f"{path}: cannot read the MLflow database: {exc}") from None
    finally:
        con.close()


def _read_sqlite_con(con: sqlite3.Connection, path: Path, opts: ReadOptions) -> list[Run]:
    tables = _tables(con)
    if "metrics" not in tables:
        raise UnreadableInputError(f"{path}: a SQLite database without MLflow's metrics table")
    mcols = set(_columns(con, "metrics"))
    missing = {"key", "value", "timestamp", "step", "run_uuid"} - mcols
    if missing:
        raise UnreadableInputError(
            f"{path}: the metrics table lacks column(s) {', '.join(sorted(missing))}; "
            "not an MLflow tracking database"
        )
    infos = _sqlite_runs(con, tables)
    # runs that logged metrics but have no row in `runs` (a partial copy) still count
    per_pair = _has_run_key_index(con)
    metric_runs = _distinct_runs(con, indexed=per_pair)
    for rid in metric_runs:
        if rid not in infos:
            infos[rid] = _RunInfo(
                run_id=rid,
                name=rid,
                source=str(path),
                metadata=_metadata(
                    store="sqlite", run_id=rid, run_name=None, experiment_id=None,
                    experiment=None, info={}, params={}, tags={},
                ),
            )  # fmt: skip
    ordered = sorted(
        infos.values(),
        key=_run_order,
    )
    selected = _select(ordered, opts, path)
    has_metrics = set(metric_runs)
    runs = [r for r in selected if r.run_id in has_metrics]
    if not runs:
        raise _no_metrics(path, selected)

    is_nan = "is_nan" if "is_nan" in mcols else "0"
    data = _sqlite_metrics(
        con, [r.run_id for r in runs], source=str(path), is_nan=is_nan, per_pair=per_pair
    )
    latest = _latest_metrics(con, tables)
    names = _unique_names(runs)
    out: list[Run] = []
    for r in runs:
        keys, counts, cols, issues = data.get(r.run_id, ([], [], None, []))
        if cols is None:
            continue
        step, value, ts = cols
        issues = issues + _check_latest(str(path), r.run_id, keys, counts, cols, latest)
        long = _long_frame(keys, counts, pl.Series(step), pl.Series(value), pl.Series(ts))
        out.append(
            build_run(
                long,
                name=names[r.run_id],
                source=str(path),
                fmt=FORMAT,
                aliases=opts.aliases,
                metadata=r.metadata,
                issues=issues,
                blocks=counts,
            )
        )
    if not out:
        raise _no_metrics(path, runs)
    return out


def _rows_as_dicts(cur: sqlite3.Cursor) -> list[dict[str, Any]]:
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, row, strict=True)) for row in cur.fetchall()]


def _sqlite_runs(con: sqlite3.Connection, tables: set[str]) -> dict[str, _RunInfo]:
    if "runs" not in tables:
        return {}
    runs = _rows_as_dicts(con.execute("SELECT * FROM runs"))
    experiments: dict[str, str] = {}
    if "experiments" in tables:
        for row in _rows_as_dicts(con.execute("SELECT * FROM experiments")):
            experiments[str(row.get("experiment_id"))] = str(row.get("name"))
    params = _sqlite_kv(con, "params", tables)
    tags = _sqlite_kv(con, "tags", tables)
    out: dict[str, _RunInfo] = {}
    for row in runs:
        rid = str(row.get("run_uuid"))
        run_tags = tags.get(rid, {})
        name = row.get("name") or run_tags.get("mlflow.runName") or None
        exp_id = row.get("experiment_id")
        out[rid] = _RunInfo(
            run_id=rid,
            name=str(name) if name else rid,
            source="",
            metadata=_metadata(
                store="sqlite",
                run_id=rid,
                run_name=str(name) if name else None,
                experiment_id=exp_id,
                experiment=experiments.get(str(exp_id)),
                info=row,
                params=params.get(rid, {}),
                tags=run_tags,
            ),
            deleted=row.get("lifecycle_stage") == "deleted",
        )
    return out


def _sqlite_kv(con: sqlite3.Connection, table: str, tables: set[str]) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    if table not in tables or not {"key", "value", "run_uuid"} <= set(_columns(con, table)):
        return out
    for key, value, rid in con.execute(f'SELECT key, value, run_uuid FROM "{table}"'):
        out.setdefault(str(rid), {})[str(key)] = "" if value is None else str(value)
    return {rid: dict(sorted(kv.items())) for rid, kv in out.items()}


def _has_run_key_index(con: sqlite3.Connection) -> bool:
    """MLflow indexes metrics on (run_uuid, key, step); without such an index, one full
    scan beats a query per metric."""
    for row in con.execute('PRAGMA index_list("metrics")'):
        cols = [r[2] for r in con.execute(f'PRAGMA index_info("{row[1]}")')]
        if cols[:2] == ["run_uuid", "key"]:
            return True
    return False


def _distinct_runs(con: sqlite3.Connection, *, indexed: bool) -> list[str]:
    """Run ids in the metrics table. With MLflow's indexes, by seeking from one id to
    the next (a loose index scan) instead of walking every row as DISTINCT does."""
    if not indexed:
        return [str(r[0]) for r in con.execute("SELECT DISTINCT run_uuid FROM metrics")]
    out: list[str] = []
    run = con.execute("SELECT min(run_uuid) FROM metrics").fetchone()[0]
    while run is not None:
        out.append(str(run))
        run = con.execute(
            "SELECT min(run_uuid) FROM metrics WHERE run_uuid > ?", (run,)
        ).fetchone()[0]
    return out


def _distinct_keys(con: sqlite3.Connection, run_ids: Sequence[str]) -> list[tuple[str, str]]:
    """(run id, metric key) pairs, by a loose scan of the (run_uuid, key, step) index."""
    out: list[tuple[str, str]] = []
    for rid in run_ids:
        key = con.execute("SELECT min(key) FROM metrics WHERE run_uuid = ?", (rid,)).fetchone()[0]
        while key is not None:
            out.append((rid, str(key)))
            key = con.execute(
                "SELECT min(key) FROM metrics WHERE run_uuid = ? AND key > ?", (rid, key)
            ).fetchone()[0]
    return out


_Cols = tuple["np.ndarray", "np.ndarray", "np.ndarray"]  # step int64, value f64, ts int64
_RunData = tuple[list[str], list[int], _Cols | None, list[DataIssue]]


def _sqlite_metrics(
    con: sqlite3.Connection,
    run_ids: Sequence[str],
    *,
    source: str,
    is_nan: str,
    per_pair: bool,
) -> dict[str, _RunData]:
    """run id -> (metric names, rows per metric, (step, value, timestamp), issues).

    The sqlite3 module has no columnar fetch, so rows come back as tuples; with MLflow's
    (run_uuid, key, step) index one query per metric returns only numbers, which go
    straight into a float64 array (exact for steps and millisecond timestamps below
    2**53 — checked, larger ones are redone as integers).
    """
    import numpy as np

    # 'nan' for is_nan rows (stored as 0): numpy reads it as NaN, no fifth column to fetch
    value_sql = "value" if is_nan == "0" else f"CASE WHEN {is_nan} THEN 'nan' ELSE value END"
    cols = f"rowid, {value_sql}, timestamp, step"
    by_run: dict[str, list[tuple[str, _Cols]]] = {rid: [] for rid in run_ids}
    issues: dict[str, list[DataIssue]] = {rid: [] for rid in run_ids}

    def add(rid: str, key: str, chunks: Iterable[list[tuple[Any, ...]]]) -> None:
        got, bad = _numeric_rows(chunks)
        by_run[rid].append((key, got))
        if bad:
            issues[rid].append(
                DataIssue(
                    kind="bad-record",
                    source=source,
                    location=f"metrics rowid {bad[0]}",
                    message=(
                        f"{len(bad)} row(s) of metric {key!r} (run {rid}) hold a value, step "
                        "or timestamp that is not a number and were skipped"
                    ),
                    count=len(bad),
                    details={"rowids": bad[:100], "metric": key},
                )
            )

    if per_pair:
        for rid, key in _distinct_keys(con, run_ids):
            cur = con.execute(
                f"SELECT {cols} FROM metrics WHERE run_uuid = ? AND key = ?", (rid, key)
            )
            add(str(rid), str(key), _chunks(cur))
    else:
        wanted = set(run_ids)
        grouped: dict[tuple[str, str], list[tuple[Any, ...]]] = {}
        for row in con.execute(f"SELECT run_uuid, key, {cols} FROM metrics"):
            if row[0] in wanted:
                grouped.setdefault((row[0], row[1]), []).append(row[2:])
        for (rid, key), rows in grouped.items():
            add(str(rid), str(key), [rows])

    out: dict[str, _RunData] = {}
    for rid in run_ids:
        got = sorted((kv for kv in by_run[rid] if kv[1][0].size), key=lambda kv: kv[0])
        if not got:
            out[rid] = ([], [], None, issues[rid])
            continue
        step = np.concatenate([c[0] for _k, c in got])
        value = np.concatenate([c[1] for _k, c in got])
        ts = np.concatenate([c[2] for _k, c in got])
        out[rid] = (
            [k for k, _c in got],
            [c[0].size for _k, c in got],
            (step, value, ts),
            issues[rid],
        )
    return out


def _chunks(cur: sqlite3.Cursor) -> Iterator[list[tuple[Any, ...]]]:
    while rows := cur.fetchmany(_FETCH_ROWS):
        yield rows


def _numeric_rows(chunks: Iterable[list[tuple[Any, ...]]]) -> tuple[_Cols, list[int]]:
    """Rows (rowid, value, timestamp, step), fetched in chunks, as (step, value,
    timestamp) arrays in rowid (insertion = logging) order; ±DBL_MAX (how MLflow stores
    ±inf) becomes ±inf. The query already turned is_nan rows' value into 'nan'. Also the
    rowids of rows that are not numbers (dropped)."""
    import numpy as np

    cols: list[list[np.ndarray]] = [[], [], [], []]  # rowid, value, timestamp, step
    bad: list[int] = []
    for rows in chunks:
        n = len(rows)
        try:
            flat = np.fromiter(itertools.chain.from_iterable(rows), dtype=np.float64, count=4 * n)
            table = flat.reshape(n, 4)
            if (np.abs(table[:, [0, 2, 3]]) >= _EXACT_IN_FLOAT).any():
                raise OverflowError  # beyond float64's exact integers
            got = [table[:, 0].astype(np.int64), table[:, 1].copy()]
            got += [table[:, 2].astype(np.int64), table[:, 3].astype(np.int64)]
        except (TypeError, ValueError, OverflowError):
            got = _numeric_rows_slow(rows, bad)
        for col, arr in zip(cols, got, strict=True):
            col.append(arr)
    if not cols[0]:
        empty = np.empty(0, dtype=np.int64)
        return (empty, np.empty(0, dtype=np.float64), empty), bad
    rowid, value, ts, step = (np.concatenate(c) for c in cols)
    order = np.argsort(rowid, kind="stable")
    value = value[order]
    value[value == _DBL_MAX] = np.inf
    value[value == -_DBL_MAX] = -np.inf
    return (step[order], value, ts[order]), bad


def _numeric_rows_slow(rows: list[tuple[Any, ...]], bad: list[int]) -> list[np.ndarray]:
    """Row by row: integers kept exact, rows that are not numbers left out (their rowids
    appended to ``bad``)."""
    import numpy as np

    good: list[tuple[int, float, int, int]] = []
    for row in rows:
        try:
            rowid, v, t, s = row
            if not (isinstance(t, int) and isinstance(s, int)) or v is None:
                raise TypeError
            good.append((int(rowid), float(v), t, s))
        except (TypeError, ValueError):
            bad.append(row[0] if isinstance(row[0], int) else -1)
    return [
        np.array([g[0] for g in good], dtype=np.int64),
        np.array([g[1] for g in good], dtype=np.float64),
        np.array([g[2] for g in good], dtype=np.int64),
        np.array([g[3] for g in good], dtype=np.int64),
    ]


def _latest_metrics(
    con: sqlite3.Connection, tables: set[str]
) -> dict[tuple[str, str], tuple[float, int, bool]]:
    if "latest_metrics" not in tables:
        return {}
    cols = set(_columns(con, "latest_metrics"))
    if not {"run_uuid", "key", "value", "step"} <= cols:
        return {}
    nan = "is_nan" if "is_nan" in cols else "0"
    return {
        (str(rid), str(key)): (float(value), int(step), bool(isnan))
        for rid, key, value, step, isnan in con.execute(
            f"SELECT run_uuid, key, value, step, {nan} FROM latest_metrics"
        )
    }


def _check_latest(
    source: str,
    run_id: str,
    keys: Sequence[str],
    counts: Sequence[int],
    cols: _Cols,
    latest: Mapping[tuple[str, str], tuple[float, int, bool]],
) -> list[DataIssue]:
    """latest_metrics must name the same metrics and end at the same step as the history."""
    import numpy as np

    if not latest:
        return []
    step = cols[0]
    ends = np.cumsum(np.asarray(counts, dtype=np.int64))
    starts = ends - np.asarray(counts, dtype=np.int64)
    odd: list[str] = []
    for key, a, b in zip(keys, starts.tolist(), ends.tolist(), strict=True):
        got = latest.get((run_id, key))
        if got is not None and got[1] != int(step[a:b].max()):
            odd.append(key)
    listed = {k for (rid, k) in latest if rid == run_id}
    absent = sorted(listed - set(keys))
    issues: list[DataIssue] = []
    if odd or absent:
        parts = []
        if odd:
            parts.append(f"last step differs for {', '.join(odd[:5])}")
        if absent:
            parts.append(f"no history rows for {', '.join(absent[:5])}")
        issues.append(
            DataIssue(
                kind="store-mismatch",
                source=source,
                location=f"run {run_id}",
                message=(
                    "MLflow's latest_metrics table disagrees with the metric history ("
                    + "; ".join(parts)
                    + "); the history was read"
                ),
                count=len(odd) + len(absent),
                details={"last_step_differs": odd, "missing_history": absent},
            )
        )
    return issues


# ---- mlflow-export-import ---------------------------------------------------------------


def _export_files(path: Path) -> Iterator[Path]:
    """run.json files of an export: the folder's own, else those of run folders below
    (an experiment export: <run_id>/run.json), at most three levels down."""
    if (path / "run.json").is_file():
        yield path / "run.json"
        return
    base_depth = len(path.parts)
    for root, dirs, files in os.walk(path):
        dirs.sort()
        if len(Path(root).parts) - base_depth >= 3:
            dirs[:] = []
        if "run.json" in files:
            yield Path(root) / "run.json"
            dirs[:] = []


def _read_export(path: Path, opts: ReadOptions) -> list[Run]:
    files = [path] if path.is_file() else list(_export_files(path))
    if not files:
        raise UnreadableInputError(f"{path}: no run.json of an MLflow export found")
    infos: list[_RunInfo] = []
    parsed: dict[str, tuple[dict[str, list[Any]] | None, list[DataIssue]]] = {}
    for f in files:
        info, metrics, issues = _parse_export(f)
        infos.append(info)
        parsed[info.run_id] = (metrics, issues)
    experiment = _export_experiment_name(path)
    for info in infos:
        if info.metadata.get("experiment") is None:
            info.metadata["experiment"] = experiment
    selected = _select(infos, opts, path)
    names = _unique_names(selected)
    out: list[Run] = []
    for r in selected:
        metrics, issues = parsed[r.run_id]
        long, more = _export_long(metrics or {}, r.source)
        if long.height == 0:
            continue
        out.append(
            build_run(
                long,
                name=names[r.run_id],
                source=r.source,
                fmt=FORMAT,
                aliases=opts.aliases,
                metadata=r.metadata,
                issues=[*issues, *more],
            )
        )
    if not out:
        raise _no_metrics(path, selected)
    return out


def _export_experiment_name(path: Path) -> str | None:
    """The experiment's name from an experiment export's experiment.json."""
    exp_json = path / "experiment.json" if path.is_dir() else path.parent.parent / "experiment.json"
    try:
        doc = json.loads(exp_json.read_bytes())
        body = doc.get("mlflow", doc)
        exp = body.get("experiment", body)
        name = exp.get("name")
    except (OSError, ValueError, AttributeError):
        return None
    return str(name) if name is not None else None


def _as_kv(obj: Any) -> dict[str, str]:
    """params/tags as a dict, or as a list of {key, value} (the REST API's shape)."""
    if isinstance(obj, dict):
        return {str(k): "" if v is None else str(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return {
            str(x.get("key")): "" if x.get("value") is None else str(x.get("value"))
            for x in obj
            if isinstance(x, dict) and "key" in x
        }
    return {}


def _parse_export(
    path: Path,
) -> tuple[_RunInfo, dict[str, list[Any]] | None, list[DataIssue]]:
    try:
        doc = json.loads(path.read_bytes())  # NaN / Infinity as Python's json writes them
    except (OSError, ValueError) as exc:
        raise UnreadableInputError(f"{path}: not readable JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise UnreadableInputError(f"{path}: not an MLflow run export (not a JSON object)")
    body: dict[str, Any] = doc["mlflow"] if isinstance(doc.get("mlflow"), dict) else doc
    info: dict[str, Any] = body["info"] if isinstance(body.get("info"), dict) else {}
    data: dict[str, Any] = body["data"] if isinstance(body.get("data"), dict) else body
    if "metrics" not in data or not info:
        raise UnreadableInputError(
            f"{path}: not an mlflow-export-import run export (expected an object with "
            "'info' and 'metrics', optionally under 'mlflow' or 'data')"
        )
    run_id = str(info.get("run_id") or info.get("run_uuid") or path.parent.name)
    tags = dict(sorted(_as_kv(data.get("tags")).items()))
    params = dict(sorted(_as_kv(data.get("params")).items()))
    name = info.get("run_name") or tags.get("mlflow.runName") or None
    issues: list[DataIssue] = []
    metrics, shape_issue = _export_metrics(data.get("metrics"), str(path))
    if shape_issue is not None:
        issues.append(shape_issue)
    run = _RunInfo(
        run_id=run_id,
        name=str(name) if name else run_id,
        source=str(path),
        metadata=_metadata(
            store="export",
            run_id=run_id,
            run_name=str(name) if name else None,
            experiment_id=info.get("experiment_id"),
            experiment=None,
            info=info,
            params=params,
            tags=tags,
        ),
        deleted=info.get("lifecycle_stage") == "deleted",
    )
    return run, metrics, issues


def _export_metrics(obj: Any, source: str) -> tuple[dict[str, list[Any]] | None, DataIssue | None]:
    """{name: [records]} from the shapes exports use: {name: [{value, timestamp, step}]},
    a list of {key, value, timestamp, step}, or (old exports) {name: latest value}."""
    if isinstance(obj, list):
        grouped: dict[str, list[Any]] = {}
        for rec in obj:
            key = rec.get("key") if isinstance(rec, dict) else None
            grouped.setdefault(str(key), []).append(rec)
        return grouped, None
    if not isinstance(obj, dict):
        return None, DataIssue(
            kind="bad-record",
            source=source,
            location="metrics",
            message="'metrics' is neither an object nor a list; no metrics read",
        )
    latest_only = [k for k, v in obj.items() if not isinstance(v, list)]
    out = {
        str(k): (v if isinstance(v, list) else [{"value": v, "step": 0}]) for k, v in obj.items()
    }
    issue = None
    if latest_only:
        issue = DataIssue(
            kind="no-history",
            source=source,
            location="metrics",
            message=(
                f"{len(latest_only)} metric(s) hold only their last value (an export without "
                "metric history); each is read as one point at step 0"
            ),
            count=len(latest_only),
            severity="info",
            details={"metrics": latest_only[:100]},
        )
    return out, issue


def _export_long(
    metrics: Mapping[str, list[Any]], source: str
) -> tuple[pl.DataFrame, list[DataIssue]]:
    names: list[str] = []
    counts: list[int] = []
    steps: list[int] = []
    values: list[float] = []
    stamps: list[float] = []
    issues: list[DataIssue] = []
    for key, records in metrics.items():
        n0 = len(steps)
        bad: list[int] = []
        for i, rec in enumerate(records):
            try:
                v = _number(rec.get("value"))
                s = int(rec.get("step") or 0)
                t = rec.get("timestamp")
                ts = math.nan if t is None else float(int(t))
            except (AttributeError, TypeError, ValueError, OverflowError):
                bad.append(i)
                continue
            steps.append(s)
            values.append(v)
            stamps.append(ts)
        if bad:
            issues.append(
                DataIssue(
                    kind="bad-record",
                    source=source,
                    location=f"metric {key!r}, record {bad[0] + 1}",
                    message=(
                        f"{len(bad)} record(s) of metric {key!r} have no numeric value/step "
                        "and were skipped"
                    ),
                    count=len(bad),
                    details={"records": [b + 1 for b in bad[:100]]},
                )
            )
        if len(steps) > n0:
            names.append(key)
            counts.append(len(steps) - n0)
    ts_ms = pl.Series(stamps, dtype=pl.Float64()).fill_nan(None)
    long = _long_frame(
        names,
        counts,
        pl.Series(steps, dtype=pl.Int64()),
        pl.Series(values, dtype=pl.Float64()),
        ts_ms,
    )
    return long, issues


def _number(v: Any) -> float:
    if isinstance(v, bool) or v is None:
        raise TypeError
    return float(v)  # also "NaN", "Infinity" written as strings


__all__ = ["FORMAT", "read", "sniff"]
