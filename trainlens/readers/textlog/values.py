"""Value texts to numbers: ``nan``/``inf`` in any case (with a sign) kept as NaN/±inf,
``ms`` → seconds, ``s`` dropped, a percent as a fraction; a text that is not a number is
counted and reported with its first line."""

from __future__ import annotations

import polars as pl

from trainlens.core.dataclass import dataclass, field
from trainlens.readers.textlog.notes import Notes


@dataclass
class BadValues:
    """The values that are not numbers, over every piece of a read: how many, the first
    (lineno, field, metric, raw text) and every metric that had one."""

    count: int = 0
    first: tuple[int, int, str, str] | None = None
    metrics: set[str] = field(default_factory=set)

    def add(self, bad: pl.DataFrame) -> None:
        if not bad.height:
            return
        self.count += bad.height
        self.metrics.update(str(m) for m in bad.get_column("metric").unique().to_list())
        row = bad.sort("lineno", "field", maintain_order=True).row(0, named=True)
        first = (int(row["lineno"]), int(row["field"]), str(row["metric"]), str(row["raw"]))
        if self.first is None or first[:2] < self.first[:2]:
            self.first = first

    def note(self, notes: Notes) -> None:
        if not self.count or self.first is None:
            return
        lineno, _, metric, raw = self.first
        names = sorted(self.metrics)
        notes.add(
            "non-numeric",
            f"{self.count} value(s) are not numbers and were skipped (first: "
            f"{metric}={raw!r}; metrics: {', '.join(names[:5])}"
            f"{'…' if len(names) > 5 else ''})",
            line=lineno,
            count=self.count,
            metrics=names,
        )


def convert(long: pl.DataFrame, bad: BadValues) -> pl.DataFrame:
    """``long`` with a Float64 ``value`` from its ``raw`` text (``raw`` dropped); the rows
    that are no number are counted in ``bad`` and left out."""
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
    missing = pl.col("value").is_null()
    if long.select(missing.any()).item():
        bad.add(long.filter(missing))
        long = long.filter(~missing)
    return long.drop("raw")


def parse(long: pl.DataFrame, notes: Notes) -> pl.DataFrame:
    """``long`` with a Float64 ``value`` from its ``raw`` text; the rest is reported."""
    bad = BadValues()
    out = convert(long, bad)
    bad.note(notes)
    return out
