"""The canonical frame's schema, its data-quality record, and its layout: the rows of
each metric as views, and the blocks (one contiguous run of rows per metric) that the
row-oriented readers write and that make those views zero-copy slices.

Split out of trainlens/core/run.py (issue 14); :mod:`trainlens.core.run` re-exports
``FRAME_SCHEMA``, ``DataIssue`` and ``metric_views``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl

FRAME_SCHEMA: dict[str, pl.DataType] = {
    "step": pl.Int64(),
    "metric": pl.Categorical(),
    "value": pl.Float64(),
    "wall_time": pl.Float64(),
    "superseded": pl.Boolean(),
}


@dataclass
class DataIssue:
    """A data-quality record: what was wrong with the input, where, and how much."""

    kind: str  # bad-line, truncated-line, corrupt-record, non-numeric, restart, ...
    source: str
    message: str
    location: str | None = None  # "line 12", "record 7 (byte 1234)", ...
    count: int = 1
    severity: str = "warning"  # info | warning
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "source": self.source,
            "location": self.location,
            "count": self.count,
            "severity": self.severity,
            "message": self.message,
            "details": self.details,
        }

    def __str__(self) -> str:
        where = f"{self.source}" + (f", {self.location}" if self.location else "")
        return f"{where}: {self.message}"


@dataclass
class Blocks:
    """The frame's rows are one contiguous block per metric: where each starts."""

    frame: pl.DataFrame
    starts: list[int]
    names: list[str]


def metric_views(frame: pl.DataFrame) -> dict[str, pl.DataFrame]:
    """The rows of each metric (without the metric column), in frame order, keyed by
    metric in order of first appearance.

    A frame whose metrics lie in contiguous blocks (what the row-oriented readers and
    MLflow produce) is cut into zero-copy slices; any other order is partitioned."""
    blocks = metric_blocks(frame.get_column("metric"))
    if blocks is not None:
        starts, names = blocks
        if len(set(names)) == len(names):
            return block_views(frame, starts, names)
    parts = frame.partition_by("metric", as_dict=True, maintain_order=True)
    return {str(key[0]): df.drop("metric") for key, df in parts.items()}


def block_views(
    frame: pl.DataFrame, starts: list[int], names: list[str]
) -> dict[str, pl.DataFrame]:
    ends = [*starts[1:], frame.height] if starts else []
    # series slices, no frame operation: polars runs those through its query engine,
    # which visits every chunk (a reader's columns can come in thousands of them)
    cols = [frame.get_column(c) for c in frame.columns if c != "metric"]
    return {
        name: pl.DataFrame([c.slice(a, b - a) for c in cols])
        for name, a, b in zip(names, starts, ends, strict=True)
    }


# a frame with more metric blocks than this is treated as interleaved
MAX_BLOCKS = 4096


def run_starts(codes: pl.Series) -> pl.Series | None:
    """Row where each run of equal values starts, or None when there are more than
    MAX_BLOCKS runs (the rows interleave metrics)."""
    change = codes.ne_missing(codes.shift(1)).fill_null(True)
    if int(change.sum()) > MAX_BLOCKS:
        return None
    return change.arg_true()


def metric_blocks(metric: pl.Series) -> tuple[list[int], list[str]] | None:
    """Start row and name of each run of equal metric names, or None when there are
    more than MAX_BLOCKS runs."""
    if metric.len() == 0:
        return [], []
    if metric.dtype != pl.String:
        metric = metric.cast(pl.String)
    starts = run_starts(metric)
    if starts is None:
        return None
    return starts.to_list(), [str(x) for x in metric.gather(starts).to_list()]


def block_lengths(starts: list[int], n: int) -> list[int]:
    """Lengths of the blocks that start at ``starts`` in ``n`` rows."""
    return [b - a for a, b in zip(starts, [*starts[1:], n], strict=False)]


def strictly_increasing(s: pl.Series) -> bool:
    n = s.len()
    return n < 2 or bool((s.slice(1, n - 1) > s.slice(0, n - 1)).all())


def runs_series(runs: list[tuple[Any, int]], dtype: pl.DataType | None = None) -> pl.Series:
    """A series of constant runs (value, length), one chunk per run (nothing per row)."""
    dtype = dtype or pl.String()
    if not runs:
        return pl.Series("", [], dtype=dtype)
    parts = [pl.Series([v], dtype=dtype).new_from_index(0, k) for v, k in runs]
    return pl.concat(parts, rechunk=False) if len(parts) > 1 else parts[0]
