"""grad_spikes' events: the grad-norm and loss excursions of a log — scored in the tail by
:mod:`._grad_baseline`, the first points against what came before them (and, for the loss,
against their neighbours), pieces of a log spliced across a level shift apart — from
their first spike point until the series is back (a helper of the ``grad_spikes``
detector, not a detector)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import numpy as np

from trainlens.core.stats import MAD_TO_SIGMA, prefix_medians
from trainlens.detectors._grad_baseline import _scores, _z_for
from trainlens.detectors._grad_common import (
    Bound,
    SpikeParams,
    _Event,
    forward_median,
    gaps_in,
    typical_interval,
)


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


def _early(x: np.ndarray, m: int, least_excess: Bound) -> tuple[np.ndarray, np.ndarray]:
    """The first points, with fewer than ``m`` values before them (too few for a robust
    sigma: the MAD of three normal values is below a third of their sigma one time in
    six): the median of what came before and whether the point exceeds it by a gross
    jump. A loss going 2.77 -> 7.34 in the second point of an excerpt is a blow-up at
    any length. At most ``m - 1`` points."""
    med = np.full(x.size, np.nan)
    k = min(m, x.size)
    if k > 1:
        med[1:k] = prefix_medians(x, np.arange(1, k))
    spike = np.zeros(x.size, dtype=bool)
    with np.errstate(invalid="ignore"):
        excess = x[1:m] - med[1:m]
        # a rise, however small its bound: a loss stuck at exactly 0.0 (every label
        # masked) has a bound of 0 and no spike at all
        spike[1:m] = (excess >= least_excess(np.abs(med[1:m]))) & (excess > 0)
    return med, spike


def _head_sigma(x: np.ndarray, p: SpikeParams, sigma_floor: Bound) -> np.ndarray:
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
    at = np.arange(max(p.min_sigma_points, 4), n)  # x[:i] holds i - 1 changes
    if at.size:
        out[at] = prefix_medians(d, at - 1) * MAD_TO_SIGMA / math.sqrt(2.0)
    head = out[:n]
    with np.errstate(invalid="ignore"):
        floor = np.broadcast_to(sigma_floor(np.abs(x[:n])), head.shape)
        out[:n] = np.where(np.isnan(head), np.nan, np.fmax(head, floor))
    return out


def _head_may_spike(
    x: np.ndarray, p: SpikeParams, z: float, least_excess: Bound, sigma_floor: Bound
) -> bool:
    """Whether a point whose window is not yet full can spike at the least sigma (its
    floor): then the screen, which judges with the deviations' sigma, must not decide."""
    n = min(x.size, p.window)
    idx = np.arange(max(p.min_sigma_points, 1), n)
    if idx.size == 0 or not np.isfinite(x[:n]).all():
        return idx.size > 0
    med = prefix_medians(x, idx)
    exc = x[idx] - med
    lim = np.broadcast_to(least_excess(np.abs(med)), med.shape)
    flo = np.broadcast_to(sigma_floor(np.abs(med)), med.shape)
    return bool(((exc >= lim) & (exc >= z * flo)).any())


def _with_head(
    got: tuple[np.ndarray, np.ndarray, np.ndarray, float],
    x: np.ndarray,
    p: SpikeParams,
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
    x: np.ndarray, p: SpikeParams, z: float
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
    head = x[: min(p.min_sigma_points, n - 1) + 2].tolist()  # (a few points: Python floats)
    for i in range(1, min(p.min_sigma_points, n - 1)):
        k = min(2, i, n - 1 - i)  # as many either side: one-sided, a steep trend leans
        nbr = head[i - k : i] + head[i + 1 : i + 1 + k]
        # and above both next points: a point between them (a fall that speeds up or slows
        # down, law-llm's 284.9 -> 161.2 -> 9.9) is no spike
        base[i] = max(_median_of_few(nbr), head[i - 1], head[i + 1])
        floor = max(p.loss_sigma_floor_rel * abs(base[i]), 1e-12)
        sig[i] = max(sigma, floor)
        excess = x[i] - base[i]
        spike[i] = excess >= z * sig[i] and excess >= p.loss_min_rel * abs(base[i])
    return base, sig, spike


def _median_of_few(v: list[float]) -> float:
    """``float(np.median(v))`` of a few finite values, bit for bit: the middle value, or
    the two middle ones averaged from +0.0 as numpy's mean sums (a NaN: numpy's own)."""
    s = sorted(v)
    if any(math.isnan(a) for a in s):
        return float(np.median(v))
    m = len(s) // 2
    return 0.0 + s[m] if len(s) % 2 else (0.0 + s[m - 1] + s[m]) / 2


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
    floor = np.broadcast_to(sigma_floor(_abs_or_zero(med[head])), fill.shape)
    sig[head] = np.where(fill, np.fmax(sig[head], floor), sig[head])
    spike[head] = espike[head]  # only gross jumps, before a sigma can be trusted
    return med, sig, spike, k


def _grad_scores(
    steps: np.ndarray, x: np.ndarray, p: SpikeParams, w_end: int
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


def _grad_events(steps: np.ndarray, g: np.ndarray, p: SpikeParams, w_end: int) -> list[_Event]:
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


_FLOAT_MAX = float(np.finfo(np.float64).max)


def _abs_or_zero(x: np.ndarray) -> np.ndarray:
    """``np.abs(np.nan_to_num(x))`` of a float64 array in three ufuncs (numpy's
    nan_to_num makes about ten calls; the sigma floor asks 8-10 times a run)."""
    if not (isinstance(x, np.ndarray) and x.dtype == np.float64):
        return np.abs(np.nan_to_num(x))
    a = np.abs(x)
    return np.where(np.isnan(a), 0.0, np.minimum(a, _FLOAT_MAX))


def _loss_scores(
    steps: np.ndarray, v: np.ndarray, p: SpikeParams, w_end: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """(baseline, sigma, spike, come-back level) of the loss of one piece of the log."""
    judged = np.ones(v.size, dtype=bool)

    def least_excess(med: np.ndarray) -> np.ndarray:
        return p.loss_min_rel * np.abs(med)

    def sigma_floor(med: np.ndarray) -> np.ndarray:
        return np.fmax(p.loss_sigma_floor_rel * _abs_or_zero(med), 1e-12)

    early = _early(v, p.min_sigma_points, lambda med: p.gross_loss_rel * med)
    z = _z_for(v.size, p.loss_z, p)
    neighbours = _neighbour_spikes(v, p, z)  # (new arrays: changed below)
    # the screen holds for bounds that grow with |med|; it knows nothing of the first
    # points' neighbour test (a few points, checked here)
    screen = (
        p.loss_min_rel >= 0
        and p.loss_sigma_floor_rel >= 0
        and not early[1].any()
        and not neighbours[2].any()
        and not _head_may_spike(v, p, z, least_excess, sigma_floor)
    )
    got = _scores(v, steps, judged, w_end, p, z, least_excess, sigma_floor, screen=screen)
    if got is None:
        return None
    got = _with_head(got, v, p, z, least_excess, sigma_floor)
    med, sig, spike, k = _with_early(got, early, p.min_sigma_points, sigma_floor)
    nb_base, nb_sig, nb_spike = neighbours
    local = nb_spike & ~spike  # judged against the neighbours' trend, not what came before
    med[local], sig[local], spike[local] = nb_base[local], nb_sig[local], True
    back = med + np.fmax(k * sig, p.recover_rel * np.abs(med))
    return med, sig, spike, back


def _loss_events(
    steps: np.ndarray, v: np.ndarray, p: SpikeParams, w_end: int, raw: tuple[np.ndarray, np.ndarray]
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
