"""Spike-preserving decimation for plots: first, min, max and last of each pixel bucket.

A line drawn at W pixels wide cannot show more than W distinct x positions; what it must
not lose is the extremes inside each pixel. Splitting the step range into ``buckets``
equal slices and keeping, in step order, each slice's first, minimum, maximum and last
point draws the same envelope as the full series (the min/max or "M4" method of Jugel
et al., VLDB 2014), so a one-step spike in a 1M-step run stays on the plot at its full
height. Nothing is sampled or averaged.

Non-finite values are not decimated here: the caller marks them on the axis
(:func:`nonfinite_marks`) and breaks the line where they occur (:func:`with_gaps`).
"""

from __future__ import annotations

import numpy as np


def bucket_ids(
    steps: np.ndarray, buckets: int, lo: float | None = None, hi: float | None = None
) -> np.ndarray:
    """Index (0..buckets-1) of the equal-width step slice each step falls in."""
    s = np.asarray(steps, dtype=np.float64)
    if s.size == 0:
        return np.empty(0, dtype=np.int64)
    lo = float(s.min()) if lo is None else lo
    hi = float(s.max()) if hi is None else hi
    span = hi - lo
    if span <= 0:
        return np.zeros(s.size, dtype=np.int64)
    ids = np.floor((s - lo) * (buckets / span)).astype(np.int64)
    return np.clip(ids, 0, buckets - 1)


def decimate(
    steps: np.ndarray,
    values: np.ndarray,
    buckets: int = 1000,
    *,
    lo: float | None = None,
    hi: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """At most 4 points per bucket: first, min, max, last, in step order.

    ``steps`` must be sorted ascending and ``values`` finite (filter non-finite values
    first). Series with no more than ``4 * buckets`` points come back unchanged.
    ``lo``/``hi`` fix the bucket grid (e.g. to the panel's x range, so overlaid runs share
    it); by default it spans the series.
    """
    s = np.asarray(steps)
    v = np.asarray(values, dtype=np.float64)
    n = s.size
    if n <= 4 * buckets:
        return s, v
    ids = bucket_ids(s, buckets, lo, hi)
    # steps are sorted, so each bucket is one contiguous block
    starts = np.flatnonzero(np.concatenate(([True], ids[1:] != ids[:-1])))
    ends = np.concatenate((starts[1:], [n])) - 1
    block = np.repeat(np.arange(starts.size), np.diff(np.concatenate((starts, [n]))))
    mins = np.minimum.reduceat(v, starts)
    maxs = np.maximum.reduceat(v, starts)
    # the first position in each block that reaches the block's min (max)
    at_min = np.flatnonzero(v == mins[block])
    at_max = np.flatnonzero(v == maxs[block])
    i_min = at_min[np.unique(block[at_min], return_index=True)[1]]
    i_max = at_max[np.unique(block[at_max], return_index=True)[1]]
    keep = np.unique(np.concatenate((starts, ends, i_min, i_max)))  # sorted = step order
    return s[keep], v[keep]


def first_per_bucket(
    steps: np.ndarray, buckets: int, *, lo: float | None = None, hi: float | None = None
) -> np.ndarray:
    """One step per occupied bucket (the first): enough to mark every pixel that has one."""
    s = np.asarray(steps)
    if s.size <= buckets:
        return s
    ids = bucket_ids(s, buckets, lo, hi)
    return s[np.unique(ids, return_index=True)[1]]


def with_gaps(
    steps: np.ndarray, values: np.ndarray, bad_steps: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Insert a NaN at each non-finite stretch so the drawn line breaks there instead
    of bridging it silently. ``bad_steps`` should already be thinned per bucket."""
    if bad_steps.size == 0:
        return steps, values
    s = np.concatenate((np.asarray(steps, dtype=np.float64), bad_steps.astype(np.float64)))
    v = np.concatenate((values, np.full(bad_steps.size, np.nan)))
    order = np.argsort(s, kind="stable")
    return s[order], v[order]


def nonfinite_marks(
    steps: np.ndarray,
    values: np.ndarray,
    buckets: int,
    *,
    lo: float | None = None,
    hi: float | None = None,
) -> dict[str, np.ndarray]:
    """Steps of NaN, +inf and -inf values, one per bucket each (for axis markers)."""
    v = np.asarray(values, dtype=np.float64)
    s = np.asarray(steps)
    out = {}
    for kind, mask in (("nan", np.isnan(v)), ("+inf", v == np.inf), ("-inf", v == -np.inf)):
        if mask.any():
            out[kind] = first_per_bucket(s[mask], buckets, lo=lo, hi=hi)
    return out


__all__ = ["bucket_ids", "decimate", "first_per_bucket", "nonfinite_marks", "with_gaps"]
