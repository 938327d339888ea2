"""A pandas ``DataFrame.to_json()`` file in its default layout, read as the table it is.

``df.to_json(path)`` (orient ``"columns"``, pandas' default for a DataFrame; a W&B
``run.history()`` saved that way too) writes one JSON object whose keys are the columns
and whose values are objects keyed by the row index's labels::

    {"loss": {"0": 2.5, "1": 2.4, ...}, "lr": {"0": 0.0003, "1": 0.0003, ...}, ...}

Taken as a JSON line it is one record of columns x rows nested keys: a 3.4 MB file became
one row of ~170,000 metrics (``loss/0``, ``loss/1``, …) and ran for over 4 minutes to
854 MB (issue 23). Here it becomes one row per index label, one column per key, so the
JSONL reader's table path (step column, time column, non-numeric cells) reads it like
the same table written as JSON lines. The layout is taken only when it is unambiguous:
the file is one JSON object, every value of it an object of scalars, every inner key a
whole number (the labels of pandas' default RangeIndex, an integer index, or a
DatetimeIndex in epoch milliseconds). A one-line JSONL file whose record nests objects
keyed by names (``{"train": {"loss": 2.1}}``) is still that record.

Each column is parsed on its own (``json.JSONDecoder.raw_decode`` from the column's
offset), so the Python objects of one column are alive at a time, and its cells go
straight into a polars Series: time and memory are linear in the file.
"""

from __future__ import annotations

import json
import re
from json.decoder import scanstring  # type: ignore[attr-defined]
from pathlib import Path
from typing import Any

import polars as pl

from trainlens.core.run import DataIssue
from trainlens.readers._wide import STEP_KEYS, find_key

# the file's first column and its first cell's label: `{"<column>": {"<integer>":`
HEAD = re.compile(rb'^\s*\{\s*"(?:[^"\\]|\\.){0,200}"\s*:\s*\{\s*"-?[0-9]{1,20}"\s*:')
HEAD_BYTES = 512
_WS = re.compile(r"[ \t\n\r]*")
_LABEL = re.compile(r"-?[0-9]{1,20}")
_DECODER = json.JSONDecoder()
STEP_COLUMN = "step"  # where the index goes when no column is a step


def looks_like(head: bytes) -> bool:
    """Whether ``head`` (the file's first bytes) starts as a to_json() columns table."""
    return HEAD.match(head[:HEAD_BYTES]) is not None


def read_columns(path: Path, source: str) -> tuple[pl.DataFrame, list[DataIssue], int] | None:
    """The table (one row per index label; the index as a ``step`` column when no column
    is a step), its notes, and the bytes read; None when the file is not that layout."""
    with path.open("rb") as fh:
        if not looks_like(fh.read(HEAD_BYTES)):
            return None
        fh.seek(0)
        data = fh.read()
    size = len(data)
    try:
        text = data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError:
        return None  # (the JSONL reader reports where the bad bytes are)
    del data
    parsed = _columns(text)
    del text
    if parsed is None:
        return None
    names, columns, labels = parsed
    n = len(labels)
    table = pl.DataFrame(
        [
            col.extend_constant(None, n - col.len()).alias(name)
            for name, col in zip(names, columns, strict=True)
        ]
    )
    index = pl.Series(STEP_COLUMN, [int(x) for x in labels], dtype=pl.Int64, strict=False)
    step_col = find_key(names, STEP_KEYS)
    how = f"the {step_col!r} column is the step" if step_col else "the index is the step"
    if step_col is None:
        table = table.insert_column(0, index)
    issue = DataIssue(
        kind="pandas-layout",
        source=source,
        message=(
            f"a pandas DataFrame.to_json() table (orient 'columns'): {len(names)} column(s) "
            f"of {n} row(s), one per index label; {how}"
        ),
        severity="info",
    )
    return table, [issue], size


def _columns(text: str) -> tuple[list[str], list[pl.Series], list[str]] | None:
    """Column names, their cells (in index order; a column may stop short of the last
    labels: pad it), and the index labels in order of first appearance."""
    pos = _skip(text, 0)
    if not text.startswith("{", pos):
        return None
    pos += 1
    names: list[str] = []
    cells: dict[str, pl.Series] = {}
    labels: list[str] = []
    where: dict[str, int] = {}
    while True:
        pos = _skip(text, pos)
        if not text.startswith('"', pos):
            return None
        try:
            name, pos = scanstring(text, pos + 1)
            pos = _skip(text, pos)
            if not text.startswith(":", pos):
                return None
            pos = _skip(text, pos + 1)
            if not text.startswith("{", pos):
                return None  # a scalar or a list beside the columns: a JSON record
            inner, pos = _DECODER.raw_decode(text, pos)
        except (ValueError, RecursionError):
            return None
        column = _column(inner, labels, where)
        if column is None:
            return None
        if name not in cells:  # (a repeated key: the last value wins, as in JSON parsers)
            names.append(name)
        cells[name] = column
        pos = _skip(text, pos)
        if text.startswith(",", pos):
            pos += 1
            continue
        if not text.startswith("}", pos):
            return None
        break
    if _skip(text, pos + 1) != len(text) or not labels:
        return None  # more after the object (JSON lines), or no cell at all
    return names, [cells[n] for n in names], labels


def _column(inner: dict[str, Any], labels: list[str], where: dict[str, int]) -> pl.Series | None:
    """One column's cells in index order, new labels appended to ``labels``; None when a
    label is not a whole number or a cell is not a scalar (not this layout)."""
    keys = list(inner)
    if keys == labels[: len(keys)] and len(keys) == len(labels):
        values = list(inner.values())  # (pandas writes every column with the same labels)
    else:
        for k in keys:
            if k not in where:
                if _LABEL.fullmatch(k) is None:
                    return None
                where[k] = len(labels)
                labels.append(k)
        values = [None] * len(labels)
        for k, v in inner.items():
            values[where[k]] = v
    if any(isinstance(v, (dict, list)) for v in values):
        return None
    try:
        # (strict=False: integers and floats make Float64, numbers beside text a String
        # column whose numbers wide_to_long casts back and whose text it reports)
        return pl.Series(values, strict=False)
    except (TypeError, ValueError, OverflowError):
        return pl.Series([None if v is None else json.dumps(v) for v in values], dtype=pl.String)


def _skip(text: str, pos: int) -> int:
    m = _WS.match(text, pos)
    return m.end() if m else pos
