"""Keras' History saved as JSON: ``json.dump(model.fit(...).history, f)``.

One JSON object whose keys are metrics and whose values are the per-epoch lists
(``{"loss": [...], "accuracy": [...], "val_loss": [...], "val_accuracy": [...]}``): one
run, the list index is the epoch and the step (Keras' CSVLogger and TensorBoard callback
count epochs from 0 too). A key whose value is not a list of numbers is named in a note;
``null`` items are absent values.

Memory. ``json.loads`` of the whole history made a Python float per value, a 62 MB
history peaked at 400 MB over the imports (4.6x the frame; issue 23). The lists of
numbers are parsed a piece of :data:`PIECE` bytes at a time straight into Float64
columns (one block per metric), so about the bytes and the frame are held; a history
whose values are not all lists of numbers (or that repeats a key) is parsed whole, as
before.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import polars as pl

from trainlens.core.errors import UnreadableInputError
from trainlens.core.run import DataIssue, Run, build_run
from trainlens.readers._wide import enum_runs
from trainlens.readers.base import ReadOptions, run_name_for

FORMAT = "keras-history"
# a history is a few KB (one number per epoch and metric); beyond this it is not one
MAX_BYTES = 64 << 20
# `{"<key>": [<number or a closing bracket>` at the start of the file
_HEAD = re.compile(
    rb'^\s*\{\s*"[^"\\]{1,200}"\s*:\s*\[\s*(?:-?[0-9.]|NaN|-?Infinity|null|\])', re.ASCII
)


def sniff(path: Path, head: bytes) -> bool:
    return not path.is_dir() and _HEAD.match(head) is not None


def _numbers(values: list[Any]) -> pl.Series | None:
    """A key's list as Float64 (``null`` items null), None when an item is no number."""
    out: list[float | None] = []
    for v in values:
        if v is None:
            out.append(None)
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            try:
                out.append(float(v))
            except OverflowError:  # an integer beyond a float: infinite, as 1e400 reads
                out.append(math.inf if v > 0 else -math.inf)
        else:
            return None
    return pl.Series(out, dtype=pl.Float64)


# ---- the lists in pieces -------------------------------------------------------------

PIECE = 1 << 20  # bytes of a list parsed at a time (~50k floats as Python objects)
_WS = rb"[ \t\r\n]*"
_KEY = re.compile(_WS + rb'"((?:[^"\\]|\\.)*)"' + _WS + rb":" + _WS + rb"\[")
_AFTER = re.compile(_WS + rb"([,}])")
_BOOL = re.compile(rb"true|false")


def _in_pieces(data: bytes) -> list[tuple[str, pl.Series | None]] | None:
    """Each key and its list as Float64 (None: not a list of numbers), parsed a piece at a
    time; None when the file is not an object of flat lists with distinct keys (then
    it is parsed whole). Raises ValueError where the JSON is invalid."""
    start = re.compile(_WS + rb"\{").match(data)
    if start is None:
        return None
    out: list[tuple[str, pl.Series | None]] = []
    pos = start.end()
    while True:
        m = _KEY.match(data, pos)
        if m is None:
            return None  # an empty object, or a value that is no list: parsed whole
        key = json.loads(b'"' + m.group(1) + b'"')
        end = data.find(b"]", m.end())
        if end < 0 or any(data.find(c, m.end(), end) >= 0 for c in (b"[", b"{", b'"')):
            return None  # nested lists, objects or text: parsed whole
        out.append((key, _list(data, m.end(), end)))
        after = _AFTER.match(data, end + 1)
        if after is None:
            raise ValueError(f"expected ',' or '}}' at byte {end + 1}")
        pos = after.end()
        if after.group(1) == b"}":
            break
    if data[pos:].strip():
        raise ValueError(f"extra data at byte {pos}")
    if len({k for k, _ in out}) != len(out):
        return None  # a repeated key: json's rule (the last value, first place) applies
    return out


def _list(data: bytes, start: int, end: int) -> pl.Series | None:
    """``data[start:end]``, the inside of a list of scalars, as Float64; None when an
    item is true or false (no number). Raises ValueError on invalid JSON."""
    parts: list[pl.Series] = []
    numbers = _BOOL.search(data, start, end) is None
    pos = start
    while pos < end:
        cut = data.find(b",", pos + PIECE, end) if end - pos > PIECE else -1
        stop = cut if cut >= 0 else end
        items = json.loads(b"[" + data[pos:stop] + b"]")
        if numbers:
            series = _numbers(items)
            if series is None:
                numbers = False
            else:
                parts.append(series)
        pos = stop + 1
        if cut >= 0 and pos >= end:
            raise ValueError(f"a trailing comma at byte {cut}")
    if not numbers:
        return None
    return pl.concat(parts) if parts else pl.Series([], dtype=pl.Float64)


def _load(path: Path) -> list[tuple[str, pl.Series | None]]:
    data = path.read_bytes()
    try:
        columns = _in_pieces(data)
    except (ValueError, RecursionError):
        columns = None  # invalid: parsed whole below, for json's own account of where
    if columns is not None:
        return columns
    try:
        whole = json.loads(data)
    except (ValueError, RecursionError) as exc:
        why = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise UnreadableInputError(f"{path}: not a JSON object ({why})") from None
    if not isinstance(whole, dict):
        raise UnreadableInputError(f"{path}: not a JSON object of per-epoch lists")
    return [(str(k), _numbers(v) if isinstance(v, list) else None) for k, v in whole.items()]


def read(path: Path, opts: ReadOptions) -> list[Run]:
    source = str(path)
    if path.stat().st_size > MAX_BYTES:
        raise UnreadableInputError(f"{path}: too large for a Keras history ({MAX_BYTES} bytes)")
    skipped: list[str] = []
    names: list[str] = []
    steps: list[pl.Series] = []
    values: list[pl.Series] = []
    for key, series in _load(path):
        if series is None:
            skipped.append(key)
            continue
        keep = series.is_not_null()
        epoch = pl.int_range(0, series.len(), dtype=pl.Int64, eager=True)
        if series.null_count():
            epoch, series = epoch.filter(keep), series.filter(keep)
        if series.len():
            names.append(key)
            steps.append(epoch)
            values.append(series)
    if not names:
        raise UnreadableInputError(f"{path}: no per-epoch lists of numbers found")
    issues = [
        DataIssue(
            kind="no-step",
            source=source,
            message="a Keras history: the list index (the epoch, from 0) is the step",
            severity="info",
        )
    ]
    if skipped:
        issues.append(
            DataIssue(
                kind="non-metric-column",
                source=source,
                message=(
                    f"{len(skipped)} key(s) hold no list of numbers and are not metrics: "
                    + ", ".join(skipped[:8])
                    + ("…" if len(skipped) > 8 else "")
                ),
                count=len(skipped),
                severity="info",
            )
        )
    counts = [v.len() for v in values]
    long = pl.DataFrame(
        [
            pl.concat(steps, rechunk=False).alias("step"),
            enum_runs(names, counts).alias("metric"),
            pl.concat(values, rechunk=False).alias("value"),
            pl.repeat(None, sum(counts), dtype=pl.Float64, eager=True).alias("wall_time"),
        ]
    )
    del steps, values
    run = build_run(
        long,
        name=run_name_for(path),
        source=source,
        fmt=FORMAT,
        aliases=opts.aliases,
        issues=issues,
        blocks=counts,
    )
    run.cursor[source] = path.stat().st_size
    return [run]
