"""Gradient-norm tail spikes and loss spikes, paired by lead and lag; absolute grad bounds.

What it flags
    GRAD001 ``grad-spike-precedes-loss-spike``: the pre-clip grad norm jumped far above
    its rolling median and the training loss jumped above its own trend at the same step
    or within ``lag_window`` steps after it — one event, with ``lead_step`` (grad),
    ``lag_step`` (loss) and ``lag`` (in steps, 0 when both move at the same step).
    GRAD002 ``grad-spike-without-loss-response``: a grad-norm spike the loss did not
    follow (an early warning). LOSS001 ``loss-spike``: a loss spike with no grad-norm
    spike leading it (or no grad norm logged). GRAD003 ``grad-norm-vanishing`` / GRAD004
    ``grad-norm-exploding``: the grad norm below 1e-2 / above 100 for a sustained
    stretch.

    Severity of a spike says what happened after it: info for a one-step outlier the loss
    shrugs off at once; warning when the spike persists (several logged points) or the
    loss takes a while to come back, or when grad-only spikes repeat in a cluster; error
    when the loss never returns near its pre-spike level, or turns non-finite.

Why it matters
    Loss spikes in large runs (PaLM, OPT, BLOOM) are usually preceded by a grad-norm
    spike one or a few steps earlier (Molybog et al. 2023, "A Theory on Adam Instability
    in Large-Scale Machine Learning"; Takase et al. 2023, "Spike No More"): the grad norm
    is the early warning, the lag says how much time there was to react. A spike the loss
    never recovers from wastes every later step; the usual remedy (PaLM, Chowdhery et al.
    2022, sec. 5.1) is to restart from a checkpoint before the spike and skip the batches
    around it, or lower the LR.

Default thresholds
    Spikes are judged in the tail, against a causal rolling baseline of the previous
    ``window`` = 50 logged points (counted in logged points, so sparse logging works):
    the grad norm in log space, the loss against its rolling median (its trend). A grad
    spike needs a robust z-score >= ``grad_z`` = 6 (MAD-sigma, floored at 0.05 in log
    units) AND a ratio >= ``grad_ratio`` = 3x the rolling median — Lightning's
    ``SpikeDetection`` callback uses a running window of 10 and ``rtol`` = 2.0, i.e.
    3x its running mean; the z-score guard is the W&B-style anomaly filter, set high
    (6 sigma) because a 1M-step run makes a million tests. A loss spike needs z >=
    ``loss_z`` = 6 AND an excess >= ``loss_min_rel`` = 5 % of the trend (Megatron's
    ``check_for_spiky_loss``, 10x the largest loss seen, only catches blow-ups). An
    excursion starts at a spike point and lasts until the series is back — the value and
    the median of the next ``recover_points`` = 3 within max(3 sigma, 2 %) of the level
    frozen at its start (grad norm: max(3 sigma, 1.5x)). Nothing is skipped as warmup:
    the first ``min_sigma_points`` = 10 points (too few before them for a robust sigma)
    are judged for gross jumps over the median before them (loss x1.5, grad norm x5),
    and the loss also against the local trend of its neighbours either side;
    over the first ``window`` points sigma is also estimated from one-step changes (the
    lagged median trails a fast early fall). The z thresholds are caps: n points need
    the normal quantile at ``spike_alpha`` = 0.001 / n, at least ``min_z`` = 4. A grad
    norm printed as exactly 0 was not computed (every step, from some step on, or at
    skipped fp16-overflow steps): DATA006, an info data-quality note; those values are
    not judged.
    Pairing window: ``lag_window`` = 10 steps, or 3 logging intervals if longer. Back
    within ``transient_points`` = 5 logged points: a one-off (info); never back with at
    least ``min_points_after`` = 10 points left: error. Grad-only spikes: warning when
    >= 3 fall within 200 logged points and the run's own spike rate does not explain it
    (Poisson tail, Bonferroni over the run's windows, level 0.1 %). Bounds: grad norm <
    ``vanish_below`` = 1e-2 or > ``explode_above`` = 100 (5-point median) for >=
    ``sustain_points`` = 50 logged points or >= ``sustain_frac`` = 5 % of the run (a
    stretch ends only once the norm is back past the bound x/÷ 1.5, hysteresis):
    warning when the norm moved into the band after warmup from outside the hysteresis
    band or by that factor itself (and, for vanishing, the loss stopped falling), info
    when it sits there from the start or hovered within 1.5x of the bound (grad norms are scaled per
    implementation; huge-batch / small-LR runs train fine with tiny norms). At most
    ``max_info_findings`` = 5 info findings per code are listed (the largest).

Known false positives
    A deliberate change of data mix, sequence length or batch size mid-run moves the loss
    level (reported as a loss spike that does not come back); fp16 loss-scale overflow
    steps whose grad norm is logged scaled; grad norms reported after clipping (then a
    spike is capped and may be missed rather than falsely flagged); runs whose grad norm
    is per-implementation scaled far outside [1e-2, 100] (only info unless it moves).

Example
    ``WARNING  GRAD001  steps 31216–31222  grad_norm spiked at step 31216 (2.39, 9.9x its
    rolling median 0.242; peak 960 at step 31219) and loss followed at step 31219 (lag
    3): 5.098 at step 31219 vs trend 2.293; a one-off: the loss was back by step 31250;
    grad_norm stayed elevated for 34 steps (7 logged points) and was back by step 31250;
    if it recurs, lower the LR or tighten gradient clipping.``
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from statistics import NormalDist
from typing import NamedTuple

import numpy as np
import polars as pl

import trainlens.core.stats as _stats
from trainlens.core.findings import Finding
from trainlens.core.run import Run
from trainlens.core.stats import MAD_TO_SIGMA, centered_rolling_median, median3, runs_of
from trainlens.detectors._causes import AFTER_LOSS_NOTE, DATA_ADVICE
from trainlens.detectors._start import run_start
from trainlens.detectors.base import Context, Skip, finding

CODES = {
    "GRAD001": "grad-spike-precedes-loss-spike",
    "GRAD002": "grad-spike-without-loss-response",
    "GRAD003": "grad-norm-vanishing",
    "GRAD004": "grad-norm-exploding",
    "LOSS001": "loss-spike",
    "DATA006": "metric-not-computed",
}

GRAD = "grad_norm"
LOSS = "train/loss"


@dataclass(frozen=True)
class Params:
    #: causal rolling baseline, in logged points
    window: int = 50
    #: points needed before a value can be judged against its rolling baseline
    min_baseline: int = 3
    #: the first points (fewer than min_sigma_points before them: too few for a robust
    #: sigma) are judged against the median of what came before, for gross jumps only:
    #: the loss x(1 + gross_loss_rel), the grad norm x gross_grad_ratio
    min_sigma_points: int = 10
    gross_loss_rel: float = 0.5
    gross_grad_ratio: float = 5.0
    #: grad spike: robust z (log space) AND ratio to the rolling median
    grad_z: float = 6.0
    grad_ratio: float = 3.0
    grad_sigma_floor: float = 0.05
    #: loss spike: robust z AND relative excess over the trend
    loss_z: float = 6.0
    #: grad_z and loss_z are caps: a run of n points needs only the z a normal sample
    #: exceeds with probability spike_alpha over n tests (Bonferroni): 6.1 at 1M points,
    #: 4.5 at 128, never below min_z (a MAD from few points is itself uncertain)
    spike_alpha: float = 0.001
    min_z: float = 4.0
    loss_min_rel: float = 0.05
    loss_sigma_floor_rel: float = 0.005
    #: a loss spike within this many steps (or lag_window_points intervals) follows
    lag_window: int = 10
    lag_window_points: int = 3
    #: back: the value and the median of recover_points points within max(k sigma, rel)
    #: of the pre-spike trend — k raised to the run's recover_quantile of robust z when its
    #: noise is heavy-tailed (capped at the spike threshold)
    recover_k: float = 3.0
    recover_rel: float = 0.02
    recover_points: int = 3
    recover_quantile: float = 0.99
    #: back within this many logged points after the start: a transient (info)
    transient_points: int = 5
    #: a step gap over this many typical logging intervals is a gap in the log: a loss
    #: still up at its last point before one is not a one-off
    gap_intervals: float = 3.0
    #: points after a spike needed to call "never recovered" an error
    min_points_after: int = 10
    #: grad-only spikes: this many within repeat_window logged points is a warning, when
    #: the run's own rate of such spikes makes it unlikely (Poisson, Bonferroni, alpha)
    repeat_count: int = 3
    repeat_window: int = 200
    repeat_alpha: float = 0.001
    #: absolute bounds on the grad norm
    vanish_below: float = 1e-2
    explode_above: float = 100.0
    sustain_points: int = 50
    sustain_frac: float = 0.05
    #: a stretch ends only when the norm is back past bound x/÷ this factor
    bound_hysteresis: float = 1.5
    #: at most this many info findings per code (the largest; the count is in evidence)
    max_info_findings: int = 5


# ---- shared helpers (usable by other detectors) ------------------------------------------


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


Bound = Callable[[np.ndarray], "np.ndarray | float"]


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
    #    points, for nothing): the largest jump over the median of the three values
    #    before (not over the one before, which may be a dip), against the floor, is
    #    tested exactly first (its baseline and sigma from the medians of its windows),
    #    and a spike there settles it
    k = max(m, 3)
    before = median3(x[k - 3 : -3], x[k - 2 : -2], x[k - 1 : -1])
    jump = (x[k:] - before) / np.fmax(sigma_floor(np.abs(before)), 1e-300)
    i = k + int(np.argmax(jump)) if jump.size else 0
    if min_samples >= 1 and jump.size and judged[i]:
        at = np.arange(max(m, i - window), i + 1)  # i and the points of its MAD window
        med_at = _stats.medians_before(x, at, window, min_samples)
        dev = np.abs(x[at[:-1]] - med_at[:-1])
        mad = _stats.medians_before(dev, np.array([dev.size]), window, max(1, min_samples - 1))
        med_i = med_at[-1:]
        sig = np.fmax(np.nan_to_num(mad * MAD_TO_SIGMA, nan=0.0), sigma_floor(med_i))
        excess = x[i] - med_i
        if bool(np.all((excess >= least_excess(med_i)) & (excess >= z * sig))):
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


def forward_median(x: np.ndarray, k: int) -> np.ndarray:
    """Median of x[i : i + k] at each i (shorter at the end)."""

    def by_polars(v: np.ndarray) -> np.ndarray:
        rev = pl.Series(v[::-1].copy(), dtype=pl.Float64)
        return rev.rolling_median(k, min_samples=1).to_numpy()[::-1]

    if k != 3 or x.size < 3 or np.isnan(x).any():
        return by_polars(x)
    out = np.empty(x.size)
    out[:-2] = median3(x[:-2], x[1:-1], x[2:])  # a few times cheaper than polars
    out[-2:] = by_polars(x[-2:])
    return out


def typical_interval(steps: np.ndarray) -> int:
    if steps.size < 2:
        return 1
    return max(1, int(_stats.median_step(steps)))


# ---- events --------------------------------------------------------------------------------


@dataclass
class _Event:
    start: int  # index into the series
    end: int
    count: int  # spike points in the event
    last_spike: int  # index of its last spike point
    peak: int
    base: float  # pre-spike baseline (value units)
    sigma: float  # its robust scale (loss units; log units for the grad norm)
    recovered: int | None = None  # index where it came back
    nonfinite_step: int | None = None
    extra: dict[str, float] = field(default_factory=dict)


@dataclass
class _Series:
    steps: np.ndarray
    values: np.ndarray
    events: list[_Event]
    interval: int
    judged_from: int  # first step judged (after warmup)


def _excursions(
    spike: np.ndarray,
    x: np.ndarray,
    fmed: np.ndarray,
    back: np.ndarray,
    quick: int = 8,
    gap_after: np.ndarray | None = None,
) -> list[tuple[int, int, int, int, int | None]]:
    """Excursions: each starts at a spike point and lasts until the series is back —
    the value and the median of the next few values at or below ``back[start]`` (the
    level frozen at the start). Spike points before that belong to the same excursion.
    With ``gap_after`` (indices followed by a gap in the log), an excursion not back by
    the gap ends there, its come-back unknown (None): the spike points after the gap
    start an excursion of their own, since nothing logged joins them to it.
    Returns (start, last index before it is back, spike points, last spike point,
    recovered index or None)."""
    idx = np.flatnonzero(spike)
    n = x.size
    if idx.size == 0:
        return []
    # where each spike point's own excursion ends: most come back within a few points,
    # so look there for all at once, then search further for the few that did not
    ahead = idx[:, None] + np.arange(1, quick + 1)[None, :]
    inside = ahead < n
    ahead = np.minimum(ahead, n - 1)
    thr = back[idx][:, None]
    ok = inside & (x[ahead] <= thr) & (fmed[ahead] <= thr)
    first = np.where(ok.any(axis=1), idx + 1 + np.argmax(ok, axis=1), -1)
    rec_of: list[int] = first.tolist()
    pts: list[int] = idx.tolist()
    out: list[tuple[int, int, int, int, int | None]] = []
    i = 0
    while i < len(pts):
        a = pts[i]
        rec: int | None = rec_of[i] if rec_of[i] >= 0 else None
        if rec is None:
            t = back[a]
            lo, chunk = a + 1 + quick, 256
            while lo < n:  # widening search from where the quick look stopped
                hi = min(n, lo + chunk)
                hit = np.flatnonzero((x[lo:hi] <= t) & (fmed[lo:hi] <= t))
                if hit.size:
                    rec = lo + int(hit[0])
                    break
                lo, chunk = hi, chunk * 4
        j = int(np.searchsorted(idx, n if rec is None else rec, side="left"))
        end = (n if rec is None else rec) - 1
        if gap_after is not None and gap_after.size:
            g = int(np.searchsorted(gap_after, a, side="left"))
            if g < gap_after.size and gap_after[g] < end:
                cut = int(gap_after[g])
                k = int(np.searchsorted(idx, cut, side="right"))
                if k < j:  # spike points after the gap, before it was back
                    j, end, rec = k, cut, None
        out.append((a, end, j - i, pts[j - 1], rec))
        i = j
    return out


def gaps_in(steps: np.ndarray, interval: int, gap_intervals: float) -> np.ndarray:
    """Indices followed by a gap in the log: a step jump over ``gap_intervals`` typical
    logging intervals (an excerpt, a log spliced from pieces, a resumed log)."""
    if steps.size < 2:
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(np.diff(steps) > gap_intervals * interval)


def _back_z(z: np.ndarray, steps: np.ndarray, w_end: int, p: Params, cap: float) -> float:
    """How many sigmas above its baseline a value may sit and count as back: at least
    ``recover_k``, more when the run's own noise is heavy-tailed (its
    ``recover_quantile`` of robust z after warmup: 3 sigma may then be crossed often by
    chance), never more than the spike threshold itself (the quantile of a short run
    can be inflated by the very spike being judged)."""
    e = z[(steps >= w_end) & np.isfinite(z)]
    q = _stats.quantile(e, p.recover_quantile) if e.size >= 100 else 0.0
    return _clip_k(q, p, cap)


def _clip_k(q: float, p: Params, cap: float) -> float:
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
    p: Params,
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


def _z_for(n: int, cap: float, p: Params) -> float:
    """The z a spike needs in a run of ``n`` points: the two-sided normal quantile at
    ``spike_alpha / n``, between ``min_z`` and ``cap``."""
    z = NormalDist().inv_cdf(1.0 - p.spike_alpha / (2.0 * max(n, 1)))
    return float(min(cap, max(p.min_z, z)))


def _early(x: np.ndarray, m: int, least_excess: Bound) -> tuple[np.ndarray, np.ndarray]:
    """The first points, with fewer than ``m`` values before them (too few for a robust
    sigma: the MAD of three normal values is below a third of their sigma one time in
    six): the median of what came before and whether the point exceeds it by a gross
    jump. A loss going 2.77 -> 7.34 in the second point of an excerpt is a blow-up at
    any length. At most ``m - 1`` points."""
    med = np.full(x.size, np.nan)
    for i in range(1, min(m, x.size)):
        med[i] = np.median(x[:i])
    spike = np.zeros(x.size, dtype=bool)
    with np.errstate(invalid="ignore"):
        excess = x[1:m] - med[1:m]
        # a rise, however small its bound: a loss stuck at exactly 0.0 (every label
        # masked) has a bound of 0 and no spike at all
        spike[1:m] = (excess >= least_excess(np.abs(med[1:m]))) & (excess > 0)
    return med, spike


def _head_sigma(x: np.ndarray, p: Params, sigma_floor: Bound) -> np.ndarray:
    """A trend-free robust sigma for the points whose window is not yet full: from the
    median absolute one-step change of the values before each (MAD of differences /
    sqrt 2). At the start of a run the series falls fast and the lagged median trails
    it, so the deviations from it measure the trend, not the noise (llama3-1b: a
    log-space sigma of 1.7 from deviations against 0.4 from differences, which hid a
    29x grad spike at step 30). NaN where fewer than 3 changes came before. At most
    ``window`` points; later the window's deviations are dominated by noise again."""
    n = min(x.size, p.window)
    out = np.full(x.size, np.nan)
    d = np.abs(np.diff(x[:n]))
    for i in range(max(p.min_sigma_points, 4), n):  # x[:i] holds i - 1 changes
        out[i] = np.median(d[: i - 1]) * MAD_TO_SIGMA / math.sqrt(2.0)
    head = out[:n]
    with np.errstate(invalid="ignore"):
        floor = np.broadcast_to(sigma_floor(np.abs(x[:n])), head.shape)
        out[:n] = np.where(np.isnan(head), np.nan, np.fmax(head, floor))
    return out


def _head_may_spike(
    x: np.ndarray, p: Params, z: float, least_excess: Bound, sigma_floor: Bound
) -> bool:
    """Whether a point whose window is not yet full can spike at the least sigma (its
    floor): then the screen, which judges with the deviations' sigma, must not decide."""
    n = min(x.size, p.window)
    idx = np.arange(max(p.min_sigma_points, 1), n)
    if idx.size == 0 or not np.isfinite(x[:n]).all():
        return idx.size > 0
    med = np.array([np.median(x[:i]) for i in idx.tolist()])
    exc = x[idx] - med
    lim = np.broadcast_to(least_excess(np.abs(med)), med.shape)
    flo = np.broadcast_to(sigma_floor(np.abs(med)), med.shape)
    return bool(((exc >= lim) & (exc >= z * flo)).any())


def _with_head(
    got: tuple[np.ndarray, np.ndarray, np.ndarray, float],
    x: np.ndarray,
    p: Params,
    z: float,
    least_excess: Bound,
    sigma_floor: Bound,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """The scores with the head's sigma lowered to its trend-free estimate where that is
    smaller, and its spikes re-decided with it."""
    med, sig, spike, k = got
    hs = _head_sigma(x, p, sigma_floor)
    n = min(x.size, p.window)
    lower = np.isfinite(hs[:n]) & (hs[:n] < sig[:n])
    if lower.any():
        sig[:n] = np.where(lower, hs[:n], sig[:n])
        excess = x[:n] - med[:n]
        with np.errstate(invalid="ignore"):
            spike[:n] = (excess >= z * sig[:n]) & (excess >= least_excess(med[:n]))
    return med, sig, spike, k


def _neighbour_spikes(
    x: np.ndarray, p: Params, z: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The loss' first points (before ``min_sigma_points``) against the robust local trend
    of their neighbours: the median of up to two values either side (the run is logged
    whole, so the points after a value are known). A fresh run's loss falls fast there,
    so the median of the values before a point lies above its trend and hides a spike
    under it. The trend is the median of as many neighbours either side (up to two), and
    at least both next points. The noise is the MAD of the one-step changes over the first
    ``window`` points around their median change (a steady fall drops out), / sqrt 2. A
    spike needs
    z of that noise AND ``loss_min_rel`` of the trend. Returns (trend, sigma, spike);
    NaN / False where a point has no neighbour after it or fewer than 4 changes exist."""
    n = x.size
    base = np.full(n, np.nan)
    sig = np.full(n, np.nan)
    spike = np.zeros(n, dtype=bool)
    d = np.diff(x[: min(n, p.window)])
    if d.size < 4 or not np.isfinite(d).all():
        return base, sig, spike
    sigma = float(np.median(np.abs(d - np.median(d)))) * MAD_TO_SIGMA / math.sqrt(2.0)
    for i in range(1, min(p.min_sigma_points, n - 1)):
        k = min(2, i, n - 1 - i)  # as many either side: one-sided, a steep trend leans
        nbr = np.r_[x[i - k : i], x[i + 1 : i + 1 + k]]
        # and above both next points: a point between them (a fall that speeds up or slows
        # down, law-llm's 284.9 -> 161.2 -> 9.9) is no spike
        base[i] = max(float(np.median(nbr)), float(x[i - 1]), float(x[i + 1]))
        floor = max(p.loss_sigma_floor_rel * abs(base[i]), 1e-12)
        sig[i] = max(sigma, floor)
        excess = x[i] - base[i]
        spike[i] = excess >= z * sig[i] and excess >= p.loss_min_rel * abs(base[i])
    return base, sig, spike


def _with_early(
    got: tuple[np.ndarray, np.ndarray, np.ndarray, float],
    early: tuple[np.ndarray, np.ndarray],
    m: int,
    sigma_floor: Bound,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """The rolling scores with the first ``m`` points' medians and gross jumps filled in."""
    med, sig, spike, k = got
    emed, espike = early
    head = slice(0, min(m, med.size))
    fill = np.isnan(med[head]) & np.isfinite(emed[head])
    med[head] = np.where(fill, emed[head], med[head])
    floor = np.broadcast_to(sigma_floor(np.abs(np.nan_to_num(med[head]))), fill.shape)
    sig[head] = np.where(fill, np.fmax(sig[head], floor), sig[head])
    spike[head] = espike[head]  # only gross jumps, before a sigma can be trusted
    return med, sig, spike, k


def _grad_scores(
    steps: np.ndarray, x: np.ndarray, p: Params, w_end: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """(baseline, sigma, spike, come-back level) of the log grad norm of one piece of the
    log."""
    # every point with a baseline is judged; warmup only sets how noisy "back" may be
    judged = np.ones(x.size, dtype=bool)

    def least_excess(med: np.ndarray) -> float:
        return math.log(p.grad_ratio)

    def sigma_floor(med: np.ndarray) -> float:
        return p.grad_sigma_floor

    early = _early(x, p.min_sigma_points, lambda med: math.log(p.gross_grad_ratio))
    # the grad norm of the very first step is no baseline: at initialization it can sit
    # far from where the first updates take it; a gross grad jump needs two values before
    early[1][:2] = False
    z = _z_for(x.size, p.grad_z, p)
    screen = not early[1].any() and not _head_may_spike(x, p, z, least_excess, sigma_floor)
    got = _scores(x, steps, judged, w_end, p, z, least_excess, sigma_floor, screen=screen)
    if got is None:
        return None
    got = _with_head(got, x, p, z, least_excess, sigma_floor)
    med, sig, spike, k = _with_early(got, early, p.min_sigma_points, sigma_floor)
    back = med + np.fmax(k * sig, math.log(1.5))
    return med, sig, spike, back


def _grad_events(steps: np.ndarray, g: np.ndarray, p: Params, w_end: int) -> list[_Event]:
    x = np.log(g)
    gaps = gaps_in(steps, typical_interval(steps), p.gap_intervals)
    # judged against the whole log, gaps and all (unlike the loss): the grad norm of a
    # run keeps to its band while the loss moves on, so what came before a gap is still
    # its baseline (BLOOM's chronicles: 0.17 at 12695 is the level 0.24 at 31214 is at)
    got = _grad_scores(steps, x, p, w_end)
    if got is None:
        return []
    med, sig, spike, back = got
    out = []
    fmed = forward_median(x, p.recover_points)
    for a, b, n, last, rec in _excursions(spike, x, fmed, back, gap_after=gaps):
        pk = a + int(np.argmax(x[a : b + 1]))
        out.append(_Event(a, b, n, last, pk, float(np.exp(med[a])), float(sig[a]), rec))
    return out


def _level_shifts(v: np.ndarray, gaps: np.ndarray, rel: float) -> np.ndarray:
    """The gaps across which the level moved by more than a gross jump (x(1 + rel) either
    way, median of up to 3 values each side): there the values before are another
    state of training (a restart with new settings), no baseline for those after. Across
    the other gaps the log goes on at its level and is judged as one series."""
    if gaps.size == 0 or gaps.size >= _MAX_PIECES:
        return gaps[:0]  # (a log in that many pieces is judged whole anyway)
    n = v.size
    at_b = gaps[:, None] + np.arange(-2, 1)[None, :]
    at_a = gaps[:, None] + np.arange(1, 4)[None, :]
    vb = np.where(at_b >= 0, v[np.clip(at_b, 0, n - 1)], np.nan)
    va = np.where(at_a < n, v[np.clip(at_a, 0, n - 1)], np.nan)
    before, after = np.nanmedian(vb, axis=1), np.nanmedian(va, axis=1)
    lo, hi = np.fmin(np.abs(before), np.abs(after)), np.fmax(np.abs(before), np.abs(after))
    with np.errstate(divide="ignore", invalid="ignore"):
        return gaps[hi > (1.0 + rel) * lo]


# a log in more pieces than this (sparse, irregular logging rather than an excerpt) is
# judged as one series: the pieces are scored in a Python loop
_MAX_PIECES = 64


def _by_piece(
    steps: np.ndarray,
    x: np.ndarray,
    gaps: np.ndarray,
    score: Callable[
        [np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None
    ],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """``score`` on each piece of the log between the gaps given, concatenated (None when
    no piece can spike). A rolling baseline that reaches across a gap where the level
    moved compares a value with a state the run has left. An excerpt
    spliced from pieces of several restarts (BigScience's tr8-104B chronicles) sits at a
    loss of 6.4 in one piece and 3.3 in the next, where a jump to 7.3 is a spike that the
    older piece's median hides."""
    if gaps.size == 0 or gaps.size >= _MAX_PIECES:
        return score(steps, x)
    bounds = [0, *(gaps + 1).tolist(), x.size]
    med = np.full(x.size, np.nan)
    sig = np.full(x.size, np.nan)
    back = np.full(x.size, np.inf)
    spike = np.zeros(x.size, dtype=bool)
    found = False
    for a, b in itertools.pairwise(bounds):
        if b - a < 2:
            continue
        got = score(steps[a:b], x[a:b])
        if got is None:
            continue
        found = True
        med[a:b], sig[a:b], spike[a:b], back[a:b] = got
    return (med, sig, spike, back) if found else None


def _loss_scores(
    steps: np.ndarray, v: np.ndarray, p: Params, w_end: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """(baseline, sigma, spike, come-back level) of the loss of one piece of the log."""
    judged = np.ones(v.size, dtype=bool)

    def least_excess(med: np.ndarray) -> np.ndarray:
        return p.loss_min_rel * np.abs(med)

    def sigma_floor(med: np.ndarray) -> np.ndarray:
        return np.fmax(p.loss_sigma_floor_rel * np.abs(np.nan_to_num(med)), 1e-12)

    early = _early(v, p.min_sigma_points, lambda med: p.gross_loss_rel * med)
    z = _z_for(v.size, p.loss_z, p)
    # the screen holds for bounds that grow with |med|; it knows nothing of the first
    # points' neighbour test (a few points, checked here)
    screen = (
        p.loss_min_rel >= 0
        and p.loss_sigma_floor_rel >= 0
        and not early[1].any()
        and not _neighbour_spikes(v, p, z)[2].any()
        and not _head_may_spike(v, p, z, least_excess, sigma_floor)
    )
    got = _scores(v, steps, judged, w_end, p, z, least_excess, sigma_floor, screen=screen)
    if got is None:
        return None
    got = _with_head(got, v, p, z, least_excess, sigma_floor)
    med, sig, spike, k = _with_early(got, early, p.min_sigma_points, sigma_floor)
    nb_base, nb_sig, nb_spike = _neighbour_spikes(v, p, z)
    local = nb_spike & ~spike  # judged against the neighbours' trend, not what came before
    med[local], sig[local], spike[local] = nb_base[local], nb_sig[local], True
    back = med + np.fmax(k * sig, p.recover_rel * np.abs(med))
    return med, sig, spike, back


def _loss_events(
    steps: np.ndarray, v: np.ndarray, p: Params, w_end: int, raw: tuple[np.ndarray, np.ndarray]
) -> list[_Event]:
    gaps = gaps_in(steps, typical_interval(steps), p.gap_intervals)
    cuts = _level_shifts(v, gaps, p.gross_loss_rel)
    got = _by_piece(steps, v, cuts, lambda st, x: _loss_scores(st, x, p, w_end))
    if got is None:
        return []
    med, sig, spike, back = got
    raw_steps, raw_vals = raw
    bad_steps = np.sort(raw_steps[~np.isfinite(raw_vals)])
    out = []
    for a, b, n, last, rec in _excursions(spike, v, forward_median(v, p.recover_points), back):
        pk = a + int(np.argmax(v[a : b + 1]))
        ev = _Event(a, b, n, last, pk, float(med[a]), float(sig[a]), rec)
        if bad_steps.size:
            j = int(np.searchsorted(bad_steps, steps[a]))
            until = steps[rec] if rec is not None else np.inf
            if j < bad_steps.size and bad_steps[j] <= until:
                ev.nonfinite_step = int(bad_steps[j])
        out.append(ev)
    return out


# ---- severity ------------------------------------------------------------------------------


def _loss_response(ls: _Series, ev: _Event, p: Params) -> tuple[str, str]:
    """(severity, clause) for what the loss did after a spike."""
    st = ls.steps
    if ev.nonfinite_step is not None:
        return "error", f"the loss became non-finite at step {ev.nonfinite_step}"
    if ev.recovered is None:
        after = st.size - 1 - ev.start
        last = float(ls.values[-1])
        # a gross jump (x(1 + gross_loss_rel) over the trend) that every later point of a
        # short log stays above is a blow-up that never came back, however short the log
        gross = after >= 2 and float(np.min(ls.values[ev.start :])) - ev.base >= (
            p.gross_loss_rel * abs(ev.base)
        )
        if after >= p.min_points_after or gross:
            return "error", (
                f"the loss never returned near its pre-spike level {ev.base:.4g} "
                f"(last {last:.4g} at step {int(st[-1])}); restart from a checkpoint before "
                f"step {int(st[ev.start])} and skip those batches, or lower the LR"
            )
        return "warning", (
            f"the loss had not come back to {ev.base:.4g} by the last logged step "
            f"{int(st[-1])} ({last:.4g})"
        )
    rec_step = int(st[ev.recovered])
    last_up = int(st[ev.recovered - 1])
    if rec_step - last_up > p.gap_intervals * ls.interval and ev.recovered - 1 > ev.start:
        # still up at its last point before a gap in the log (an excerpt, a resumed log):
        # when it came back is unknown, so it is no one-off, however few points it spans
        return "warning", (
            f"the loss was still up at step {last_up}, the last logged step before a gap, "
            f"and back by step {rec_step}"
        )
    if ev.recovered - ev.start <= p.transient_points:
        return "info", f"a one-off: the loss was back by step {rec_step}"
    return "warning", f"the loss stayed up {_duration(st, ev.start, ev.recovered)}"


def _duration(st: np.ndarray, a: int, b: int) -> str:
    """'for N steps (M logged points)' from index a to index b (where it was back)."""
    n_steps, n_points = int(st[b] - st[a]), b - a
    pts = f" ({n_points} logged points)" if n_points != n_steps else ""
    return f"for {n_steps} steps{pts} and was back by step {int(st[b])}"


def _grad_persistent(ev: _Event, p: Params) -> bool:
    """The grad norm stayed up longer than a transient (or never came back)."""
    back = ev.recovered if ev.recovered is not None else ev.end + 1
    return back - ev.start > p.transient_points


def _span(gs: _Series, ev: _Event) -> str:
    if ev.recovered is None:
        if ev.end < gs.steps.size - 1:  # ended at a gap in the log
            return f"from step {int(gs.steps[ev.start])} to step {int(gs.steps[ev.end])}"
        return f"from step {int(gs.steps[ev.start])} to the last logged step"
    return _duration(gs.steps, ev.start, ev.recovered)


def _lead_text(gs: _Series, ev: _Event) -> str:
    v0, vp = float(gs.values[ev.start]), float(gs.values[ev.peak])
    txt = f"{v0:.3g}, {v0 / ev.base:.1f}x its rolling median {ev.base:.3g}"
    if ev.peak != ev.start:
        txt += f"; peak {vp:.3g} at step {int(gs.steps[ev.peak])}"
    return txt


def _ratio(ev: _Event, g: np.ndarray) -> float:
    return float(g[ev.peak] / ev.base) if ev.base > 0 else float("inf")


# ---- the detector --------------------------------------------------------------------------


def detect(run: Run, params: Params, ctx: Context) -> list[Finding]:
    p = params
    has_g, has_l = run.has(GRAD), run.has(LOSS)
    if not has_g and not has_l:
        raise Skip(f"needs {GRAD} or {LOSS}, not logged")
    gs = ls = None
    out: list[Finding] = []
    too_few: list[str] = []
    loss_raw = run.series(LOSS) if has_l else None
    loss = None
    if loss_raw is not None:
        ok = np.isfinite(loss_raw[1])
        loss = (loss_raw[0][ok], loss_raw[1][ok])
    if has_g:
        st, gv = run.series(GRAD, finite=True)
        st, gv, note = _not_computed(st, gv)
        out.extend(note)
        if st.size >= 2:
            w_end = run_start(run, st, ctx).warmup_end
            pos = gv > 0
            events = _grad_events(st[pos], gv[pos], p, w_end)
            gs = _Series(st[pos], gv[pos], events, typical_interval(st), w_end)
            out.extend(_bounds(st, gv, loss, w_end, p))
        else:
            too_few.append(f"{GRAD} has {st.size} computed value{'s' * (st.size != 1)}")
    if loss is not None and loss_raw is not None:
        st, lv = loss
        if st.size >= 2:
            w_end = run_start(run, st, ctx).warmup_end
            events = _loss_events(st, lv, p, w_end, loss_raw)
            ls = _Series(st, lv, events, typical_interval(st), w_end)
        else:
            too_few.append(f"{LOSS} has {st.size} finite value{'s' * (st.size != 1)}")
    if gs is None and ls is None and not out:
        raise Skip(f"{' and '.join(too_few)}: a spike needs at least 2 values to compare")
    # why a loss spike's lead cannot be checked when there is no grad-norm series to check
    no_grad = "is not logged" if not has_g else "was not computed there (exactly 0)"
    pending = _pair(gs, ls, p, no_grad)
    # a grad norm above the absolute bound for long is one GRAD004 finding, not also a
    # grad-only spike at its start
    high = [(f.step_start or 0, f.step_end or 0) for f in out if f.code == "GRAD004"]
    if high and gs is not None:
        slack = 5 * gs.interval
        pending = [
            x
            for x in pending
            if not (x.code == "GRAD002" and any(a - slack <= x.step <= b for a, b in high))
        ]
    out.extend(_resolve(pending, p))
    return out


def _not_computed(st: np.ndarray, gv: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[Finding]]:
    """A grad norm printed as exactly 0 was not computed: Megatron prints ``grad norm:
    0.000`` when it does not compute it, and at fp16 overflow steps it skips (BLOOM's
    first iterations); a real norm of a network's gradients is not exactly 0.0 in
    floating point. Those values are dropped and reported as a data-quality note (at
    every step, from some step to the end, or at N steps), not as vanishing gradients.
    Fewer than 3 zeros (of a longer series) are dropped without a note."""
    zero = gv == 0
    n_zero = int(zero.sum())
    if n_zero == 0:
        return st, gv, []
    keep = ~zero
    if n_zero < min(3, st.size):
        return st[keep], gv[keep], []
    zs = st[zero]
    a, b = int(zs[0]), int(zs[-1])
    nonzero = np.flatnonzero(keep)
    suffix = not nonzero.size or int(nonzero[-1]) < int(np.flatnonzero(zero)[0])
    if not nonzero.size:
        where = f"at every logged step ({a}–{b})"
    elif suffix:
        where = f"from step {a} to the last logged step ({b})"
    else:
        where = f"at {n_zero} logged steps between {a} and {b}"
    note = finding(
        "DATA006",
        CODES["DATA006"],
        "info",
        f"{GRAD} is exactly 0 {where}, {n_zero} values: not computed there (Megatron prints "
        "0.000 when it does not compute it, and at skipped fp16-overflow steps), so those "
        "values are not judged as a gradient norm.",
        metric=GRAD,
        step_start=a,
        step_end=b,
        zero_values=n_zero,
    )
    return st[keep], gv[keep], [note]


def _pair(
    gs: _Series | None, ls: _Series | None, p: Params, no_grad: str = "is not logged"
) -> list[_Pending]:
    out: list[_Pending] = []
    loss_used = np.zeros(len(ls.events) if ls is not None else 0, dtype=bool)
    grad_answered = np.zeros(len(gs.events) if gs is not None else 0, dtype=bool)
    if gs is not None and ls is not None and gs.events and ls.events:
        win = max(p.lag_window, p.lag_window_points * max(gs.interval, ls.interval))
        l_idx = np.array([e.start for e in ls.events], dtype=np.int64)
        l_start = ls.steps[l_idx]
        l_end = ls.steps[np.array([e.end for e in ls.events], dtype=np.int64)]
        # a loss spike after a gap in the log is not paired across it: nothing logged
        # joins the two (a spliced excerpt's typical interval can make the window long)
        gap_steps = ls.steps[gaps_in(ls.steps, ls.interval, p.gap_intervals)]
        for gi, ge in enumerate(gs.events):
            # a loss spike follows from the grad spike's first step to lag_window after
            # its last spike point
            g0, g1 = int(gs.steps[ge.start]), int(gs.steps[ge.last_spike])
            reach = g1 + win
            ng = int(np.searchsorted(gap_steps, g1, side="left"))
            if ng < gap_steps.size:
                reach = min(reach, int(gap_steps[ng]))
            li = int(np.searchsorted(l_start, g0, side="left"))
            while li < l_start.size and l_start[li] <= reach and loss_used[li]:
                li += 1
            if li < l_start.size and l_start[li] <= reach:
                loss_used[li] = grad_answered[gi] = True
                le = ls.events[li]
                sev, clause = _loss_response(ls, le, p)
                if sev == "info" and _grad_persistent(ge, p):
                    sev = "warning"
                    clause += f"; grad_norm stayed elevated {_span(gs, ge)}"
                if sev == "warning":
                    clause += "; if it recurs, lower the LR or tighten gradient clipping"
                out.append(
                    _Pending(
                        "GRAD001",
                        sev,
                        _ratio(ge, gs.values),
                        g0,
                        partial(_grad001, gs, ge, ls, le, sev, clause),
                    )
                )
                continue
            # a loss spike already under way when the grad norm spiked: the grad norm
            # did not lead, but the spike is not unanswered either
            lb = int(np.searchsorted(l_start, g0, side="left")) - 1
            if lb >= 0 and l_end[lb] >= g0 - win:
                grad_answered[gi] = True
                extra = ls.events[lb].extra
                extra.setdefault("grad_spike_step", g0)
                extra.setdefault("grad_ratio", _ratio(ge, gs.values))
    if ls is not None:
        for li in np.flatnonzero(~loss_used).tolist():
            le = ls.events[li]
            sev, clause = _loss_response(ls, le, p)
            if sev == "warning":
                clause += "; " + DATA_ADVICE  # replaced by _causes when something moved first
            z = (float(ls.values[le.peak]) - le.base) / le.sigma if le.sigma > 0 else 0.0
            out.append(
                _Pending(
                    "LOSS001",
                    sev,
                    z,
                    int(ls.steps[le.start]),
                    partial(_loss001, ls, le, sev, clause, no_grad=None if gs else no_grad),
                )
            )
    if gs is not None:
        lone = np.flatnonzero(~grad_answered).tolist()
        out.extend(_grad002(gs, lone, p, ls))
    return out


def _grad001(gs: _Series, ge: _Event, ls: _Series, le: _Event, sev: str, clause: str) -> Finding:
    lead = int(gs.steps[ge.start])
    lag_step = int(ls.steps[le.start])
    ratio = _ratio(ge, gs.values)
    loss_peak = float(ls.values[le.peak])
    excess = loss_peak - le.base
    end = max(int(gs.steps[ge.end]), int(ls.steps[le.end]))
    return finding(
        "GRAD001",
        CODES["GRAD001"],
        sev,
        f"grad_norm spiked at step {lead} ({_lead_text(gs, ge)}) and loss followed at "
        f"step {lag_step} "
        f"(lag {lag_step - lead}): {loss_peak:.4g} at step {int(ls.steps[le.peak])} vs trend "
        f"{le.base:.4g}; {clause}.",
        metric=GRAD,
        step_start=lead,
        step_end=end,
        lead_step=lead,
        lag_step=lag_step,
        lag=lag_step - lead,
        grad_ratio=ratio,
        grad_ratio_at_lead=float(gs.values[ge.start]) / ge.base if ge.base > 0 else None,
        grad_baseline=ge.base,
        grad_peak=float(gs.values[ge.peak]),
        grad_peak_step=int(gs.steps[ge.peak]),
        grad_spike_points=ge.count,
        loss_baseline=le.base,
        loss_peak=loss_peak,
        loss_peak_step=int(ls.steps[le.peak]),
        loss_excess=excess,
        loss_excess_rel=excess / abs(le.base) if le.base else float("inf"),
        loss_z=excess / le.sigma if le.sigma > 0 else float("inf"),
        loss_spike_points=le.count,
        recovered_step=None if le.recovered is None else int(ls.steps[le.recovered]),
        nonfinite_step=le.nonfinite_step,
    )


def _loss001(ls: _Series, le: _Event, sev: str, clause: str, *, no_grad: str | None) -> Finding:
    """``no_grad``: why there is no grad-norm series to check a lead in (None: there is)."""
    s0 = int(ls.steps[le.start])
    loss_peak = float(ls.values[le.peak])
    excess = loss_peak - le.base
    if "grad_spike_step" in le.extra:
        lead_txt = (
            f"grad_norm spiked only at step {int(le.extra['grad_spike_step'])}, after the "
            f"loss{AFTER_LOSS_NOTE}"
        )
    elif no_grad is None:
        lead_txt = "no grad_norm spike led it"
    else:
        lead_txt = f"grad_norm {no_grad}, so its lead cannot be checked"
    return finding(
        "LOSS001",
        CODES["LOSS001"],
        sev,
        f"loss spiked at step {s0}: {loss_peak:.4g} at step {int(ls.steps[le.peak])} vs trend "
        f"{le.base:.4g} (+{excess / abs(le.base):.0%}); {lead_txt}; {clause}."
        if le.base
        else f"loss spiked at step {s0}: {loss_peak:.4g}; {lead_txt}; {clause}.",
        metric=LOSS,
        step_start=s0,
        step_end=int(ls.steps[le.end]),
        loss_baseline=le.base,
        loss_peak=loss_peak,
        loss_peak_step=int(ls.steps[le.peak]),
        loss_excess=excess,
        loss_excess_rel=excess / abs(le.base) if le.base else float("inf"),
        loss_z=excess / le.sigma if le.sigma > 0 else float("inf"),
        loss_spike_points=le.count,
        recovered_step=None if le.recovered is None else int(ls.steps[le.recovered]),
        nonfinite_step=le.nonfinite_step,
        grad_spike_step=le.extra.get("grad_spike_step"),
        grad_ratio=le.extra.get("grad_ratio"),
    )


def _loss_moved(gs: _Series, ev: _Event, ls: _Series | None, p: Params) -> str:
    """What the loss did at a grad-only spike: not a spike, but did it move? The largest
    rise over the last loss before the grad spike, within the pairing window."""
    if ls is None:
        return "train/loss is not logged"
    g0 = int(gs.steps[ev.start])
    win = max(p.lag_window, p.lag_window_points * max(gs.interval, ls.interval))
    i0 = int(np.searchsorted(ls.steps, g0, side="left"))
    i1 = int(np.searchsorted(ls.steps, int(gs.steps[ev.last_spike]) + win, side="right"))
    if i0 == 0 or i1 <= i0:
        return "the loss did not follow"
    before = float(ls.values[i0 - 1])
    j = i0 + int(np.argmax(ls.values[i0:i1]))
    rise = (float(ls.values[j]) - before) / abs(before) if before else 0.0
    if rise < p.recover_rel:
        return "the loss did not follow"
    return (
        f"the loss rose only {rise:.1%} ({float(ls.values[j]):.4g} at step "
        f"{int(ls.steps[j])} after {before:.4g}), less than a loss spike"
    )


def _grad002(gs: _Series, lone: list[int], p: Params, ls: _Series | None) -> list[_Pending]:
    out: list[_Pending] = []
    if not lone:
        return out
    why = "the loss did not follow" if ls is not None else "train/loss is not logged"
    # repeated grad-only spikes: a window of repeat_window points holding at least
    # repeat_count of them, more than the run's own rate of such spikes explains
    # (Poisson tail, Bonferroni over the windows of the run, level repeat_alpha)
    starts = np.array([gs.events[i].start for i in lone], dtype=np.int64)
    in_cluster = np.zeros(len(lone), dtype=bool)
    judged = max(int(np.sum(gs.steps >= gs.judged_from)), 1)
    w = max(1, min(p.repeat_window, judged))
    counts = np.searchsorted(starts, starts + w, side="left") - np.arange(len(lone))
    cand = np.flatnonzero(counts >= p.repeat_count)
    if cand.size:
        rate = (len(lone) - counts[cand] + 1) / judged  # outside the window, add-one
        # P(X >= count) for X ~ Poisson: scipy.stats.poisson.sf(count - 1, mu) is
        # pdtrc(count - 1, mu) (count >= 1); scipy.special imports in a third of the time
        from scipy.special import pdtrc

        # sliding windows: about twice as many tests as disjoint ones
        pval = pdtrc(counts[cand] - 1, rate * w) * max(2.0 * judged / w, 1.0)
        for j, c in zip(
            cand[pval < p.repeat_alpha].tolist(),
            counts[cand][pval < p.repeat_alpha].tolist(),
            strict=True,
        ):
            in_cluster[j : j + c] = True
    for a, b in runs_of(in_cluster):
        evs = [gs.events[lone[i]] for i in range(a, b + 1)]
        steps = [int(gs.steps[e.start]) for e in evs]
        ratios = [_ratio(e, gs.values) for e in evs]
        out.append(
            _Pending(
                "GRAD002",
                "warning",
                max(ratios),
                steps[0],
                partial(
                    finding,
                    "GRAD002",
                    CODES["GRAD002"],
                    "warning",
                    f"grad_norm spiked {len(evs)} times between steps {steps[0]} and "
                    f"{steps[-1]} (up to {max(ratios):.1f}x its rolling median) and {why}; "
                    "repeated spikes are an early sign of instability — check the LR, warmup "
                    "and clipping.",
                    metric=GRAD,
                    step_start=steps[0],
                    step_end=int(gs.steps[evs[-1].end]),
                    spike_steps=steps,
                    grad_ratios=ratios,
                    count=len(evs),
                    lead_step=steps[0],
                ),
            )
        )
    for j, i in enumerate(lone):
        if in_cluster[j]:
            continue
        ev = gs.events[i]
        # a grad-only excursion that starts in the first points is the norm settling
        # after initialization (it often stays up for tens of steps): a note, not a warning
        settling = ev.start < p.min_sigma_points
        sev = "warning" if _grad_persistent(ev, p) and not settling else "info"
        out.append(
            _Pending(
                "GRAD002",
                sev,
                _ratio(ev, gs.values),
                int(gs.steps[ev.start]),
                partial(_grad002_one, gs, ev, sev, _loss_moved(gs, ev, ls, p), p),
            )
        )
    return out


def _grad002_one(gs: _Series, ev: _Event, sev: str, why: str, p: Params) -> Finding:
    s0 = int(gs.steps[ev.start])
    if ev.recovered is not None:
        rec = f"back by step {int(gs.steps[ev.recovered])}"
    elif ev.end < gs.steps.size - 1:
        rec = f"still elevated at step {int(gs.steps[ev.end])}, the last before a gap in the log"
    else:
        rec = "still elevated at the last logged step"

    if not _grad_persistent(ev, p):
        what = f"a one-off ({rec})"
    elif sev == "info":
        what = (
            f"it stayed elevated {_span(gs, ev)}, from the first points of the log: the norm "
            "settling after initialization"
        )
    else:
        what = f"it stayed elevated {_span(gs, ev)}"
    return finding(
        "GRAD002",
        CODES["GRAD002"],
        sev,
        f"grad_norm spiked at step {s0} ({_lead_text(gs, ev)}) and {why}: {what}.",
        metric=GRAD,
        step_start=s0,
        step_end=int(gs.steps[ev.end]),
        lead_step=s0,
        grad_ratio=_ratio(ev, gs.values),
        grad_baseline=ev.base,
        grad_peak=float(gs.values[ev.peak]),
        grad_peak_step=int(gs.steps[ev.peak]),
        grad_spike_points=ev.count,
        recovered_step=None if ev.recovered is None else int(gs.steps[ev.recovered]),
    )


def _bounds(
    st: np.ndarray,
    gv: np.ndarray,
    loss: tuple[np.ndarray, np.ndarray] | None,
    w_end: int,
    p: Params,
) -> list[Finding]:
    """GRAD003 / GRAD004: the grad norm outside [vanish_below, explode_above] for long."""
    out: list[Finding] = []
    h = p.bound_hysteresis
    if st.size < 5:
        return out
    if not ((gv < p.vanish_below * h).any() or (gv > p.explode_above / h).any()):
        return out  # no median of values inside the loose bounds lies outside them
    sm = centered_rolling_median(gv, 5)
    span = max(int(st[-1] - st[0]), 1)
    for code, core, loose, bound, relaxed in (
        (
            "GRAD003",
            sm < p.vanish_below,
            sm < p.vanish_below * h,
            p.vanish_below,
            p.vanish_below * h,
        ),
        (
            "GRAD004",
            sm > p.explode_above,
            sm > p.explode_above / h,
            p.explode_above,
            p.explode_above / h,
        ),
    ):
        # a stretch starts where the norm crosses the bound and lasts until it is back
        # past the relaxed bound (hysteresis), so dips around the bound do not split it
        inside = np.cumsum(core)
        for a0, b in runs_of(loose):
            hits = int(inside[b] - (inside[a0 - 1] if a0 else 0))
            if hits == 0:
                continue
            a = a0 + int(np.argmax(core[a0 : b + 1]))
            n = b - a + 1
            length = int(st[b] - st[a])
            sustained = n >= p.sustain_points or (n >= 5 and length >= p.sustain_frac * span)
            if not sustained or hits < 0.5 * n:
                continue
            before = gv[max(0, a - p.window) : a]
            # moved in: the norm came from outside the hysteresis band, or moved by that
            # factor itself, not from just over the bound. A converged LoRA fine-tune
            # (SmolVLM, loss 19 -> 0.0023) whose norm sat at a median of 0.0123 for 600
            # steps and dipped to 0.0096 for 9 points was noise around 1e-2, not gradients
            # that vanished; 0.013 -> 0.001 would be
            inside_med = float(np.median(gv[a : b + 1]))
            before_med = float(np.median(before)) if before.size else math.nan
            moved_in = (
                before.size >= p.min_baseline
                and int(st[a]) >= w_end
                and (
                    before_med >= relaxed or before_med >= h * inside_med
                    if code == "GRAD003"
                    else before_med <= relaxed or before_med * h <= inside_med
                )
            )
            onset, tail_med = _left_tail(gv, sm, a0, a, up=code == "GRAD004", p=p)
            falling = _loss_falls(loss, int(st[a]), int(st[b]))
            if code == "GRAD003":
                sev = "warning" if moved_in and falling is not True else "info"
                what = "vanishing"
                hint = (
                    "check for a frozen or detached module, a dead activation, or an LR near zero"
                )
            else:
                sev = "warning" if moved_in or falling is False else "info"
                what = "exploding"
                hint = "lower the LR or add/tighten gradient clipping"
            note = ""
            near = before.size >= p.min_baseline and int(st[a]) >= w_end and not moved_in
            if sev == "info":
                note = (
                    " (the loss keeps falling, so training still progresses)"
                    if moved_in
                    else f" (it was already near the bound: median {float(np.median(before)):.3g}"
                    f" over the {before.size} points before; grad norms are scaled per "
                    "implementation, so this may be normal)"
                    if near
                    else " (from the start of the log"
                    + (", while the loss keeps falling" if falling else "")
                    + "; grad norms are scaled per implementation, so this may be normal)"
                )
            med = float(np.median(gv[a : b + 1]))
            out.append(
                finding(
                    code,
                    CODES[code],
                    sev,
                    (
                        f"grad_norm is {'below' if code == 'GRAD003' else 'above'} {bound:g} "
                        f"from the first logged step {int(st[a])} and stayed "
                        if a == 0
                        else f"grad_norm {'fell below' if code == 'GRAD003' else 'rose above'} "
                        f"{bound:g} at step {int(st[a])} and stayed "
                        if onset == a
                        else f"grad_norm left its tail (median {tail_med:.3g} before) at step "
                        f"{int(st[onset])}, {'fell below' if code == 'GRAD003' else 'rose above'}"
                        f" {bound:g} at step {int(st[a])} and stayed "
                    )
                    + f"{'below' if code == 'GRAD003' else 'above'} {relaxed:.3g} until step "
                    f"{int(st[b])} ({n} logged points, median {med:.3g}): {what} "
                    f"gradients{note}; {hint}.",
                    metric=GRAD,
                    step_start=int(st[onset]),
                    crossed_step=int(st[a]),
                    step_end=int(st[b]),
                    bound=bound,
                    points=n,
                    points_beyond_bound=hits,
                    steps=length,
                    median=med,
                    median_before=float(np.median(before)) if before.size else None,
                    loss_falling=falling,
                )
            )
    return out


def _left_tail(
    gv: np.ndarray, sm: np.ndarray, a0: int, a: int, *, up: bool, p: Params
) -> tuple[int, float]:
    """Where the grad norm left its own tail before crossing an absolute bound at index
    ``a`` (its stretch begins at ``a0``): after the last point before it whose 5-point
    median still lay within the tail's noise band (median x/÷ max(exp(recover_k sigma),
    1.5), the band a spike must come back to). The crossing is where a threshold
    happened to be, not where the change began. The tail is the ``window`` points before
    the stretch — or, when the norm was already climbing there, the window before the
    climb: consecutive windows (going back) whose medians keep moving away by more than
    ``tail_step`` = 10 % each are the climb. Returns (index, the tail's median); ``a``
    itself when no tail is known."""
    w = p.window
    k = a0 // w  # whole windows before the stretch, the last one ending at a0
    if k == 0:
        return a, math.nan
    blocks = gv[a0 - k * w : a0].reshape(k, w)
    with np.errstate(divide="ignore", invalid="ignore"):
        lb = np.log(np.where(blocks > 0, blocks, np.nan))
    med = np.nanmedian(lb, axis=1) if np.isfinite(lb).any() else np.full(k, np.nan)
    step = math.log(1.1)
    climbing = med[:-1] < med[1:] - step if up else med[:-1] > med[1:] + step
    flat = np.flatnonzero(~climbing)  # windows (going back) where the climb stops
    t = int(flat[-1]) + 1 if flat.size else 0  # the tail window
    lt = lb[t][np.isfinite(lb[t])]
    if lt.size < p.min_baseline:
        return a, math.nan
    mid = float(np.median(lt))
    sigma = max(float(np.median(np.abs(lt - mid))) * MAD_TO_SIGMA, p.grad_sigma_floor)
    band = max(p.recover_k * sigma, math.log(1.5))
    with np.errstate(divide="ignore", invalid="ignore"):
        ls = np.log(sm[:a])
    inside = ls <= mid + band if up else ls >= mid - band
    last = np.flatnonzero(inside)
    return (int(last[-1]) + 1 if last.size else a), float(math.exp(mid))


def _loss_falls(loss: tuple[np.ndarray, np.ndarray] | None, a: int, b: int) -> bool | None:
    """Whether the loss fell by more than 1 % (smoothed) over steps [a, b]."""
    if loss is None:
        return None
    s, v = loss
    sel = (s >= a) & (s <= b)
    if sel.sum() < 10:
        return None
    seg = v[sel]
    k = max(3, seg.size // 10)
    first, last = float(np.median(seg[:k])), float(np.median(seg[-k:]))
    return last < first - 0.01 * abs(first)


class _Pending(NamedTuple):
    """A finding decided but not yet built (one-off outliers can number thousands on a
    long run; only the largest are built and listed)."""

    code: str
    severity: str
    score: float
    step: int
    build: Callable[[], Finding]


def _resolve(pending: list[_Pending], p: Params) -> list[Finding]:
    """Every warning and error; at most ``max_info_findings`` info findings per code
    (the largest), each saying how many there were."""
    out = [x.build() for x in pending if x.severity != "info"]
    for code in CODES:
        infos = [x for x in pending if x.severity == "info" and x.code == code]
        total = len(infos)
        if total > p.max_info_findings:
            infos.sort(key=lambda x: x.score, reverse=True)
            infos = infos[: p.max_info_findings]
        for x in infos:
            f = x.build()
            if total > p.max_info_findings:
                f = Finding(
                    f.code,
                    f.name,
                    f.severity,
                    f.metric,
                    f.step_start,
                    f.step_end,
                    f.message.rstrip(".")
                    + f" (one of the {len(infos)} largest of {total} such one-off spikes).",
                    {**f.evidence, "similar_total": total},
                )
            out.append(f)
    return out
