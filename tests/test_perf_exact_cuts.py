"""Exact cuts that skip a whole-series computation (issue 13's noisy 1M-step run): each
skip happens only where the full computation could not have changed a result."""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainlens.core import stats
from trainlens.core.stats import median, median_rows, quantile, quantile_filled
from trainlens.detectors import _lr_precision, memory, tensors


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(
    n=st.integers(25, 400),
    window=st.integers(1, 40),
    min_frac=st.sampled_from([0.01, 0.05, 0.2, 0.5]),
    p_low=st.sampled_from([0.0, 0.01, 0.05, 0.2]),
    p_high=st.sampled_from([0.0, 0.01, 0.05, 0.2]),
    on_bound=st.booleans(),
    seed=st.integers(0, 2**31),
)
def test_band_skipped_only_when_no_median_could_leave_it(
    n: int,
    window: int,
    min_frac: float,
    p_low: float,
    p_high: float,
    on_bound: bool,
    seed: int,
) -> None:
    p = dataclasses.replace(tensors.Params(), window=window, min_frac=min_frac)
    rng = np.random.default_rng(seed)
    v = 10 ** rng.uniform(-4, -2, n)
    u = rng.random(n)
    # outside values in clumps (where medians leave the band) or exactly on the bounds
    low, high = (p.band_low, p.band_high) if on_bound else (p.band_low / 3, p.band_high * 3)
    v[u < p_low] = low
    v[u > 1 - p_high] = high
    if rng.random() < 0.5:
        v = np.sort(v)
    if not tensors._may_leave_band(v, p):
        med = pl.Series(v).rolling_median(window, min_samples=window // 2).to_numpy()
        for frac in (np.nanmean(med < p.band_low), np.nanmean(med > p.band_high)):
            assert frac < min_frac


def test_band_is_computed_when_medians_leave_it() -> None:
    v = np.full(1000, 1e-3)
    v[:300] = 1.0  # 30 % above the band: TENSOR002 material
    assert tensors._may_leave_band(v, tensors.Params())
    assert not tensors._may_leave_band(np.full(1000, 1e-3), tensors.Params())


def _print_halfunit_pow(values: np.ndarray, max_digits: int = 6) -> np.ndarray:
    """lr_schedule.print_halfunit as it was: a pow of every value in every pass."""
    v = np.asarray(values, dtype=np.float64)
    mag = np.abs(v)
    ok = np.isfinite(v) & (mag > 0)
    if not ok.any():
        return np.zeros(v.shape)
    expo = np.floor(np.log10(np.where(ok, mag, 1.0)))
    digits = np.full(v.shape, max_digits + 1)
    todo = ok.copy()
    for k in range(1, max_digits + 1):
        x = mag * 10.0 ** (k - 1 - expo)
        hit = todo & (np.abs(x - np.round(x)) <= 1e-6 * np.maximum(x, 1.0))
        digits[hit] = k
        todo &= ~hit
    k = int(np.quantile(digits[ok], 0.9, method="higher"))
    if k > max_digits:
        return np.zeros(v.shape)
    return np.where(ok, 0.5 * 10.0 ** (expo - k + 1), 0.0)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(
    n=st.integers(1, 3000),
    lo=st.integers(-300, 300),
    decades=st.integers(0, 12),
    digits=st.integers(1, 9),
    odd=st.sampled_from([0.0, 0.01, 0.2]),
    seed=st.integers(0, 2**31),
)
def test_print_halfunit_same_as_a_pow_per_value(
    n: int, lo: int, decades: int, digits: int, odd: float, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    v = 10.0 ** rng.uniform(lo, min(lo + decades, 307), n) * rng.choice([-1.0, 1.0], n)
    v = np.array([float(f"{x:.{digits - 1}e}") for x in v])  # printed to `digits` digits
    u = rng.random(n)
    v[u < odd] = rng.choice([0.0, np.nan, np.inf, 3.14159265358979])
    with np.errstate(all="ignore"):
        want = _print_halfunit_pow(v)
        got = _lr_precision.print_halfunit(v)
    np.testing.assert_array_equal(got, want)


@pytest.mark.slow
@settings(max_examples=500, deadline=None)
@given(
    values=st.lists(
        st.one_of(
            st.floats(allow_nan=True, allow_infinity=True),
            st.sampled_from([0.0, -0.0, 1.0, 1.5, 2.0]),  # ties
        ),
        min_size=0,
        max_size=300,
    )
)
def test_median_is_numpys_bit_for_bit(values: list[float]) -> None:
    x = np.array(values, dtype=np.float64)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the median of nothing
        want = float(np.median(x))
        got = median(x)
    assert (got == want and np.signbit(got) == np.signbit(want)) or (
        np.isnan(got) and np.isnan(want)
    )


def test_median_of_large_noisy_arrays() -> None:
    rng = np.random.default_rng(7)
    for n in (999_999, 1_000_000, 2, 3):
        x = np.round(rng.standard_t(3, n), 3)  # printed values: many ties
        assert median(x) == float(np.median(x))


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(
    rows=st.integers(0, 40),
    cols=st.integers(0, 12),
    pool=st.sampled_from(["normal", "ties", "zeros", "nan", "inf"]),
    seed=st.integers(0, 2**31),
)
def test_median_rows_is_numpys_bit_for_bit(rows: int, cols: int, pool: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((rows, cols))
    if pool == "ties":
        a = np.round(a, 1)
    elif pool == "zeros":
        a = rng.choice([0.0, -0.0, 1.0], (rows, cols))
    elif pool in ("nan", "inf") and a.size:
        a.flat[rng.integers(0, a.size)] = np.nan if pool == "nan" else -np.inf
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the median of nothing
        want = np.median(a, axis=1)
        got = median_rows(a)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


@pytest.mark.slow
@settings(max_examples=500, deadline=None)
@given(
    values=st.lists(
        st.one_of(
            st.floats(allow_nan=True, allow_infinity=True),
            st.sampled_from([0.0, -0.0, 1.0, 1.5, 2.0]),
        ),
        min_size=1,
        max_size=300,
    ),
    q=st.one_of(st.sampled_from([0.0, 0.5, 0.99, 1.0]), st.floats(0.0, 1.0)),
)
def test_quantile_is_numpys_bit_for_bit(values: list[float], q: float) -> None:
    x = np.array(values, dtype=np.float64)
    with np.errstate(all="ignore"):
        want = float(np.quantile(x, q))
        got = quantile(x, q)
    # equal floats; the sign of a zero result follows the partition's order of +0 and -0
    assert got == want or (np.isnan(got) and np.isnan(want))
    if got == want and got != 0:
        assert got.hex() == want.hex()


def test_quantile_of_large_noisy_arrays() -> None:
    rng = np.random.default_rng(11)
    for n in (1_000_000, 999_999, 101):
        z = np.abs(rng.standard_t(3, n))
        for q in (0.99, 0.5, 0.9):
            assert quantile(z, q) == float(np.quantile(z, q))


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(
    known=st.lists(
        st.one_of(
            st.floats(-1e6, 1e6, allow_nan=False), st.sampled_from([2.99, 2.999997, 3.0, 4.1])
        ),
        max_size=120,
    ),
    count=st.integers(0, 400),
    fill=st.sampled_from([2.999997, 0.0, -1.5, 3.0]),
    q=st.one_of(st.sampled_from([0.0, 0.5, 0.99, 1.0]), st.floats(0.0, 1.0)),
)
def test_quantile_filled_is_numpys_of_the_whole_array(
    known: list[float], count: int, fill: float, q: float
) -> None:
    """grad_spikes' come-back quantile over a series that is one number but for a few."""
    x = np.array(known, dtype=np.float64)
    whole = np.r_[x, np.full(count, fill)]
    if whole.size == 0:
        return
    rng = np.random.default_rng(count)
    want = float(np.quantile(rng.permutation(whole), q))
    got = quantile_filled(x, fill, count, q)
    assert got == want
    if got != 0:
        assert got.hex() == want.hex()


def _buckets_by_polars(x: np.ndarray, y: np.ndarray, nb: int) -> tuple[np.ndarray, np.ndarray]:
    """memory._buckets as it was: a polars group_by median per bucket."""
    n = len(x)
    bid = (np.arange(n) * nb) // n
    g = (
        pl.DataFrame({"b": bid, "x": x.astype(np.float64), "y": y.astype(np.float64)})
        .group_by("b")
        .agg(pl.col("x").median(), pl.col("y").median())
        .sort("b")
    )
    return g.get_column("x").to_numpy(), g.get_column("y").to_numpy()


@settings(max_examples=300, deadline=None)
@given(
    n=st.integers(2, 2000),
    nb=st.integers(1, 250),
    ties=st.booleans(),
    seed=st.integers(0, 2**31),
)
def test_memory_buckets_are_polars_group_medians(n: int, nb: int, ties: bool, seed: int) -> None:
    if n <= nb:
        return
    rng = np.random.default_rng(seed)
    x = np.sort(rng.choice(10 * n, n, replace=False))  # logged steps
    y = np.cumsum(rng.standard_t(3, n)) * 10 ** rng.uniform(-3, 9)
    if ties:
        y = np.round(y, -3) + 0.0  # no -0.0: no memory log holds one (see run_medians)
    bx, by = memory._buckets(x, y, nb)
    px, py = _buckets_by_polars(x, y, nb)
    assert bx.tobytes() == px.tobytes()
    assert by.tobytes() == py.tobytes()


@settings(max_examples=300, deadline=None)
@given(
    n=st.integers(1, 120),
    window=st.sampled_from([3, 5, 7, 9, 21, 31, 51, 4]),
    pool=st.sampled_from(["normal", "ties", "zeros", "inf"]),
    nan_frac=st.sampled_from([0.0, 0.3]),
    nan_missing=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_centered_rolling_median_is_polars_value_for_value(
    n: int, window: int, pool: str, nan_frac: float, nan_missing: bool, seed: int
) -> None:
    # the edges of a short series are taken from a numpy table of the windows
    # (stats._centered_short): the same floats as polars' centered call
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n) * 10.0 ** rng.integers(-5, 5)
    if pool == "ties":
        x = np.round(x, 1)
    elif pool == "zeros":
        x = rng.integers(0, 3, n).astype(np.float64)
    elif pool == "inf":
        x[rng.integers(0, n)] = np.inf
    x[rng.random(n) < nan_frac] = np.nan
    s = pl.Series(x, dtype=pl.Float64)
    if nan_missing:
        s = s.fill_nan(None)
    want = s.rolling_median(window, center=True, min_samples=1).to_numpy()
    got = stats.centered_rolling_median(x, window, nan_missing=nan_missing)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want) & (want != 0)  # (which of -0.0 and 0.0: as the median3 path has it)
    assert np.array_equal(got[ok].view(np.int64), want[ok].view(np.int64))
    assert np.array_equal(got[~np.isnan(want)], want[~np.isnan(want)])
