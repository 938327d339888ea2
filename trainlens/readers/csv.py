"""CSV / TSV: wide tables with empty cells.

Covers Lightning's sparse metrics.csv (train and val rows interleaved, most cells empty),
W&B's CSV downloads (a chart's ``<run> - <metric>`` columns with ``__MIN``/``__MAX``
companions: one run per W&B run; a runs table: one run per row, final values only — see
:mod:`trainlens.readers._wandb`), a ``run.history()`` saved by pandas (``_step`` the step,
``_timestamp`` the wall time, ``_runtime`` no metric; pandas' unnamed 0..n-1 index column
dropped with a note) and TensorBoard's CSV download (``Wall time,Step,Value``: one
metric, named after the file).
A cell that is not a number is reported with its line and skipped; the rest is kept.
"""

from __future__ import annotations

import dataclasses
import io
import itertools
import mmap
import os
import re
from pathlib import Path

import polars as pl

from trainlens.core.errors import UnreadableInputError
from trainlens.core.run import DataIssue, Run, build_run
from trainlens.readers import _fwtables, _shrink, _step_rule, _wandb, _yolo_results
from trainlens.readers._wide import STEP_KEYS, find_key, wide_to_long, without_pandas_index
from trainlens.readers.base import ReadOptions, as_utf8, read_head, run_name_for

FORMAT = "csv"
_HEAD_SEEN = 4096  # the bytes sniffing is given (trainlens.readers.base.HEAD_BYTES)
# the widest table read. Measured (one metric per column, 3 rows, 2-core machine): 10,000
# columns 5.7 s and 0.12 GB, 50,000 columns 53 s (the per-column work grows faster than
# the width), 1,000,000 columns (one row) stopped after 10 minutes at 2.9 GB. A real run
# logs some thousands at most (per-layer norms)
MAX_COLUMNS = 20_000


def _delimiter(header: bytes) -> str | None:
    counts = {d: header.count(d.encode()) for d in (",", "\t", ";")}
    best = max(counts, key=lambda d: counts[d])
    return best if counts[best] else None


# a cell ending in a name and its number (`loss:1.3818`, `<time> iters: 100`, `lr = 0.1`):
# a log line's pair, no column's name
_PAIR_CELL = re.compile(rb"[A-Za-z_][ \t]*[:=][ \t]*[-+]?\.?[0-9][^ \t]*[ \t]*$")


def _cells_are_pairs(line: bytes, delim: str) -> bool:
    """True when most cells of ``line`` end in a name and its number: a key/value log's
    line (`2024-01-30 21:22:28 iters: 100, loss:1.3818, accuracy:0.6422`), no table's
    header (a header names its columns)."""
    cells = [c for c in line.split(delim.encode()) if c.strip()]
    pairs = sum(1 for c in cells if _PAIR_CELL.search(c))
    return len(cells) >= 2 and pairs * 2 > len(cells)


def sniff(path: Path, head: bytes) -> bool:
    if path.is_dir():
        return False
    lines = [ln for ln in head.splitlines() if ln.strip()]
    if not lines or lines[0].lstrip().startswith((b"{", b"[")):
        return False
    delim = _delimiter(lines[0])
    if delim is None:
        return _yolo_results.sniff(path, head)  # (YOLOv5's results.txt: no header, spaces)
    if _cells_are_pairs(lines[0], delim):
        return False
    if b"\x00" in head:
        return False
    n = lines[0].count(delim.encode())
    if len(lines) == 1 and len(head) >= _HEAD_SEEN and b"\n" not in head and n >= 16:
        return True  # a header longer than the first look: the reader says what it holds
    # a header, then rows with the same number of fields
    body = lines[1:6] if len(lines) > 1 else []
    return bool(body) and all(ln.count(delim.encode()) == n for ln in body[:-1] or body)


def read(path: Path, opts: ReadOptions) -> list[Run]:
    source = str(path)
    if _yolo_results.sniff(path, read_head(path)):
        return _yolo(path, opts)
    _check_width(path)
    mapped, before = _read_guarded(path)
    if mapped is not None:
        df, size = mapped
        issues: list[DataIssue] = []
    else:
        df, size, issues = _read_bytes(path, source, before)
    if df.height == 0:
        raise UnreadableInputError(f"{path}: a header but no rows")
    df, index_note = without_pandas_index(df, source)
    issues = [*issues, *index_note]

    name = run_name_for(path)
    cols = df.columns
    if {c.lower() for c in cols} == {"wall time", "step", "value"}:
        # TensorBoard's CSV download: one metric per file, named after the file
        value_col = next(c for c in cols if c.lower() == "value")
        df = df.rename({value_col: name})
    elif _wandb.is_runs_table(cols):
        runs = _wandb.runs_table(df, source=source, opts=opts, issues=issues)
        for run in runs:
            run.cursor[source] = size
        return runs
    else:
        charts = _wandb.chart_runs(df, opts, source)
        if charts:
            runs = []
            for label, sub, notes in charts:
                try:
                    runs.append(_one_run(sub, label, source, opts, [*issues, *notes], size))
                except UnreadableInputError:
                    continue  # a W&B run with no value in this chart: nothing to show
            if not runs:
                raise UnreadableInputError(f"{path}: no numeric metric columns found")
            return runs
    df = _wandb.history_dump(df)  # a saved run.history(): W&B's own columns
    prep = _fwtables.prepare(df, path)  # a framework's own table (Ultralytics, timm, …)
    df, issues = prep.df, [*issues, *prep.notes]
    if prep.aliases:
        opts = dataclasses.replace(opts, aliases=_fwtables.with_aliases(opts.aliases, prep.aliases))
    sessions = _fit_sessions(df)
    if sessions is not None:
        note = DataIssue(
            kind="fit-sessions",
            source=source,
            message=(
                f"the epoch goes back to {_first_epoch(sessions[1])} at line "
                f"{sessions[1][0]}: the file holds {len(sessions)} training sessions "
                "appended one after another (Keras' CSVLogger with append=True), each read "
                "as its own run"
            ),
            count=len(sessions),
            severity="info",
        )
        runs = [
            _one_run(seg, f"{name} fit {k}", source, opts, [*issues, note], size, first_line=line)
            for k, (line, seg, _) in enumerate(sessions, start=1)
        ]
    else:
        runs = [_one_run(df, name, source, opts, issues, size)]
    for run in runs:
        if prep.framework is not None:
            run.metadata["framework"] = prep.framework
        run.metadata.update(prep.metadata)
        _fwtables.finish(run)
    return runs


def _yolo(path: Path, opts: ReadOptions) -> list[Run]:
    """YOLOv5's headerless results.txt (:mod:`trainlens.readers._yolo_results`)."""
    copy = _shrink.read_copy(path)
    data = copy.data[: copy.data.rfind(b"\n") + 1] if copy.end < copy.size else copy.data
    df, issues, meta, aliases = _yolo_results.frame(data, path)
    if copy.end < copy.size:
        issues.append(_shrink.shrank(path, len(data), copy.size))
    if df.height == 0:
        raise UnreadableInputError(f"{path}: no whole line of YOLOv5's results in it")
    opts = dataclasses.replace(opts, aliases=_fwtables.with_aliases(opts.aliases, aliases))
    run = _one_run(df, run_name_for(path), str(path), opts, issues, len(data))
    run.metadata.update(meta)
    _fwtables.finish(run)
    return [run]


def _check_width(path: Path) -> None:
    """Refuse a table wider than MAX_COLUMNS, counted on its header line alone."""
    with path.open("rb") as fh:
        header = fh.readline(64 << 20)
    delim = _delimiter(header[:_HEAD_SEEN]) or ","
    n = header.count(delim.encode()) + 1
    if n > MAX_COLUMNS:
        raise UnreadableInputError(
            f"{path}: too many columns ({n:,} in its header line); trainlens reads tables "
            f"of at most {MAX_COLUMNS:,} columns"
        )


def _first_epoch(session: tuple[int, pl.DataFrame, str]) -> int:
    return int(session[1].get_column(session[2])[0])


def _fit_sessions(df: pl.DataFrame) -> list[tuple[int, pl.DataFrame, str]] | None:
    """(first line, rows, epoch column) per training session of a per-epoch table whose
    whole-number epoch rises, goes back, and rises again: Keras' CSVLogger(append=True)
    adds each ``fit()`` call's epochs after the last ones, from epoch 0 again unless
    ``initial_epoch`` was given. Read as one run, the sessions were numbered by line and
    the LR of the next session looked like a scheduler reset (a brain-tumour CNN file of
    four sessions got LR007 and LOSS003 errors). None for any other table."""
    if find_key(df.columns, STEP_KEYS) is not None:
        return None
    col = find_key(df.columns, ("epoch",))
    if col is None or not df.schema[col].is_integer() or df.height < 2:
        return None
    epoch = df.get_column(col)
    if epoch.null_count():
        return None
    d = epoch.diff().drop_nulls().to_numpy()
    if (d == 0).any() or not (d < 0).any():
        return None  # one session (or repeated epochs: not this layout)
    cuts = [0, *(int(i) + 1 for i in (d < 0).nonzero()[0]), df.height]
    # data lines are numbered from 2 (line 1 is the header), unless rows were left out
    lines = df.get_column(_fwtables.SOURCE_LINE) if _fwtables.SOURCE_LINE in df.columns else None
    return [
        (a + 2 if lines is None else int(lines[a]), df.slice(a, b - a), col)
        for a, b in itertools.pairwise(cuts)
    ]


def _one_run(
    df: pl.DataFrame,
    name: str,
    source: str,
    opts: ReadOptions,
    issues: list[DataIssue],
    size: int,
    first_line: int = 2,
) -> Run:
    df, note = _epoch_as_step(df, source)
    issues = [*issues, *note]
    # data lines are numbered from 2 (line 1 is the header)
    line_numbers = pl.Series("_line", range(first_line, first_line + df.height), dtype=pl.Int64)
    if _fwtables.SOURCE_LINE in df.columns:  # rows were left out: each keeps its own line
        line_numbers = df.get_column(_fwtables.SOURCE_LINE).alias("_line")
        df = df.drop(_fwtables.SOURCE_LINE)
    # a step under another name, `N/M`, or counted again each epoch (the JSONL rule)
    guess = _step_rule.resolve(df, find_key(df.columns, STEP_KEYS), "CSV")
    if guess is not None:
        df = guess.df
        issues += [
            DataIssue(kind="inferred-step", source=source, message=n, severity="info")
            for n in guess.notes
        ]
    long, more, counts = wide_to_long(
        df,
        source=source,
        line_numbers=line_numbers,
        step_key=guess.step_key if guess else None,
        step_name=guess.step_name if guess else None,
    )
    if long.height == 0:
        raise UnreadableInputError(f"{source}: no numeric metric columns found")
    run = build_run(
        long,
        name=name,
        source=source,
        fmt=FORMAT,
        aliases=opts.aliases,
        issues=[*issues, *more],
        blocks=counts,
    )
    if guess is not None:
        run.metadata.update(guess.metadata)
    run.cursor[source] = size
    return run


def _epoch_as_step(df: pl.DataFrame, source: str) -> tuple[pl.DataFrame, list[DataIssue]]:
    """Keras' CSVLogger writes one row per epoch and no step column: its whole-number,
    rising ``epoch`` is then the step (the row number would be off by one from the epoch
    every message names). ``epoch`` stays a metric too."""
    if find_key(df.columns, STEP_KEYS) is not None:
        return df, []
    col = find_key(df.columns, ("epoch",))
    if col is None or not df.schema[col].is_integer():
        return df, []
    epoch = df.get_column(col)
    if epoch.null_count() or epoch.len() < 1 or not bool((epoch.diff().drop_nulls() > 0).all()):
        return df, []
    note = DataIssue(
        kind="no-step",
        source=source,
        message=f"no step column; {col!r} (one row per epoch) is used as the step",
        severity="info",
    )
    return df.with_columns(epoch.cast(pl.Int64).alias("step")), [note]


FAST_MIN_BYTES = 1 << 20  # smaller files are read into memory first
_SCAN_BLOCK = 1 << 20


def _read_guarded(path: Path) -> tuple[tuple[pl.DataFrame, int] | None, int]:
    """:func:`_read_mapped` under the guard, and the file's size when it began; None
    when a page was cut from under it (then the bytes left are read) or when mapping is
    not guarded here (an install without the compiled guard)."""
    if not _shrink.GUARDED:
        return None, 0
    with _shrink.guard(path) as g:
        mapped = _read_mapped(path)
    return (None if g.cut else mapped), g.size


def _read_mapped(path: Path) -> tuple[pl.DataFrame, int] | None:
    """A large ASCII file read by polars from its path (no copy of the bytes in Python);
    None for anything else (then the bytes are read, decoded and checked)."""
    with path.open("rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size < FAST_MIN_BYTES:
            return None
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            if not _is_ascii(mm):
                return None  # the general path checks the UTF-8 and reports bad bytes
            end = mm.find(b"\n")
            header = mm[: end if end >= 0 else size]
    try:
        df = _polars_csv(path, _delimiter(header) or ",")
    except Exception:
        return None
    return (df, size) if df.height else None


def _is_ascii(data: mmap.mmap) -> bool:
    # block by block (bytes.isascii is a fast word-at-a-time check; one block in memory)
    return all(data[i : i + _SCAN_BLOCK].isascii() for i in range(0, len(data), _SCAN_BLOCK))


def _read_bytes(
    path: Path, source: str, before: int = 0
) -> tuple[pl.DataFrame, int, list[DataIssue]]:
    """The general read, of a copy of the bytes; ``before`` is the file's size when a
    read before this one began (0: none did), for the note when it has shrunk since."""
    copy = _shrink.read_copy(path)
    data = copy.data
    issues: list[DataIssue] = []
    if copy.end < max(before, copy.size):
        # cut short: its last line may end inside a number ("0.125" read as "0.1"),
        # so the read stops at the last whole line
        data = data[: data.rfind(b"\n") + 1]
        issues.append(_shrink.shrank(path, len(data), max(before, copy.size)))
    if not data or data.isspace():  # (isspace stops at the first other byte; no copy)
        raise UnreadableInputError(f"{path}: the file is empty")
    data, bad = as_utf8(data, source)
    issues.extend(bad)
    end = data.find(b"\n")
    header = data[: end if end >= 0 else len(data)]
    delim = _delimiter(header) or ","
    try:
        df = _polars_csv(io.BytesIO(data), delim)
    except Exception:  # polars gives up on the whole file for one malformed field
        df, bad = _without_unbalanced_quotes(data, delim, source)
        issues.extend(bad)
    return df, len(data), issues


def _without_unbalanced_quotes(
    data: bytes, delim: str, source: str
) -> tuple[pl.DataFrame, list[DataIssue]]:
    """The table with every data line holding an odd number of quote characters blanked
    (a stray ``"`` opens a field that never closes, and polars then refuses the whole
    file); one note names those lines. A blanked line keeps its place, so later line
    numbers stay right; its cells are read as absent, the file's other rows are kept."""
    lines = data.split(b"\n")
    n_fields = lines[0].count(delim.encode()) + 1 if lines else 1
    blank = delim.encode() * (n_fields - 1)
    bad: list[int] = []
    for i in range(1, len(lines)):
        if lines[i].count(b'"') % 2:
            lines[i] = blank
            bad.append(i + 1)
    if not bad:
        raise UnreadableInputError(f"{source}: not a CSV file polars can parse")
    try:
        df = _polars_csv(io.BytesIO(b"\n".join(lines)), delim)
    except Exception as exc:
        why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UnreadableInputError(f"{source}: not a CSV file polars can parse ({why})") from None
    shown = ", ".join(map(str, bad[:5])) + ("…" if len(bad) > 5 else "")
    issue = DataIssue(
        kind="bad-line",
        source=source,
        location=f"line {bad[0]}",
        message=(f'{len(bad)} line(s) with an unbalanced quote (") were skipped (lines {shown})'),
        count=len(bad),
        details={"lines": bad[:100]},
    )
    return df, [issue]


def _polars_csv(source: Path | io.BytesIO, delim: str) -> pl.DataFrame:
    df = _polars_csv_inferred(source, delim)
    key = find_key(df.columns, STEP_KEYS)
    if key is not None and df.schema[key] == pl.Float64:
        # a step column with a fraction in it: read again as text, parsed exactly later
        # (as floats, a step 2**63-1 became 2**63 and 2**53+1 became 2**53)
        if isinstance(source, io.BytesIO):
            source.seek(0)
        df = pl.read_csv(
            source,
            separator=delim,
            infer_schema_length=10_000,
            null_values=[""],
            truncate_ragged_lines=True,
            schema_overrides={key: pl.String},
        )
    return df


def _polars_csv_inferred(source: Path | io.BytesIO, delim: str) -> pl.DataFrame:
    try:
        return pl.read_csv(
            source,
            separator=delim,
            infer_schema_length=10_000,
            null_values=[""],
            truncate_ragged_lines=True,
        )
    except Exception:
        # a type that changes below the inferred part: read as text and cast per cell
        if isinstance(source, io.BytesIO):
            source.seek(0)
        return pl.read_csv(
            source,
            separator=delim,
            infer_schema=False,
            null_values=[""],
            truncate_ragged_lines=True,
        )
