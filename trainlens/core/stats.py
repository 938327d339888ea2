"""Vectorized statistics the detectors share (numpy / polars, no per-row Python loops)."""

from __future__ import annotations

import math
import warnings
from statistics import NormalDist
from typing import NamedTuple

import numpy as np
import polars as pl

MAD_TO_SIGMA = 1.4826  # MAD of a normal sample × this = its standard deviation


def rolling_median(x: np.ndarray, window: int, *, causal: bool = True) -> np.ndarray:
    """Median of the previous ``window`` values (causal: excluding the current one)."""
    s = pl.Series(x, dtype=pl.Float64)
    if causal:
        s = s.shift(1)
    return s.rolling_median(window, min_samples=max(3, window // 4)).to_numpy()


def rolling_mad(
    x: np.ndarray, window: int, *, causal: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """Rolling median and median absolute deviation (scaled to a sigma)."""
    med = rolling_median(x, window, causal=causal)
    dev = np.abs(x - med)
    s = pl.Series(dev, dtype=pl.Float64)
    if causal:
        # the deviation of each past value from ITS median: approximate by the rolling
        # median of |x - med| over the same window, lagged
        s = s.shift(1)
    mad = s.rolling_median(window, min_samples=max(3, window // 4)).to_numpy() * MAD_TO_SIGMA
    return med, mad


def median3(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Elementwise median of three arrays without NaN (it is one of the three values, so
    it is what any median gives)."""
    return np.maximum(np.minimum(a, b), np.minimum(np.maximum(a, b), c))


def median5(
    a: np.ndarray, b: np.ndarray, c: np.ndarray, d: np.ndarray, e: np.ndarray
) -> np.ndarray:
    """Elementwise median of five arrays without NaN. Of the pairs (a, b) and (c, d), the
    smaller of the two minimums has three values above it and the larger of the two
    maximums three below, so neither is the median unless tied with it: the median of the
    other three is the median of five (one of the values, as any median gives)."""
    lo = np.maximum(np.minimum(a, b), np.minimum(c, d))
    hi = np.minimum(np.maximum(a, b), np.maximum(c, d))
    return median3(e, lo, hi)


def centered_rolling_median(x: np.ndarray, window: int, *, nan_missing: bool = False) -> np.ndarray:
    """Median of x[i - h : i + h + 1] at each i (h = window // 2), of what is there at the
    edges; NaN is skipped as missing with ``nan_missing`` (else it is a value).

    Value for value ``pl.Series(x).rolling_median(window, center=True, min_samples=1)``,
    which polars computes several times slower than the trailing window: for an odd
    window the centered median at i is the trailing one at i + h, so only the last h
    points (windows cut short at the end) are left to the centered call; three points
    take min/max passes."""
    x = np.asarray(x, dtype=np.float64)
    n, h = x.size, window // 2
    skip_nan = nan_missing and bool(np.isnan(x).any())

    def series(v: np.ndarray) -> pl.Series:
        s = pl.Series(v, dtype=pl.Float64)
        return s.fill_nan(None) if skip_nan else s

    def centered(v: np.ndarray) -> np.ndarray:
        short = _centered_short(v, window, skip_nan)
        if short is not None:
            return short
        return series(v).rolling_median(window, center=True, min_samples=1).to_numpy()

    if window % 2 == 0 or n <= 2 * h + 1 or (h <= 2 and np.isnan(x).any()):
        return centered(x)
    out = np.empty(n)
    if h == 1:
        out[1:-1] = median3(x[:-2], x[1:-1], x[2:])
        out[0] = centered(x[:2])[0]
    elif h == 2:
        out[2:-2] = median5(x[:-4], x[1:-3], x[2:-2], x[3:-1], x[4:])  # 4x cheaper
        out[:2] = centered(x[:4])[:2]
    else:
        out[: n - h] = series(x).rolling_median(window, min_samples=1).to_numpy()[h:]
    out[n - h :] = centered(x[n - 2 * h :])[h:]
    return out


#: a few values' centered median (the table of their windows up to this many cells) is
#: taken in numpy: polars' rolling median has a fixed cost of ~30 µs a call, and the
#: edges of a centered median are such calls, 1-2 a series
_SHORT_CENTERED_CELLS = 1600


def _centered_short(v: np.ndarray, window: int, skip_nan: bool) -> np.ndarray | None:
    """``pl.Series(v).rolling_median(window, center=True, min_samples=1)`` (NaN as missing
    with ``skip_nan``) of a few values, for an odd window, by one sort of a table of the
    windows: the middle value of an odd count, ``lower + (upper - lower) * 0.5`` of an even
    one, as polars takes them. None (polars decides) for a long ``v``, an even window, a
    zero (which of -0.0 and 0.0 comes out could differ), ±inf, or NaN taken as a value."""
    n = v.size
    if n == 0 or n * window > _SHORT_CENTERED_CELLS or window % 2 == 0:
        return None
    mag = np.abs(v)
    ok = (mag > 0) & (mag < np.inf)  # (False for NaN)
    if not ok.all():
        if not skip_nan or not (ok | np.isnan(v)).all():
            return None
        v = np.where(ok, v, np.inf)  # a missing value sorts last, as outside the series
    pad = np.full(window // 2, np.inf)
    t = np.sort(np.lib.stride_tricks.sliding_window_view(np.r_[pad, v, pad], window), axis=1)
    counts = np.count_nonzero(t < np.inf, axis=1)
    rows = np.arange(n)
    high = t[rows, counts // 2]
    low = t[rows, np.maximum(counts - 1, 0) // 2]
    with np.errstate(invalid="ignore"):
        out = np.where(counts % 2 == 1, high, low + (high - low) * 0.5)
    out[counts == 0] = np.nan
    return out


def median(x: np.ndarray) -> float:
    """``float(np.median(x))`` bit for bit, for a 1-D float64 array, by one partition:
    numpy's median partitions at both middle values and at the end (for a NaN check),
    6-10 ms on 1M values where one partition takes ~1-2 ms. The lower middle of an even
    count is the largest value below the upper one, and the two are averaged as numpy
    averages them; with a NaN (the median is NaN) or any other input, numpy's own."""
    x = np.asarray(x)
    if x.ndim != 1 or x.size == 0 or x.dtype != np.float64:
        return float(np.median(x))
    k = x.size // 2
    p = np.partition(x, k)
    if np.isnan(p[k:].max()):  # NaN sorts last: it is in the upper part if anywhere
        return float(np.median(x))
    # numpy's mean of the middle value(s) sums from +0.0 (so a -0.0 median is 0.0)
    if x.size % 2:
        return float(0.0 + p[k])
    return float((0.0 + p[:k].max() + p[k]) / 2)


def quantile(x: np.ndarray, q: float) -> float:
    """``float(np.quantile(x, q))`` (linear), the same float, for a 1-D float64 array and
    a number q in [0, 1], by one partition: numpy partitions at the first, last and both
    neighbouring order statistics (3-8 ms on 1M values, ~1 ms so) and interpolates as
    below; with a NaN or any other input, numpy's own. (A zero result may come out as
    -0.0 where numpy gives 0.0 or back: which of equal zeros ends up where depends on the
    partition; they compare equal.)"""
    x = np.asarray(x)
    n = x.size
    v = (n - 1) * q
    if x.ndim != 1 or n == 0 or x.dtype != np.float64 or not v >= 0:
        return float(np.quantile(x, q))
    if v >= n - 1:  # numpy takes the last value for both neighbours
        a = b = x.max()
        t = v + 1
    else:
        lo = math.floor(v)
        p = np.partition(x, lo + 1)
        a, b = p[: lo + 1].max(), p[lo + 1]
        if np.isnan(p[lo + 1 :].max()):  # NaN sorts last: it is in the upper part if anywhere
            return float(np.quantile(x, q))
        t = v - lo
    if np.isnan(a) or np.isnan(b):
        return float(np.quantile(x, q))
    d = b - a  # numpy's _lerp, from the nearer end
    return float(b - d * (1 - t)) if t >= 0.5 else float(a + d * t)


def quantile_filled(x: np.ndarray, fill: float, count: int, q: float) -> float:
    """``quantile(np.r_[x, np.full(count, fill)], q)`` — numpy's linear quantile, the
    same float — without the array: for a series whose values are all one number but for
    a few (``x``, finite), the order statistics come from ``x`` sorted and the count of
    ``fill`` placed among them (the million-point partition costs ~10 ms)."""
    x = np.asarray(x, dtype=np.float64)
    n = x.size + count
    v = (n - 1) * q
    if n == 0 or count < 0 or not v >= 0 or not (math.isfinite(fill) and np.isfinite(x).all()):
        return quantile(np.r_[x, np.full(max(count, 0), fill)], q)
    s = np.sort(x)
    below = int(np.searchsorted(s, fill, side="left"))

    def at(i: int) -> float:
        if i < below:
            return float(s[i])
        return fill if i < below + count else float(s[i - count])

    if v >= n - 1:  # numpy takes the last value for both neighbours
        a = b = at(n - 1)
        t = v + 1
    else:
        lo = math.floor(v)
        a, b = at(lo), at(lo + 1)
        t = v - lo
    d = b - a  # numpy's _lerp, from the nearer end
    return float(b - d * (1 - t)) if t >= 0.5 else float(a + d * t)


def median_rows(a: np.ndarray) -> np.ndarray:
    """``np.median(a, axis=1)`` bit for bit, for a 2-D float64 array without NaN, by one
    partition of each row (block medians of a 1M-point series: 12 ms by numpy, 2 ms so);
    numpy's own for any other input. As :func:`median`, for each row."""
    a = np.asarray(a)
    if a.ndim != 2 or 0 in a.shape or a.dtype != np.float64 or np.isnan(a).any():
        return np.asarray(np.median(a, axis=1))
    k = a.shape[1] // 2
    p = np.partition(a, k, axis=1)
    if a.shape[1] % 2:
        return 0.0 + p[:, k]
    return (0.0 + p[:, :k].max(axis=1) + p[:, k]) / 2


#: above this many values, prefix_medians takes numpy's median one prefix at a time (the
#: table it sorts holds counts x max(counts) values)
PREFIX_TABLE_MAX = 256


def prefix_medians(x: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """``np.median(x[:c])`` for each ``c`` in ``counts`` (each at least 1), bit for bit
    (as :func:`median_rows`), by one sort of a table of the prefixes: the first points of
    a series asked for 40-80 medians of growing prefixes a run, ~10 µs each in numpy's
    median, ~1 ms of a 1,200-step run. A prefix holding NaN, a non-float64 ``x`` or a
    longest prefix over PREFIX_TABLE_MAX take numpy's median, one by one."""
    counts = np.asarray(counts, dtype=np.int64)
    if counts.size == 0:
        return np.empty(0, dtype=np.float64)
    m = int(counts.max())
    head = x[:m]
    if m > PREFIX_TABLE_MAX or x.dtype != np.float64 or np.isnan(head).any():
        return np.array([np.median(x[:c]) for c in counts.tolist()], dtype=np.float64)
    table = np.where(np.arange(m) < counts[:, None], head, np.inf)  # +inf sorts last
    table.sort(axis=1)
    rows = np.arange(counts.size)
    high = table[rows, counts // 2]
    low = table[rows, (counts - 1) // 2]
    out = 0.0 + high
    even = counts % 2 == 0
    out[even] = (0.0 + low[even] + high[even]) / 2
    return out


def run_medians(a: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """The median of each run ``a[starts[i] : starts[i + 1]]`` (the last to the end; each
    run non-empty, ``a`` finite), value for value what polars' group median gives: the
    middle value of an odd count, ``lower + (upper - lower) * 0.5`` of an even one. Runs
    of one length are taken together, one partition per row (a polars group_by of 1M
    rows into 200 runs took ~10 ms). Where -0.0 and 0.0 meet in a run, which of the two
    comes out can differ from polars (they compare equal)."""
    sizes = np.diff(np.r_[starts, a.size])
    out = np.empty(starts.size)
    for m in np.unique(sizes).tolist():
        rows = np.flatnonzero(sizes == m)
        hi = m // 2
        part = np.partition(a[starts[rows, None] + np.arange(m)], hi, axis=1)
        high = part[:, hi]
        if m % 2:
            out[rows] = high
        else:
            low = part[:, :hi].max(axis=1)
            out[rows] = low + (high - low) * 0.5
    return out


def median_step(steps: np.ndarray) -> float:
    """``np.median(np.diff(steps))``, the typical step between logged points. Most logs
    step evenly: then it is their one difference, found by a min and a max (the median's
    partition of a 1M-point diff costs ~8 ms, and detectors ask for it eight times a run)."""
    d = np.diff(steps)
    if d.size:
        lo, hi = d.min(), d.max()
        if lo == hi:
            return float(lo)
    return float(np.median(d))


def runs_of(mask: np.ndarray) -> list[tuple[int, int]]:
    """Index ranges [start, end] (inclusive) where ``mask`` is true, in order."""
    m = np.asarray(mask, dtype=bool)
    if not m.any():
        return []
    padded = np.concatenate(([False], m, [False]))
    edges = np.flatnonzero(np.diff(padded.astype(np.int8)))
    starts, ends = edges[0::2], edges[1::2] - 1
    return list(zip(starts.tolist(), ends.tolist(), strict=True))


def ema(x: np.ndarray, alpha: float) -> np.ndarray:
    """Debiased exponential moving average (as TensorBoard/W&B smooth), NaN-free input."""
    s = pl.Series(x, dtype=pl.Float64)
    return s.ewm_mean(alpha=alpha, adjust=True).to_numpy()


class TheilSen(NamedTuple):
    """What :func:`theil_sen` returns (the fields of scipy's ``TheilslopesResult``)."""

    slope: float
    intercept: float
    low_slope: float
    high_slope: float


def theil_sen(y: np.ndarray, x: np.ndarray, confidence: float = 0.95) -> TheilSen:
    """Theil–Sen line through (x, y) with a ``confidence`` interval on its slope.

    The same numbers as ``scipy.stats.theilslopes(y, x, alpha=confidence)``, without
    importing scipy.stats (over half a second of CPU): the slope is the median of the
    slopes of all pairs with distinct x; the intercept is median(y) − slope · median(x);
    the interval takes the pairwise slopes at the ranks of Sen's (1968) normal
    approximation, whose variance discounts tied x and tied y values (eq. 2.6). The
    normal quantile comes from :class:`statistics.NormalDist`, which may differ from
    scipy's in the last bit; the ranks are rounded, so the interval is the same (unless
    a rank lands within that bit of a half). For finite input; NaN for what cannot be
    computed (fewer than two distinct x).
    """
    y = np.asarray(y, dtype=np.float64).ravel()
    x = np.asarray(x, dtype=np.float64).ravel()
    if x.size != y.size:
        raise ValueError("x and y must have the same length")
    dx = x[:, None] - x[None, :]
    dy = y[:, None] - y[None, :]
    pair = dx > 0  # each pair of distinct x once
    slopes = np.sort(dy[pair] / dx[pair])
    nt = slopes.size
    if nt == 0:
        return TheilSen(math.nan, math.nan, math.nan, math.nan)
    slope = float(np.median(slopes))
    intercept = float(np.median(y) - slope * np.median(x))

    alpha = 1.0 - confidence if confidence > 0.5 else confidence
    z = NormalDist().inv_cdf(alpha / 2.0)
    n = y.size
    sigsq = (1 / 18.0) * (n * (n - 1) * (2 * n + 5) - _ties_term(x) - _ties_term(y))
    if not sigsq >= 0:
        return TheilSen(slope, intercept, math.nan, math.nan)
    sigma = math.sqrt(sigsq)
    hi = min(int(np.round((nt - z * sigma) / 2.0)), nt - 1)
    lo = max(int(np.round((nt + z * sigma) / 2.0)) - 1, 0)
    return TheilSen(slope, intercept, float(slopes[lo]), float(slopes[hi]))


def _ties_term(a: np.ndarray) -> int:
    """Σ t(t−1)(2t+5) over the groups of t tied values (t ≥ 2) of ``a``."""
    _, counts = np.unique(a, return_counts=True)
    t = counts[counts > 1].astype(np.int64)
    return int((t * (t - 1) * (2 * t + 5)).sum())


def medians_before(
    a: np.ndarray, idx: np.ndarray, window: int, min_count: int, *, chunk: int = 8192
) -> np.ndarray:
    """The median of ``a[max(0, i - window) : i]`` at each i in ``idx`` (NaN where it holds
    fewer than ``min_count`` values), value for value what
    ``pl.Series(a).rolling_median(window, min_samples=min_count)`` gives at i - 1, for finite
    ``a``: polars takes the middle value of an odd count and ``lower + (upper - lower) *
    0.5`` of an even one (numpy's median, their mean, differs from it in the last bit in
    about 2 % of windows of 50). For some points of a long series: about 0.12 µs a
    window of 50, against 60 ns a point for polars over the whole series."""
    idx = np.asarray(idx, dtype=np.int64)
    out = np.full(idx.size, np.nan)
    lo, hi = (window - 1) // 2, window // 2
    full = np.flatnonzero(idx >= window)
    rows_of = np.lib.stride_tricks.sliding_window_view(a, window) if full.size else a[:0]
    for c in range(0, full.size, chunk):
        at = full[c : c + chunk]
        # one partition at the upper middle; the lower is the largest value below it (a
        # partition at both costs about three times as much)
        part = np.partition(rows_of[idx[at] - window], hi, axis=1)
        high = part[:, hi]
        low = part[:, :hi].max(axis=1) if lo != hi else high
        out[at] = low + (high - low) * 0.5 if lo != hi else low
    for k in np.flatnonzero((idx < window) & (idx >= max(min_count, 1))).tolist():
        v = np.sort(a[: idx[k]])
        low, high = v[(v.size - 1) // 2], v[v.size // 2]
        out[k] = low + (high - low) * 0.5 if v.size % 2 == 0 else high
    return out


# ---- robust levels and noise (throughput, entropy, data_path) ---------------------------


def nanmedian_rows(a: np.ndarray) -> np.ndarray:
    """Median of each row ignoring NaN; NaN (and no warning) for all-NaN rows."""
    if a.size == 0:
        return np.full(a.shape[0], np.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.asarray(np.nanmedian(a, axis=1), dtype=np.float64)


def odd(n: float) -> int:
    """The odd integer at or above ``n`` (at least 1)."""
    k = max(1, math.ceil(n))
    return k if k % 2 else k + 1


def centered_median(x: np.ndarray, window: int) -> np.ndarray:
    """Centered rolling median (NaN treated as missing); edges use what is there."""
    n = len(x)
    window = min(odd(window), odd(n) - 2 if n > 2 else 1)
    if window <= 1 or n < 3:
        return np.asarray(x, dtype=np.float64).copy()
    return centered_rolling_median(x, window, nan_missing=True)


def robust_sigma(x: np.ndarray) -> float:
    """MAD-based standard deviation of the finite values (0 when fewer than 2)."""
    x = x[np.isfinite(x)]
    if len(x) < 2:
        return 0.0
    return MAD_TO_SIGMA * median(np.abs(x - median(x)))


def noise_sigma(y: np.ndarray) -> float:
    """Point-to-point noise: robust sigma of first differences / sqrt(2) (immune to level
    shifts and slow trends)."""
    if len(y) < 3:
        return 0.0
    d = np.diff(y)
    return MAD_TO_SIGMA * median(np.abs(d - median(d))) / math.sqrt(2)
