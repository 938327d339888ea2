"""CSV / TSV: wide tables with empty cells.

Covers Lightning's sparse metrics.csv (train and val rows interleaved, most cells empty),
W&B's CSV download (``<run> - <metric>`` columns, ``__MIN``/``__MAX`` companions) and
TensorBoard's CSV download (``Wall time,Step,Value``: one metric, named after the file).
A cell that is not a number is reported with its line and skipped; the rest is kept.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import polars as pl

from trainlens.core.errors import UnreadableInputError
from trainlens.core.run import DataIssue, Run, build_run
from trainlens.readers._wide import wide_to_long
from trainlens.readers.base import ReadOptions, run_name_for

FORMAT = "csv"

_WANDB_COL = re.compile(r"^(?P<run>.+?) - (?P<metric>.+)$")


def _delimiter(header: bytes) -> str | None:
    counts = {d: header.count(d.encode()) for d in (",", "\t", ";")}
    best = max(counts, key=lambda d: counts[d])
    return best if counts[best] else None


def sniff(path: Path, head: bytes) -> bool:
    if path.is_dir():
        return False
    lines = [ln for ln in head.splitlines() if ln.strip()]
    if not lines or lines[0].lstrip().startswith((b"{", b"[")):
        return False
    delim = _delimiter(lines[0])
    if delim is None:
        return False
    if b"\x00" in head:
        return False
    n = lines[0].count(delim.encode())
    # a header, then rows with the same number of fields
    body = lines[1:6] if len(lines) > 1 else []
    return bool(body) and all(ln.count(delim.encode()) == n for ln in body[:-1] or body)


def read(path: Path, opts: ReadOptions) -> list[Run]:
    source = str(path)
    data = path.read_bytes()
    if not data.strip():
        raise UnreadableInputError(f"{path}: the file is empty")
    issues: list[DataIssue] = []
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line_no = data.count(b"\n", 0, exc.start) + 1
        issues.append(
            DataIssue(
                kind="encoding",
                source=source,
                location=f"line {line_no}",
                message=f"bytes that are not UTF-8 (first at line {line_no}) were replaced",
            )
        )
        data = data.decode("utf-8", errors="replace").encode("utf-8")
    header = data.split(b"\n", 1)[0]
    delim = _delimiter(header) or ","
    try:
        df = pl.read_csv(
            io.BytesIO(data),
            separator=delim,
            infer_schema_length=10_000,
            null_values=[""],
            truncate_ragged_lines=True,
        )
    except Exception:
        # a type that changes below the inferred part: read as text and cast per cell
        df = pl.read_csv(
            io.BytesIO(data),
            separator=delim,
            infer_schema=False,
            null_values=[""],
            truncate_ragged_lines=True,
        )
    if df.height == 0:
        raise UnreadableInputError(f"{path}: a header but no rows")

    name = run_name_for(path)
    cols = df.columns
    if {c.lower() for c in cols} == {"wall time", "step", "value"}:
        # TensorBoard's CSV download: one metric per file, named after the file
        value_col = next(c for c in cols if c.lower() == "value")
        df = df.rename({value_col: name})
    else:
        runs_named = {m.group("run") for c in cols if (m := _WANDB_COL.match(c))}
        if len(runs_named) == 1:
            run_label = runs_named.pop()
            df = df.rename({c: m.group("metric") for c in cols if (m := _WANDB_COL.match(c))})
            name = run_label
    # data lines are numbered from 2 (line 1 is the header)
    line_numbers = pl.Series("_line", range(2, df.height + 2), dtype=pl.Int64)
    long, more = wide_to_long(df, source=source, line_numbers=line_numbers)
    issues.extend(more)
    if long.height == 0:
        raise UnreadableInputError(f"{path}: no numeric metric columns found")
    run = build_run(long, name=name, source=source, fmt=FORMAT, aliases=opts.aliases, issues=issues)
    run.cursor[source] = len(data)
    return [run]
