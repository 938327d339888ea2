"""The Run: one training run as a canonical long polars frame plus what we know about it.

Canonical frame (DESIGN.md): ``step`` Int64, ``metric`` String, ``value`` Float64 (NaN and
±inf kept), ``wall_time`` Float64 seconds (null where unknown), and ``superseded``
Boolean — true for values a later segment replaced after a restart (the step went
backwards); they stay in the frame so nothing is lost, and analyses use the standing
values (:meth:`Run.standing`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from trainlens.core.names import AliasTable

FRAME_SCHEMA: dict[str, pl.DataType] = {
    "step": pl.Int64(),
    "metric": pl.String(),
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
    # would cost more than reading it
    _views: dict[str, pl.DataFrame] | None = field(
        default=None, init=False, repr=False, compare=False
    )
    _views_of: int | None = field(default=None, init=False, repr=False, compare=False)

    # ---- views -------------------------------------------------------------------------
    def _by_metric(self) -> dict[str, pl.DataFrame]:
        if self._views is None or self._views_of != id(self.frame):
            parts = self.standing().partition_by("metric", as_dict=True, maintain_order=True)
            self._views = {str(key[0]): df.drop("metric") for key, df in parts.items()}
            self._views_of = id(self.frame)
        return self._views

    @property
    def metrics(self) -> list[str]:
        return sorted(self.frame.get_column("metric").unique().to_list())

    def has(self, metric: str) -> bool:
        return metric in self._by_metric()

    def standing(self) -> pl.DataFrame:
        """The values that stand: superseded segments of restarts left out."""
        if not self.frame.get_column("superseded").any():
            return self.frame
        return self.frame.filter(~pl.col("superseded"))

    def series_frame(self, metric: str) -> pl.DataFrame:
        """step, value, wall_time of one metric: standing values, step order, last per step."""
        df = self._by_metric().get(metric)
        if df is None:
            return pl.DataFrame(schema={"step": pl.Int64, "value": pl.Float64,
                                        "wall_time": pl.Float64})
        steps = df.get_column("step").to_numpy()
        if steps.size > 1 and not bool(np.all(steps[1:] > steps[:-1])):
            df = df.unique(subset="step", keep="last", maintain_order=True).sort("step")
        return df.select("step", "value", "wall_time")

    def series(self, metric: str, *, finite: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Steps and values of one metric (standing values, step order, last per step)."""
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


# ---- building a frame from what a reader parsed ----------------------------------------


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
        return cls(np.empty(0, np.int64), [], np.empty(0, np.float64), None)


def frame_from_long(
    df: pl.DataFrame,
    *,
    source: str,
    aliases: AliasTable | None = None,
) -> tuple[pl.DataFrame, list[DataIssue], dict[str, str]]:
    """Canonicalize a long frame (step, metric, value[, wall_time]) in file order.

    Maps metric names through the alias table (scaling units where the alias says),
    marks restarts and duplicates, and returns (frame, data-quality issues,
    canonical->raw names).
    """
    aliases = aliases or AliasTable()
    if "wall_time" not in df.columns:
        df = df.with_columns(pl.lit(None, dtype=pl.Float64).alias("wall_time"))
    df = df.select(
        pl.col("step").cast(pl.Int64),
        pl.col("metric").cast(pl.String),
        pl.col("value").cast(pl.Float64),
        pl.col("wall_time").cast(pl.Float64).fill_nan(None),
    )
    raw = df.get_column("metric").unique(maintain_order=True).to_list()
    resolved = aliases.resolve(raw)
    renamed = {k: v.canonical for k, v in resolved.items() if v.canonical != k}
    scaled = {k: v.scale for k, v in resolved.items() if v.scale != 1.0}
    if scaled:
        df = df.with_columns(
            (
                pl.col("value")
                * pl.col("metric").replace_strict(scaled, default=1.0, return_dtype=pl.Float64)
            ).alias("value")
        )
    if renamed:
        df = df.with_columns(pl.col("metric").replace(renamed))
    canonical_to_raw = {v.canonical: k for k, v in resolved.items()}
    frame, issues = mark_restarts(df, source=source)
    return frame, issues, canonical_to_raw


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
    backs = (
        df.with_columns(pl.col("step").shift(1).over("metric").alias("_prev"))
        .filter(pl.col("_back"))
        .select("_row", "_prev", "step")
        .sort("_row")
    )
    groups: list[dict[str, int]] = []
    for row, prev_step, to_step in backs.iter_rows():
        g = groups[-1] if groups else None
        if g is None or to_step > g["from"]:
            groups.append({"row": row, "from": prev_step, "to": to_step})
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
                location=f"row {int(g['row']) + 1}",
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
) -> Run:
    frame, more, names = frame_from_long(long, source=source, aliases=aliases)
    return Run(
        name=name,
        source=source,
        format=fmt,
        frame=frame,
        metadata=dict(metadata or {}),
        data_quality=[*issues, *more],
        raw_names=names,
    )
