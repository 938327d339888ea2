"""A file store's metric files (``timestamp value step`` lines) parsed by polars' CSV
reader, batched; a line polars cannot read is re-read the way MLflow reads it, and
reported with its file and line number when MLflow could not read it either."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import polars as pl

from trainlens.core.run import DataIssue
from trainlens.readers import _shrink

# polars reads a metric file; a line it cannot parse becomes a row with nulls
_SCHEMA = {"timestamp": pl.Int64(), "value": pl.Float64(), "step": pl.Int64()}


_BIG_FILE = 1 << 20  # read by path (polars maps and splits it); smaller ones are batched


_BATCH_BYTES = 64 << 20


# precedes each file in a joined buffer: no MLflow line has this step, so the marker rows
# give each file's rows without counting newlines
_MARKER_STEP = -(2**63)


_MARKER_LINE = b"0 0 -9223372036854775808\n"


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


def parse_metric_files(
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
    # polars maps a file it reads from a path: under the guard (a metric file cut short
    # meanwhile would end the process), else, or when a page was cut, from a copy
    if _shrink.GUARDED:
        with _shrink.guard(path) as g:
            try:
                df = _csv(Path(path))
            except Exception:
                df = None
        if df is not None and not g.cut:
            return df
    return _read_bytes(_shrink.read_copy(path).data)


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
        # the row index in the dtype of ``drop`` (is_in between Int64 and UInt32 is a
        # supertype cast that polars deprecates)
        index = pl.int_range(df.height, eager=True, dtype=pl.UInt32)
        fixed = fixed.filter(~index.is_in(drop.implode()))
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
