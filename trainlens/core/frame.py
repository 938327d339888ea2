"""The canonical frame's schema, its data-quality record, and its layout: the rows of
each metric as views, and the blocks (one contiguous run of rows per metric) that the
row-oriented readers write and that make those views zero-copy slices.

Split out of trainlens/core/run.py (issue 14); :mod:`trainlens.core.run` re-exports
``FRAME_SCHEMA``, ``DataIssue`` and ``metric_views``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import polars as pl

from trainlens.core.dataclass import dataclass, field

#: Above this many metrics, work done once per metric (a view, a polars call) is done
#: once per frame instead (one group_by, one sort): each per-metric polars call costs
#: 0.1-0.5 ms, so 100k metrics took minutes (a 6 MB JSONL with 100k names: > 400 s),
#: while a grouping costs about what reading the rows did. Below it the per-metric
#: paths stay (no grouping of a 12M-row frame of 12 metrics); both give the same
#: numbers (tests/test_hostile_special.py compares them).
MANY_METRICS = 512

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


class MetricViews(Mapping[str, pl.DataFrame]):
    """The rows of each metric (without the metric column), in frame order, keyed by
    metric in order of first appearance; each view is cut when first asked for.

    Built eagerly, 10k views took 5 s (0.5 ms each), though a detector asks for a few of
    them by name. ``cols`` hold each metric's rows as one block; ``spans`` give each
    metric's block (first row, length), and a view is a zero-copy slice of the columns."""

    def __init__(self, cols: list[pl.Series], spans: dict[str, tuple[int, int]]) -> None:
        self._cols = cols
        self._spans = spans
        self._built: dict[str, pl.DataFrame] = {}
        # each metric's series as Run.series_frame gives it (step order, last per step):
        # detectors ask for the same ones 3-5 times a run, at ~0.1 ms a call
        self.series: dict[str, pl.DataFrame] = {}

    def __getitem__(self, metric: str) -> pl.DataFrame:
        df = self._built.get(metric)
        if df is None:
            a, k = self._spans[metric]  # (KeyError for a metric not logged, as a dict)
            # series slices, no frame operation: polars runs those through its query
            # engine, which visits every chunk (a reader's columns can come in thousands)
            df = self._built[metric] = pl.DataFrame([c.slice(a, k) for c in self._cols])
        return df

    def steps(self, metric: str) -> Any:
        """The ``step`` column of a metric's view as a numpy array (zero-copy from one
        chunk), without cutting the view's frame (the summary asks for every metric's)."""
        df = self._built.get(metric)
        if df is not None:
            return df.get_column("step").to_numpy()
        a, k = self._spans[metric]
        col = next(c for c in self._cols if c.name == "step")
        return col.slice(a, k).to_numpy()

    def columns(self, metric: str, names: Sequence[str]) -> list[pl.Series] | None:
        """These columns of a metric's view (None for a metric not logged), without
        cutting the view's frame when it is not cut yet."""
        df = self._built.get(metric)
        if df is not None:
            return [df.get_column(n) for n in names]
        span = self._spans.get(metric)
        if span is None:
            return None
        by_name = {c.name: c for c in self._cols}
        return [by_name[n].slice(*span) for n in names]

    def __setitem__(self, metric: str, df: pl.DataFrame) -> None:
        """Replace a view (by a rechunked copy of it, say)."""
        if metric not in self._spans:
            raise KeyError(metric)
        self._built[metric] = df
        self.series.pop(metric, None)

    def __contains__(self, metric: object) -> bool:
        return metric in self._spans

    def __iter__(self) -> Iterator[str]:
        return iter(self._spans)

    def __len__(self) -> int:
        return len(self._spans)

    def with_view(self, metric: str, df: pl.DataFrame) -> MetricViews:
        """These views and one more (a metric not among them), sharing those cut so far."""
        out = MetricViews(self._cols, {**self._spans, metric: (0, 0)})
        out._built = {**self._built, metric: df}  # (its span is never cut: built already)
        out.series = {k: v for k, v in self.series.items() if k != metric}
        return out


def metric_views(frame: pl.DataFrame) -> MetricViews:
    """The rows of each metric (see :class:`MetricViews`).

    A frame whose metrics lie in contiguous blocks (what the row-oriented readers and
    MLflow produce) is cut into zero-copy slices; any other order is first sorted by
    metric, once (a stable sort: each metric's rows keep their order)."""
    metric = frame.get_column("metric")
    blocks = metric_blocks(metric)
    if blocks is not None:
        starts, names = blocks
        if len(set(names)) == len(names):
            return block_views(frame, starts, names)
    import numpy as np

    cat = metric if isinstance(metric.dtype, pl.Categorical) else metric.cast(pl.Categorical)
    codes = cat.to_physical().to_numpy()
    order = np.argsort(codes, kind="stable")
    sorted_codes = codes[order]
    starts_at = np.flatnonzero(np.r_[True, sorted_codes[1:] != sorted_codes[:-1]])
    lengths = np.diff(np.r_[starts_at, codes.size])
    first_rows = order[starts_at]  # each metric's first row (the sort is stable)
    names_at = metric.gather(pl.Series(first_rows)).cast(pl.String).to_list()
    spans = {
        str(names_at[i]): (int(starts_at[i]), int(lengths[i]))
        for i in np.argsort(first_rows).tolist()  # in order of first appearance
    }
    rest = frame.drop("metric")[pl.Series(order)]
    return MetricViews([rest.get_column(c) for c in rest.columns], spans)


def block_views(frame: pl.DataFrame, starts: list[int], names: list[str]) -> MetricViews:
    cols = [frame.get_column(c) for c in frame.columns if c != "metric"]
    ends = [*starts[1:], frame.height] if starts else []
    spans = {m: (a, b - a) for m, a, b in zip(names, starts, ends, strict=True)}
    return MetricViews(cols, spans)


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
    """A series of constant runs (value, length), one chunk per run (nothing per row);
    with more than MANY_METRICS runs, one chunk of them all (a series per run cost 0.2 ms:
    100k metrics' blocks took 40 s)."""
    dtype = dtype or pl.String()
    if not runs:
        return pl.Series("", [], dtype=dtype)
    if len(runs) > MANY_METRICS:
        import numpy as np

        values = pl.Series([v for v, _ in runs], dtype=dtype)
        at = np.repeat(np.arange(len(runs)), [k for _, k in runs])
        return values.gather(pl.Series(at))
    parts = [pl.Series([v], dtype=dtype).new_from_index(0, k) for v, k in runs]
    return pl.concat(parts, rechunk=False) if len(parts) > 1 else parts[0]
