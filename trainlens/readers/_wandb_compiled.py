"""The columns of the compiled W&B lane (``_wbscan.scan``) as polars series (private to
the W&B run reader).

The lane hands each metric's values over as its own Arrow array (no copy into one
buffer), and its steps and wall times as the indexes of the history records they came
from. A metric logged at every step (the usual case) came from a contiguous range of
records, so its steps and wall times are slices of the records' columns: polars shares
their memory. Every column of the frame is therefore in chunks, one per metric, and
nothing here touches a row: at 12M values, each fresh copy of a column costs more in
page faults than the copy itself, and this lane's whole-process time is what the
benchmark (bench/wandb_read.py) holds against W&B's reader. No numpy: its import is
~0.1 s of that time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import polars as pl

from trainlens.core.dataclass import dataclass
from trainlens.readers._wandb_log import unique_names


@dataclass
class Compiled:
    """The history rows ``_wbscan.scan`` decoded from one file: one block per metric
    (``names[i]`` has ``counts[i]`` rows), each in file order, each column in one chunk
    per block; each history record's step and wall time (``mark_*``, for placing system
    samples)."""

    names: list[str]
    counts: list[int]
    rec: pl.Series
    step: pl.Series
    value: pl.Series
    wall: pl.Series
    mark_step: pl.Series
    mark_wall: pl.Series
    base: int  # added to rec: the file's place in a resumed run

    def metric(self, extra: Sequence[tuple[str, int]] = ()) -> pl.Series:
        """The metric column: an Enum of the names (then ``extra``'s), a constant run a
        block (nothing per row)."""
        blocks = list(zip(self.names, self.counts, strict=True)) + list(extra)
        enum = pl.Enum([n for n, _ in blocks])
        parts = [pl.Series("metric", [n], dtype=enum).new_from_index(0, k) for n, k in blocks]
        if not parts:
            return pl.Series("metric", [], dtype=enum)
        return pl.concat(parts, rechunk=False)

    def frame(self) -> pl.DataFrame:
        """The rows as a frame with ``rec`` (for merging with other lanes' rows)."""
        return pl.DataFrame(
            [
                (self.rec + self.base).alias("rec"),
                self.step.alias("step"),
                self.metric(),
                self.value.alias("value"),
                self.wall.alias("wall_time"),
            ]
        )


def _chunks(parts: list[pl.Series], dtype: pl.DataType) -> pl.Series:
    return pl.concat(parts, rechunk=False) if parts else pl.Series([], dtype=dtype)


def from_compiled(
    scanned: tuple[Any, ...], out: list[Compiled], base: int
) -> tuple[list[tuple[int, bytes]], int]:
    """The columns of ``_wbscan.scan`` appended to ``out`` (when it decoded any history
    value); the records left to the exact decoder, and how many records were read."""
    keys, values, rows, mark_step_c, mark_wall_c, mark_rec_c, exact = scanned
    keys = unique_names(keys)
    mark_step = pl.Series(mark_step_c).alias("step")
    mark_wall = pl.Series(mark_wall_c).alias("wall_time")
    mark_rec = pl.Series(mark_rec_c).alias("rec")
    names: list[str] = []
    counts: list[int] = []
    rec: list[pl.Series] = []
    step: list[pl.Series] = []
    value: list[pl.Series] = []
    wall: list[pl.Series] = []
    for key, vals, at in zip(keys, values, rows, strict=True):
        if not len(vals):  # (a key met only in records left to the exact decoder)
            continue
        names.append(key)
        counts.append(len(vals))
        value.append(pl.Series(vals).alias("value"))
        if isinstance(at, tuple):  # records start..start+count-1: slices, no copy
            start, n = at
            rec.append(mark_rec.slice(start, n))
            step.append(mark_step.slice(start, n))
            wall.append(mark_wall.slice(start, n))
        else:
            idx = pl.Series(at)
            rec.append(mark_rec.gather(idx))
            step.append(mark_step.gather(idx))
            wall.append(mark_wall.gather(idx))
    if names:
        out.append(
            Compiled(
                names=names,
                counts=counts,
                rec=_chunks(rec, pl.Int64()),
                step=_chunks(step, pl.Int64()),
                value=_chunks(value, pl.Float64()),
                wall=_chunks(wall, pl.Float64()),
                mark_step=mark_step,
                mark_wall=mark_wall,
                base=base,
            )
        )
    return exact, len(mark_step) + len(exact)
