"""From a reader's long frame to the canonical one: metric names through the alias table
(units scaled), restarts and repeated steps marked (:func:`mark_restarts`), each with a
data-quality note. The usual frame (every metric's steps strictly increase) skips the
restart machinery, proven from the steps and metric codes without grouping.

Split out of trainlens/core/run.py (issue 14); :mod:`trainlens.core.run` re-exports
``RawColumns``, ``frame_from_long`` and ``mark_restarts``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import polars as pl

from trainlens.core.dataclass import dataclass
from trainlens.core.frame import (
    FRAME_SCHEMA,
    Blocks,
    DataIssue,
    block_lengths,
    metric_blocks,
    run_starts,
    runs_series,
    strictly_increasing,
)
from trainlens.core.names import AliasTable

if TYPE_CHECKING:  # numpy is imported only where an array is made: building a frame
    # needs only polars, so reading a file does not pay numpy's start-up
    import numpy as np


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
    frame, issues, names, _ = canonicalize(df, source=source, aliases=aliases)
    return frame, issues, names


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


def canonicalize(
    df: pl.DataFrame,
    *,
    source: str,
    aliases: AliasTable | None,
    block_counts: Sequence[int] | None = None,
) -> tuple[pl.DataFrame, list[DataIssue], dict[str, str], Blocks | None]:
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
        starts_s = run_starts(codes)
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
        if codes is None:  # only the blocks to scale are touched (slices share memory)
            lengths = block_lengths(starts, n)
            parts = [
                value.slice(a, k) * factor[c] if factor[c] != 1.0 else value.slice(a, k)
                for c, a, k in zip(block_codes, starts, lengths, strict=True)
            ]
            value = pl.concat(parts, rechunk=False) if parts else value
        else:
            value = value * pl.Series(factor).gather(codes)
    canonical_to_raw = {v.canonical: k for k, v in resolved.items()}

    if in_blocks:
        # metrics in blocks: each column is a few constant runs, no string per row
        lengths = block_lengths(starts, n)
        metric = runs_series(
            [(canonical[c], k) for c, k in zip(block_codes, lengths, strict=True)],
            pl.Categorical(),
        )
        superseded = pl.repeat(False, n, eager=True, dtype=pl.Boolean)
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
            blocks = Blocks(frame, starts, [canonical[c] for c in block_codes])
        return frame, [], canonical_to_raw, blocks
    position = next((c for c in ("_line", "_order") if c in df.columns), None)
    if position is None and codes is not None and not contiguous and _non_decreasing(step):
        # no step goes back, so no restart: only a metric logged twice at one step
        # (HF's epoch in its train and eval entries) is left to find, without
        # mark_restarts' windows (1M-entry trainer state: 0.28 GB of them, bench/memory.py)
        dups = _repeated_steps(out, codes)
        issues = _duplicate_issues(dups, source) if dups.height else []
        return out.with_columns(superseded.alias("superseded")), issues, canonical_to_raw, None
    if position is not None:  # back to the order of writing
        out = out.with_columns(df.get_column(position)).sort(position, maintain_order=True)
        if position == "_order":
            out = out.drop("_order")
    frame, issues = mark_restarts(out, source=source)
    return frame, issues, canonical_to_raw, None


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
        if n < 2:
            return True
        # each step above the one before it, but where a block starts: one pass over the
        # rows whatever the number of blocks (a slice per block cost 0.1 ms)
        rises = step.slice(1, n - 1) > step.slice(0, n - 1)
        if len(starts) > 1:
            rises = rises.scatter([a - 1 for a in starts[1:]], True)
        return bool(rises.all())
    if codes is None or not bool((step.slice(1, n - 1) >= step.slice(0, n - 1)).all()):
        return False
    lo, hi = int(step[0]), int(step[-1])
    if (hi - lo + 1) * n_codes >= 2**62:
        return False
    # the key a slice at a time: whole, its temporaries took 3 x 8 bytes a row (9M rows of
    # a Megatron log: ~200 MB over the frame, the read's peak; bench/memory.py)
    previous: int | None = None
    for a in range(0, n, _KEY_SLICE):
        key = (step.slice(a, _KEY_SLICE) - lo) * n_codes + codes.slice(a, _KEY_SLICE).cast(pl.Int64)
        if not strictly_increasing(key) or (previous is not None and int(key[0]) <= previous):
            break
        previous = int(key[-1])
    else:
        return True
    key = (step - lo) * n_codes + codes.cast(pl.Int64)
    return key.n_unique() == n


_KEY_SLICE = 1 << 20


def _non_decreasing(step: pl.Series) -> bool:
    n = step.len()
    return not step.null_count() and bool((step.slice(1, n - 1) >= step.slice(0, n - 1)).all())


def _repeated_steps(out: pl.DataFrame, codes: pl.Series) -> pl.DataFrame:
    """The rows of ``out`` (steps non-decreasing) whose metric was logged at the same
    step just before with another value: what mark_restarts' ``_dup`` finds there.
    Sorted by (step, metric, row), each metric's values at one step lie side by side."""
    same = (pl.col("step") == pl.col("step").shift(1)) & (
        pl.col("_code") == pl.col("_code").shift(1)
    )
    pairs = (
        pl.DataFrame(
            [
                out.get_column("step"),
                codes.cast(pl.UInt32).alias("_code"),
                pl.int_range(0, out.height, dtype=pl.UInt32, eager=True).alias("_row"),
            ]
        )
        .sort("step", "_code", "_row")
        .select(pl.col("_row"), pl.col("_row").shift(1).alias("_before"), same.alias("_same"))
        .filter(pl.col("_same"))
    )
    value = out.get_column("value")
    now = value.gather(pairs.get_column("_row"))
    before = value.gather(pairs.get_column("_before"))
    rows = pairs.get_column("_row").filter(now.ne_missing(before)).sort()
    return out[rows]


def _metric_codes(metric: pl.Series) -> tuple[pl.Series, list[str]]:
    """A UInt32 code per row and the name of each code."""
    if isinstance(metric.dtype, pl.Enum) and not metric.null_count():
        cats = metric.dtype.categories.to_list()
        return metric.to_physical(), [str(c) for c in cats]
    metric = metric.cast(pl.String)
    blocks = metric_blocks(metric)
    if blocks is not None:
        starts, block_names = blocks
        ids: dict[str, int] = {}
        block_codes = [ids.setdefault(x, len(ids)) for x in block_names]
        lengths = block_lengths(starts, metric.len())
        runs = list(zip(block_codes, lengths, strict=True))
        return runs_series(runs, pl.UInt32()), list(ids)
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
    nxt = pl.col("step").shift(-1).over("metric")
    df = df.with_columns(
        (pl.col("step") < prev).fill_null(False).alias("_back"),
        # (in this context: the window's groups are built once for both shifts)
        (nxt > prev).fill_null(False).alias("_ahead"),
        prev.alias("_prev_step"),
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
    df = df.with_columns(
        # a value behind the one before it whose next is ahead of both: a line logged out
        # of order, or two writers appending to one file in turn (two ranks both logging:
        # 1020, 1010, 1030, 1020, …) — no resume, nothing to supersede. A resume goes on
        # from where it went back to (its next step is at most the one it went back from)
        (pl.col("_back") & pl.col("_ahead")).alias("_aside"),
    )
    aside = df.filter(pl.col("_aside"))
    if aside.height >= _INTERLEAVED:
        # two writers in turn: a step back no farther than they ever lagged each other
        # (one pausing to save a checkpoint: 1050, 1040, 1050) is the same interleaving
        lag = aside.select((pl.col("_prev_step") - pl.col("step")).max()).item()
        within = pl.col("_back") & ((pl.col("_prev_step") - pl.col("step")) <= lag)
        df = df.with_columns((pl.col("_aside") | within).alias("_aside"))
        aside = df.filter(pl.col("_aside"))
    if aside.height:
        issues.append(_aside_issue(aside, source))
        df = df.with_columns((pl.col("_back") & ~pl.col("_aside")).alias("_back"))
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


#: values aside their neighbours that make a file two writers' in turn, not a stray line
_INTERLEAVED = 3


def _aside_issue(aside: pl.DataFrame, source: str) -> DataIssue:
    """The note for values logged behind their neighbours (see ``_aside``)."""
    where = pl.col("_line") if "_line" in aside.columns else pl.col("_row") + 1
    unit = "line" if "_line" in aside.columns else "row"
    first = aside.select(where.first(), pl.col("step").first()).row(0)
    n = aside.height
    many = n >= _INTERLEAVED
    return DataIssue(
        kind="out-of-order",
        source=source,
        location=f"{unit} {int(first[0])}",
        message=(
            f"{n} value(s) logged behind the step before them and followed by a later one "
            f"(first: step {int(first[1])}); "
            + (
                "two writers append to this file in turn (two processes or ranks each "
                "logging the run): read as one run, not as restarts; where both logged a "
                "step, the last value stands"
                if many
                else "read in step order, not as a restart"
            )
        ),
        count=n,
        severity="warning" if many else "info",
        details={"first_step": int(first[1])},
    )


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
