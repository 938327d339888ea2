"""Step counters of the general key/value reader (:mod:`trainlens.readers.textlog.generic`)
that no step name says: a batch counter of any name, or none, after the epoch; an
iteration that starts again at each stage."""

from __future__ import annotations

import polars as pl

#: step lines a file needs before a guess is trusted (generic's own)
MIN_LINES = 2


def unnamed_counter(pairs: pl.DataFrame, epoch: str) -> str | None:
    """A counter with its total, of any name, on the epoch's lines (`Epoch [1/10], Sample
    [2/5]`, `Epoch 0 [20/188]`) that starts again each epoch: the batch within the epoch,
    when no step name is there to say so."""
    if pairs.filter(pl.col("of").is_not_null() & (pl.col("_lower") != epoch)).height == 0:
        return None
    ep_lines = pairs.filter(pl.col("_lower") == epoch).select("lineno")
    on = pairs.join(ep_lines, on="lineno", how="semi").filter(
        pl.col("of").is_not_null() & (pl.col("_lower") != epoch)
    )
    if on.height < MIN_LINES:
        return None
    per = (
        on.group_by("_lower", maintain_order=True)
        .agg(
            pl.len().alias("n"),
            (pl.col("value") == pl.col("value").round()).all().alias("whole"),
            (pl.col("value") <= pl.col("of")).all().alias("within"),
            (pl.col("value").diff() < 0).sum().alias("drops"),
            pl.col("of").n_unique().alias("totals"),
        )
        .filter(pl.col("whole") & pl.col("within") & (pl.col("totals") == 1))
        .filter(pl.col("n") * 2 >= ep_lines.height)
    )
    if per.height != 1:
        return None
    return str(per.get_column("_lower")[0])


def staged_steps(rows: pl.DataFrame) -> pl.DataFrame:
    """``lineno, step`` of iterations that start again at each stage (``_epoch``: the
    stage): the iteration plus the last iteration of every earlier stage of the same
    launch (a stage that goes back is a job launched again: its steps start over, a
    restart)."""
    rows = rows.sort("lineno").with_columns(
        (pl.col("_epoch").diff().fill_null(0) < 0).cum_sum().alias("_launch"),
        (pl.col("_epoch").diff().fill_null(0) != 0).cum_sum().alias("_seg"),
    )
    segs = (
        rows.group_by("_seg", maintain_order=True)
        .agg(pl.col("_launch").first(), pl.col("step").max().alias("_last"))
        .with_columns(
            (pl.col("_last").cum_sum() - pl.col("_last")).over("_launch").alias("_offset")
        )
    )
    return rows.join(segs.select("_seg", "_offset"), on="_seg", how="left").select(
        "lineno", (pl.col("step") + pl.col("_offset")).alias("step")
    )
