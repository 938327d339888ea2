"""Root cause across signals: what moved before the loss (a shared step, not a detector).

The detectors each judge one signal. A loss event (LOSS001, GRAD001, LOSS003, NAN001 on
``train/loss``) is explained by what moved *before* it: the learning rate (against its
declared plan, or its own history), the loss scale, the grad norm, the update ratio.
:func:`attach_causes` runs once over the findings the detectors produced, finds the onset
of each of those signals in a look-back window before the loss onset, orders them by step
and attaches ``evidence.chain`` (``[{"metric", "step", "what"}, …]``, the loss last),
``evidence.first_mover`` (a metric, or None) and ``evidence.first_mover_step``, and puts
the chain and the advice that fits the first mover in the message. "A bad batch or data"
is said only when no optimizer-side signal moved first.

Onset: the first departure of a metric from its own tail, not the step where a large
threshold is crossed. The tail of a point is its level — the median of the 10 logged
points before it (a 50-point median lags a trend by half its window) — and its noise —
the MAD of the successive differences of the ``window`` = 50 points before it, / sqrt 2,
as a sigma (a trend, e.g. a grad norm falling fast early on, does not inflate it) — in
log space for the grad norm, the update ratio, the LR's step changes and the loss. An
excursion starts at the first point beyond max(``band_k`` = 3 sigma, x``band_ratio`` =
1.5) of its tail and lasts while the points stay beyond that band of the tail frozen at
its start; it is a real departure only when a point of it reaches max(``confirm_k`` = 6
sigma, x``confirm_ratio`` = 3) — grad_spikes' spike rule (6 robust sigmas AND 3x,
Lightning's SpikeDetection ratio) — so noise never becomes a mover; its onset is the
excursion's start, where it left the band. A move must also last until the pairing lag
before the loss (10 steps or 3 intervals, grad_spikes' lag_window): one that was over
before then is another event.

- LR with a declared schedule: the departure from the planned value (the step either side
  of the plan is allowed, for schedulers stepped before or after the LR is read): beyond
  x1.1 of the plan, confirmed at x1.5. A warmup ramp or a step decay that follows the
  declaration is not a mover; an undeclared one is.
- LR without a declaration: a jump of its log step change beyond 6 sigmas of the previous
  changes and at least x1.5 in one logged interval (linear warmup, cosine and linear decay
  change by a few percent per interval, smoothly). For a sustained loss rise, an LR still
  climbing to its highest yet (x2 or more since its last low) is named too: a warmup
  whose peak the run cannot take.
- Loss scale: any drop (fp16 dynamic scaling halves it on an overflow; its growth every N
  steps is not a departure). Where drops are routine, one in the window counts only when
  the run's own rate of drops makes it unlikely (Poisson, ``scale_alpha`` = 1 %).
- A grad norm or update ratio turning non-finite strictly before the loss (not in fp16
  runs, whose overflow steps are skipped on purpose).

Look-back: max(``lookback_steps`` = 50, ``lookback_points`` = 10 loss intervals) before
the loss onset (for LOSS003, a slow rise seen late, at least ``slow_lookback_frac`` = 5 %
of the run, the stretch LOSS003 itself needs); a mover's onset must lie in it (a
departure under way since before it is not "moving before the loss"). At one step the
order is lr, loss scale, grad norm, update ratio (the LR is set before the step; the
update follows the gradient).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from trainlens.core.findings import Finding
from trainlens.core.run import Run
from trainlens.core.schedules import declared_lr
from trainlens.core.stats import MAD_TO_SIGMA, median_rows, median_step, runs_of
from trainlens.detectors.base import Context

LR, SCALE, GRAD, UPDATE, LOSS = "lr", "loss_scale", "grad_norm", "update_ratio", "train/loss"
#: the optimizer-side signals, in their order at one step
CANDIDATES = (LR, SCALE, GRAD, UPDATE)
_LABEL = {LR: "lr", SCALE: "loss scale", GRAD: "grad norm", UPDATE: "update ratio", LOSS: "loss"}

#: the default advice clauses of grad_spikes' loss events; replaced here by the advice
#: that fits what moved first (one place: grad_spikes builds its messages from these)
DATA_ADVICE = "look at the batches at that step (corrupt or out-of-domain data)"
GRAD_ADVICE = "if it recurs, lower the LR or tighten gradient clipping"
AFTER_LOSS_NOTE = " (a bad batch or data, not an optimizer blow-up)"

ADVICE = {
    LR: "check the scheduler and the LR the optimizer actually used at that step",
    SCALE: (
        "an fp16 overflow: look for inf/NaN gradients at that step, keep the loss scale from "
        "growing so fast, or train in bf16"
    ),
    GRAD: "tighten gradient clipping or lower the LR",
    UPDATE: (
        "the update grew before the gradient did: check the optimizer state (e.g. Adam's "
        "moments after a reset or resume) and the LR"
    ),
}


@dataclass(frozen=True)
class CauseParams:
    lookback_steps: int = 50
    lookback_points: int = 10
    #: a slow rise (LOSS003) looks back this share of the run at least
    slow_lookback_frac: float = 0.05
    #: the tail: median and MAD of this many logged points before a point
    window: int = 50
    min_baseline: int = 2
    #: an excursion leaves the band; it is real when it reaches the confirmation
    band_k: float = 3.0
    band_ratio: float = 1.5
    confirm_k: float = 6.0
    confirm_ratio: float = 3.0
    sigma_floor: float = 0.05
    #: the loss itself (its onset): relative bounds as grad_spikes' loss spikes
    loss_band_rel: float = 0.02
    loss_confirm_rel: float = 0.05
    loss_sigma_floor: float = 0.005
    #: LR against its declared plan
    plan_band: float = 1.1
    plan_confirm: float = 1.5
    #: LR against its own history: a jump in one logged interval
    lr_jump: float = 1.5
    lr_sigma_floor: float = 0.01
    #: LR still climbing before a sustained rise: this factor since its last low
    ramp_factor: float = 2.0
    #: ... when the loss stays up this many logged points or more (or LOSS003)
    sustain_points: int = 50
    #: routine loss-scale drops: one in the window counts below this chance probability
    scale_alpha: float = 0.01


@dataclass(frozen=True)
class Move:
    metric: str
    step: int
    what: str
    planned: bool = False
    #: the advice when this move is the first, if not the metric's usual one
    advice: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "step": self.step, "what": self.what}


# ---- onsets --------------------------------------------------------------------------------


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


# ---- the signals ----------------------------------------------------------------------------


@dataclass
class _Scope:
    """One loss event: its onset, the look-back window, whether the rise is sustained."""

    loss_step: int
    lo: int  # first step of the look-back window
    hi: int  # last step a confirming point may lie at
    reach: int  # a move must last to this step at least (over before: another event)
    sustained: bool


class _Signals:
    """The run's candidate series, read once; what every event asks of them, computed
    once (a 1M-step run has a few dozen events, each judged on its own window)."""

    def __init__(self, run: Run, ctx: Context, p: CauseParams) -> None:
        self.p = p
        self.raw: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for m in (*CANDIDATES, LOSS):
            if run.has(m):
                self.raw[m] = run.series(m)
        self.schedule: dict[str, Any] | None = None
        #: the log's steps + offset are the plan's (a resumed run: Context.step_offset)
        self.offset = ctx.step_offset
        first = self.raw[LR][0][:1] + self.offset if LR in self.raw else None
        if first is not None and ctx.schedule and _plan(ctx.schedule, first) is not None:
            self.schedule = ctx.schedule
        self._pos: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self._drops: np.ndarray | None = None
        #: the loss' typical logging interval, in steps
        self.loss_interval = _interval(self.raw[LOSS][0]) if LOSS in self.raw else 1

    def scale_drops(self) -> np.ndarray:
        """Indices (into the positive loss-scale points) where the scale fell."""
        if self._drops is None:
            _, v, _ = self.positive(SCALE)
            self._drops = np.flatnonzero(v[1:] < v[:-1] * (1 - 1e-9)) + 1
        return self._drops

    def logged(self) -> list[str]:
        return [m for m in CANDIDATES if m in self.raw]

    def positive(self, m: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Steps, values and log values of the finite positive points."""
        if m not in self._pos:
            s, v = self.raw[m]
            ok = np.isfinite(v) & (v > 0)
            self._pos[m] = (s[ok], v[ok], np.log(v[ok]))
        return self._pos[m]


def _plan(schedule: dict[str, Any], steps: np.ndarray) -> np.ndarray | None:
    """The declared LR at each step and the steps either side (3 x n), or None when the
    declaration cannot give one (an incomplete schedule is the LR detector's to report)."""
    try:
        return np.vstack([declared_lr(schedule, steps + d) for d in (-1, 0, 1)])
    except (ValueError, TypeError, KeyError):
        return None


def _log_signal(sig: _Signals, m: str, sc: _Scope) -> Move | None:
    """Grad norm / update ratio: the first upward departure from its tail."""
    p = sig.p
    s, v, x = sig.positive(m)
    if s.size < p.min_baseline + 1:
        return None
    a = int(np.searchsorted(s, sc.lo, side="left"))
    b = int(np.searchsorted(s, sc.hi, side="right"))
    d = tail_departure(
        x,
        a,
        b,
        window=p.window,
        min_baseline=p.min_baseline,
        band_k=p.band_k,
        band_min=math.log(p.band_ratio),
        confirm_k=p.confirm_k,
        confirm_min=math.log(p.confirm_ratio),
        sigma_floor=p.sigma_floor,
        reach=int(np.searchsorted(s, sc.reach, side="left")),
    )
    if d is None or int(s[d.onset]) > sc.loss_step:
        return None
    med = math.exp(d.median)
    v0, vp = float(v[d.onset]), float(v[d.peak])
    what = (
        f"left its tail at step {int(s[d.onset])} ({v0:.3g}, ×{v0 / med:.3g} its median {med:.3g}"
    )
    if d.peak != d.onset:
        what += f"; ×{vp / med:.3g} at step {int(s[d.peak])}"
    return Move(m, int(s[d.onset]), what + ")")


def _nonfinite(sig: _Signals, m: str, sc: _Scope) -> Move | None:
    """A grad norm / update ratio non-finite strictly before the loss onset (not in fp16
    runs, which skip overflow steps on purpose and lower the loss scale instead)."""
    if SCALE in sig.raw:
        return None
    s, v = sig.raw[m]
    a, b = np.searchsorted(s, [sc.lo, sc.loss_step], side="left")
    bad = np.flatnonzero(~np.isfinite(v[a:b]))
    if not bad.size:
        return None
    k = int(a) + int(bad[0])
    kind = "NaN" if np.isnan(v[k]) else "inf"
    return Move(m, int(s[k]), f"became {kind} at step {int(s[k])}")


def _scale_drop(sig: _Signals, sc: _Scope) -> Move | None:
    """The first drop of the loss scale in the window, unless drops are routine here."""
    s, v, _ = sig.positive(SCALE)
    if s.size < 2:
        return None
    drops = sig.scale_drops()
    # a scale that keeps falling over consecutive points (overflow after overflow) is one
    # episode: counted once, or the event's own later drops make drops look routine
    episodes = drops[np.r_[True, np.diff(drops) > 1]] if drops.size else drops
    a = int(np.searchsorted(s, sc.lo, side="left"))
    b = int(np.searchsorted(s, sc.loss_step, side="right"))
    c = int(np.searchsorted(s, sc.hi, side="right"))  # the event's own lag window too
    i0, i1, i2 = np.searchsorted(episodes, [a, b, c])
    hits = episodes[i0:i1]
    if not hits.size:
        return None
    n_win, outside = b - a, s.size - (c - a)
    rate = float(episodes.size - (i2 - i0)) / max(outside, 1)
    if rate > 0:
        from scipy.special import pdtrc  # P(X >= k), X ~ Poisson(mu)

        if float(pdtrc(hits.size - 1, rate * n_win)) >= sig.p.scale_alpha:
            return None  # as many drops as the run makes anyway
    k = int(hits[0])
    low = float(v[k : int(hits[-1]) + 1].min())
    return Move(
        SCALE,
        int(s[k]),
        f"dropped at step {int(s[k])} ({v[k - 1]:.6g} to {low:.6g}, ×{low / v[k - 1]:.3g})",
    )


def _lr_move(sig: _Signals, sc: _Scope) -> Move | None:
    if sig.schedule is None:
        s, v, x = sig.positive(LR)
        return _lr_jump(s, v, x, sig.p, sc) or (_lr_ramp(s, v, sig.p, sc) if sc.sustained else None)
    s, v = sig.raw[LR]
    # only the window and what leads into it: the plan of a 1M-step run is not needed
    a = max(int(np.searchsorted(s, sc.lo, side="left")) - sig.p.window, 0)
    b = int(np.searchsorted(s, sc.hi, side="right"))
    ok = np.isfinite(v[a:b])
    s, v = s[a:b][ok], v[a:b][ok]
    plan = _plan(sig.schedule, s + sig.offset)
    return None if plan is None else _lr_vs_plan(s, v, plan, sig.p, sc)


def _lr_vs_plan(
    s: np.ndarray, v: np.ndarray, plan: np.ndarray, p: CauseParams, sc: _Scope
) -> Move | None:
    """The first departure from the declared LR (the step either side allowed)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        dev = np.log(np.maximum(v, 0.0)[None, :] / plan)
    dev[~np.isfinite(dev) & ~(plan > 0)] = np.nan  # no plan to compare with
    close = np.nanargmin(np.where(np.isnan(dev), np.inf, np.abs(dev)), axis=0)
    d = dev[close, np.arange(s.size)]
    d = np.nan_to_num(d, nan=0.0, posinf=50.0, neginf=-50.0)
    b = int(np.searchsorted(s, sc.hi, side="right"))
    band, confirm = math.log(p.plan_band), math.log(p.plan_confirm)
    # one departure: the stretches off the plan (either side: a reset LR that re-warms
    # crosses the plan on its way from below to above) with gaps shorter than the lag
    runs: list[list[int]] = []
    for i, j in runs_of(np.abs(d) >= band):
        if runs and int(s[i]) - int(s[runs[-1][1]]) <= sc.hi - sc.loss_step:
            runs[-1][1] = j
        else:
            runs.append([i, j])
    for i, j in runs:
        if i >= b or int(s[i]) > sc.loss_step:
            break
        seg = np.abs(d[i : min(j + 1, b)])
        if int(s[i]) < sc.lo or int(s[j]) < sc.reach or seg.max() < confirm:
            continue  # under way before the window, over before the loss, or small
        pk = i + int(np.argmax(seg))
        planned = float(plan[1, pk])
        f = float(v[pk]) / planned if planned > 0 else float("inf")
        verb = "rose" if d[pk] > 0 else "fell"
        return Move(
            LR,
            int(s[i]),
            f"{verb} ×{f:.3g} {'at' if j == i else 'from'} step {int(s[i])} against its "
            f"declared schedule ({float(v[pk]):.3g} vs planned {planned:.3g} at step "
            f"{int(s[pk])})",
        )
    return None


def _lr_jump(
    s: np.ndarray, v: np.ndarray, x: np.ndarray, p: CauseParams, sc: _Scope
) -> Move | None:
    """A jump of the log step change beyond its own tail, without a declared plan."""
    if s.size < p.min_baseline + 2:
        return None
    a = max(int(np.searchsorted(s, sc.lo, side="left")) - 1, 0)
    b = int(np.searchsorted(s, sc.loss_step, side="right")) - 1
    # the changes of the window, of the tails scanned before it and of their own tails
    # (dx[k]: from point c0 + k to the next), so that every tail is a full one
    c0 = max(a - 2 * p.window - 2, 0)
    dx = np.diff(x[c0 : b + 2])
    a, b = a - c0, b - c0
    found: list[Move] = []
    # both signs scan the same changes from the same start first: their tails once
    # (a third of the cause chain's tails on the 1M noisy run)
    memo: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
    for sign in (1.0, -1.0):
        start = a
        while start < b:
            d = tail_departure(
                dx,
                start,
                b,
                window=p.window,
                min_baseline=p.min_baseline,
                band_k=p.confirm_k,
                band_min=math.log(p.lr_jump),
                confirm_k=p.confirm_k,
                confirm_min=math.log(p.lr_jump),
                sigma_floor=p.lr_sigma_floor,
                sign=sign,
                memo=memo,
            )
            if d is None:
                break
            start = d.onset + 1
            mv = _jump_move(s, v, c0 + d.onset + 1, sign, p, sc)
            if mv is not None:
                found.append(mv)
                break
    return min(found, key=lambda mv: mv.step, default=None)


def _jump_move(
    s: np.ndarray, v: np.ndarray, k: int, sign: float, p: CauseParams, sc: _Scope
) -> Move | None:
    """The LR jumped into point ``k``: a move when it left the level it had (the median
    of the points before, so the jump back after a one-step shock is no move) and was
    still off it at ``sc.reach`` (a shock over before then is another event)."""
    level = float(np.median(v[max(0, k - LEVEL_POINTS) : k]))
    if abs(math.log(v[k] / level)) < math.log(p.lr_jump):
        return None
    r = int(np.searchsorted(s, sc.reach, side="right")) - 1
    if r > k and abs(math.log(v[r] / level)) < math.log(p.lr_jump):
        return None
    seg = v[k : int(np.searchsorted(s, sc.loss_step, side="right"))]
    ext = float(seg.max() if sign > 0 else seg.min()) if seg.size else float(v[k])
    verb = "rose" if sign > 0 else "fell"
    return Move(LR, int(s[k]), f"{verb} ×{ext / level:.3g} at step {int(s[k])} (from {level:.3g})")


def _lr_ramp(
    s: np.ndarray, v: np.ndarray, p: CauseParams, sc: _Scope, *, planned: bool = False
) -> Move | None:
    """An LR still climbing at the loss onset, to its highest yet, by ramp_factor or more
    since its last low (a warmup whose peak the run cannot take)."""
    e = int(np.searchsorted(s, sc.loss_step, side="right")) - 1
    # two points show a climb: a trainer_state logged every 500 steps has its LR at 1.5e-3
    # and then at its peak 3e-3 when the loss has risen (a Whisper fine-tune, 1.24 -> 2.03)
    if e < 1:
        return None
    head = v[: e + 1]
    if head[-1] < 0.999 * head.max():
        return None
    lo = int(np.searchsorted(s, sc.lo, side="left"))
    if not (lo < e and head[-1] > head[min(lo, e - 1)] * 1.001):
        return None  # not climbing in the window
    falls = np.flatnonzero(head[1:] < head[:-1] * (1 - 1e-3))
    k = int(falls[-1]) + 1 if falls.size else 0  # the last low
    f = float(head[-1] / head[k])
    if f < p.ramp_factor:
        return None
    how = "in its declared warmup" if planned else "its highest yet"
    return Move(
        LR,
        int(s[k]),
        f"climbing since step {int(s[k])} (×{f:.3g} to {float(head[-1]):.3g} at step "
        f"{int(s[e])}, {how})",
        planned=planned,
        advice="the loss rose while the LR was still climbing: lower the peak LR or lengthen "
        "the warmup",
    )


# ---- the loss event -------------------------------------------------------------------------

_EVENT_CODES = ("LOSS001", "GRAD001", "LOSS003", "NAN001")


def _loss_onset(f: Finding, sig: _Signals) -> int | None:
    if f.code == "GRAD001":
        return _int(f.evidence.get("lag_step"), f.step_start)
    if f.code in ("LOSS001", "NAN001"):
        return f.step_start
    # LOSS003 is judged on a smoothed curve, whose start can be off by half its window:
    # the onset is the first departure of the raw loss from its tail near there
    if f.step_start is None or LOSS not in sig.raw:
        return f.step_start
    p = sig.p
    s, _, logv = sig.positive(LOSS)
    span = max(p.lookback_steps, p.lookback_points * sig.loss_interval)
    a = int(np.searchsorted(s, f.step_start - span, side="left"))
    b = int(np.searchsorted(s, f.step_start + span, side="right"))
    d = tail_departure(
        logv,
        a,
        b,
        window=p.window,
        min_baseline=p.min_baseline,
        band_k=p.band_k,
        band_min=math.log1p(p.loss_band_rel),
        confirm_k=p.confirm_k,
        confirm_min=math.log1p(p.loss_confirm_rel),
        sigma_floor=p.loss_sigma_floor,
    )
    return int(s[d.onset]) if d is not None else f.step_start


def _int(value: Any, default: int | None) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _interval(s: np.ndarray) -> int:
    return max(1, int(median_step(s))) if s.size >= 2 else 1


def _scope(f: Finding, sig: _Signals) -> _Scope | None:
    if f.code not in _EVENT_CODES or (f.code == "NAN001" and f.metric != LOSS):
        return None
    step = _loss_onset(f, sig)
    if step is None:
        return None
    p = sig.p
    interval = sig.loss_interval
    look = max(p.lookback_steps, p.lookback_points * interval)
    if f.code == "LOSS003" and LOSS in sig.raw:
        # a slow rise is seen late (LOSS003 needs 5 % of the run above the minimum): what
        # set it off may lie that far before its onset
        s = sig.raw[LOSS][0]
        look = max(look, math.ceil(p.slow_lookback_frac * float(s[-1] - s[0])))
    # the pairing window of grad_spikes (lag_window 10 steps or 3 intervals): a move over
    # longer than that before the loss onset did not lead it
    lag = max(10, 3 * interval)
    span = 0
    if LOSS in sig.raw and sig.raw[LOSS][0].size:
        s = sig.raw[LOSS][0]
        span = int(s[-1] - s[0])
    return _Scope(step, step - look, step + lag, step - lag, _sustained(f, interval, span, p))


def _sustained(f: Finding, interval: int, span: int, p: CauseParams) -> bool:
    """A rise that stays (LOSS003, or a loss event back only after sustain_points logged
    points — or after the stretch LOSS003 itself needs, 5 % of the run and 5 points, when
    that is shorter — or never): only then may a climbing LR be its cause. A spike the
    loss comes back from within a few dozen points is a spike (a bad batch in warmup stays
    one). In a 60-point log a loss up for 28 points (700 of 1,475 steps: a Whisper
    fine-tune while its LR warmed up) is no spike."""
    if f.code == "LOSS003":
        return True
    if f.code not in ("LOSS001", "GRAD001") or f.severity.rank < 1:
        return False
    start = _int(f.evidence.get("lag_step"), f.step_start)
    back = _int(f.evidence.get("recovered_step"), None)
    if back is None or start is None:
        return True
    need = p.sustain_points * interval
    if span > 0:
        need = min(need, max(math.ceil(p.slow_lookback_frac * span), 5 * interval))
    return back - start >= need


def chain_for(f: Finding, run: Run, ctx: Context, p: CauseParams | None = None) -> list[Move]:
    """What moved before the loss event of finding ``f`` (empty when ``f`` is no loss
    event), in order, the loss last. A planned LR ramp is returned marked ``planned``."""
    sig = _Signals(run, ctx, p or CauseParams())
    sc = _scope(f, sig)
    return [] if sc is None else _moves(sig, sc)


def _moves(sig: _Signals, sc: _Scope) -> list[Move]:
    found: list[Move] = []
    for m in sig.logged():
        mv: Move | None
        if m == LR:
            mv = _lr_move(sig, sc)
            if mv is None and sig.schedule is not None and sc.sustained:
                s, v, _ = sig.positive(LR)
                mv = _lr_ramp(s, v, sig.p, sc, planned=True)
        elif m == SCALE:
            mv = _scale_drop(sig, sc)
        else:
            mv = _nonfinite(sig, m, sc) or _log_signal(sig, m, sc)
        if mv is not None:
            found.append(mv)
    found.sort(key=lambda mv: (mv.step, CANDIDATES.index(mv.metric)))
    return [*found, Move(LOSS, sc.loss_step, f"left its tail at step {sc.loss_step}")]


# ---- the findings ---------------------------------------------------------------------------


def chain_text(chain: list[Move]) -> str:
    """'lr rose x40 at step 400 (…) → grad norm left its tail at step 400 (…) → loss at
    step 401'."""
    parts = [f"{_LABEL[mv.metric]} {mv.what}" for mv in chain[:-1]]
    return " → ".join([*parts, f"loss at step {chain[-1].step}"])


def attach_causes(
    run: Run, ctx: Context, findings: list[Finding], p: CauseParams | None = None
) -> list[Finding]:
    """The findings, each loss event with its chain, first mover and fitting advice."""
    if not any(f.code in _EVENT_CODES for f in findings):
        return findings
    sig = _Signals(run, ctx, p or CauseParams())
    if not sig.logged():
        return findings  # nothing optimizer-side to check: the detectors' words stand
    out = []
    for f in findings:
        sc = _scope(f, sig)
        out.append(f if sc is None else _explained(f, _with_lead(f, _moves(sig, sc)), sig.logged()))
    return out


def _with_lead(f: Finding, chain: list[Move]) -> list[Move]:
    """A GRAD001 finding is itself a grad norm that led the loss: when the tails here did
    not see it (a shorter baseline, a different noise estimate), its own lead stands in,
    so the finding never says that nothing optimizer-side moved."""
    lead = _int(f.evidence.get("lead_step"), None)
    if f.code != "GRAD001" or lead is None or any(mv.metric == GRAD for mv in chain):
        return chain
    ratio, base = f.evidence.get("grad_ratio_at_lead"), f.evidence.get("grad_baseline")
    what = f"spiked at step {lead}"
    if isinstance(ratio, (int, float)) and isinstance(base, (int, float)):
        what += f" (×{ratio:.3g} its rolling median {base:.3g})"
    movers = sorted(
        [*chain[:-1], Move(GRAD, lead, what)],
        key=lambda mv: (mv.step, CANDIDATES.index(mv.metric)),
    )
    return [*movers, chain[-1]]


def _explained(f: Finding, chain: list[Move], logged: list[str]) -> Finding:
    movers = [mv for mv in chain[:-1] if not mv.planned]
    first = movers[0] if movers else None
    loss_step = chain[-1].step
    ev = {
        **f.evidence,
        "chain": [mv.as_dict() for mv in [*movers, chain[-1]]],
        "first_mover": first.metric if first else None,
        "first_mover_step": first.step if first else None,
    }
    ramp = next((mv for mv in chain if mv.planned), None)
    if ramp is not None:
        ev["planned_lr_ramp"] = ramp.as_dict()
    msg = f.message
    if f.code in ("LOSS001", "GRAD001"):
        for clause in (DATA_ADVICE, GRAD_ADVICE):
            msg = msg.replace("; " + clause, "")
        if first is not None:
            msg = msg.replace(AFTER_LOSS_NOTE, "")
    if first is not None:
        text = chain_text([*movers, chain[-1]])
        advice = first.advice or ADVICE[first.metric]
        if first.metric == GRAD and first.step == loss_step and len(movers) == 1:
            advice = (
                "both left their tails at the same step: a bad batch or a step too large — "
                "look at that batch, and at clipping and the LR"
            )
        tail = f"what moved first: {text}; {advice}"
    elif ramp is not None:
        tail = f"nothing departed from its plan, but the lr was {ramp.what}"
        if not f.evidence.get("in_warmup"):  # LOSS003 inside the warmup already advises it
            tail += (
                ": the planned peak may be too high for this run — lower it or lengthen the warmup"
            )
    elif f.severity.rank >= 1:
        names = ", ".join(_LABEL[m] for m in logged)
        where = {
            "LOSS003": "look at the data from that step (a change of mix or a corrupt shard)",
            "NAN001": "a bad batch or data, or an overflow in the forward pass",
        }.get(f.code, DATA_ADVICE)
        tail = (
            f"nothing optimizer-side ({names}) moved before the loss at step {loss_step}: {where}"
        )
    else:
        return Finding(f.code, f.name, f.severity, f.metric, f.step_start, f.step_end, msg, ev)
    msg = msg.rstrip().rstrip(".") + "; " + tail + "."
    return Finding(f.code, f.name, f.severity, f.metric, f.step_start, f.step_end, msg, ev)
