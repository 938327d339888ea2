"""Shared by row-oriented readers (JSONL, CSV): a wide table in file order to a long frame."""

from __future__ import annotations

import re
from collections import Counter

import polars as pl

from trainlens.core.frame import MANY_METRICS
from trainlens.core.run import DataIssue
from trainlens.core.steps import bad_step_note, steps_of

STEP_KEYS = (
    "step",
    "global_step",
    "trainer/global_step",
    "iteration",
    "iter",
    "_step",
    "steps",
    "it",
)
TIME_KEYS = ("wall_time", "time", "timestamp", "_timestamp", "walltime", "Wall time")


def find_key(columns: list[str], candidates: tuple[str, ...]) -> str | None:
    lower = {c.lower(): c for c in columns}
    for cand in candidates:
        if cand in columns:
            return cand
        if cand.lower() in lower:
            return lower[cand.lower()]
    return None


def flatten_structs(df: pl.DataFrame, sep: str = "/") -> pl.DataFrame:
    """Nested objects become ``parent/child`` columns, recursively."""
    while True:
        structs = [c for c, t in df.schema.items() if isinstance(t, pl.Struct)]
        if not structs:
            return df
        for col in structs:
            fields = [f.name for f in df.schema[col].fields]  # type: ignore[attr-defined]
            taken = set(df.columns)
            names = []
            for f in fields:
                # a flat key "a/b" beside {"a": {"b": ...}}: the nested one is "a/b#2"
                name, k = f"{col}{sep}{f}", 2
                while name in taken:
                    name, k = f"{col}{sep}{f}#{k}", k + 1
                taken.add(name)
                names.append(name)
            df = df.with_columns(pl.col(col).struct.rename_fields(names)).unnest(col)


def wide_to_long(
    df: pl.DataFrame,
    *,
    source: str,
    line_numbers: pl.Series | None = None,
    unit: str = "line",
    step_key: str | None = None,
    time_key: str | None = None,
    no_wall_time: bool = False,
    step_name: str | None = None,
) -> tuple[pl.DataFrame, list[DataIssue], list[int]]:
    """Unpivot a wide table (a step column, maybe a time column, one column per metric)
    to (step, metric, value, wall_time) in file order within each metric, the metrics in
    column order (``metric`` is an Enum; :func:`trainlens.core.run.build_run` takes it),
    the issues, and each metric's row count (``build_run``'s ``blocks``).
    Non-numeric cells are counted and reported; missing cells are simply absent.
    ``step_key`` / ``time_key`` name the columns when a framework's layout says which
    (:mod:`trainlens.readers._native_json`); ``no_wall_time``: the file has no wall clock
    (detectron2's ``time`` is seconds per iteration, not a timestamp); ``step_name``: the
    logged name of a step column made by the reader, for the notes."""
    issues: list[DataIssue] = []
    cols = df.columns
    step_key = original_step_key = step_key or find_key(cols, STEP_KEYS)
    time_key = None if no_wall_time else (time_key or find_key(cols, TIME_KEYS))
    if line_numbers is None:
        line_numbers = pl.Series("_line", range(1, df.height + 1), dtype=pl.Int64)
    df = df.with_columns(line_numbers.alias("_line"))

    if step_key is None:
        issues.append(
            DataIssue(
                kind="no-step",
                source=source,
                message=f"no step column found; the {unit} number is used as the step",
                severity="info",
            )
        )
        df = df.with_columns((pl.col("_line") - 1).alias("_step"))
        step_key = "_step"
    else:
        step, why = _int_steps(df.get_column(step_key))
        df = df.with_columns(step.alias("_step_int"), why.alias("_step_why"))
        step_key = "_step_int"

    if time_key is not None and not _scalar_type(df.schema[time_key]):
        time_key = None  # a list or an object under a time key: no wall time (not a crash)
    if time_key is not None:
        t = df.get_column(time_key)
        if t.dtype == pl.String:
            parsed = t.cast(pl.Float64, strict=False)
            if parsed.null_count() > t.null_count():
                dt = t.str.to_datetime(strict=False, time_zone="UTC")
                parsed = dt.dt.epoch("us").cast(pl.Float64) / 1e6
            t = parsed
        df = df.with_columns(t.cast(pl.Float64, strict=False).alias("_wall"))
    else:
        df = df.with_columns(pl.lit(None, dtype=pl.Float64).alias("_wall"))

    skip = {step_key, time_key, original_step_key, "_line", "_wall", "_step_why"}
    metric_cols = [c for c in df.columns if c not in skip]
    casts: list[pl.Series] = []
    dropped: list[str] = []
    # (the schema once: df.schema builds a new mapping of every column on each call, so
    # asking it per column was quadratic: 2,000 keys took 15 s)
    schema = df.schema
    for c in metric_cols:
        dtype = schema[c]
        if dtype.is_numeric() or dtype == pl.Boolean:
            col = df.get_column(c)
            casts.append(col if dtype == pl.Float64 else col.cast(pl.Float64))
        elif dtype == pl.String:
            col = df.get_column(c)
            num = col.str.strip_chars().cast(pl.Float64, strict=False)
            text = col.is_not_null() & (col.str.strip_chars() != "")
            bad = num.is_null() & text
            n_bad = int(bad.sum())
            # (a sparse text column has null rows: compare with the cells that hold text)
            if n_bad and n_bad == int(text.sum()):
                dropped.append(c)  # a text column (run names, tags): not a metric
                continue
            if bad.any():
                issues.append(_cell_issue(df, bad, c, source, unit, "a non-numeric value"))
            casts.append(num.alias(c))
        elif dtype == pl.Null:
            continue
        else:
            dropped.append(c)
    if dropped:
        issues.append(
            DataIssue(
                kind="non-metric-column",
                source=source,
                message=(
                    f"{len(dropped)} column(s) hold no numbers and are not metrics: "
                    + ", ".join(dropped[:8])
                    + ("…" if len(dropped) > 8 else "")
                ),
                severity="info",
                details={"columns": dropped},
            )
        )
    not_metrics = set(dropped)
    metric_names = [c for c in metric_cols if c not in not_metrics and schema[c] != pl.Null]
    issues.extend(_stepless_rows(df, step_key, casts, source, unit, step_name or original_step_key))
    # (columns keep the reader's chunks: a per-metric view is made one chunk when a
    # detector first asks for it, see Run.series_frame)
    wide = pl.DataFrame(
        [
            df.get_column(step_key).alias("step"),
            df.get_column("_wall").alias("wall_time"),
            df.get_column("_line"),
        ]
    )
    # (the metric columns beside the frame, not in it: a key "" or "step" must not be
    # renamed by, or collide in, a DataFrame)
    long, counts = _unpivot(wide, metric_names, casts)
    return long, issues, counts


def _unpivot(
    wide: pl.DataFrame, metric_names: list[str], columns: list[pl.Series]
) -> tuple[pl.DataFrame, list[int]]:
    """(step, metric, value, wall_time, _line): each metric's non-null cells (``columns``,
    one per name) in file order, the metrics one after the other, ``metric`` an Enum of
    ``metric_names``, ``_line`` the line each value came from (restarts are told in that order).

    The same rows as ``wide.unpivot(...)`` filtered on non-null value and step, built
    from per-metric slices concatenated without copying; the metric column is made from
    integer codes, never one string per row."""
    # step and wall_time are shared by every dense metric: made one chunk here, once,
    # a per-metric view of them needs no copy later
    step = wide.get_column("step").rechunk()
    wall = wide.get_column("wall_time").rechunk()
    order = wide.get_column("_line")
    step_ok = step.null_count() == 0
    steps: list[pl.Series] = []
    values: list[pl.Series] = []
    walls: list[pl.Series] = []
    orders: list[pl.Series] = []
    counts: list[int] = []
    for value in columns:
        if step_ok and value.null_count() == 0:
            steps.append(step)
            values.append(value)
            walls.append(wall)
            orders.append(order)
        else:
            keep = value.is_not_null() & step.is_not_null()
            steps.append(step.filter(keep))
            values.append(value.filter(keep))
            walls.append(wall.filter(keep))
            orders.append(order.filter(keep))
        counts.append(steps[-1].len())
    long = pl.DataFrame(
        [
            _concat(steps, step.dtype).alias("step"),
            enum_runs(metric_names, counts).alias("metric"),
            _concat(values, pl.Float64()).alias("value"),
            _concat(walls, pl.Float64()).alias("wall_time"),
            _concat(orders, order.dtype).alias("_line"),
        ]
    )
    return long, counts


def _concat(parts: list[pl.Series], dtype: pl.DataType) -> pl.Series:
    if not parts:
        return pl.Series("", [], dtype=dtype)
    # one copy into one chunk when the parts are many: 100k chunks made every later
    # operation on the column visit each of them
    return pl.concat(parts, rechunk=len(parts) > MANY_METRICS) if len(parts) > 1 else parts[0]


def enum_runs(names: list[str], counts: list[int]) -> pl.Series:
    """An Enum series of ``names``: counts[i] rows of names[i], one after the other — one
    constant chunk per name, no string (nor code) per row is made."""
    # one Series of the names, sliced per name: a new Enum Series per name copies the
    # whole category list each time (quadratic in the number of metrics)
    every = pl.Series("metric", names, dtype=pl.Enum(names))
    if len(names) > MANY_METRICS:  # a chunk per name cost 12 µs each, a gather nothing per name
        import numpy as np

        return every.gather(pl.Series(np.repeat(np.arange(len(names)), counts)))
    parts = [every.slice(i, 1).new_from_index(0, k) for i, k in enumerate(counts)]
    if not parts:
        return every.clear()
    return pl.concat(parts, rechunk=False) if len(parts) > 1 else parts[0]


def _scalar_type(dtype: pl.DataType) -> bool:
    """A column polars can cast to a number cell by cell: not a list or an object."""
    return dtype.is_numeric() or dtype in (pl.String, pl.Boolean, pl.Null)


def _int_steps(step: pl.Series) -> tuple[pl.Series, pl.Series]:
    """The step column as Int64, null where there is no usable step, and why not
    (:func:`trainlens.core.steps.steps_of`: a fractional step is no step, never rounded).
    Those rows are reported by :func:`_stepless_rows`."""
    if not _scalar_type(step.dtype):  # a list ([3]) or an object: no step
        return steps_of(pl.Series(step.name, [True] * step.len()).set(step.is_null(), None))
    return steps_of(step)


def _stepless_rows(
    df: pl.DataFrame,
    step_key: str,
    casts: list[pl.Series],
    source: str,
    unit: str,
    raw_key: str | None,
) -> list[DataIssue]:
    """A note for the rows whose values are left out for want of a usable step (no step
    key on the line, or a step that is not a whole number within Int64): how many
    values, from which lines. Every value read is in the frame or counted here."""
    step = df.get_column(step_key)
    missing = step.is_null()
    if not missing.any() or not casts:
        return []
    values = pl.DataFrame(casts).filter(missing)
    per_row = values.select(pl.sum_horizontal(pl.all().is_not_null())).to_series()
    has_values = per_row > 0
    n_values = int(per_row.sum())
    if n_values == 0:
        return []
    lines = df.get_column("_line").filter(missing).filter(has_values)
    reasons: Counter[str] = Counter()
    if "_step_why" in df.columns:
        why = df.get_column("_step_why").filter(missing).filter(has_values)
        reasons.update(why.fill_null("missing").to_list())
    return [
        bad_step_note(
            source=source,
            unit=unit,
            where=lines.head(100).to_list(),
            n_values=n_values,
            n_records=lines.len(),
            reasons=reasons,
            key=raw_key,
        )
    ]


def _cell_issue(
    df: pl.DataFrame, bad: pl.Series, col: str, source: str, unit: str, what: str
) -> DataIssue:
    lines = df.get_column("_line").filter(bad).head(5).to_list()
    n = int(bad.sum())
    return DataIssue(
        kind="non-numeric",
        source=source,
        location=f"{unit} {lines[0]}",
        message=(
            f"{n} cell(s) of {col!r} hold {what} and were skipped "
            f"({unit}s {', '.join(map(str, lines))}{'…' if n > len(lines) else ''})"
        ),
        count=n,
        details={"column": col, unit + "s": lines},
    )


# pandas' index as pyarrow's parquet writer names it (a RangeIndex is kept as metadata
# only; any other index becomes these columns)
PANDAS_INDEX_COLUMN = re.compile(r"^__index_level_\d+__$")


def without_pandas_index(df: pl.DataFrame, source: str) -> tuple[pl.DataFrame, list[DataIssue]]:
    """The table without pandas' index, and an info note when there was one: a leading
    column with an empty header holding 0, 1, …, n-1 (``DataFrame.to_csv()`` writes the
    index so by default), or the ``__index_level_<k>__`` columns of ``to_parquet()``.
    Kept as a metric, the row number became a metric named "" that rose every row."""
    dropped = [c for c in df.columns if PANDAS_INDEX_COLUMN.match(c)]
    if df.width and df.columns[0] == "" and _is_row_number(df.get_column("")):
        dropped.insert(0, "")
    if not dropped:
        return df, []
    shown = ", ".join(repr(c) for c in dropped)
    note = DataIssue(
        kind="pandas-index",
        source=source,
        message=f"column {shown} is pandas' row index (written with the table), not a metric",
        severity="info",
        details={"columns": dropped},
    )
    return df.drop(dropped), [note]


def _is_row_number(col: pl.Series) -> bool:
    if not col.dtype.is_integer() or col.null_count():
        return False
    return bool((col == pl.int_range(0, col.len(), eager=True)).all())
