"""Training-loss trend: a loss that never decreases, or one that climbs back up and stays.

What it flags
    LOSS002 ``loss-not-decreasing``: after warmup the training loss never gets
    meaningfully below its early level and its robust slope shows no significant
    decrease — the model is not learning (warning when the loss sits near its initial
    value; info when it fell during warmup and stayed flat for the whole rest of the run).
    LOSS003 ``loss-diverging``: after it had fallen, the smoothed training loss rises
    above its running minimum by a clear margin and stays there for a long stretch — not
    a spike, which the smoothing removes (warning; error when it ends above the loss the
    run started from; info when it comes back down before the end).

    Only ``train/loss`` is judged: a rising validation loss while the training loss falls
    is overfitting (VAL001), and single spikes belong to LOSS001 / GRAD001.

Why it matters
    A loss that does not move after warmup means compute is being spent on nothing: an
    LR far too small (or zero), frozen or detached parameters, labels that do not match
    the inputs, a loss computed on the wrong tensor. A loss that climbs back up and
    stays up is a run diverging — every step from there makes the model worse; restart
    from the checkpoint at its minimum with a lower LR.

    A plateau late in a long run is normal (the run converged): LOSS002 requires the loss
    to be flat from the end of warmup on, so a converged run is never flagged.

Default thresholds
    Warmup skipped: the first max(``warmup_steps`` = 50, ``warmup_frac`` = 2 % of the run)
    steps, or a declared warmup. LOSS002: the median of the last ``seg_frac`` = 10 % of
    the points is not below the median of the first 10 % after warmup by
    ``min_rel_decrease`` = 2 %, the smoothed loss never got that far below its early level
    (margin also at least ``noise_k`` = 4 times the noise of the smoothed loss), and the
    Theil–Sen slope's 99 % interval does not lie below zero. This is SageMaker Debugger's
    ``LossNotDecreasing`` rule (a minimum percentage decrease, ``diff_percent``, between
    checks) turned into one judgement over the whole run, with PyTorch's
    ``ReduceLROnPlateau``-style relative threshold and a robust slope test (Sen 1968).
    Warning when the final loss is within ``min_total_decrease`` = 5 % of the initial one.
    LOSS003: a centered rolling median over ``smooth_frac`` = 2 % of the points (5 to
    1001) removes spikes; the smoothed loss must exceed its running minimum by
    max(``rise_rel`` = 5 %, 4 noise sigmas) for at least ``min_frac`` = 5 % of the run
    (and ``min_run_points`` = 5 points), after having fallen below the initial loss by
    the same margin. The 5 % is SageMaker's ``increase_threshold_percent`` default for a
    loss allowed to rise; PaLM (Chowdhery et al. 2022) and OPT (Zhang et al. 2022)
    describe such non-recovering rises as the runs they had to restart.

Known false positives
    Losses that are not meant to decrease (GAN discriminator/generator losses, RL policy
    losses, some contrastive losses with a learned temperature); a curriculum or data-mix
    change that raises the loss level on purpose (LOSS003); cyclic schedules or warm
    restarts raise the loss for a while (reported as info when it comes back down);
    a loss logged as a running average over the whole run (looks flat late).

Example
    ``WARNING  LOSS003  steps 400–1000  loss rose from its minimum 2.003 (step 362) to
    5.572 (+178%, smoothed) from step 400 and stayed up to the end of the run (2.912 at
    step 1000); restart from a checkpoint before step 400 with a lower LR.``
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from trainlens.core.findings import Finding
from trainlens.core.run import Run
from trainlens.detectors._stats import MAD_TO_SIGMA, runs_of, theil_sen
from trainlens.detectors.base import Context, Skip, finding
from trainlens.detectors.grad_spikes import warmup_end

CODES = {
    "LOSS002": "loss-not-decreasing",
    "LOSS003": "loss-diverging",
}

LOSS = "train/loss"


@dataclass(frozen=True)
class Params:
    warmup_steps: int = 50
    warmup_frac: float = 0.02
    #: post-warmup points needed to judge a trend
    min_points: int = 20
    #: early / final segments, as a fraction of the post-warmup points
    seg_frac: float = 0.10
    min_rel_decrease: float = 0.02
    min_total_decrease: float = 0.05
    noise_k: float = 4.0
    slope_confidence: float = 0.99
    max_fit_points: int = 500
    #: LOSS003
    smooth_frac: float = 0.02
    rise_rel: float = 0.05
    min_frac: float = 0.05
    min_run_points: int = 5
    #: beyond this many points the curve is reduced to block medians before smoothing
    max_smooth_points: int = 20000


def _smooth(v: np.ndarray, frac: float) -> tuple[np.ndarray, float, int]:
    """Centered rolling median over ~frac of the points (odd, 5..1001), and the noise
    sigma of that smoothed curve (robust sigma of the residuals / sqrt(w), x 1.25 for a
    median)."""
    w = int(np.clip(round(frac * v.size), 5, 1001)) | 1
    sm = pl.Series(v, dtype=pl.Float64).rolling_median(w, min_samples=1, center=True).to_numpy()
    res = v - sm
    sigma = float(np.median(np.abs(res - np.median(res)))) * MAD_TO_SIGMA
    return sm, 1.2533 * sigma / np.sqrt(w), w


def _reduce(st: np.ndarray, v: np.ndarray, limit: int) -> tuple[np.ndarray, np.ndarray]:
    """Medians of consecutive blocks when there are more than ``limit`` points: the trend
    and its noise survive, spikes do not, and the smoothing stays cheap on 1M steps."""
    n = v.size
    if n <= limit:
        return st, v
    b = -(-n // limit)
    m = n // b
    med = np.median(v[: m * b].reshape(m, b), axis=1)
    mid = st[: m * b].reshape(m, b)[:, b // 2]
    if m * b < n:
        med = np.r_[med, np.median(v[m * b :])]
        mid = np.r_[mid, st[m * b + (n - m * b) // 2]]
    return mid, med


def detect(run: Run, params: Params, ctx: Context) -> list[Finding]:
    p = params
    if not run.has(LOSS):
        raise Skip(f"needs {LOSS}, not logged")
    steps_all, v_all = run.series(LOSS, finite=True)
    if steps_all.size < p.min_points:
        return []
    w_end = warmup_end(steps_all, ctx, min_steps=p.warmup_steps, frac=p.warmup_frac)
    keep = steps_all >= w_end
    st, v = steps_all[keep], v_all[keep]
    if st.size < p.min_points:
        return []
    initial = float(np.median(v_all[: min(5, v_all.size)]))
    rst, rv = _reduce(st, v, p.max_smooth_points)
    sm, noise, w = _smooth(rv, p.smooth_frac)
    diverging = _diverging(rst, rv, sm, noise, w, initial, steps_all, p)
    out = list(diverging)
    if not any(f.severity.rank >= 1 for f in diverging):
        out.extend(_not_decreasing(st, v, sm, noise, initial, p))
    return out


def _not_decreasing(
    st: np.ndarray, v: np.ndarray, sm: np.ndarray, noise: float, initial: float, p: Params
) -> list[Finding]:
    n = v.size
    k = max(3, int(p.seg_frac * n))
    early, final = float(np.median(v[:k])), float(np.median(v[-k:]))
    scale = abs(early)
    if scale < 1e-8 and abs(final) < 1e-8:
        return []  # a loss at zero has converged
    margin = max(p.min_rel_decrease * scale, p.noise_k * noise)
    lowest = float(np.min(sm))
    if final < early - margin or lowest < early - margin:
        return []
    idx = np.linspace(0, n - 1, min(n, p.max_fit_points)).astype(np.int64)
    fit = theil_sen(v[idx], st[idx].astype(np.float64), p.slope_confidence)
    if fit.high_slope < 0:
        return []  # a small but significant decrease: still learning
    total = (initial - final) / abs(initial) if initial else 0.0
    near_initial = total < p.min_total_decrease
    sev = "warning" if near_initial else "info"
    change = final - early
    if near_initial:
        what = (
            f"the loss has not decreased: {early:.4g} after warmup (step {int(st[0])}), "
            f"{final:.4g} at the end (step {int(st[-1])}), {change / scale:+.1%}, still near "
            f"its initial {initial:.4g}; check the LR (not zero or far too small), frozen or "
            "detached parameters, and that labels match the inputs"
        )
    else:
        what = (
            f"the loss fell from {initial:.4g} only during warmup and has been flat since step "
            f"{int(st[0])} ({early:.4g} → {final:.4g}, {change / scale:+.1%}); if this is not "
            "a converged fine-tune, the LR after warmup may be too small"
        )
    return [
        finding(
            "LOSS002",
            CODES["LOSS002"],
            sev,
            what + ".",
            metric=LOSS,
            step_start=int(st[0]),
            step_end=int(st[-1]),
            initial=initial,
            early=early,
            final=final,
            rel_change=change / scale if scale else 0.0,
            total_decrease=total,
            slope=float(fit.slope),
            slope_low=float(fit.low_slope),
            slope_high=float(fit.high_slope),
            noise=noise,
        )
    ]


def _diverging(
    st: np.ndarray,
    v: np.ndarray,
    sm: np.ndarray,
    noise: float,
    w: int,
    initial: float,
    steps_all: np.ndarray,
    p: Params,
) -> list[Finding]:
    runmin = np.minimum.accumulate(sm)
    margin = np.fmax(p.rise_rel * np.abs(runmin), p.noise_k * noise)
    above = (sm - runmin) > margin
    span = max(int(steps_all[-1] - steps_all[0]), 1)
    out: list[Finding] = []
    for a, e in runs_of(above):
        length = int(st[e] - st[a])
        if e - a + 1 < p.min_run_points or length < p.min_frac * span:
            continue
        low = float(runmin[a])
        if not low < initial - max(p.rise_rel * abs(initial), p.noise_k * noise):
            continue  # it never fell: a loss that does not decrease (LOSS002)
        b = int(np.flatnonzero(sm[: a + 1] == low)[-1])
        # the centered median crosses up to w/2 points early or late: the rise starts at
        # the first point near there whose next three points are over the margin
        lo, hi = max(b + 1, a - w // 2), min(st.size, a + w // 2 + 1)
        near = np.lib.stride_tricks.sliding_window_view(np.r_[v, v[-1], v[-1]], 3)[lo:hi]
        over = np.flatnonzero(np.median(near, axis=1) > low + margin[a])
        a = lo + int(over[0]) if over.size else a
        seg = sm[a : e + 1]
        peak = a + int(np.argmax(seg))
        recovered = e < st.size - 1
        end_val = float(sm[e])
        rise = float(sm[peak]) - low
        rel = rise / abs(low) if low else float("inf")
        if recovered:
            sev = "info"
            tail = f"then came back down by step {int(st[e + 1])}; if it recurs, lower the LR"
        elif end_val >= initial:
            sev = "error"
            tail = (
                f"and stayed up to the end of the run, above where it started ({initial:.4g}); "
                f"restart from a checkpoint before step {int(st[a])} with a lower LR"
            )
        else:
            sev = "warning"
            tail = (
                f"and stayed up to the end of the run ({end_val:.4g} at step {int(st[-1])}); "
                f"restart from a checkpoint before step {int(st[a])} with a lower LR"
            )
        out.append(
            finding(
                "LOSS003",
                CODES["LOSS003"],
                sev,
                f"loss rose from its minimum {low:.4g} (step {int(st[b])}) to {float(sm[peak]):.4g}"
                f" ({rel:+.0%}, smoothed) from step {int(st[a])} {tail}.",
                metric=LOSS,
                step_start=int(st[a]),
                step_end=int(st[e]),
                min_step=int(st[b]),
                min_loss=low,
                peak_step=int(st[peak]),
                peak_loss=float(sm[peak]),
                rise=rise,
                rise_rel=rel,
                end_loss=end_val,
                initial_loss=initial,
                recovered=recovered,
                stretch_steps=length,
                smooth_window=w,
            )
        )
    return out
