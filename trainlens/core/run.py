"""The Run: one training run as a canonical long polars frame plus what we know about it.

Canonical frame (DESIGN.md): ``step`` Int64, ``metric`` Categorical, ``value`` Float64
(NaN and ±inf kept), ``wall_time`` Float64 seconds (null where unknown), and
``superseded`` Boolean — true for values a later segment replaced after a restart (the
step went backwards); they stay in the frame so nothing is lost, and analyses use the
standing values (:meth:`Run.standing`). ``metric`` is Categorical rather than String: a
1M-step, 12-metric run would otherwise hold 12M string views (~190 MB) for 12 names;
compare it with strings as usual, and cast a frame of your own to Categorical before
concatenating it with a run's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import polars as pl

from trainlens.core.names import AliasTable

if TYPE_CHECKING:  # numpy is imported only where an array is made (Run.series): building
    # a Run needs only polars, so reading a file does not pay numpy's start-up
    import numpy as np

_T = TypeVar("_T")

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
    _views: dict[str, pl.DataFrame] | None = field(
        default=None, init=False, repr=False, compare=False
    )
    _views_of: pl.DataFrame | None = field(default=None, init=False, repr=False, compare=False)
    _metrics: list[str] | None = field(default=None, init=False, repr=False, compare=False)
    # set by build_run when the frame holds each metric in one block (cheap views)
    _blocks: _Blocks | None = field(default=None, init=False, repr=False, compare=False)
    _metrics_of: pl.DataFrame | None = field(default=None, init=False, repr=False, compare=False)
    # what several detectors derive alike from the same frame (where the LR ramp ends:
    # four detectors ask, ~20 ms each on a 1M-step run), computed once per frame object
    _memo: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)
    _memo_of: pl.DataFrame | None = field(default=None, init=False, repr=False, compare=False)

    # ---- views -------------------------------------------------------------------------
    def _by_metric(self) -> dict[str, pl.DataFrame]:
        if self._views is None or self._views_of is not self.frame:
            b = self._blocks
            if b is not None and b.frame is self.frame:
                self._views = _block_views(self.frame, b.starts, b.names)
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
            self._blocks = _Blocks(new, [*blocks.starts, base.height], [*blocks.names, metric])
        if views is not None:
            body = [rows.get_column(c) for c in rows.columns if c != "metric"]
            self._views = {**views, metric: pl.DataFrame(body)}
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

    def series_frame(self, metric: str) -> pl.DataFrame:
        """step, value, wall_time of one metric: standing values, step order, last per step."""
        views = self._by_metric()
        df = views.get(metric)
        if df is None:
            return pl.DataFrame(
                schema={"step": pl.Int64, "value": pl.Float64, "wall_time": pl.Float64}
            )
        if max(df.n_chunks("all")) > 1:  # joined once, then numpy arrays need no copy
            df = views[metric] = df.rechunk()
        if not _strictly_increasing(df.get_column("step")):
            df = df.unique(subset="step", keep="last", maintain_order=True).sort("step")
        return df.select("step", "value", "wall_time")

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


def metric_views(frame: pl.DataFrame) -> dict[str, pl.DataFrame]:
    """The rows of each metric (without the metric column), in frame order, keyed by
    metric in order of first appearance.

    A frame whose metrics lie in contiguous blocks (what the row-oriented readers and
    MLflow produce) is cut into zero-copy slices; any other order is partitioned."""
    blocks = _metric_blocks(frame.get_column("metric"))
    if blocks is not None:
        starts, names = blocks
        if len(set(names)) == len(names):
            return _block_views(frame, starts, names)
    parts = frame.partition_by("metric", as_dict=True, maintain_order=True)
    return {str(key[0]): df.drop("metric") for key, df in parts.items()}


def _block_views(
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
_MAX_BLOCKS = 4096


def _run_starts(codes: pl.Series) -> pl.Series | None:
    """Row where each run of equal values starts, or None when there are more than
    _MAX_BLOCKS runs (the rows interleave metrics)."""
    change = codes.ne_missing(codes.shift(1)).fill_null(True)
    if int(change.sum()) > _MAX_BLOCKS:
        return None
    return change.arg_true()


def _metric_blocks(metric: pl.Series) -> tuple[list[int], list[str]] | None:
    """Start row and name of each run of equal metric names, or None when there are
    more than _MAX_BLOCKS runs."""
    if metric.len() == 0:
        return [], []
    if metric.dtype != pl.String:
        metric = metric.cast(pl.String)
    starts = _run_starts(metric)
    if starts is None:
        return None
    return starts.to_list(), [str(x) for x in metric.gather(starts).to_list()]


def _lengths(starts: list[int], n: int) -> list[int]:
    """Lengths of the blocks that start at ``starts`` in ``n`` rows."""
    return [b - a for a, b in zip(starts, [*starts[1:], n], strict=False)]


def _strictly_increasing(s: pl.Series) -> bool:
    n = s.len()
    return n < 2 or bool((s.slice(1, n - 1) > s.slice(0, n - 1)).all())


@dataclass
class RawColumns:
    """What a reader parsed, before alias mapping and restart handling.

    Rows are in the order they were written (file order), which is what tells a
    restart (a step lower than the one before it, for the same metric) from a
    merely unsorted file.
    """

    step: np.ndarray  # int64
    metric: pl.Series | Sequence[str]  # raw names
    value: np.ndarray  # float64
    wall_time: np.ndarray | None = None  # float64, NaN where unknown

    @classmethod
    def empty(cls) -> RawColumns:
        import numpy as np

        return cls(np.empty(0, np.int64), [], np.empty(0, np.float64), None)


def frame_from_long(
    df: pl.DataFrame,
    *,
    source: str,
    aliases: AliasTable | None = None,
) -> tuple[pl.DataFrame, list[DataIssue], dict[str, str]]:
    """Canonicalize a long frame (step, metric, value[, wall_time][, _line | _order]).

    Rows are in file order, or grouped by metric with a column that gives each row's
    place in the file: ``_line`` (its line number, which restart notes then cite) or
    ``_order`` (any sortable position, a timestamp say). A restart is told by the order
    the values were written in, and its metrics are pooled by it.

    Maps metric names through the alias table (scaling units where the alias says),
    marks restarts and duplicates, and returns (frame, data-quality issues,
    canonical->raw names). ``metric`` may be String or Enum; the frame's is Categorical.

    The work is done on integer metric codes: names are resolved once per metric, not
    per row, and a frame in which every metric's steps strictly increase (no restart, no
    repeated step — provable from the steps and codes without grouping) skips the
    restart machinery (:func:`mark_restarts`), which any other frame goes through.
    """
    frame, issues, names, _ = _canonicalize(df, source=source, aliases=aliases)
    return frame, issues, names


@dataclass
class _Blocks:
    """The frame's rows are one contiguous block per metric: where each starts."""

    frame: pl.DataFrame
    starts: list[int]
    names: list[str]


def _known_blocks(
    metric: pl.Series, counts: Sequence[int] | None
) -> tuple[list[str], list[int], list[int]] | None:
    """Names, block starts and block codes from the block lengths a reader gave (one per
    category of an Enum metric column, in order), when they fit the column."""
    if counts is None or not isinstance(metric.dtype, pl.Enum) or metric.null_count():
        return None
    names = [str(c) for c in metric.dtype.categories.to_list()]
    if len(names) != len(counts) or sum(counts) != metric.len():
        return None
    starts: list[int] = []
    block_codes: list[int] = []
    at = 0
    for code, k in enumerate(counts):
        if k:
            starts.append(at)
            block_codes.append(code)
            at += k
    return names, starts, block_codes


def _canonicalize(
    df: pl.DataFrame,
    *,
    source: str,
    aliases: AliasTable | None,
    block_counts: Sequence[int] | None = None,
) -> tuple[pl.DataFrame, list[DataIssue], dict[str, str], _Blocks | None]:
    aliases = aliases or AliasTable()
    known = _known_blocks(df.get_column("metric"), block_counts)
    codes: pl.Series | None = None
    if known is not None:  # no code per row, no pass to find the blocks
        names, starts, block_codes = known
        n = df.height
    else:
        codes, names = _metric_codes(df.get_column("metric"))
        n = codes.len()
    step = df.get_column("step").cast(pl.Int64)
    value = df.get_column("value").cast(pl.Float64)
    if "wall_time" in df.columns:
        wall = df.get_column("wall_time").cast(pl.Float64)
        if wall.is_nan().any():  # (a copy of the column only when there is a NaN)
            wall = wall.fill_nan(None)
    else:
        wall = pl.repeat(None, n, eager=True, dtype=pl.Float64)

    if codes is None:
        in_blocks = True
        present = list(dict.fromkeys(block_codes))
    else:
        starts_s = _run_starts(codes)
        in_blocks = starts_s is not None
        if starts_s is not None:
            starts = starts_s.to_list()
            block_codes = codes.gather(starts_s).to_list()
            present = list(dict.fromkeys(block_codes))
        else:
            starts, block_codes = [], []
            present = codes.unique(maintain_order=True).to_list()
    raw = [names[c] for c in present]  # in order of first appearance
    resolved = aliases.resolve(raw)
    canonical = [resolved[x].canonical if x in resolved else x for x in names]
    if any(resolved[r].scale != 1.0 for r in raw):
        factor = [resolved[x].scale if x in resolved else 1.0 for x in names]
        if codes is None:
            lengths = _lengths(starts, n)
            per_row = [(factor[c], k) for c, k in zip(block_codes, lengths, strict=True)]
            value = value * _runs_series(per_row, pl.Float64())
        else:
            value = value * pl.Series(factor).gather(codes)
    canonical_to_raw = {v.canonical: k for k, v in resolved.items()}

    if in_blocks:
        # metrics in blocks: each column is a few constant runs, no string per row
        lengths = _lengths(starts, n)
        metric = _runs_series(
            [(canonical[c], k) for c, k in zip(block_codes, lengths, strict=True)],
            pl.Categorical(),
        )
        superseded = _runs_series([(False, k) for k in lengths], pl.Boolean())
    else:
        assert codes is not None
        metric = pl.Series("metric", canonical, dtype=pl.Categorical).gather(codes)
        superseded = pl.repeat(False, n, eager=True, dtype=pl.Boolean)
    out = pl.DataFrame(
        [step.alias("step"), metric.alias("metric"), value.alias("value"), wall.alias("wall_time")]
    )
    contiguous = in_blocks and len(present) == len(starts)
    if n < 2 or _steps_increase(step, codes, starts, contiguous, len(names)):
        frame = out.with_columns(superseded.alias("superseded"))
        blocks = None
        if contiguous:
            blocks = _Blocks(frame, starts, [canonical[c] for c in block_codes])
        return frame, [], canonical_to_raw, blocks
    position = next((c for c in ("_line", "_order") if c in df.columns), None)
    if position is not None:  # back to the order of writing
        out = out.with_columns(df.get_column(position)).sort(position, maintain_order=True)
        if position == "_order":
            out = out.drop("_order")
    frame, issues = mark_restarts(out, source=source)
    return frame, issues, canonical_to_raw, None


def _runs_series(runs: list[tuple[Any, int]], dtype: pl.DataType | None = None) -> pl.Series:
    """A series of constant runs (value, length), one chunk per run (nothing per row)."""
    dtype = dtype or pl.String()
    if not runs:
        return pl.Series("", [], dtype=dtype)
    parts = [pl.Series([v], dtype=dtype).new_from_index(0, k) for v, k in runs]
    return pl.concat(parts, rechunk=False) if len(parts) > 1 else parts[0]


def _steps_increase(
    step: pl.Series, codes: pl.Series | None, starts: list[int], contiguous: bool, n_codes: int
) -> bool:
    """True when every metric's steps strictly increase in row order (so nothing is a
    restart or a repeated step), decided without grouping for two layouts: metrics in
    contiguous blocks, or rows in non-decreasing step order with no metric twice at one
    step. False means "not shown", and the general path decides."""
    if step.null_count():
        return False
    n = step.len()
    if contiguous:
        ends = [*starts[1:], n]
        return all(
            _strictly_increasing(step.slice(a, b - a)) for a, b in zip(starts, ends, strict=True)
        )
    if codes is None or not bool((step.slice(1, n - 1) >= step.slice(0, n - 1)).all()):
        return False
    lo, hi = int(step[0]), int(step[-1])
    if (hi - lo + 1) * n_codes >= 2**62:
        return False
    key = (step - lo) * n_codes + codes.cast(pl.Int64)
    return _strictly_increasing(key) or key.n_unique() == n


def _metric_codes(metric: pl.Series) -> tuple[pl.Series, list[str]]:
    """A UInt32 code per row and the name of each code."""
    if isinstance(metric.dtype, pl.Enum) and not metric.null_count():
        cats = metric.dtype.categories.to_list()
        return metric.to_physical(), [str(c) for c in cats]
    metric = metric.cast(pl.String)
    blocks = _metric_blocks(metric)
    if blocks is not None:
        starts, block_names = blocks
        ids: dict[str, int] = {}
        block_codes = [ids.setdefault(x, len(ids)) for x in block_names]
        lengths = _lengths(starts, metric.len())
        runs = list(zip(block_codes, lengths, strict=True))
        return _runs_series(runs, pl.UInt32()), list(ids)
    uniq = [str(x) for x in metric.unique(maintain_order=True).to_list()]
    return metric.cast(pl.Enum(uniq)).to_physical(), uniq


def mark_restarts(df: pl.DataFrame, *, source: str) -> tuple[pl.DataFrame, list[DataIssue]]:
    """Add ``superseded``: a step lower than the previous one of the same metric starts
    a new segment, and every earlier value at or after that segment's first step is
    superseded. Returns the frame and one issue per restart (and per duplicated step)."""
    issues: list[DataIssue] = []
    if df.height == 0:
        return df.with_columns(pl.lit(False).alias("superseded")), issues
    df = df.with_row_index("_row")
    prev = pl.col("step").shift(1).over("metric")
    df = df.with_columns(
        (pl.col("step") < prev).fill_null(False).alias("_back"),
        # a repeated step is worth a note only when it disagrees with what was logged
        # (Lightning's CSV repeats `epoch` on every row of a step)
        (
            (pl.col("step") == prev)
            & (pl.col("value").ne_missing(pl.col("value").shift(1).over("metric")))
        )
        .fill_null(False)
        .alias("_dup"),
    )
    if not df.get_column("_back").any():
        dups = df.filter(pl.col("_dup"))
        if dups.height:
            issues.extend(_duplicate_issues(dups, source))
        return df.with_columns(pl.lit(False).alias("superseded")).select(list(FRAME_SCHEMA)), issues

    df = df.with_columns(pl.col("_back").cast(pl.Int32).cum_sum().over("metric").alias("_seg"))
    # first step of each segment, and the lowest first step of any later segment
    seg = (
        df.group_by("metric", "_seg")
        .agg(pl.col("step").first().alias("_start"), pl.col("_row").first().alias("_row0"))
        .sort("metric", "_seg", descending=[False, True])
        .with_columns(
            pl.col("_start").cum_min().over("metric").shift(1).over("metric").alias("_cutoff")
        )
    )
    df = df.join(seg.select("metric", "_seg", "_cutoff"), on=["metric", "_seg"], how="left")
    df = df.with_columns(
        (pl.col("_cutoff").is_not_null() & (pl.col("step") >= pl.col("_cutoff"))).alias(
            "superseded"
        )
    ).sort("_row")

    # one issue per restart, pooled over the metrics that went back together (sparse
    # metrics resume at slightly different steps): a back-jump whose target lies beyond
    # every step the current restart reached starts a new restart
    # where: the file's line when the reader gave it (``_line``), else the frame's row
    where = pl.col("_line") if "_line" in df.columns else pl.col("_row") + 1
    backs = (
        df.with_columns(
            pl.col("step").shift(1).over("metric").alias("_prev"), where.alias("_where")
        )
        .filter(pl.col("_back"))
        .select("_row", "_prev", "step", "_where")
        .sort("_row")
    )
    unit = "line" if "_line" in df.columns else "row"
    groups: list[dict[str, int]] = []
    for _row, prev_step, to_step, at in backs.iter_rows():
        g = groups[-1] if groups else None
        if g is None or to_step > g["from"]:
            groups.append({"at": at, "from": prev_step, "to": to_step})
        else:
            g["from"] = max(g["from"], prev_step)
            g["to"] = min(g["to"], to_step)
    for g in groups:
        from_step, to_step = int(g["from"]), int(g["to"])
        n_sup = df.filter(
            pl.col("superseded") & (pl.col("step") >= to_step) & (pl.col("step") <= from_step)
        ).height
        issues.append(
            DataIssue(
                kind="restart",
                source=source,
                location=f"{unit} {int(g['at'])}",
                message=(
                    f"restart: step went back from {from_step} to {to_step}; "
                    f"{n_sup} earlier values from step {to_step} on are superseded "
                    "(kept, marked superseded)"
                ),
                count=1,
                severity="warning",
                details={"from_step": from_step, "to_step": to_step, "superseded": n_sup},
            )
        )
    dups = df.filter(pl.col("_dup"))
    if dups.height:
        issues.extend(_duplicate_issues(dups, source))
    return df.select(list(FRAME_SCHEMA)), issues


def _duplicate_issues(dups: pl.DataFrame, source: str) -> list[DataIssue]:
    first = int(dups.get_column("step").min())  # type: ignore[arg-type]
    metrics = sorted(dups.get_column("metric").unique().to_list())
    return [
        DataIssue(
            kind="duplicate-step",
            source=source,
            location=f"step {first}",
            message=(
                f"{dups.height} values repeat a step already logged for the same metric "
                f"(first at step {first}; metrics: {', '.join(metrics[:5])}"
                f"{'…' if len(metrics) > 5 else ''}); all kept, the last one stands"
            ),
            count=dups.height,
            severity="info",
            details={"first_step": first, "metrics": metrics},
        )
    ]


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
    frame, more, names, found = _canonicalize(
        long, source=source, aliases=aliases, block_counts=blocks
    )
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
