"""Entropy collapse: an abrupt fall of the output entropy, or entropy near zero.

Needs `entropy` (mean entropy of the output distribution, nats) · real logs and
fixtures: `tests/test_system_detectors_real.py`

Severity by code
    | code | name | severity |
    |---|---|---|
    | ENT001 | entropy-collapse | info (an abrupt fall that came back) · warning (a fall that stayed, or entropy near zero) |

What it flags
    - **An abrupt fall**: the entropy at least halves within a short window (L points, 2 % of
      the run, at least 5) while it had been drifting slowly before the fall began. The
      finding starts at the step the fall began (`step_start`) and gives the levels
      `before` and `after` (nats), `fall_ratio`, `fall_step` (the steepest point),
      `log_fall_per_window` against `prior_log_fall_per_window`, and `recovered_step` when
      the entropy came back at least half-way.
    - **Near zero**: the (filtered) entropy below `near_zero` (0.1 nats) for at least L
      points after it was above `clearly_above` (0.5 nats). When an abrupt fall led there,
      it is one finding (`near_zero_step` in its evidence); when the entropy slid there
      gradually, the finding starts where it became near zero and says when it was last
      clearly above (`last_clearly_above_step`).

    ### Method

    On the log of the entropy (median-filtered over L/2 points): for every point, the fall
    over the last L points. A candidate fall is at least log 2 (halving) and at least
    `noise_z` times the noise of an L-point change (from the point-to-point noise — not from
    the spread of the changes, which a collapse that keeps falling in log space would
    inflate). For the steepest point of each candidate, the start of the fall is located —
    the knee of a hinge fit (a level, then a straight fall) over the K+1 windows before it,
    moved back to where the values left the trend they followed before (an accelerating fall
    bends away before the fitted knee) — and the fall must be `rate_factor` times faster than
    the drift per L over the K·L points before that start. A learning curve falls fastest at
    its start and ever more slowly afterwards, so it never falls faster than it just did;
    the first `warmup_frac` of the run (and a declared LR warmup) is only baseline.

Why it matters
    A healthy language model's output entropy stays near its loss — a few nats. A sudden
    collapse means the model became certain for a reason other than learning: a label leak
    (the target visible in the input), a degenerate shortcut, logits growing without bound
    before a divergence (the attention/logit entropy collapse of Zhai et al. 2023,
    *Stabilizing Transformer Training by Preventing Attention Entropy Collapse*), or, in RL
    fine-tuning, policy entropy collapse (Cui et al. 2025, *The Entropy Mechanism of
    Reinforcement Learning for Reasoning Language Models*).

Default thresholds and their source
    | parameter | default | meaning / source |
    |---|---|---|
    | `fall_ratio` | 0.5 | an abrupt fall at least halves the entropy; healthy phase changes (induction-head formation) drop loss and entropy by ~10–20 % |
    | `window_frac`, `min_window` | 0.02, 5 | the fall window L: 2 % of the logged points, at least 5 |
    | `prior_windows` | 3 | the drift before the fall is measured over 3 L points |
    | `rate_factor` | 5 | the steepest L-point fall must be 5x the drift per L before the fall began |
    | `noise_z` | 6 | and 6 robust standard deviations of an L-point change (the 6-sigma rule, for runs of up to millions of points) |
    | `near_zero` | 0.1 nats | a language model's predictive entropy is well above 1 nat; 0.1 nats means ≥ ~97 % confidence on average |
    | `clearly_above` | 0.5 nats | near zero counts only after the entropy was at least this (5x) — a task that was always near zero is not a collapse |
    | `warmup_frac` | 0.05 | the first 5 % of the run (or the declared LR warmup, if longer) is baseline only: the fall from ln(vocabulary) is learning |
    | `max_findings` | 3 | at most three findings |

Known false positives
    - Tasks solved exactly (copying, sorting, arithmetic, a classifier with a clean
      separation) end near zero entropy by design.
    - Fine-tuning or overfitting on a small set: the model memorizes it and its train
      entropy slides toward zero (reported as near zero, with that hint).
    - A switch to a much easier data mix, or a temperature / label-smoothing change mid-run.
    - Entropy logged in bits shifts the near-zero bound (set `near_zero`).

Measured
    - Fixture `entropy_collapse` (label leak from step 500; entropy 2.0 → below 0.1 at 583 →
      5e-5): **warning at 511** (label 500 ± 41): fell from 1.94 to 0.055 nats within 53
      steps, 82× faster than the drift before; near zero from 583.
    - Fixture `overfit` (64 fixed sequences, train entropy slides to ~0): **warning at 455**
      (near zero; the label lists it as a non-required consequence at 437 ± 100).
    - Healthy fixtures (entropy 4.55 → 1.7–2.0) and the other fault runs: nothing
      (`nan_divergence`: the NaN entropies are NAN001's; the finite part is healthy).
    - Real logs: none of them logs entropy (skipped).
    - 100 000 steps of log-normal (σ 0.15) noise on a learning curve from 10.8 nats: nothing.

Example
    ```
      WARNING  ENT001    steps 511–1000   output entropy collapsed from step 511: it fell from 1.94 to 0.0549 nats (÷35.3) within 53 steps, 82× faster than its drift before, stayed near zero (< 0.1 nats) from step 583; look for a label leak, a degenerate shortcut or growing logits.
    ```
"""  # noqa: E501  (tables: one row a line)

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from trainlens.core.dataclass import dataclass
from trainlens.core.findings import Finding
from trainlens.core.run import Run
from trainlens.core.stats import centered_median, odd, robust_sigma, runs_of
from trainlens.detectors._start import run_start
from trainlens.detectors.base import Context, Skip, finding, require

CODES = {"ENT001": "entropy-collapse"}

_EPS = 1e-6  # nats; log of smaller entropies is clamped
_MAX_FILTER = 201  # the widest median filter (points)
_MAX_CANDIDATES = 20  # candidate falls examined in detail


@dataclass(frozen=True)
class Params:
    #: entropy below this (nats), sustained, is near zero
    near_zero: float = 0.1
    #: ... which counts only if the entropy was at least this before
    clearly_above: float = 0.5
    #: an abrupt fall ends at most at this fraction of the level before
    fall_ratio: float = 0.5
    #: the fall window L as a fraction of the logged points ...
    window_frac: float = 0.02
    #: ... and at least this many points
    min_window: int = 5
    #: the preceding drift is measured over this many windows
    prior_windows: int = 3
    #: the fall must be this many times the preceding fall per window
    rate_factor: float = 5.0
    #: ... and this many robust sigmas of all window-long changes
    noise_z: float = 6.0
    #: the first fraction of the run is baseline only (initial learning)
    warmup_frac: float = 0.05
    #: at most this many findings
    max_findings: int = 3


def _knee(y: np.ndarray, max_points: int = 400) -> int:
    """Index where y ≈ a − b·max(0, i − k) bends (least squares over every k; long
    windows are reduced to block medians first)."""
    m = len(y)
    if m < 4:
        return 0
    if m > max_points:
        block = -(-m // max_points)
        nb = m // block
        coarse = np.median(y[: nb * block].reshape(nb, block), axis=1)
        return _knee(coarse, max_points) * block
    i = np.arange(m, dtype=np.float64)
    ks = i[:-1]
    h = np.maximum(0.0, i[None, :] - ks[:, None])
    hc = h - h.mean(axis=1, keepdims=True)
    yc = y - y.mean()
    shh = (hc**2).sum(axis=1)
    shy = (hc * yc[None, :]).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        gain = np.where((shh > 0) & (shy < 0), shy**2 / shh, -np.inf)
    return int(np.argmax(gain))


def _nats(x: float) -> str:
    return f"{x:.3g}"


@dataclass
class _Series:
    """The log entropy and what every step of the search reads from it."""

    steps: np.ndarray
    z: np.ndarray  # log entropy
    zs: np.ndarray  # ... median-filtered over ``ws`` points
    L: int  # the fall window (points)
    K: int  # windows of drift measured before a fall
    i0: int  # the first point after the baseline-only start
    d: np.ndarray  # fall of ``zs`` over the L points up to each point (NaN: not judged)
    valid: np.ndarray  # points with K+1 windows after i0 before them
    sigma_point: float  # point-to-point noise of z
    sigma_d: float  # noise of an L-point change of zs
    min_fall: float  # the least log fall that counts

    @property
    def n(self) -> int:
        return len(self.z)

    @functools.cached_property
    def z3(self) -> np.ndarray:
        """The log entropy median-filtered over 3 points (read only where a fall is
        examined: made then)."""
        return centered_median(self.z, 3)


def _prepare(run: Run, params: Params, ctx: Context) -> _Series:
    """The filtered log entropy and its fall per window, or Skip when too short."""
    require(run, "entropy")
    steps, e = run.series("entropy", finite=True)
    n = len(e)
    L = max(params.min_window, round(params.window_frac * n))
    K = params.prior_windows
    if n < (K + 2) * L + params.min_window:
        raise Skip(f"only {n} entropy values, too few to judge")
    z = np.log(np.maximum(e, _EPS))
    ws = max(3, min(odd(L / 2), _MAX_FILTER))
    zs = centered_median(z, ws)

    # the baseline-only start: a fraction of the run, or the run's own LR warmup (the
    # ramp seen in the log, or a declared warmup against the real step numbers)
    warm_step = float(steps[0]) + params.warmup_frac * float(steps[-1] - steps[0])
    warm_step = max(warm_step, float(run_start(run, steps, ctx).warmup_end))
    i0 = int(np.searchsorted(steps, warm_step))

    # fall over L points, and the fall per L over the K*L points before
    t = np.arange(n)
    valid = t - (K + 1) * L >= i0
    d = np.full(n, np.nan)
    idx = t[valid]
    d[idx] = zs[idx - L] - zs[idx]
    # noise of an L-point change of the filtered series, from the point-to-point noise
    # (not from the spread of the changes themselves: after a collapse the log keeps
    # falling, which would inflate it)
    sigma_point = robust_sigma(z - zs)
    sigma_d = math.sqrt(2.0) * 1.2533 * sigma_point / math.sqrt(ws)
    min_fall = math.log(1.0 / params.fall_ratio)
    return _Series(steps, z, zs, L, K, i0, d, valid, sigma_point, sigma_d, min_fall)


def _candidate_runs(sr: _Series, params: Params) -> list[tuple[int, int]]:
    """Stretches where the window fall is large and above the noise (the largest
    ``_MAX_CANDIDATES`` of them: noise can make many)."""
    with np.errstate(invalid="ignore"):
        cand = sr.valid & (sr.d >= sr.min_fall) & (sr.d >= params.noise_z * sr.sigma_d)
    runs = runs_of(cand)
    if len(runs) > _MAX_CANDIDATES:
        peak = [float(np.nanmax(sr.d[a : b + 1])) for a, b in runs]
        keep = sorted(np.argsort(peak)[-_MAX_CANDIDATES:].tolist())
        runs = [runs[i] for i in keep]
    return runs


def _onset(sr: _Series, tt: int) -> int:
    """Where the fall whose steepest point is ``tt`` began."""
    z, L, K = sr.z, sr.L, sr.K
    # the knee of a hinge (level, then a straight fall) fitted to the log entropy over
    # the K+1 windows up to the steepest point
    lo = max(tt - (K + 1) * L, sr.i0)
    hi = min(sr.n, tt + L)
    knee = min(_knee(z[lo:hi]) + lo, tt)
    # ... moved to where the values left the trend they followed before (an
    # accelerating fall bends away from it before the fitted knee; a step is
    # located exactly)
    pre_end = knee - L // 2 if knee - L // 2 - lo >= 3 else knee
    onset = knee
    if pre_end - lo >= 3:
        xs = np.arange(lo, pre_end, dtype=np.float64)
        slope, icpt = np.polyfit(xs, z[lo:pre_end], 1)
    else:
        slope, icpt = 0.0, float(np.median(z[lo : max(pre_end, lo + 1)]))
    trend = icpt + slope * np.arange(lo, tt + 1)
    stay = np.flatnonzero(sr.z3[lo : tt + 1] >= trend - 4.0 * sr.sigma_point)
    if len(stay):
        onset = min(tt, lo + int(stay[-1]) + 1)
    return onset


def _fall(sr: _Series, a: int, b: int, params: Params) -> dict[str, Any] | None:
    """The abrupt fall in candidate stretch a..b, or None when it is not one."""
    z, d, n, L, K = sr.z, sr.d, sr.n, sr.L, sr.K
    # the steepest point: the first to come near the largest fall of the stretch
    seg = d[a : b + 1]
    tt = a + int(np.argmax(seg >= np.nanmax(seg) - max(2.0 * sr.sigma_d, 0.05 * np.nanmax(seg))))
    before = float(np.median(z[tt - (K + 1) * L : tt - L]))
    after_seg = z[tt : min(n, tt + L)]
    if len(after_seg) < params.min_window:
        return None
    after = float(np.median(after_seg))
    if before - after < sr.min_fall:
        return None
    settled = z[tt + L : min(n, tt + 3 * L)]
    if len(settled) >= params.min_window:
        after = min(after, float(np.median(settled)))
    onset = _onset(sr, tt)
    # abrupt: the steepest L-point fall against the drift per L in the K*L points
    # before the fall began (a learning curve never falls faster than it just did)
    p0 = max(onset - K * L, sr.i0)
    if onset - p0 < 2 * L:
        return None
    first_lv = float(np.median(z[p0 : p0 + L]))
    last_lv = float(np.median(z[onset - L : onset]))
    prior = max((first_lv - last_lv) * L / (onset - p0 - L), 0.0)
    if d[tt] < params.rate_factor * prior:
        return None
    before = float(np.median(z[max(onset - L, p0) : onset]))
    # recovered: later back above half-way (in log) between before and after
    back = (
        np.flatnonzero(sr.zs[tt + L :] >= before - 0.5 * sr.min_fall)
        if tt + L < n
        else np.empty(0, dtype=np.int64)
    )
    rec = tt + L + int(back[0]) if len(back) else None
    return {
        "onset": onset,
        "t": tt,
        "before": before,
        "after": after,
        "rate": float(d[tt]),
        "prior": prior,
        "rec": rec,
    }


def _falls(sr: _Series, params: Params) -> list[dict[str, Any]]:
    """Abrupt falls, each examined only after the previous one recovered."""
    used_until = -1
    events: list[dict[str, Any]] = []
    for a, b in _candidate_runs(sr, params):
        if a <= used_until:
            continue
        ev = _fall(sr, a, b, params)
        if ev is None:
            continue
        used_until = ev["rec"] if ev["rec"] is not None else sr.n
        events.append(ev)
    return events


def _near_zero(sr: _Series, params: Params, events: list[dict[str, Any]]) -> None:
    """Near zero, sustained, after being clearly above: marked on the fall that led there,
    else added as a slide."""
    z, zs, L, n = sr.z, sr.zs, sr.L, sr.n
    nz_runs = [
        (a, b)
        for a, b in runs_of(zs < math.log(params.near_zero))
        if b - a + 1 >= L and np.nanmax(zs[: a + 1]) >= math.log(params.clearly_above)
    ]
    for a, b in nz_runs:
        ev = next(
            (ev for ev in events if ev["onset"] <= a and (ev["rec"] is None or ev["rec"] > a)), None
        )
        if ev is not None:
            ev.setdefault("near_zero_at", a)
            ev.setdefault("near_zero_end", b)
            continue
        # a slide, not a fall: the finding starts where it became near zero
        above = np.flatnonzero(zs[:a] >= math.log(params.clearly_above))
        last_above = int(above[-1]) if len(above) else 0
        before = float(np.median(z[max(0, last_above - L + 1) : last_above + 1]))
        events.append(
            {
                "onset": a,
                "last_above": last_above,
                "t": a,
                "before": before,
                "after": float(np.median(z[a : b + 1])),
                "rate": None,
                "prior": None,
                "rec": b + 1 if b + 1 < n else None,
                "near_zero_at": a,
                "near_zero_end": b,
            }
        )


def _message(ev: dict[str, Any], steps: np.ndarray, params: Params) -> str:
    onset, before, after = ev["onset"], math.exp(ev["before"]), math.exp(ev["after"])
    rec = ev["rec"]
    nz = ev.get("near_zero_at")
    start = int(steps[onset])
    if "last_above" in ev:
        parts = [
            f"output entropy has been near zero (< {params.near_zero:g} nats) since step "
            f"{start}: it slid from {_nats(before)} nats (at step "
            f"{int(steps[ev['last_above']])}) to {_nats(after)}"
        ]
    else:
        parts = [
            f"output entropy collapsed from step {start}: it fell from {_nats(before)} "
            f"to {_nats(after)} nats"
        ]
    if ev["rate"] is not None:
        within = int(steps[ev["t"]] - steps[onset]) + 1
        speed = ev["rate"] / ev["prior"] if ev["prior"] > 0 else float("inf")
        parts[0] += f" (÷{before / after:.3g}) within {within} step{'s' if within != 1 else ''}"
        parts.append(
            f"{speed:.0f}× faster than its drift before"
            if math.isfinite(speed)
            else "after it had not been falling"
        )
    if nz is not None and "last_above" not in ev:
        parts.append(f"stayed near zero (< {params.near_zero:g} nats) from step {int(steps[nz])}")
    if rec is not None:
        parts.append(f"came back at step {int(steps[rec])}")
    hint = (
        "a model memorizing a small train set does this; otherwise look for a label "
        "leak or a degenerate shortcut"
        if "last_above" in ev
        else "look for a label leak, a degenerate shortcut or growing logits"
    )
    return ", ".join(parts) + f"; {hint}."


def _finding(ev: dict[str, Any], sr: _Series, params: Params) -> Finding:
    steps = sr.steps
    before, after = math.exp(ev["before"]), math.exp(ev["after"])
    rec = ev["rec"]
    nz = ev.get("near_zero_at")
    sev = "info" if rec is not None and nz is None else "warning"
    end = int(steps[rec - 1]) if rec is not None else int(steps[-1])
    evidence: dict[str, Any] = {
        "before": before,
        "after": after,
        "fall_ratio": after / before if before > 0 else None,
        "fall_step": int(steps[ev["t"]]),
        "recovered_step": int(steps[rec]) if rec is not None else None,
        "near_zero_step": int(steps[nz]) if nz is not None else None,
        "last_clearly_above_step": int(steps[ev["last_above"]]) if "last_above" in ev else None,
        "window_points": sr.L,
    }
    if ev["rate"] is not None:
        evidence["log_fall_per_window"] = ev["rate"]
        evidence["prior_log_fall_per_window"] = ev["prior"]
    return finding(
        "ENT001",
        CODES["ENT001"],
        sev,
        _message(ev, steps, params),
        metric="entropy",
        step_start=int(steps[ev["onset"]]),
        step_end=end,
        **evidence,
    )


def detect(run: Run, params: Params, ctx: Context) -> list[Finding]:
    sr = _prepare(run, params, ctx)
    events = _falls(sr, params)
    _near_zero(sr, params, events)
    events = sorted(events, key=lambda x: x["onset"])[: params.max_findings]
    return [_finding(ev, sr, params) for ev in events]
