"""MLflow's SQLite tracking database, opened read-only: runs, params and tags from
their tables, values from ``metrics`` in insertion order, ``latest_metrics`` as a
cross-check."""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from trainlens.core.errors import UnreadableInputError
from trainlens.core.run import DataIssue, Run, build_run
from trainlens.readers.base import ReadOptions
from trainlens.readers.mlflow._runs import (
    FORMAT,
    RunInfo,
    long_frame,
    no_metrics,
    run_metadata,
    run_order,
    select_runs,
    unique_names,
)

if TYPE_CHECKING:  # numpy is imported where it is used: a file store needs none
    import numpy as np


_DBL_MAX = 1.7976931348623157e308


_EXACT_IN_FLOAT = float(2**53)


_FETCH_ROWS = 1 << 20  # SQLite rows per fetch: bounds the Python tuples alive at once


def _connect(path: Path, timeout: float = 5.0) -> sqlite3.Connection:
    uri = path.resolve().as_uri() + "?mode=ro"
    return sqlite3.connect(uri, uri=True, timeout=timeout)


def _tables(con: sqlite3.Connection) -> set[str]:
    return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def _columns(con: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')]


# sniffing waits this long for a lock (a writer's commit takes milliseconds); the reader
# then waits sqlite's usual 5 s before it says the database is locked
_SNIFF_TIMEOUT = 0.2


def sqlite_has_metrics(path: Path) -> bool | None:
    """Whether the SQLite database has MLflow's ``metrics`` table; None when it cannot be
    told (locked, truncated, malformed): the reader then says what is wrong with it, not
    "not a format trainlens knows"."""
    try:
        con = _connect(path, timeout=_SNIFF_TIMEOUT)
    except sqlite3.Error:
        return None
    try:
        return "metrics" in _tables(con)
    except sqlite3.Error:
        return None
    finally:
        con.close()


def read_sqlite(path: Path, opts: ReadOptions) -> list[Run]:
    try:
        con = _connect(path)
    except sqlite3.Error as exc:
        raise UnreadableInputError(f"{path}: cannot open the SQLite database: {exc}") from None
    try:
        return _read_sqlite_con(con, path, opts)
    except sqlite3.DatabaseError as exc:
        raise UnreadableInputError(
            f"{path}: cannot read the MLflow database: {exc}{_cut_short(path)}"
        ) from None
    finally:
        con.close()


def _cut_short(path: Path) -> str:
    """ "; the file is cut short (n of m bytes)" when the header's page size and count
    (bytes 16-17 and 28-31 of every SQLite file) say it should be longer, else ""."""
    try:
        size = path.stat().st_size
        with path.open("rb") as fh:
            head = fh.read(32)
    except OSError:
        return ""
    if len(head) < 32:
        return f"; the file is cut short ({size} bytes, not even a header)"
    page = int.from_bytes(head[16:18], "big")
    page = 65536 if page == 1 else page  # (the header's way of writing 65536)
    want = page * int.from_bytes(head[28:32], "big")
    return f"; the file is cut short ({size} of {want} bytes)" if 0 < size < want else ""


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
    index = _run_key_index(con)
    metric_runs = _distinct_runs(con, indexed=index is not None)
    for rid in metric_runs:
        if rid not in infos:
            infos[rid] = RunInfo(
                run_id=rid,
                name=rid,
                source=str(path),
                metadata=run_metadata(
                    store="sqlite", run_id=rid, run_name=None, experiment_id=None,
                    experiment=None, info={}, params={}, tags={},
                ),
            )  # fmt: skip
    ordered = sorted(
        infos.values(),
        key=run_order,
    )
    selected = select_runs(ordered, opts, path)
    has_metrics = set(metric_runs)
    runs = [r for r in selected if r.run_id in has_metrics]
    if not runs:
        raise no_metrics(path, selected)

    is_nan = "is_nan" if "is_nan" in mcols else "0"
    data = _sqlite_metrics(
        con, [r.run_id for r in runs], source=str(path), is_nan=is_nan, index=index
    )
    latest = _latest_metrics(con, tables)
    names = unique_names(runs)
    out: list[Run] = []
    for r in runs:
        keys, counts, cols, issues = data.get(r.run_id, ([], [], None, []))
        if cols is None:
            continue
        step, value, ts = cols
        issues = issues + _check_latest(str(path), r.run_id, keys, counts, cols, latest)
        long = long_frame(keys, counts, pl.Series(step), pl.Series(value), pl.Series(ts))
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
        raise no_metrics(path, runs)
    return out


def _rows_as_dicts(cur: sqlite3.Cursor) -> list[dict[str, Any]]:
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, row, strict=True)) for row in cur.fetchall()]


def _sqlite_runs(con: sqlite3.Connection, tables: set[str]) -> dict[str, RunInfo]:
    if "runs" not in tables:
        return {}
    runs = _rows_as_dicts(con.execute("SELECT * FROM runs"))
    experiments: dict[str, str] = {}
    if "experiments" in tables:
        for row in _rows_as_dicts(con.execute("SELECT * FROM experiments")):
            experiments[str(row.get("experiment_id"))] = str(row.get("name"))
    params = _sqlite_kv(con, "params", tables)
    tags = _sqlite_kv(con, "tags", tables)
    out: dict[str, RunInfo] = {}
    for row in runs:
        rid = str(row.get("run_uuid"))
        run_tags = tags.get(rid, {})
        name = row.get("name") or run_tags.get("mlflow.runName") or None
        exp_id = row.get("experiment_id")
        out[rid] = RunInfo(
            run_id=rid,
            name=str(name) if name else rid,
            source="",
            metadata=run_metadata(
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


def _run_key_index(con: sqlite3.Connection) -> str | None:
    """The name of an index on metrics (run_uuid, key, …), as MLflow makes; without
    one, one full scan beats a query per metric."""
    for row in con.execute('PRAGMA index_list("metrics")'):
        cols = [r[2] for r in con.execute(f'PRAGMA index_info("{_quoted(row[1])}")')]
        if cols[:2] == ["run_uuid", "key"]:
            return str(row[1])
    return None


def _quoted(name: str) -> str:
    """An identifier read from the database, safe between double quotes."""
    return str(name).replace('"', '""')


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
    index: str | None,
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

    if index is not None:
        # named: without statistics SQLite's planner takes MLflow's primary key, which
        # starts with `key`, and walks that metric's rows of every run (measured on 200
        # runs written by MlflowClient: 14.5 ms a query, 0.64 ms through this index)
        pick = f'SELECT {cols} FROM metrics INDEXED BY "{_quoted(index)}" '
        for rid, key in _distinct_keys(con, run_ids):
            cur = con.execute(pick + "WHERE run_uuid = ? AND key = ?", (rid, key))
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
