"""Parquet: a run's history saved as a table, or a canonical frame ``trainlens convert`` wrote.

- **Long** (``step``, ``metric``, ``value``, maybe ``wall_time``, ``superseded``,
  ``run``: what ``trainlens convert`` writes): the frame as it was, one run per ``run``
  value (else one run, named after the file). Restarts are marked again from the rows'
  order, which the file keeps, so a converted run reads back to the same frame.
- **Wide** (a step column, maybe a time column, a column per metric): what pandas'
  ``to_parquet`` writes for W&B's ``run.history()`` / ``scan_history()`` and most
  hand-made exports. W&B's own columns are handled as in a CSV dump (``_step`` the step,
  ``_timestamp`` the wall time, ``_runtime`` no metric: :func:`trainlens.readers._wandb.
  history_dump`); pandas' index columns (``__index_level_0__``) are dropped with a note;
  struct columns (nested dicts) become ``parent/child``; a datetime time column is read
  as seconds since the epoch.

polars reads the file (no other dependency). A file polars cannot read (cut short, not
parquet after all) is one sentence; parquet's footer indexes the whole file, so there is
no partial read of a damaged one.
"""

from __future__ import annotations

import io
from pathlib import Path

import polars as pl

from trainlens.core.errors import UnreadableInputError
from trainlens.core.run import DataIssue, Run, build_run
from trainlens.readers import _shrink, _wandb
from trainlens.readers._sniff import PARQUET_MAGIC
from trainlens.readers._wide import (
    TIME_KEYS,
    find_key,
    flatten_structs,
    wide_to_long,
    without_pandas_index,
)
from trainlens.readers.base import ReadOptions

FORMAT = "parquet"
LONG_COLUMNS = ("step", "metric", "value")


def sniff(path: Path, head: bytes) -> bool:
    return not path.is_dir() and head.startswith(PARQUET_MAGIC)


def _name(path: Path) -> str:
    stem = path.name[: -len(".parquet")] if path.name.endswith(".parquet") else path.stem
    return path.parent.resolve().name if stem in {"metrics", "history"} else stem


def read(path: Path, opts: ReadOptions) -> list[Run]:
    source = str(path)
    df, size, notes = _frame(path)
    if df.height == 0:
        raise UnreadableInputError(f"{path}: a parquet file with no rows")
    if all(c in df.columns for c in LONG_COLUMNS):
        runs = _long_runs(df, path, opts)
    else:
        runs = [_wide_run(df, path, opts)]
    for run in runs:
        run.cursor[source] = size
        run.data_quality[:0] = notes
    return runs


def _frame(path: Path) -> tuple[pl.DataFrame, int, list[DataIssue]]:
    """The table, the bytes it was read from, and the note when the file shrank while
    read. polars maps a file it reads from a path, so that read is made under the guard
    (:mod:`trainlens.readers._shrink`); when a page was cut from under it, or the guard is
    not built, polars reads a copy of the bytes there are (the footer is at the end, so a
    file cut short is then one sentence, which says so)."""
    size = 0
    if _shrink.GUARDED:
        with _shrink.guard(path) as g:
            size = g.size
            try:
                df = pl.read_parquet(path)
            except Exception as exc:
                df, failed = None, exc
        if not g.cut:
            if df is None:
                raise _unreadable(path, failed, "") from None
            return df, size, []
    copy = _shrink.read_copy(path)
    notes = _shrink.note_if_shrank(path, copy.end, max(size, copy.size))
    try:
        return pl.read_parquet(io.BytesIO(copy.data)), copy.end, notes
    except Exception as exc:
        raise _unreadable(path, exc, f"; {notes[0].message}" if notes else "") from None


def _unreadable(path: Path, exc: Exception, more: str) -> UnreadableInputError:
    # polars' errors are many types; each is this one sentence
    why = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), type(exc).__name__)
    return UnreadableInputError(f"{path}: not a parquet file polars can read ({why}){more}")


def _long_runs(df: pl.DataFrame, path: Path, opts: ReadOptions) -> list[Run]:
    source = str(path)
    keep = [c for c in ("step", "metric", "value", "wall_time") if c in df.columns]
    parts: list[tuple[str, pl.DataFrame]]
    if "run" in df.columns:
        parts = [
            (str(name), part)
            for (name,), part in df.group_by("run", maintain_order=True)  # file order
        ]
    else:
        parts = [(_name(path), df)]
    runs = []
    for name, part in parts:
        long = part.select(keep).with_columns(_metric_names(part.get_column("metric")))
        bad = long.get_column("step").null_count()
        notes = []
        if bad:
            long = long.filter(pl.col("step").is_not_null())
            notes.append(
                DataIssue(
                    kind="bad-step",
                    source=source,
                    message=f"{bad} value(s) without a step were skipped",
                    count=bad,
                )
            )
        runs.append(
            build_run(
                long, name=name, source=source, fmt=FORMAT, aliases=opts.aliases, issues=notes
            )
        )
    return runs


def _metric_names(metric: pl.Series) -> pl.Series:
    """The metric column as the frame takes it: a categorical one (``trainlens convert``
    writes it so) as an Enum of its names in order of first appearance, with no string
    per row (a String cast of 50M rows took 1.5 GB more: bench/memory.py); else text."""
    if isinstance(metric.dtype, (pl.Categorical, pl.Enum)) and not metric.null_count():
        names = metric.unique(maintain_order=True).cast(pl.String).to_list()
        return metric.cast(pl.Enum(names))
    return metric.cast(pl.String)


def _wide_run(df: pl.DataFrame, path: Path, opts: ReadOptions) -> Run:
    source = str(path)
    df, issues = without_pandas_index(df, source)
    df = flatten_structs(_wandb.history_dump(df))
    time_key = find_key(df.columns, TIME_KEYS)
    if time_key is not None and isinstance(df.schema[time_key], pl.Datetime):
        seconds = pl.col(time_key).dt.epoch("us").cast(pl.Float64) / 1e6
        df = df.with_columns(seconds.alias(time_key))
    rows = pl.Series("_line", range(1, df.height + 1), dtype=pl.Int64)
    long, more, counts = wide_to_long(df, source=source, line_numbers=rows, unit="row")
    if long.height == 0:
        raise UnreadableInputError(f"{path}: no numeric metric columns found")
    return build_run(
        long,
        name=_name(path),
        source=source,
        fmt=FORMAT,
        aliases=opts.aliases,
        issues=[*issues, *more],
        blocks=counts,
    )
