"""The cause step's signals: the run's optimizer-side series read once, and for one loss
event (its :class:`_Scope`) the move of each — the LR against its declared plan or its own
history, a loss-scale drop, the grad norm or update ratio leaving its tail or turning
non-finite (see :mod:`trainlens.detectors._causes`). Not a detector."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from trainlens.core.dataclass import dataclass
from trainlens.core.run import Run
from trainlens.core.schedules import declared_lr
from trainlens.core.stats import median_step, runs_of
from trainlens.detectors._causes_catalogue import (
    CANDIDATES,
    LOSS,
    LR,
    SCALE,
    CauseParams,
    Move,
)
from trainlens.detectors._causes_onset import LEVEL_POINTS, tail_departure
from trainlens.detectors.base import Context


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


def _interval(s: np.ndarray) -> int:
    return max(1, int(median_step(s))) if s.size >= 2 else 1


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
    if (v[k] > level) != (sign > 0):
        # the change slowed the other way, the level did not move that way: a warmup's
        # ramp flattening is no fall (it was told "lr fell ×3" of an LR that rose ×3)
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
