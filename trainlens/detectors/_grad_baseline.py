"""grad_spikes' tail statistics: the causal rolling baseline and robust sigma of a series,
which points spike, the z a spike needs and the z it must come back under, and the cheap
screen that rules spikes out on a quiet series (a helper of the ``grad_spikes`` detector,
not a detector)."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import polars as pl

import trainlens.core.stats as _stats
from trainlens.core.stats import MAD_TO_SIGMA, median3
from trainlens.detectors._grad_common import Bound, SpikeParams


def causal_baseline(
    x: np.ndarray, window: int, min_samples: int, med: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Rolling median of the previous ``window`` values and the rolling median of the
    previous absolute deviations from their own baseline, scaled to a sigma (NaN where
    there are fewer than ``min_samples`` values before). ``med``: the first, if known."""
    if med is None:
        med = _lagged_median(x, window, min_samples)
    finite = np.isfinite(med)
    mad = np.full(x.size, np.nan)
    if finite.any():
        f = int(finite.argmax())  # the first baseline (no index array of a million points)
        mad[f:] = _lagged_median(np.abs(x[f:] - med[f:]), window, max(1, min_samples - 1))
    return med, mad * MAD_TO_SIGMA


def _lagged_median(x: np.ndarray, window: int, min_samples: int) -> np.ndarray:
    # rolling over the values as they are, then shifted by one in numpy: a null in front
    # would send polars down a much slower path
    med = pl.Series(x, dtype=pl.Float64).rolling_median(window, min_samples=min_samples)
    return np.r_[np.nan, med.to_numpy()[:-1]]


def may_spike(
    x: np.ndarray,
    judged: np.ndarray,
    window: int,
    min_samples: int,
    z: float,
    least_excess: Bound,
    sigma_floor: Bound,
) -> tuple[bool, np.ndarray | None]:
    """Whether any judged point can be a spike — ``x - med >= least_excess(med)`` and
    ``x - med >= z * max(sigma, sigma_floor(med))`` against :func:`causal_baseline` —
    decided cheaply when none can be (the usual case), and the baseline median if it was
    computed on the way. Both bounds are functions of |med| that do not fall as it grows.

    Each stage only rules points out (a point it keeps may still fail the exact test,
    which then decides):

    1. the median of the previous values is at least their minimum, so x - minimum bounds
       the excess from above and max(minimum, 0) bounds |med| from below;
    2. a few points left: their medians from numpy, loosened by a relative 1e-9 (numpy
       may round a median of two values differently from polars);
    3. the rolling median itself: only sigma is left unknown, and it is at least its floor;
    4. sigma at the points left, from numpy medians of their windows' deviations, with
       the same margin.
    """
    m = max(min_samples, 1)  # the first point with a baseline (the median lags by one)
    if z < 0 or x.size <= m or not np.abs(x).max() < 1e300:  # NaN, ±inf, overflow
        return True, None  # nothing to bound with
    # 0. a real log has spikes, and the stages below then rule nothing out (30-40 ms on 1M
    #    points, for nothing): a spike at the largest jump settles it
    if _largest_jump_spikes(x, judged, window, min_samples, z, least_excess, sigma_floor):
        return True, None

    def can_spike(excess_at_most: np.ndarray, abs_med_at_least: np.ndarray) -> np.ndarray:
        floor = np.fmax(0.0, sigma_floor(abs_med_at_least))
        return (excess_at_most >= least_excess(abs_med_at_least)) & (excess_at_most >= z * floor)

    prev_min = pl.Series(x[:-1]).rolling_min(window, min_samples=1).to_numpy()[m - 1 :]
    keep = judged[m:] & can_spike(x[m:] - prev_min, np.maximum(prev_min, 0.0))
    idx = m + np.flatnonzero(keep)
    if idx.size and idx.size <= 10_000:
        med_c, slack = _medians_before(x, idx, window, min_samples)
        slack *= 1e-9
        idx = idx[can_spike(x[idx] - (med_c - slack), np.maximum(np.abs(med_c) - slack, 0.0))]
    if idx.size == 0:
        return False, None
    med = _lagged_median(x, window, min_samples)
    excess = x - med
    with np.errstate(invalid="ignore"):
        idx = np.flatnonzero(judged & can_spike(excess, np.abs(med)))
    if idx.size == 0:
        return False, med
    if idx.size > 100_000:
        return True, med
    f = int(np.flatnonzero(np.isfinite(med))[0])  # where the deviations start
    dev = np.abs(x[f:] - med[f:])
    # the likeliest spikes first (largest excess over the floor), a batch at a time: on a
    # noisy run that has spikes the first batch settles it (the whole check over 30k
    # candidates costs about as much as the rolling MAD it would save)
    floor = np.broadcast_to(np.fmax(sigma_floor(med[idx]), 1e-300), idx.shape)
    idx = idx[np.argsort(-(excess[idx] / floor), kind="stable")]
    for c in range(0, idx.size, 1024):
        at = idx[c : c + 1024]
        mad = _stats.medians_before(dev, at - f, window, max(1, min_samples - 1))
        sig = np.fmax(np.nan_to_num(mad * MAD_TO_SIGMA, nan=0.0), sigma_floor(med[at]))
        if (excess[at] >= z * sig * (1.0 - 1e-9)).any():
            return True, med
    return False, med


def _largest_jump_spikes(
    x: np.ndarray,
    judged: np.ndarray,
    window: int,
    min_samples: int,
    z: float,
    least_excess: Bound,
    sigma_floor: Bound,
) -> bool:
    """Whether the largest jump over the median of the three values before (not over the
    one before, which may be a dip), against the floor, is a spike by the exact test (its
    baseline and sigma from the medians of its windows): :func:`may_spike`'s first stage."""
    m = max(min_samples, 1)
    k = max(m, 3)
    before = median3(x[k - 3 : -3], x[k - 2 : -2], x[k - 1 : -1])
    jump = (x[k:] - before) / np.fmax(sigma_floor(np.abs(before)), 1e-300)
    i = k + int(np.argmax(jump)) if jump.size else 0
    if not (min_samples >= 1 and jump.size and judged[i]):
        return False
    at = np.arange(max(m, i - window), i + 1)  # i and the points of its MAD window
    med_at = _stats.medians_before(x, at, window, min_samples)
    dev = np.abs(x[at[:-1]] - med_at[:-1])
    mad = _stats.medians_before(dev, np.array([dev.size]), window, max(1, min_samples - 1))
    med_i = med_at[-1:]
    sig = np.fmax(np.nan_to_num(mad * MAD_TO_SIGMA, nan=0.0), sigma_floor(med_i))
    excess = x[i] - med_i
    return bool(np.all((excess >= least_excess(med_i)) & (excess >= z * sig)))


def _medians_before(
    a: np.ndarray, idx: np.ndarray, window: int, min_count: int
) -> tuple[np.ndarray, np.ndarray]:
    """The median (as polars' rolling median gives it: ``_stats.medians_before``) and the
    largest |value| of a[max(0, i - window) : i] for each i in ``idx`` (NaN where there
    are fewer than ``min_count`` values)."""
    med = _stats.medians_before(a, idx, window, min_count)
    big = np.full(idx.size, np.nan)
    full = idx >= window
    if full.any():
        rows = np.lib.stride_tricks.sliding_window_view(a, window)[idx[full] - window]
        big[full] = np.abs(rows).max(axis=1)
    for k in np.flatnonzero(~full & (idx >= max(min_count, 1))).tolist():
        big[k] = np.abs(a[: idx[k]]).max()
    return med, big


def _back_z(z: np.ndarray, steps: np.ndarray, w_end: int, p: SpikeParams, cap: float) -> float:
    """How many sigmas above its baseline a value may sit and count as back: at least
    ``recover_k``, more when the run's own noise is heavy-tailed (its
    ``recover_quantile`` of robust z after warmup: 3 sigma may then be crossed often by
    chance), never more than the spike threshold itself (the quantile of a short run
    can be inflated by the very spike being judged)."""
    e = z[(steps >= w_end) & np.isfinite(z)]
    q = _stats.quantile(e, p.recover_quantile) if e.size >= 100 else 0.0
    return _clip_k(q, p, cap)


def _clip_k(q: float, p: SpikeParams, cap: float) -> float:
    return float(np.clip(q, p.recover_k, max(cap, p.recover_k)))


# a rolling MAD-sigma only where it is read costs about 0.12 µs a point since
# medians_before takes one partition a window (was 0.6 µs), against 60-65 ns a point for
# polars over the whole series. Measured on the noisy 1M run's loss (~10 % of its points
# read): its events take 182 ms at a 5 % limit, 133 ms at 15 %, 128 ms at 25 %
_SIGMA_AT_POINTS_MAX = 0.25


def _scores(
    x: np.ndarray,
    steps: np.ndarray,
    judged: np.ndarray,
    w_end: int,
    p: SpikeParams,
    z: float,
    least_excess: Bound,
    sigma_floor: Bound,
    *,
    screen: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float] | None:
    """The causal baseline and floored robust sigma of ``x``, which points spike (z sigmas
    AND the least excess above the baseline, once judged), and the z a spike must come
    back under (grad and loss alike; they differ in their space and bounds). With
    ``screen``, None when :func:`may_spike` shows that no point can spike.

    The baseline is exact everywhere. The sigma is exact at every point that could spike
    (its excess passes the least excess and z times the floor) and at every point whose z
    the come-back quantile (:func:`_back_z`) may need; elsewhere it is NaN, unless the
    rolling MAD over the whole series was the cheaper way (on a noisy run the MAD's
    rolling median is most of this detector's time, and nothing reads it there)."""
    med0 = None
    if screen:
        possible, med0 = may_spike(
            x, judged, p.window, p.min_baseline, z, least_excess, sigma_floor
        )
        if not possible:
            return None
    med = med0 if med0 is not None else _lagged_median(x, p.window, p.min_baseline)
    excess = x - med
    fl = np.asarray(sigma_floor(med), dtype=np.float64)  # a number for the grad norm
    tail = steps >= w_end
    with np.errstate(invalid="ignore"):
        # sig >= floor: elsewhere no point spikes, and z <= excess / floor < low_z
        low_z = p.recover_k * (1.0 - 1e-6)
        cand = judged & (excess >= least_excess(med)) & (excess >= z * fl)
        need = cand | (tail & (excess > low_z * fl))
    finite = np.isfinite(excess)  # need is False where it is not
    usable = z >= 0 and bool(np.isfinite(x).all()) and bool(fl.min() > 0 and fl.max() < np.inf)
    idx = np.flatnonzero(need)
    sig = None
    if usable and idx.size <= _SIGMA_AT_POINTS_MAX * x.size:
        floor = np.broadcast_to(fl, x.shape)
        f = int(finite.argmax())
        mad = _stats.medians_before(
            np.abs(excess[f:]), idx - f, p.window, max(1, p.min_baseline - 1)
        )
        sig = np.full(x.size, np.nan)
        sig[idx] = np.fmax(np.nan_to_num(mad * MAD_TO_SIGMA, nan=0.0), floor[idx])
        # the z of the tail: known at idx, elsewhere taken as low_z, below every z that is
        # known to be over recover_k (no million-point z array: _stats.quantile_filled)
        known = idx[tail[idx]]
        zk = excess[known] / sig[known]
        n = int(np.count_nonzero(tail & finite))
        # the quantile is exact when the order statistics it takes are among the known z
        # above recover_k (all others are below); both below: it is under recover_k
        above = int(np.count_nonzero(zk > p.recover_k * (1.0 - 1e-9)))
        pos = math.floor(p.recover_quantile * (n - 1))
        if n < 100 or pos - 1 >= n - above or pos + 2 < n - above:
            q = (
                _stats.quantile_filled(zk, low_z, n - zk.size, p.recover_quantile)
                if n >= 100
                else 0.0
            )
            k = _clip_k(q, p, z)
            spike = np.zeros(x.size, dtype=bool)
            at = np.flatnonzero(cand)  # the points that can spike, all with their sigma
            spike[at] = excess[at] >= z * sig[at]
            return med, sig, spike, k
    _, sig = causal_baseline(x, p.window, p.min_baseline, med)
    sig = np.fmax(np.nan_to_num(sig, nan=0.0), fl)
    k = _back_z(excess / sig, steps, w_end, p, z)
    with np.errstate(invalid="ignore"):
        spike = (excess >= z * sig) & (excess >= least_excess(med)) & judged
    return med, sig, spike, k


def _z_for(n: int, cap: float, p: SpikeParams) -> float:
    """The z a spike needs in a run of ``n`` points: the two-sided normal quantile at
    ``spike_alpha / n``, between ``min_z`` and ``cap``."""
    z = NormalDist().inv_cdf(1.0 - p.spike_alpha / (2.0 * max(n, 1)))
    return float(min(cap, max(p.min_z, z)))
