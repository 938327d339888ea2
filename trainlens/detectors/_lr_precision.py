"""The print precision of a logged LR series: what a log's rounding hides.

A log prints the LR with ``%f`` (a fixed resolution) or with a few significant digits
(``%.2e``); a comparison with the plan must allow half a unit of what was printed.
"""

from __future__ import annotations

import numpy as np


def print_quantum(
    values: np.ndarray, *, min_distinct: int = 10, max_decimals: int = 12, cap_frac: float = 0.05
) -> float:
    """The print resolution of a logged series (1e-6 for ``%f``), or 0 when it looks
    unrounded. Round numbers are not rounding: a few values (a step decay 0.1, 0.01,
    0.001) count only when one of them uses two digits or more at that resolution
    (0.000038); with many values, a resolution coarser than ``cap_frac`` of the largest
    one (a tiny LR printed with ``%f``) only when the series repeats values below its
    peak, as rounding a changing LR does (an exact ramp 1e-4, 2e-4, ... does not)."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if len(v) > 50_000:  # a strided sample decides as well, and keeps 1M-step runs cheap
        v = v[:: len(v) // 50_000]
    u = np.unique(np.abs(v))
    if len(u) < 2 or u[-1] <= 0:
        return 0.0
    # a resolution is first tried on a few of the values: one of them off the grid rules
    # it out as all of them would (an unrounded LR rules out all 13 so, not on 50,000)
    few = u[:: max(1, len(u) // 64)]
    for d in range(max_decimals + 1):
        x = few * 10.0**d
        if not np.all(np.abs(x - np.round(x)) <= 1e-6):
            continue
        x = u * 10.0**d
        if not np.all(np.abs(x - np.round(x)) <= 1e-6):
            continue
        q = 10.0**-d
        if len(u) < min_distinct:
            mant = np.round(x[x >= 1])
            two_digits = bool(np.any((mant >= 10) & (mant % 10 != 0)))
            return q if two_digits and q <= 0.5 * u[-1] else 0.0
        if q <= cap_frac * u[-1]:
            return q
        repeats = (v[1:] == v[:-1]) & (v[1:] < u[-1])
        return q if q <= 0.5 * u[-1] and repeats.sum() >= 3 else 0.0
    return 0.0


def print_halfunit(values: np.ndarray, max_digits: int = 6) -> np.ndarray:
    """Half a unit of the last printed digit of each value, for a log that prints a fixed
    number of significant digits (``%.2e``: 3) — at most ``max_digits`` — else 0. The
    digits are those most values use (90th percentile: 3.70e-06 prints as 3.7e-06)."""
    v = np.asarray(values, dtype=np.float64)
    mag = np.abs(v)
    ok = np.isfinite(v) & (mag > 0)
    if not ok.any():
        return np.zeros(v.shape)
    expo = np.floor(np.log10(np.where(ok, mag, 1.0)))
    # 10 ** (k - 1 - expo) looked up in a table of the few exponents there are: a pow of
    # every value cost 6 ms a pass on a 1M-step LR, six passes (numpy's array pow, the
    # same numbers; Python's scalar pow can differ in the last bit)
    e0 = int(expo.min())
    at = (expo - e0).astype(np.intp)
    exps = np.arange(e0, int(expo.max()) + 1, dtype=np.float64)
    digits = np.full(v.shape, max_digits + 1)
    todo = ok.copy()
    for k in range(1, max_digits + 1):
        x = mag * (10.0 ** (k - 1 - exps))[at]
        hit = todo & (np.abs(x - np.round(x)) <= 1e-6 * np.maximum(x, 1.0))
        digits[hit] = k
        todo &= ~hit
    k = int(np.quantile(digits[ok], 0.9, method="higher"))
    if k > max_digits:
        return np.zeros(v.shape)
    return np.where(ok, 0.5 * 10.0 ** (expo - k + 1), 0.0)
