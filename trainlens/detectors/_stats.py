"""Vectorized statistics the detectors share (numpy / polars, no per-row Python loops)."""

from __future__ import annotations

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
