"""The summary's wall-clock step times (``summary._densest_clock``, numpy over each
metric's standing rows) against the polars queries they replaced, kept here as the
reference: the densest series' clock (ties to the first metric in the column's order),
its latest time per step with NaNs aside, in step order; on random runs with restarts,
duplicate steps, nulls and NaNs in the wall time, and ties between clocks that differ."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainlens import summary
from trainlens.core.run import Run


def _reference(run: Run) -> tuple[np.ndarray, np.ndarray] | None:
    st_ = run.standing().filter(pl.col("wall_time").is_not_null())
    if not st_.height:
        return None
    dense = (
        st_.group_by("metric")
        .agg(pl.col("step").n_unique().alias("n"))
        .sort(["n", "metric"], descending=[True, False])
        .get_column("metric")[0]
    )
    st_ = st_.filter(pl.col("metric") == dense)
    per_step = st_.group_by("step").agg(pl.col("wall_time").max()).sort("step")
    return per_step.get_column("step").to_numpy(), per_step.get_column("wall_time").to_numpy()


def _run(rows: list[tuple[int, str, float | None, bool]], dtype: pl.DataType) -> Run:
    frame = pl.DataFrame(
        [
            pl.Series("step", [r[0] for r in rows], dtype=pl.Int64),
            pl.Series("metric", [r[1] for r in rows], dtype=dtype),
            pl.Series("value", [1.0] * len(rows), dtype=pl.Float64),
            pl.Series("wall_time", [r[2] for r in rows], dtype=pl.Float64),
            pl.Series("superseded", [r[3] for r in rows], dtype=pl.Boolean),
        ]
    )
    return Run(name="r", source="r.jsonl", format="jsonl", frame=frame)


def _same(
    got: tuple[np.ndarray, np.ndarray] | None, want: tuple[np.ndarray, np.ndarray] | None
) -> None:
    assert (got is None) == (want is None)
    if got is not None and want is not None:
        assert got[0].tolist() == want[0].tolist()
        assert np.array_equal(got[1], want[1], equal_nan=True)


NAMES = ["loss", "lr", "system/gpu", "val/loss", "Loss"]
_WALL = st.one_of(st.none(), st.just(math.nan), st.floats(0, 1e4, allow_nan=False))


@settings(max_examples=300, deadline=None)
@given(
    rows=st.lists(
        st.tuples(st.integers(0, 12), st.sampled_from(NAMES), _WALL, st.booleans()),
        max_size=40,
    ),
    enum=st.booleans(),
)
def test_the_densest_clock_is_what_the_queries_gave(
    rows: list[tuple[int, str, float | None, bool]], enum: bool
) -> None:
    names = sorted({r[1] for r in rows}, reverse=True)  # an Enum in another order
    dtype: pl.DataType = pl.Enum(names) if enum and names else pl.Categorical()
    run = _run(rows, dtype)
    _same(summary._densest_clock(run), _reference(run))


def test_a_tie_goes_to_the_first_name_and_a_sparse_clock_loses() -> None:
    rows = [(s, "train/loss", 10.0 * s, False) for s in range(5)]
    rows += [(s, "lr", 100.0 + s, False) for s in range(5)]  # same count, another clock
    rows += [(s * 2, "system/gpu", 7.0 * s, False) for s in range(3)]
    run = _run(rows, pl.Categorical())
    steps, wall = summary._densest_clock(run) or (None, None)
    assert steps is not None and wall is not None
    assert wall.tolist() == [100.0, 101.0, 102.0, 103.0, 104.0]  # "lr" < "train/loss"
    _same((steps, wall), _reference(run))


@pytest.mark.parametrize("superseded", [False, True])
def test_repeated_steps_take_their_latest_time(superseded: bool) -> None:
    rows = [(1, "loss", 5.0, False), (2, "loss", 6.0, False), (2, "loss", math.nan, False)]
    rows += [(1, "loss", 9.0, superseded), (3, "loss", None, False)]
    run = _run(rows, pl.Categorical())
    got = summary._densest_clock(run)
    _same(got, _reference(run))
    assert got is not None and got[1].tolist() == [5.0 if superseded else 9.0, 6.0]
