"""The two CSV files W&B's web page downloads, told apart from a plain metrics table.

- **A chart's export** (`Step`, then `"<run> - <metric>"` columns, each maybe with
  `__MIN` / `__MAX` companions): one run per W&B run, named after it. The companions are
  the minimum and maximum of the points W&B drew as one (a downsampled or grouped chart);
  where they equal the value on every row (the usual case: nothing was merged) they say
  nothing and are dropped; where they differ they are kept as `<metric>__min` /
  `<metric>__max` (the metric's canonical name), never as the metric itself. Empty cells
  are a run with no point at that step, not a NaN.
- **A runs table** (`Name`, `State`, `Notes`, `User`, `Tags`, `Created`, `Runtime`,
  `Sweep`, then config columns, then summary columns): one run per row, named after
  `Name`, holding only the run's final (summary) values — one value per metric, at the
  step the row gives (`_step`, `step` or `iter`), else 0, with a note saying it is no
  history. The fixed columns go to ``metadata["wandb"]`` and the config columns to
  ``metadata["params"]`` (where a run's own configuration is kept, as for MLflow).
  W&B lists the config columns and then the summary columns, each block sorted by name;
  the place where the order starts again is the boundary. When it cannot be seen (no
  restart, or several), a column is a summary metric when its name maps to a canonical
  metric, holds a `/`, or is a step column.
- **The API's runs export** (W&B's docs: each run's config, its summary — sorted, with
  W&B's own `_runtime`, `_step`, `_timestamp`, `_wandb` — then `name` and `id`): read
  like the runs table, the summary being the sorted block around W&B's own keys; rows
  that share an `id` are one run's history.
"""

from __future__ import annotations

import re
from typing import Any

import polars as pl

from trainlens.core.names import AliasTable
from trainlens.core.run import DataIssue, Run, build_run
from trainlens.readers._wide import STEP_KEYS, TIME_KEYS, find_key, wide_to_long
from trainlens.readers.base import ReadOptions

# split at the last " - ": a run's display name may hold one ("lr 1e-3 - bs 64"), a
# logged key has no spaces around a dash
CHART_COLUMN = re.compile(r"^(?P<run>.+) - (?P<metric>.+)$")
COMPANION = re.compile(r"^(?P<base>.+)__(?P<kind>MIN|MAX)$")
# the columns W&B's runs table writes before the config (the visible defaults and the
# ones a user can add from the column picker)
FIXED_COLUMNS = frozenset(
    {
        "name",  # the API export's own two: name, id
        "id",
        "Name",
        "State",
        "Notes",
        "User",
        "Tags",
        "Created",
        "Runtime",
        "Sweep",
        "ID",
        "Group",
        "Job Type",
        "Hostname",
        "Description",
        "Commit",
        "GitHub",
        "GPU Type",
        "GPU Count",
        "Updated",
        "End Time",
        "Heartbeat",
    }
)
# the columns W&B writes into every history row (``run.history()``, ``scan_history()``)
HISTORY_OWN = ("_step", "_runtime", "_timestamp")
# keys W&B puts in every run's summary: they mark the summary block of an export
INTERNAL_SUMMARY = frozenset({*HISTORY_OWN, "_wandb"})
RUN_STEP_KEYS = ("_step", "step", "iter", "global_step", "trainer/global_step", "iteration")
_AXIS_WORDS = ("step", "time", "epoch")


# ---- chart export ---------------------------------------------------------------------------


def _is_axis(column: str) -> bool:
    low = column.lower()
    in_keys = find_key([column], STEP_KEYS) or find_key([column], TIME_KEYS)
    return bool(in_keys) or any(w in low for w in _AXIS_WORDS)


def _same(a: pl.Series, b: pl.Series) -> bool:
    fa, fb = a.cast(pl.Float64, strict=False), b.cast(pl.Float64, strict=False)
    return bool(((fa == fb) | (fa.is_null() & fb.is_null())).fill_null(False).all())


def chart_runs(
    df: pl.DataFrame, opts: ReadOptions, source: str
) -> list[tuple[str, pl.DataFrame, list[DataIssue]]]:
    """(run name, its own table, notes) per W&B run of a chart export; [] when ``df`` is
    not one (no ``<run> - <metric>`` column, or a column that is neither one nor an axis)."""
    groups: dict[str, list[tuple[str, str]]] = {}
    shared: list[str] = []
    for col in df.columns:
        m = CHART_COLUMN.match(col)
        if m:
            groups.setdefault(m.group("run"), []).append((col, m.group("metric")))
        else:
            shared.append(col)
    if not groups or not all(_is_axis(c) for c in shared):
        return []
    return [
        _chart_run(df, run, pairs, shared, opts.aliases, source) for run, pairs in groups.items()
    ]


def _chart_run(
    df: pl.DataFrame,
    run: str,
    pairs: list[tuple[str, str]],
    shared: list[str],
    aliases: AliasTable,
    source: str,
) -> tuple[str, pl.DataFrame, list[DataIssue]]:
    bases = {metric: col for col, metric in pairs if not COMPANION.match(metric)}
    # a row where this run has no point is another run's (a chart against a logged metric,
    # each run with its own `_step`, interleaves them): the shared axis on it is no value of
    # this run, so it is blanked rather than reported as a value without a step. Rows stay
    # in place so that notes name the file's lines
    own = pl.any_horizontal(
        [pl.col(c).is_not_null() & (pl.col(c).cast(pl.Utf8) != "") for c, _ in pairs]
    )
    mask = df.select(own.alias("own")).get_column("own")
    columns: list[pl.Series] = [
        df.select(pl.when(mask).then(pl.col(c)).alias(c)).get_column(c) for c in shared
    ]
    dropped: list[str] = []
    kept: list[str] = []
    for col, metric in pairs:
        m = COMPANION.match(metric)
        if m is None:
            columns.append(df.get_column(col).alias(metric))
            continue
        base = m.group("base")
        if base in bases and _same(df.get_column(col), df.get_column(bases[base])):
            dropped.append(metric)
            continue
        alias = aliases.lookup(base)
        name = f"{alias.canonical if alias else base}__{m.group('kind').lower()}"
        series = df.get_column(col)
        if alias is not None and alias.scale != 1.0:  # in the canonical metric's unit
            series = series.cast(pl.Float64, strict=False) * alias.scale
        columns.append(series.alias(name))
        kept.append(name)
    notes: list[DataIssue] = []
    if dropped:
        notes.append(
            DataIssue(
                kind="wandb-companions",
                source=source,
                message=(
                    f"W&B's __MIN/__MAX columns equal the value on every row and are not "
                    f"kept as metrics ({', '.join(sorted(set(dropped)))})"
                ),
                count=len(dropped),
                severity="info",
            )
        )
    if kept:
        notes.append(
            DataIssue(
                kind="wandb-companions",
                source=source,
                message=(
                    "W&B's __MIN/__MAX columns differ from the value (a downsampled or "
                    f"grouped chart): kept as {', '.join(kept)}"
                ),
                count=len(kept),
                severity="info",
            )
        )
    return run, pl.DataFrame(columns), notes


# ---- runs table -----------------------------------------------------------------------------


def is_runs_table(columns: list[str]) -> bool:
    # (the user picks the visible columns: "State" or "Created" may be hidden)
    if "Name" in columns and len(FIXED_COLUMNS & set(columns)) >= 4:
        return True
    # the API's runs export (W&B's docs: a run's config, its summary, `name`, `id`)
    return ("name" in columns or "Name" in columns) and bool(set(columns) & INTERNAL_SUMMARY)


def split_config_summary(columns: list[str], aliases: AliasTable) -> tuple[list[str], list[str]]:
    """(config columns, summary columns) of a runs table, fixed columns left out."""
    keys = [c.lower() for c in columns]
    internal = [i for i, c in enumerate(columns) if c in INTERNAL_SUMMARY]
    if internal:  # the sorted block around W&B's own summary keys (_runtime, _step, …)
        lo = hi = internal[0]
        while lo > 0 and keys[lo - 1] <= keys[lo]:
            lo -= 1
        while hi + 1 < len(keys) and keys[hi + 1] >= keys[hi]:
            hi += 1
        if lo <= internal[-1] <= hi:
            return columns[:lo] + columns[hi + 1 :], columns[lo : hi + 1]
    restarts = [i for i in range(1, len(keys)) if keys[i] < keys[i - 1]]
    if len(restarts) == 1:
        return columns[: restarts[0]], columns[restarts[0] :]
    summary = [
        c
        for c in columns
        if "/" in c or c.startswith("_") or aliases.lookup(c) is not None or c in RUN_STEP_KEYS
    ]
    return [c for c in columns if c not in summary], summary


_MAX_STEP = float(1 << 62)  # beyond this a float step is no iteration count


def _row_steps(
    df: pl.DataFrame, step_col: str | None, source: str
) -> tuple[pl.Series, list[DataIssue]]:
    """Each row's step (Int64): its step column, 0 where there is none; a cell that is no
    usable step (text, NaN, beyond int64) is 0 too, and said in a note."""
    if step_col is None:
        return pl.Series("step", [0] * df.height, dtype=pl.Int64), []
    raw = df.get_column(step_col)
    as_float = raw.cast(pl.Float64, strict=False)
    bad = (as_float.is_null() & raw.is_not_null()) | ~as_float.is_finite().fill_null(True)
    bad = bad | (as_float.abs() > _MAX_STEP).fill_null(False)
    step = as_float.set(bad, None).fill_null(0.0).round(0).cast(pl.Int64).alias("step")
    if not bad.any():
        return step, []
    lines = [i + 2 for i in bad.arg_true().head(5).to_list()]
    note = DataIssue(
        kind="non-numeric",
        source=source,
        location=f"line {lines[0]}",
        message=(
            f"{int(bad.sum())} run(s) have a {step_col!r} that is no step; their final "
            f"values are put at step 0 (lines {', '.join(map(str, lines))})"
        ),
        count=int(bad.sum()),
    )
    return step, [note]


def _is_flag_text(col: pl.Series) -> bool:
    if col.dtype != pl.String:
        return False
    values = col.drop_nulls().str.to_lowercase()
    return values.len() > 0 and bool(values.is_in(["true", "false", ""]).all())


def _plain(value: Any) -> Any:
    return value if isinstance(value, (str, int, float, bool)) else str(value)


def _row_groups(df: pl.DataFrame) -> list[list[int]]:
    """Row indices of each run, in order of first appearance. The web page's table has
    one row per run (two rows of one name are two runs: seeds); the API's export may hold
    a run's history, several rows of one ``id`` (a name alone does not tell a run's
    history from its seeds)."""
    if "id" not in df.columns or "Name" in df.columns:
        return [[i] for i in range(df.height)]
    groups: dict[object, list[int]] = {}
    for i, k in enumerate(df.get_column("id").to_list()):
        groups.setdefault(("row", i) if k in (None, "") else k, []).append(i)
    return list(groups.values())


def _summary_note(source: str, line: int, step: int) -> DataIssue:
    return DataIssue(
        kind="summary-only",
        source=source,
        location=f"line {line}",
        message=(
            "a W&B runs table holds each run's final (summary) values, not its "
            f"history: one value per metric, at step {step}"
        ),
        severity="info",
    )


def runs_table(
    df: pl.DataFrame, *, source: str, opts: ReadOptions, issues: list[DataIssue]
) -> list[Run]:
    """One Run per run of a W&B runs table (see the module docstring)."""
    from trainlens.core.errors import UnreadableInputError

    rest = [c for c in df.columns if c not in FIXED_COLUMNS]
    config, summary = split_config_summary(rest, opts.aliases)
    step_col = find_key(summary, RUN_STEP_KEYS)
    time_col = "_timestamp" if "_timestamp" in summary else None
    # (a true/false summary is a flag, never a training metric: kept with the params)
    flags = [c for c in summary if df.schema[c] == pl.Boolean or _is_flag_text(df.get_column(c))]
    config = [*config, *flags]
    metrics = [
        c
        for c in summary
        if c not in (step_col, time_col) and not c.startswith("_") and c not in flags
    ]
    step, step_notes = _row_steps(df, step_col, source)
    issues = [*issues, *step_notes]
    parts = [step, *(df.get_column(c) for c in metrics)]
    if time_col is not None:
        parts.append(df.get_column(time_col).alias("wall_time"))
    lines = pl.Series("_line", range(2, df.height + 2), dtype=pl.Int64)
    long, more, _ = wide_to_long(pl.DataFrame(parts), source=source, line_numbers=lines)
    by_line = long.partition_by("_line", as_dict=True, maintain_order=True)

    runs: list[Run] = []
    empty: list[str] = []
    for group in _row_groups(df):
        row = df.row(group[0], named=True)
        name = str(row.get("Name") or row.get("name") or f"row {group[0] + 2}")
        got = [by_line[(i + 2,)] for i in group if (i + 2,) in by_line]
        if not got:
            empty.append(name)
            continue
        rows = pl.concat(got) if len(got) > 1 else got[0]
        notes = [*issues, *more] if not runs else []  # the file's notes, once
        if len(group) == 1:
            notes.append(_summary_note(source, group[0] + 2, int(rows.get_column("step")[0])))
        metadata = {
            "wandb": {c: _plain(row[c]) for c in df.columns if c in FIXED_COLUMNS and row[c]},
            "params": {c: _plain(row[c]) for c in config if row[c] not in (None, "")},
        }
        runs.append(
            build_run(
                rows,
                name=name,
                source=source,
                fmt="csv",
                aliases=opts.aliases,
                metadata=metadata,
                issues=notes,
            )
        )
    if not runs:
        raise UnreadableInputError(f"{source}: a W&B runs table with no metric values")
    if empty:
        runs[0].data_quality.append(
            DataIssue(
                kind="summary-only",
                source=source,
                message=(
                    f"{len(empty)} run(s) of the table have no metric value and are left "
                    f"out: {', '.join(empty[:8])}{'…' if len(empty) > 8 else ''}"
                ),
                count=len(empty),
            )
        )
    return runs


# ---- history dumps ------------------------------------------------------------------------


def history_dump(df: pl.DataFrame) -> pl.DataFrame:
    """A ``run.history()`` / ``scan_history()`` table as a user saves it (pandas'
    ``to_csv`` / ``to_parquet``): W&B's own columns are no metrics. ``_timestamp`` is the
    wall time (before a logged ``time``: W&B's clock, not the user's), ``_runtime`` (the
    seconds since the run started, which ``_timestamp`` already says) and ``_wandb`` are
    dropped, and ``_step`` is the step — or, when the table has a trainer's own step
    column (``global_step``, ``trainer/global_step``, which :data:`STEP_KEYS` prefers), no
    metric either: it counts ``wandb.log`` calls. Any other table (two of W&B's three
    columns are needed to call it a dump) is returned as it is."""
    cols = df.columns
    if sum(c in cols for c in HISTORY_OWN) < 2:
        return df
    drop: list[str] = [c for c in ("_runtime", "_wandb") if c in cols]
    if "_step" in cols and find_key(cols, STEP_KEYS) != "_step":
        drop.append("_step")
    df = df.drop(drop)
    if "_timestamp" in cols and find_key(df.columns, TIME_KEYS) != "_timestamp":
        taken = find_key(df.columns, ("wall_time",))
        if taken is None:
            df = df.rename({"_timestamp": "wall_time"})
    return df
