"""Values that take the last step before them: an evaluation's results printed after the
training lines (MMEngine's ``Epoch(val)``, Composer's ``[Eval batch=..]`` block, OLMo's
evaluator block, fairseq's lines without ``num_updates``)."""

from __future__ import annotations

import polars as pl

from trainlens.readers.textlog.notes import Notes


def place(
    found: list[pl.DataFrame], following: list[pl.DataFrame], notes: Notes
) -> list[pl.DataFrame]:
    """``found`` (compact long frames in line order) with the ``following`` values placed
    at the step of the nearest line above them that has one; those above every such line
    are left out with a note."""
    if not following:
        return found
    rows = pl.concat(following)
    if not found:
        anchors = pl.DataFrame(schema={"lineno": pl.UInt32, "step": pl.Int64})
    else:
        anchors = (
            pl.concat([f.select("lineno", "step") for f in found])
            .unique("lineno", keep="last")
            .sort("lineno")
        )
    rows = rows.sort("lineno", "field", maintain_order=True)
    placed = rows.drop("step").join_asof(anchors, on="lineno", strategy="backward")
    placed = placed.select(rows.columns)
    lost = placed.filter(pl.col("step").is_null())
    if lost.height:
        notes.ignored(
            lost.height,
            "value(s) of evaluation lines came before any training step and were left out",
            line=int(lost.get_column("lineno")[0]),
        )
        placed = placed.filter(pl.col("step").is_not_null())
    if not found:
        return [placed]
    out = pl.concat([*found, placed], how="vertical_relaxed")
    return [out.sort("lineno", "field", maintain_order=True)]


def strip_prefix(long: pl.DataFrame, prefix: str) -> pl.DataFrame:
    """``long`` with ``prefix`` removed from its metric names."""
    name = pl.col("metric").cast(pl.String).str.strip_prefix(prefix).cast(pl.Categorical)
    return long.with_columns(name.alias("metric"))
