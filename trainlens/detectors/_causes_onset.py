"""Onsets for the cause step: the first confirmed departure of a series from its own
tail (level: the median of the last few points; noise: the MAD of successive
differences), as :mod:`trainlens.detectors._causes` describes. Not a detector."""

from __future__ import annotations

import math

import numpy as np

from trainlens.core.dataclass import dataclass
from trainlens.core.stats import MAD_TO_SIGMA, median_rows


@dataclass(frozen=True)
class Departure:
    onset: int  # index where it left the band
    peak: int  # index of the largest departure in the excursion (up to the limit)
    median: float  # the tail at the onset (same space as the values)


def tail_departure(
    x: np.ndarray,
    start: int,
    stop: int,
    *,
    window: int,
    min_baseline: int,
    band_k: float,
    band_min: float,
    confirm_k: float,
    confirm_min: float,
    sigma_floor: float,
    sign: float = 1.0,
    reach: int = 0,
    memo: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] | None = None,
) -> Departure | None:
    """The first confirmed excursion of ``x`` (already in the space judged, e.g. log)
    whose onset lies at or after index ``start`` — scanned from ``window`` points
    before, so an excursion under way before ``start`` is seen as such and skipped —
    whose confirming point lies before index ``stop`` and which lasts to index ``reach``
    at least (one that was over before then is another event). ``sign`` +1 looks up,
    -1 down. ``memo``: tails of this ``x`` with these parameters, by scanned range (a caller
    that scans the same ``x`` both ways computes them once)."""
    i0, n = max(0, start - window), min(stop, x.size)
    if i0 >= n:
        return None
    memo = {} if memo is None else memo
    if (i0, n) not in memo:
        memo[i0, n] = _tails(x, i0, n, window, min_baseline, sigma_floor)
    med, sig = memo[i0, n]
    band = np.fmax(band_k * sig, band_min)
    with np.errstate(invalid="ignore"):
        leaves = np.flatnonzero(sign * (x[i0:n] - med) >= band) + i0
    after = i0
    for i in leaves.tolist():
        if i < after:
            continue  # inside the excursion just judged
        m, b = float(med[i - i0]), float(band[i - i0])
        # an excursion: while the points stay beyond the band of the tail frozen here
        j = i
        while j + 1 < x.size and sign * (x[j + 1] - m) >= b:
            j += 1
        dev = sign * (x[i : min(j + 1, n)] - m)
        confirm = max(confirm_k * float(sig[i - i0]), confirm_min)
        if i >= start and j >= reach and (dev >= confirm).any():
            return Departure(i, i + int(np.argmax(dev)), m)
        after = j + 1
    return None


def _tails(
    x: np.ndarray, i0: int, n: int, window: int, min_baseline: int, floor: float
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_tail` of the ``window`` points before each index in [i0, n), vectorized
    where the window is full (NaN where fewer than ``min_baseline`` points precede)."""
    idx = np.arange(i0, n)
    med = np.full(idx.size, np.nan)
    sig = np.full(idx.size, np.nan)
    full = idx >= max(window, LEVEL_POINTS, 3)
    if full.any():
        ii = idx[full]
        c = int(ii[0]) - window  # a local copy: never a pass over a 1M-point series
        xs = x[c : int(ii[-1])]
        # median_rows: np.median(axis=1)'s values at a third of its cost (264 calls a run)
        med[full] = median_rows(
            np.lib.stride_tricks.sliding_window_view(xs, LEVEL_POINTS)[ii - c - LEVEL_POINTS]
        )
        d = np.lib.stride_tricks.sliding_window_view(np.diff(xs), window - 1)[ii - c - window]
        dev = np.abs(d - median_rows(d)[:, None])
        sig[full] = median_rows(dev) * MAD_TO_SIGMA / math.sqrt(2.0)
    for k in np.flatnonzero(~full).tolist():
        i = int(idx[k])
        if i >= min_baseline:
            med[k], sig[k] = _tail(x[max(0, i - window) : i], floor)
    return med, np.fmax(sig, floor)


#: the tail's level: the median of this many points before (a 50-point median lags a
#: trend, e.g. a grad norm falling fast early in a run, by half its window)
LEVEL_POINTS = 10


def _tail(base: np.ndarray, sigma_floor: float) -> tuple[float, float]:
    """The level (median of the last LEVEL_POINTS) and the noise of ``base``: the MAD of
    its successive differences / sqrt 2 as a sigma, which a trend does not inflate (the
    MAD around one median of a falling series measures the fall, not the noise)."""
    med = float(np.median(base[-LEVEL_POINTS:]))
    if base.size < 2:
        return med, sigma_floor
    d = np.diff(base)
    sig = float(np.median(np.abs(d - np.median(d)))) * MAD_TO_SIGMA / math.sqrt(2.0)
    return med, max(sig, sigma_floor)
