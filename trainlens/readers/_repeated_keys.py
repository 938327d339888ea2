"""JSON keys repeated within one object: JSON parsers keep the last value, polars the
first. The JSONL reader finds such lines after polars has read the file (cheaply: a screen,
then an exact parse of the few lines it picks), rewrites them to hold the last value, and
says so in a note."""

from __future__ import annotations

import json
from typing import Any

import polars as pl

from trainlens.core.run import DataIssue

_BLOCK = 1 << 20  # bytes per numpy pass


# a key: a JSON string followed by ':' (a screen; the lines it picks are parsed exactly)
_KEY_PATTERN = r'"(?:[^"\\]|\\.)*"\s*:'


def lines_repeating_a_key(body: bytes, df: pl.DataFrame, *, large: bool) -> list[int]:
    """0-based numbers of the lines of ``body`` (one row of ``df`` each) that repeat a
    key within one object: polars keeps the first value, JSON parsers the last.

    A screen picks candidates, which are then parsed exactly: in a ``large`` file (no
    objects inside lists), the lines whose count of ``":`` differs from the keys polars
    read (a numpy pass: 0.1 s per 100 MB); otherwise the lines whose key strings are not all
    distinct (a polars regex pass, fine for small files; keys repeated in different
    nested objects are not repeats)."""
    countable = not any(_has_objects_in_lists(dt) for dt in df.schema.values())
    if countable and large and df.height:
        starts, ends, candidates = _key_count_mismatches(body, df)
        texts = {int(i): body[starts[i] : ends[i]].decode("utf-8", "replace") for i in candidates}
    else:
        lines = pl.Series([body.decode("utf-8", errors="replace")]).str.split("\n").explode()
        keys = lines.str.extract_all(_KEY_PATTERN)
        screened = (keys.list.len() > keys.list.unique().list.len()).arg_true().to_list()
        texts = {i: lines[i] for i in screened}
    out = []
    for i, text in texts.items():
        try:
            if load_last_wins(text)[1]:
                out.append(i)
        except ValueError:
            continue
    return sorted(out)


def _key_count_mismatches(body: bytes, df: pl.DataFrame) -> tuple[Any, Any, list[int]]:
    """Each line's start and end offsets, and the lines whose number of ``":`` byte
    pairs is not the number of non-null cells polars read from them."""
    import numpy as np

    arr = np.frombuffer(body, dtype=np.uint8)
    newlines = np.flatnonzero(arr == 0x0A)
    pairs = np.zeros(len(newlines) + 1, dtype=np.int64)
    for i in range(0, arr.size, _BLOCK):
        block = arr[i : i + _BLOCK + 5]
        at = np.flatnonzero((block[:-1] == 0x22) & (block[1:] == 0x3A))
        at = at[at < _BLOCK] + i
        pairs += np.bincount(np.searchsorted(newlines, at), minlength=len(pairs))
        # a null value (`": null`, `":null`) has its key but no cell: not a repeat
        nul = np.flatnonzero(
            (block[:-4] == 0x3A)
            & (block[1:-3] == 0x6E)
            & (block[2:-2] == 0x75)
            & (block[3:-1] == 0x6C)
            & (block[4:] == 0x6C)
        )
        spaced = np.flatnonzero(
            (block[:-5] == 0x3A)
            & (block[1:-4] == 0x20)
            & (block[2:-3] == 0x6E)
            & (block[3:-2] == 0x75)
            & (block[4:-1] == 0x6C)
            & (block[5:] == 0x6C)
        )
        for hits in (nul, spaced):
            hits = hits[hits < _BLOCK] + i
            pairs -= np.bincount(np.searchsorted(newlines, hits), minlength=len(pairs))
    cells = _cells_per_row(df)
    n = min(df.height, len(pairs))
    mismatched = np.flatnonzero(pairs[:n] != cells[:n]).tolist()
    starts = np.concatenate([[0], newlines + 1])
    ends = np.concatenate([newlines, [len(body)]])
    del arr
    return starts, ends, mismatched


def _cells_per_row(df: pl.DataFrame) -> Any:
    """The keys polars read from each row (a nested object's keys too). A column with no
    null adds 1 to every row and one of nulls only nothing, both known from its null count;
    only the others are summed. (An expression per column cost 5 s for 100k columns.)"""
    import numpy as np

    h = df.height
    cells = np.zeros(h, dtype=np.int64)
    nested: list[pl.Expr] = []
    for s, k in zip(df.iter_columns(), df.null_count().row(0), strict=True):
        if isinstance(s.dtype, pl.Struct):
            nested.extend(_key_terms(pl.col(s.name), s.dtype))
        elif k == 0:
            cells += 1
        elif k < h:
            cells += s.is_not_null().to_numpy()
    if nested:
        cells += df.select(pl.sum_horizontal(nested)).to_series().to_numpy()
    return cells


def _has_objects_in_lists(dtype: pl.DataType) -> bool:
    if isinstance(dtype, (pl.List, pl.Array)):
        inner = dtype.inner
        return isinstance(inner, (pl.Struct, pl.List, pl.Array)) or inner is None
    if isinstance(dtype, pl.Struct):
        return any(_has_objects_in_lists(f.dtype) for f in dtype.fields)  # type: ignore[arg-type]
    return False


def _key_terms(expr: pl.Expr, dtype: pl.DataType) -> list[pl.Expr]:
    """One 0/1 term per key polars read: the key itself, and a nested object's keys."""
    terms = [expr.is_not_null().cast(pl.Int64)]
    if isinstance(dtype, pl.Struct):
        for f in dtype.fields:
            terms += _key_terms(expr.struct.field(f.name), f.dtype)  # type: ignore[arg-type]
    return terms


def load_last_wins(line: str | bytes) -> tuple[object, bool]:
    """The parsed line (a repeated key keeps its last value) and whether any repeated."""
    repeated = False

    def pairs_to_dict(pairs: list[tuple[str, object]]) -> dict[str, object]:
        nonlocal repeated
        out = dict(pairs)
        repeated = repeated or len(out) < len(pairs)
        return out

    return json.loads(line, object_pairs_hook=pairs_to_dict), repeated


def last_key_wins(body: bytes, repeated: list[int], source: str) -> tuple[bytes, list[DataIssue]]:
    """``body`` with the given lines rewritten to hold each key's last value, and a note."""
    lines = body.split(b"\n")
    for i in repeated:
        lines[i] = json.dumps(load_last_wins(lines[i])[0]).encode()
    return b"\n".join(lines), [repeated_key_issue(repeated, source)]


def repeated_key_issue(repeated: list[int], source: str) -> DataIssue:
    numbers = sorted(n + 1 for n in repeated)
    shown = ", ".join(map(str, numbers[:5])) + ("…" if len(numbers) > 5 else "")
    return DataIssue(
        kind="duplicate-key",
        source=source,
        location=f"line {numbers[0]}",
        message=(
            f"{len(numbers)} line(s) repeat a key in one object; the last value of each "
            f"was kept, as JSON parsers read it (lines {shown})"
        ),
        count=len(numbers),
        details={"lines": numbers[:100]},
    )
