"""stalls._timed_rows skips the step search for a metric logged on exactly the densest
metric's steps (most metrics of a long run): the rows it keeps are those the search
keeps (steps the densest metric lacks, or an earlier time at a step it has)."""

from __future__ import annotations

import numpy as np
import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from trainlens.core.run import Run, build_run
from trainlens.detectors import stalls


def _timed_rows_by_search(run: Run) -> pl.DataFrame:
    """The rows as the search over every sparser metric gives them (the code before the
    cut, kept here as the reference)."""
    timed = []
    for metric in run.metrics:
        sf = run.series_frame(metric)
        if sf.height and sf.get_column("wall_time").null_count() < sf.height:
            timed.append((metric, sf))
    timed.sort(key=lambda t: -t[1].height)
    dense = timed[0][1]
    dense_steps = dense.get_column("step").to_numpy()
    dense_wall = dense.get_column("wall_time").to_numpy()
    parts = [dense.select("step", pl.lit(False).alias("superseded"), "wall_time")]
    for _, sf in timed[1:]:
        steps = sf.get_column("step").to_numpy()
        wall = sf.get_column("wall_time").to_numpy()
        at = np.minimum(np.searchsorted(dense_steps, steps), dense_steps.size - 1)
        earlier = np.greater(
            dense_wall[at], wall, where=~np.isnan(wall), out=np.zeros(wall.size, bool)
        )
        extra = sf.filter(pl.Series((dense_steps[at] != steps) | earlier))
        if extra.height:
            parts.append(extra.select("step", pl.lit(False).alias("superseded"), "wall_time"))
    return pl.concat(parts)


@settings(max_examples=150, deadline=None)
@given(
    n=st.integers(2, 60),
    seed=st.integers(0, 2**32 - 1),
    shift=st.sampled_from([0.0, -1.0, 1.0, -0.5]),
    frac_shifted=st.sampled_from([0.0, 0.05, 0.5, 1.0]),
    nan_frac=st.sampled_from([0.0, 0.2]),
    sparse_every=st.integers(1, 7),
)
def test_same_steps_keep_what_the_search_keeps(
    n: int, seed: int, shift: float, frac_shifted: float, nan_frac: float, sparse_every: int
) -> None:
    rng = np.random.default_rng(seed)
    steps = np.cumsum(rng.integers(1, 4, n))
    wall = 1.7e9 + np.cumsum(rng.uniform(0.5, 2.0, n))
    # the same steps (the cut's case), some at another time, some times unknown
    same = wall + np.where(rng.random(n) < frac_shifted, shift, 0.0)
    same[rng.random(n) < nan_frac] = np.nan
    sparse = np.arange(0, n, sparse_every)
    rows = [("loss", steps, wall), ("lr", steps, same), ("eval", steps[sparse] + 1, wall[sparse])]
    df = pl.DataFrame(
        {
            "step": np.concatenate([s for _, s, _ in rows]),
            "metric": [m for m, s, _ in rows for _ in range(s.size)],
            "value": rng.random(sum(s.size for _, s, _ in rows)),
            "wall_time": np.concatenate([w for _, _, w in rows]),
        }
    )
    run = build_run(df, name="r", source="mem", fmt="jsonl")
    dense, parts, _ = stalls._timed_rows(run)
    assert dense is not None
    got = pl.concat([dense.select("step", pl.lit(False).alias("superseded"), "wall_time"), *parts])
    want = _timed_rows_by_search(run)
    assert got.equals(want)
