"""The JSONL reader's column order: columns in order of the first value in the file
(private to :mod:`trainlens.readers.jsonl`, which reads a frame polars ordered its own
way and puts its columns in this order)."""

from __future__ import annotations

import json
import mmap
from collections import Counter
from collections.abc import Callable

import polars as pl

_SCAN_BLOCK = 1 << 20  # bytes per numpy pass (stays in cache)


def first_appearance_order(df: pl.DataFrame, line_of_row: Callable[[int], bytes]) -> pl.DataFrame:
    """Columns in order of the first value in the file: by the row of each column's first
    non-null value, keys first seen in the same row in their order on that line. (polars'
    own order comes from merging the distinct row shapes and depends on which it saw.)
    Frames with nested objects keep polars' order."""
    if (
        df.width < 2
        or df.height == 0
        or any(isinstance(dt, (pl.Struct, pl.List)) for dt in df.schema.values())
    ):
        return df
    # from each column's null count (known without a pass): a column with no null starts
    # at row 0, one of nulls only never; only the others are searched. An expression per
    # column over all of them cost 8 s for 100k columns, the null counts 0.2 s
    h = df.height
    rows = [
        0 if k == 0 else h if k == h else int(s.is_not_null().arg_max())  # type: ignore[arg-type]
        for s, k in zip(df.iter_columns(), df.null_count().row(0), strict=True)
    ]
    per_row = Counter(rows)  # (rows.count per column was quadratic in the width)
    tied_rows = {r for r, n in per_row.items() if n > 1 and r < df.height}
    position: dict[tuple[int, str], int] = {}
    for r in tied_rows:
        try:
            keys = list(json.loads(line_of_row(r)))
        except ValueError:
            keys = []
        for i, k in enumerate(keys):
            position[(r, k)] = i
    columns = df.columns  # (a new list on every call)
    order = sorted(
        range(df.width),
        key=lambda j: (rows[j], position.get((rows[j], columns[j]), len(position)), j),
    )
    if order == list(range(df.width)):
        return df
    return df[:, order]  # (by position: a select of 100k names cost 1.8 s, this 0.5 s)


def nth_line(body: bytes | mmap.mmap, n: int) -> bytes:
    """Line n (0-based) of body, counting every line (blank ones too)."""
    start = 0
    if n > 0:
        import numpy as np

        arr = np.frombuffer(body, dtype=np.uint8)
        seen = 0  # newlines before the block
        for i in range(0, arr.size, _SCAN_BLOCK):
            hits = np.flatnonzero(arr[i : i + _SCAN_BLOCK] == 0x0A)
            if seen + hits.size >= n:  # the n-th newline ends line n-1
                start = i + int(hits[n - seen - 1]) + 1
                break
            seen += hits.size
        else:
            start = len(body)
        del arr
    stop = body.find(b"\n", start)
    return bytes(body[start : stop if stop >= 0 else len(body)])
