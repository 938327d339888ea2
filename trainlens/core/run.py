"""The Run: one training run as a canonical long polars frame plus what we know about it.

Canonical frame (DESIGN.md): ``step`` Int64, ``metric`` Categorical, ``value`` Float64
(NaN and ±inf kept), ``wall_time`` Float64 seconds (null where unknown), and
``superseded`` Boolean — true for values a later segment replaced after a restart (the
step went backwards); they stay in the frame so nothing is lost, and analyses use the
standing values (:meth:`Run.standing`). ``metric`` is Categorical rather than String: a
1M-step, 12-metric run would otherwise hold 12M string views (~190 MB) for 12 names;
compare it with strings as usual, and cast a frame of your own to Categorical before
concatenating it with a run's.

The frame's schema and layout helpers are in :mod:`trainlens.core.frame`, the way from a
reader's long frame to this one (aliases, restarts) in :mod:`trainlens.core.canonical`;
their public names are importable from here as before.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import polars as pl

from trainlens.core import units
from trainlens.core.canonical import RawColumns, canonicalize, frame_from_long, mark_restarts
from trainlens.core.dataclass import dataclass, field
from trainlens.core.frame import (
    FRAME_SCHEMA,
    Blocks,
    DataIssue,
    MetricViews,
    block_views,
    metric_views,
    strictly_increasing,
)
from trainlens.core.names import AliasTable

if TYPE_CHECKING:  # numpy is imported only where an array is made (Run.series): building
    # a Run needs only polars, so reading a file does not pay numpy's start-up
    import numpy as np

__all__ = [
    "FRAME_SCHEMA",
    "DataIssue",
    "RawColumns",
    "Run",
    "build_run",
    "frame_from_long",
    "mark_restarts",
    "metric_views",
]

_T = TypeVar("_T")


@dataclass
class Run:
    """One run: the canonical frame, where it came from, and its data-quality notes."""

    name: str
    source: str
    format: str
    frame: pl.DataFrame
    metadata: dict[str, Any] = field(default_factory=dict)
    data_quality: list[DataIssue] = field(default_factory=list)
    raw_names: dict[str, str] = field(default_factory=dict)  # canonical -> as logged
    cursor: dict[str, int] = field(default_factory=dict)  # file -> offset read up to

    # per-metric views of the standing values, built once per frame object: detectors
    # ask for the same few series many times, and filtering a 12M-row frame each time
    # would cost more than reading it. The frame object itself is kept (not its id, which
    # a new frame may reuse once the old one is gone).
    _views: MetricViews | None = field(default=None, init=False, repr=False, compare=False)
    _views_of: pl.DataFrame | None = field(default=None, init=False, repr=False, compare=False)
    _metrics: list[str] | None = field(default=None, init=False, repr=False, compare=False)
    # set by build_run when the frame holds each metric in one block (cheap views)
    _blocks: Blocks | None = field(default=None, init=False, repr=False, compare=False)
    _metrics_of: pl.DataFrame | None = field(default=None, init=False, repr=False, compare=False)
    # what several detectors derive alike from the same frame (where the LR ramp ends:
    # four detectors ask, ~20 ms each on a 1M-step run), computed once per frame object
    _memo: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)
    _memo_of: pl.DataFrame | None = field(default=None, init=False, repr=False, compare=False)

    # ---- views -------------------------------------------------------------------------
    def _by_metric(self) -> MetricViews:
        if self._views is None or self._views_of is not self.frame:
            b = self._blocks
            if b is not None and b.frame is self.frame:
                self._views = block_views(self.frame, b.starts, b.names)
            else:
                self._views = metric_views(self.standing())
            self._views_of = self.frame
        return self._views

    @property
    def metrics(self) -> list[str]:
        if self._metrics is None or self._metrics_of is not self.frame:
            b = self._blocks
            if b is not None and b.frame is self.frame:  # known without a pass over rows
                self._metrics = sorted(set(b.names))
            else:
                self._metrics = sorted(self.frame.get_column("metric").unique().to_list())
            self._metrics_of = self.frame
        return list(self._metrics)

    def add_derived(self, metric: str, series: pl.DataFrame) -> None:
        """Put a metric computed from others (``series``: step, value, wall_time) into the
        frame, replacing any of that name. It is appended as a block of its own, so the
        per-metric views already built stay valid (no regrouping of the whole frame)."""
        old = self.frame
        rows = series.select(
            "step",
            pl.lit(metric).alias("metric"),
            "value",
            "wall_time",
            pl.lit(False).alias("superseded"),
        )
        rows = rows.select(old.columns).cast(old.schema)
        blocks = self._blocks if self._blocks is not None and self._blocks.frame is old else None
        views = self._views if self._views_of is old else None
        base = old
        if self.has(metric):  # the run logged it too: the derived one replaces it
            base = old.filter(pl.col("metric") != metric)
            blocks = views = None
        new = pl.concat([base, rows], how="vertical")
        self.frame = new
        self._metrics = None
        if blocks is not None:
            self._blocks = Blocks(new, [*blocks.starts, base.height], [*blocks.names, metric])
        if views is not None:
            body = [rows.get_column(c) for c in rows.columns if c != "metric"]
            self._views = views.with_view(metric, pl.DataFrame(body))
            self._views_of = new

    def memo(self, key: str, compute: Callable[[], _T]) -> _T:
        """``compute()``, once per frame object: a later call with the same ``key`` gets
        the same value until the frame changes (:meth:`add_derived` makes a new one)."""
        if self._memo_of is not self.frame:
            self._memo, self._memo_of = {}, self.frame
        if key not in self._memo:
            self._memo[key] = compute()
        value: _T = self._memo[key]
        return value

    def has(self, metric: str) -> bool:
        return metric in self._by_metric()

    def standing(self) -> pl.DataFrame:
        """The values that stand: superseded segments of restarts left out."""
        if not self.frame.get_column("superseded").any():
            return self.frame
        return self.frame.filter(~pl.col("superseded"))

    def columns(self, metric: str, names: Sequence[str]) -> list[pl.Series] | None:
        """These columns of one metric's standing rows, in frame order (every row, not one
        per step); None for a metric not logged. No query: slices of the run's columns."""
        return self._by_metric().columns(metric, names)

    def series_frame(self, metric: str) -> pl.DataFrame:
        """step, value, wall_time of one metric: standing values, step order, last per step."""
        views = self._by_metric()
        done = views.series.get(metric)
        if done is not None:  # (a polars frame is not changed in place: shared safely)
            return done
        names = ("step", "value", "wall_time")
        # (the view's columns, not its frame: cutting it and then a frame of three of its
        # columns cost ~10 µs a metric; a select goes through polars' query engine, ~30 µs)
        cols = views.columns(metric, names)
        if cols is None:
            return pl.DataFrame(
                schema={"step": pl.Int64, "value": pl.Float64, "wall_time": pl.Float64}
            )
        if any(c.n_chunks() > 1 for c in cols):  # joined once, then numpy needs no copy
            df = views[metric] = views[metric].rechunk()
            cols = [df.get_column(c) for c in names]
        if not _increasing(cols[0]):
            df = pl.DataFrame(cols).unique(subset="step", keep="last", maintain_order=True)
            df = df.sort("step")
            cols = [df.get_column(c) for c in names]
        done = pl.DataFrame(cols)
        views.series[metric] = done
        return done

    def all_finite(self) -> bool:
        """Whether every standing value is finite (nulls aside), once per frame: the
        usual answer, which spares a check per metric (nonfinite, the summary)."""
        return self.memo("all_finite", lambda: _all_finite(self.standing().get_column("value")))

    def series(self, metric: str, *, finite: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Steps and values of one metric (standing values, step order, last per step)."""
        import numpy as np

        df = self.series_frame(metric)
        steps = df.get_column("step").to_numpy()
        values = df.get_column("value").to_numpy().astype(np.float64, copy=False)
        if finite:
            ok = np.isfinite(values)
            return steps[ok], values[ok]
        return steps, values

    def wide(self, metrics: Sequence[str] | None = None) -> pl.DataFrame:
        """One row per step, a column per metric (standing values, last per step)."""
        df = self.standing()
        if metrics is not None:
            df = df.filter(pl.col("metric").is_in(list(metrics)))
        return df.pivot(on="metric", index="step", values="value", aggregate_function="last").sort(
            "step"
        )


def _all_finite(values: pl.Series) -> bool:
    """``values.is_finite().all()`` (nulls aside), in numpy when there is no null: polars'
    expression costs ~40 µs a run on a small frame."""
    if values.null_count() or values.dtype != pl.Float64:
        return bool(values.is_finite().all())
    import numpy as np

    return bool(np.isfinite(values.to_numpy()).all())


def _increasing(steps: pl.Series) -> bool:
    """:func:`strictly_increasing`, in numpy for a column without nulls (no copy)."""
    if steps.null_count() or steps.dtype != pl.Int64:
        return strictly_increasing(steps)
    a = steps.to_numpy()
    return a.size < 2 or bool((a[1:] > a[:-1]).all())


def build_run(
    long: pl.DataFrame,
    *,
    name: str,
    source: str,
    fmt: str,
    aliases: AliasTable | None = None,
    metadata: Mapping[str, Any] | None = None,
    issues: Sequence[DataIssue] = (),
    blocks: Sequence[int] | None = None,
) -> Run:
    """A Run from a reader's long frame (see :func:`frame_from_long`). ``blocks``: when
    the reader wrote the rows as one block per metric, ``metric`` an Enum, the length of
    each category's block in category order; it spares a pass over every row."""
    frame, more, names, found = canonicalize(
        long, source=source, aliases=aliases, block_counts=blocks
    )
    scaled, decided = units.infer(frame, names, aliases or AliasTable(), source, found)
    if scaled is not frame:  # (a unit decided: the block views were of the old frame)
        frame, found = scaled, None
    more = [*more, *decided]
    run = Run(
        name=name,
        source=source,
        format=fmt,
        frame=frame,
        metadata=dict(metadata or {}),
        data_quality=[*issues, *more],
        raw_names=names,
    )
    run._blocks = found
    return run
