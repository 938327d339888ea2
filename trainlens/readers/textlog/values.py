"""Value texts to numbers: ``nan``/``inf`` in any case (with a sign) kept as NaN/±inf,
``ms`` → seconds, ``s`` dropped, a percent as a fraction; a text that is not a number is
counted and reported with its first line."""

from __future__ import annotations

import polars as pl

from trainlens.readers.textlog.notes import Notes


def parse(long: pl.DataFrame, notes: Notes) -> pl.DataFrame:
    """``long`` with a Float64 ``value`` from its ``raw`` text; the rest is reported."""
    raw = pl.col("raw").str.strip_chars()
    is_ms = raw.str.ends_with("ms")
    is_s = ~is_ms & raw.str.ends_with("s")
    is_pct = raw.str.ends_with("%")
    number = (
        pl.when(is_ms)
        .then(raw.str.slice(0, raw.str.len_chars() - 2))
        .when(is_s | is_pct)
        .then(raw.str.slice(0, raw.str.len_chars() - 1))
        .otherwise(raw)
        .str.strip_chars()
    )
    # a percent is a fraction (canonical mfu is 0..1; nanoGPT prints `mfu 15.34%`)
    scale = pl.when(is_ms).then(pl.lit(1e-3)).when(is_pct).then(pl.lit(0.01)).otherwise(1.0)
    long = long.with_columns((number.cast(pl.Float64, strict=False) * scale).alias("value"))
    bad = long.filter(pl.col("value").is_null())
    if bad.height:
        first = bad.row(0, named=True)
        names = sorted(bad.get_column("metric").unique().to_list())
        notes.add(
            "non-numeric",
            f"{bad.height} value(s) are not numbers and were skipped (first: "
            f"{first['metric']}={first['raw']!r}; metrics: {', '.join(names[:5])}"
            f"{'…' if len(names) > 5 else ''})",
            line=int(first["lineno"]),
            count=bad.height,
            metrics=names,
        )
        long = long.filter(pl.col("value").is_not_null())
    return long
