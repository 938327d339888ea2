"""Training-loss trend: a loss that never decreases, or one that climbs back up and stays.

Needs `train/loss` · real logs: `tests/test_spikes_real.py`

Severity by code
    | code | name | severity |
    |---|---|---|
    | LOSS002 | loss-not-decreasing | warning (flat near its initial value, or exactly the same at every step) · info (fell only during warmup, flat since; or the log resumes a run) |
    | LOSS003 | loss-diverging | warning (rose and stayed up) · error (ends above where it started) · info (came back down) |
    | LOSS004 | accuracy-at-chance | warning (an accuracy stayed at 0, or at 1/k beside a loss at ln k, while the loss fell) |

What it flags
    - **LOSS002** — after warmup the training loss never gets meaningfully below its early
      level and its robust slope shows no significant decrease: the model is not learning.
      A plateau late in a long run is normal and never flagged: the loss must be flat from
      the end of warmup on.
      A loss that is exactly the same number at every logged step is said so (no update
      reaches the loss). A loss of exactly 0 at every logged step of a log that starts at the
      beginning is a warning of its own: nothing converges before it starts, so no loss was
      computed (every label masked or ignored; HF Trainer dicts `{'loss': 0.0, 'grad_norm':
      nan}`). A loss that reaches 0 after a descent is left alone. When the log resumes a run — its first step lies more than two
      logging intervals past step 1, or its epoch counter starts at 2 or more — a flat loss
      is what a converged run does: info, with advice about the resume (LR after resuming,
      optimizer state), never "check that labels match the inputs".
      **Practical, not only statistical, significance**: a decrease whose Theil–Sen slope
      is significant but adds up to less than `min_rel_decrease` of the loss over the
      judged stretch is no learning (three real W&B runs: 3.661 → 3.668, 4.43 → 4.40,
      4.45 → 4.39 over 40 epochs with accuracy at 0 were called healthy), and a smoothed
      curve that dipped below the early level must stay there for `min_below_frac` of the
      points to count as a descent. Where an **accuracy-like metric** is logged
      (`train/accuracy`, `val/accuracy`, `val/<set>_accuracy`, `top1` …; see
      `_chance.py`), its distance from chance decides too: an accuracy that stayed at 0,
      or at 1/k while the loss sits at ln k (a k-class model predicting the uniform
      distribution), makes a flat loss a warning — also one that fell only during
      warmup, or in a resumed log — and the message says so; an accuracy that clearly
      rose (more than 2 points and 3 of its noise sigmas) makes it info (it does learn).
      So does a validation task metric with chance 0 (AP, mAP, mIoU, PQ) already 5 points
      above 0 at its first evaluation and not lower at its last: the model started
      trained (a detectron2 fine-tune of its own checkpoint, AP 14.8 → 15.2, loss flat).
    - **LOSS004** — an accuracy-like metric stayed at chance (as above) while the loss did
      fall: the model learned the label prior, predicts one class, or the accuracy is not
      computed on its predictions. Only when LOSS002 did not fire and no accuracy of the
      same split improved; a validation accuracy at chance (beside a validation loss whose
      median is ln k) while the training accuracy rose is a model that memorizes (a public
      7-epoch Keras log: train accuracy 0.52 → 0.90, val_accuracy 0.40–0.55, val_loss
      ≈ ln 2). Judged also on logs too short for a loss trend (under `min_points`).
    - **LOSS003** — after it had fallen, the smoothed training loss rises above its running
      minimum by a clear margin and stays there for a long stretch. A single spike is removed
      by the smoothing (spikes are `grad_spikes`' job: GRAD001 / LOSS001). The finding
      starts where the loss left its tail around the minimum (the last point whose 3-point
      median lay within max(4 noise sigmas, half the margin) of the minimum), not where the
      smoothed curve crossed the margin. Judged over the whole log, warmup included: a loss
      that climbs back during the LR warm-up is diverging all the same; then the advice is
      about the LR the warmup heads for (lower the peak LR or lengthen the warmup), and the
      evidence has `in_warmup`. A loss spike that never came back (LOSS001) starting inside a
      rise that stayed up is the same event seen by `grad_spikes`: it is folded into the
      LOSS003, which takes the worse severity of the two (unless the config sets LOSS003's)
      and the spike's step as `evidence.spike_step`.

    **Warmup** is the run's own (`trainlens/detectors/_start.py`): the LR ramp seen in the
    log (the LR starts at or below half its peak and climbs; the ramp ends where it reaches
    95 % of it), or a declared `warmup_steps` compared with the real step numbers (a log
    starting at step 29,020 with a 2,000-step warmup has none in it); otherwise none. LOSS002
    compares the level after it when that leaves at least `min_points` and a quarter of the
    log, else the whole log. Fewer than `min_points` = 10 finite values: skipped, with the
    reason.

    **Short logs** (under 250 points, the shortest smoothing window of 5): a point is part of
    its own 5-point median, so the residuals understate the noise by a third to a half; the
    noise is then at least the MAD of the one-step changes around their median change / √2.
    And the running minimum of a noisy curve is itself an extreme — about √(2 ln m) sigmas
    below the level over m = n / 5 independent smoothed values — so LOSS003's margin adds
    that depth: a flat noisy 17-point excerpt does not "rise 8 % from its minimum".

    Only `train/loss` is judged: validation loss rising while training loss falls is VAL001
    (`val_divergence`).

    Evidence — LOSS002: `initial`, `early`, `final`, `rel_change`, `total_decrease`,
    `slope`, `slope_low`, `slope_high`, `noise`, `fitted_drop_rel` (the slope × the
    judged span, over the early level), `accuracy_metric`, `accuracy_chance` (0, 1/k or
    null). LOSS004: `accuracy_start`, `accuracy_best`, `accuracy_end`, `chance`,
    `classes`, `loss_start`, `loss_end`. LOSS003: `min_step`, `min_loss`,
    `peak_step`, `peak_loss`, `rise`, `rise_rel`, `end_loss`, `initial_loss`, `recovered`,
    `stretch_steps`, `smooth_window`.

Why it matters
    A loss that does not move after warmup means compute spent on nothing: an LR far too
    small or zero, frozen or detached parameters, labels that do not match the inputs, a loss
    computed on the wrong tensor. A loss that climbs back and stays up is a diverging run:
    every step from there makes the model worse; restart from the checkpoint at its minimum
    with a lower LR (the PaLM and OPT logbooks describe exactly these restarts).

Default thresholds and their source
    Warmup is the run's own: the LR ramp in the log or a declared warmup against the
    real step numbers (``_start.py``); a log that resumes a run (starts late, or at epoch
    2+) gets resume advice and info at most for a flat loss. Fewer than ``min_points`` =
    10 values: skipped. LOSS003 is judged over the whole log, from where the loss left
    its tail around the minimum. LOSS002: the median of the last ``seg_frac`` = 10 % of
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

    | parameter | default | meaning / source |
    |---|---|---|
    | `min_points` | 10 | points needed to judge a trend (fewer: skipped with the reason) |
    | `min_after_warmup_frac` | 0.25 | LOSS002 judges after the run's warmup only when that leaves a quarter of the points |
    | `seg_frac` | 0.10 | early / final level = median of the first / last 10 % of post-warmup points |
    | `min_rel_decrease` | 0.02 | LOSS002 needs the final level not 2 % below the early one, and the smoothed curve never 2 % (or `noise_k` = 4 noise σ) below it — SageMaker Debugger's `LossNotDecreasing` (a minimum percentage decrease, `diff_percent`, between checks) made into one judgement over the run, with a `ReduceLROnPlateau`-style relative threshold |
    | `slope_confidence` | 0.99 | and the Theil–Sen slope's 99 % interval (Sen 1968; ≤ 500 evenly spaced points) does not lie below zero — or it does, but the slope over the judged span adds up to less than `min_rel_decrease` of the loss (practical significance) |
    | `min_below_frac` | 0.25 | a smoothed loss below the early level by the margin for a quarter of the points is a descent |
    | accuracy at chance | 2 points, 10 % | `_chance.py`: an accuracy that never rose 2 points (nor 3 noise σ) above its start, and is 0 or within 10 % of 1/k with the early loss within 10 % of ln k — a classifier predicting the uniform distribution over k classes has cross-entropy ln k and accuracy 1/k |
    | `min_total_decrease` | 0.05 | warning when the final loss is within 5 % of the initial one; info when it fell earlier (during warmup) |
    | `smooth_frac` | 0.02 | LOSS003 smoothing: centered rolling median over 2 % of the points (5…1001); beyond `max_smooth_points` = 20 000 points the curve is first reduced to block medians |
    | `rise_rel` | 0.05 | the smoothed loss must exceed its running minimum by max(5 %, 4 noise σ) — SageMaker's `increase_threshold_percent` default for a loss allowed to rise |
    | `min_frac`, `min_run_points` | 0.05, 5 | for at least 5 % of the run's steps (and 5 points), after having fallen below the initial loss by the same margin |

Known false positives
    - Losses that are not meant to decrease: GAN losses, RL policy losses, some contrastive
      losses with a learned temperature.
    - A curriculum or data-mix change that raises the loss level on purpose (LOSS003).
    - Cyclic schedules / warm restarts raise the loss for a while: reported as info when it
      comes back down.
    - A loss logged as a running average over the whole run looks flat late.
    - A fine-tune that converges within warmup: LOSS002 info.

Measured
    - modded-nanogpt records and the BLOOM notes: nothing.
    - The real-log corpus (tests/real_logs.yml) and the fixture runs: the same findings
      before and after practical significance and the accuracy check; the detector cases
      of the three W&B runs' shapes (40 epochs, -0.7 %…-1.3 %, accuracy 0) were silent
      before and are LOSS002 warnings now.
    - Fixture runs: `lr_shock_diverge` LOSS003 warning from step 400 (the shock) to the end;
      `lr_shock_recover` LOSS003 info 391–473 (came back down); `slow_loader` LOSS003 info
      620–732 (+18 %, back down: the padding injected there changes what the loss averages
      over); healthy runs and the other fault runs: nothing.
    - 1M logged steps: about 0.1–0.3 s.

Example
    ```
      WARNING  LOSS003   steps 400–1000   loss rose from its minimum 2.003 (step 362) to 5.572 (+178%, smoothed) from step 400 and stayed up to the end of the run (2.912 at step 1000); restart from a checkpoint before step 400 with a lower LR.
    ```
"""  # noqa: E501  (tables: one row a line)

from __future__ import annotations

import numpy as np

from trainlens.core.dataclass import dataclass
from trainlens.core.findings import Finding
from trainlens.core.run import Run
from trainlens.core.stats import (
    MAD_TO_SIGMA,
    centered_rolling_median,
    median,
    median3,
    median_rows,
    runs_of,
    theil_sen,
)
from trainlens.detectors._chance import Accuracy, accuracies, started_trained
from trainlens.detectors._start import Start, run_start
from trainlens.detectors.base import Context, Skip, finding

CODES = {
    "LOSS002": "loss-not-decreasing",
    "LOSS003": "loss-diverging",
    "LOSS004": "accuracy-at-chance",
}

LOSS = "train/loss"


@dataclass(frozen=True)
class Params:
    #: points needed to judge a trend (after the run's own warmup when it leaves as many)
    min_points: int = 10
    #: LOSS002 judges after warmup when that leaves this fraction of the points, else
    #: the whole log (a log that is mostly warmup is judged whole)
    min_after_warmup_frac: float = 0.25
    #: early / final segments, as a fraction of the post-warmup points
    seg_frac: float = 0.10
    min_rel_decrease: float = 0.02
    min_total_decrease: float = 0.05
    #: the smoothed loss below the early level by the margin for this share of the
    #: post-warmup points is a descent (a dip that came straight back is none)
    min_below_frac: float = 0.25
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
    # (polars' centered rolling median, value for value, mostly by its trailing one)
    sm = centered_rolling_median(v, w)
    res = v - sm
    sigma = median(np.abs(res - median(res))) * MAD_TO_SIGMA
    # a point is part of its own median: with the shortest window (5, logs under 250
    # points) its residual understates the noise by a third to a half; one-step changes
    # around their median change (a steady trend drops out) / sqrt 2 do not. Longer logs
    # keep the residuals: a loss spanning decades (version_13) has changes far noisier
    # early than at its minimum
    d = np.diff(v)
    if w == 5 and d.size >= 4:
        sigma = max(sigma, median(np.abs(d - median(d))) * MAD_TO_SIGMA / np.sqrt(2))
    return sm, 1.2533 * sigma / np.sqrt(w), w


def _reduce(st: np.ndarray, v: np.ndarray, limit: int) -> tuple[np.ndarray, np.ndarray]:
    """Medians of consecutive blocks when there are more than ``limit`` points: the trend
    and its noise survive, spikes do not, and the smoothing stays cheap on 1M steps."""
    n = v.size
    if n <= limit:
        return st, v
    b = -(-n // limit)
    m = n // b
    med = median_rows(v[: m * b].reshape(m, b))
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
        # too short for a trend, not for an accuracy that never left chance (a 7-epoch
        # Keras log: val_accuracy 0.5 -> 0.4 beside val_loss ln 2, train accuracy 0.9)
        if steps_all.size >= 2:
            level = median(v_all[:3])
            chance = _at_chance(accuracies(run, int(steps_all[0]), level), steps_all, v_all)
            if chance:
                return chance
        raise Skip(
            f"{LOSS} has {steps_all.size} finite value{'s' * (steps_all.size != 1)}; a trend "
            f"needs at least {p.min_points}"
        )
    start = run_start(run, steps_all, ctx)
    if not start.resumed and not np.any(v_all != 0.0):
        return [_never_computed(steps_all)]
    # LOSS002: the level after the run's own warmup (a log all warmup is judged whole);
    # LOSS003 over the whole log (a loss climbing back during warmup diverges all the same)
    keep = steps_all >= start.warmup_end
    if keep.sum() < max(p.min_points, p.min_after_warmup_frac * keep.size):
        keep[:] = True  # too little left after warmup to call the rest of the run flat
    st, v = steps_all[keep], v_all[keep]
    initial = median(v_all[: min(5, v_all.size)])
    rst, rv = _reduce(steps_all, v_all, p.max_smooth_points)
    sm, noise, w = _smooth(rv, p.smooth_frac)
    diverging = _diverging(rst, rv, sm, noise, w, initial, steps_all, start, p)
    out = list(diverging)
    if not any(f.severity.rank >= 1 for f in diverging):
        # the smoothed curve after warmup: the whole log's, from there on (one smoothing)
        sm_k = sm if keep.all() else sm[rst >= st[0]]
        level = median(v[: max(3, int(p.seg_frac * v.size))])
        accs = accuracies(run, int(st[0]), level)
        flat = _not_decreasing(
            run, st, v, sm_k if sm_k.size else sm, noise, initial, start, accs, p
        )
        out.extend(flat or _at_chance(accs, st, v))
    return out


def _never_computed(st: np.ndarray) -> Finding:
    """A loss of exactly 0.0 at every logged step from the run's first has not converged
    (nothing converges before it starts): no loss was computed — every label masked or
    ignored (HF Trainer dicts ``{'loss': 0.0, 'grad_norm': nan}``), an empty target. A
    loss that reaches 0 later, or a resumed log, is left to the rule below."""
    return finding(
        "LOSS002",
        CODES["LOSS002"],
        "warning",
        f"{LOSS} is exactly 0 at every logged step from the first ({int(st[0])}–"
        f"{int(st[-1])}, {st.size} values): no loss was computed, so nothing is being "
        "learned; check that the labels are not all masked or ignored (-100) and that the "
        "loss is wired to the model's output.",
        metric=LOSS,
        step_start=int(st[0]),
        step_end=int(st[-1]),
        initial=0.0,
        final=0.0,
        constant=True,
        resumed=None,
    )


def _not_decreasing(
    run: Run,
    st: np.ndarray,
    v: np.ndarray,
    sm: np.ndarray,
    noise: float,
    initial: float,
    start: Start,
    accs: list[Accuracy],
    p: Params,
) -> list[Finding]:
    n = v.size
    k = max(3, int(p.seg_frac * n))
    early, final = median(v[:k]), median(v[-k:])
    scale = abs(early)
    if scale < 1e-8 and abs(final) < 1e-8:
        return []  # a loss at zero has converged
    margin = max(p.min_rel_decrease * scale, p.noise_k * noise)
    # below the early level for a while (a dip straight back is none; LOSS003 the rest)
    below = float(np.mean(sm < early - margin))
    if final < early - margin or below >= p.min_below_frac:
        return []
    idx = np.linspace(0, n - 1, min(n, p.max_fit_points)).astype(np.int64)
    fit = theil_sen(v[idx], st[idx].astype(np.float64), p.slope_confidence)
    # practical, not only statistical, significance: a decrease the slope's 99 % interval
    # proves but under min_rel_decrease of the loss over the stretch (real W&B runs: 4.45
    # -> 4.39 over 40 epochs, accuracy at 0) is a run that does not learn
    fitted_drop = -float(fit.slope) * float(st[-1] - st[0])
    if fit.high_slope < 0 and fitted_drop >= p.min_rel_decrease * scale:
        return []  # a small but significant and sizeable decrease: still learning
    total = (initial - final) / abs(initial) if initial else 0.0
    sev, what = _flat_text(st, v, early, final, initial, total, start, p)
    stuck = next((a for a in accs if a.chance is not None), None)
    learned = next((a for a in accs if a.improved), None)
    if stuck is not None:
        sev, what = "warning", f"{what}; {stuck.words}: the model never beat chance"
    elif learned is not None:
        sev = "info"
        what = (
            f"{what}; but {learned.metric} rose from {learned.start:.3g} to {learned.best:.3g}"
            ", so it does learn: the loss may be dominated by a term that cannot fall"
        )
    elif sev == "warning" and (trained := started_trained(run, int(st[0]))) is not None:
        sev, what = "info", f"{what.split('; check ')[0]}; {trained.words}"  # (no advice)
    change = final - early
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
            constant=bool(np.ptp(v) == 0.0),
            resumed=start.resumed,
            warmup_end=start.warmup_end,
            fitted_drop_rel=fitted_drop / scale if scale else 0.0,
            accuracy_metric=named.metric if (named := stuck or learned) else None,
            accuracy_chance=stuck.chance if stuck else None,
        )
    ]


def _at_chance(accs: list[Accuracy], st: np.ndarray, v: np.ndarray) -> list[Finding]:
    """LOSS004: an accuracy-like metric that never left chance (0, or 1 / k beside a loss
    at ln k) while the loss did fall: what fell is the loss of predicting the label
    prior, or the accuracy is computed on something else than what is learned."""
    stuck = next((a for a in accs if a.chance is not None), None)
    if stuck is None:
        return []
    split = stuck.metric.split("/")[0]
    if any(a.improved and a.metric.split("/")[0] == split for a in accs):
        return []
    # a validation accuracy at chance while the training one rose: it memorizes
    trained = next((a for a in accs if a.improved and not a.metric.startswith("val")), None)
    went = f"{LOSS} went {float(v[0]):.4g} → {float(v[-1]):.4g}"
    if split == "val" and trained is not None:
        why = (
            f" while {trained.metric} rose from {trained.start:.3g} to {trained.end:.3g} and "
            f"{went}: it memorizes the training set and learns nothing that carries over; "
            "check that the validation labels and preprocessing match the training ones, "
            "and use more data, augmentation or a smaller model."
        )
    else:
        why = (
            f" while {went}: the model never beat chance; check that the labels match the "
            "inputs and the accuracy is computed on the model's predictions (not a constant "
            "or the wrong axis), and whether it predicts one class."
        )
    return [
        finding(
            "LOSS004",
            CODES["LOSS004"],
            "warning",
            stuck.words + why,
            metric=stuck.metric,
            step_start=stuck.first_step,
            step_end=stuck.last_step,
            accuracy_start=stuck.start,
            accuracy_best=stuck.best,
            accuracy_end=stuck.end,
            chance=stuck.chance,
            classes=stuck.classes,
            loss_start=float(v[0]),
            loss_end=float(v[-1]),
        )
    ]


def _flat_text(
    st: np.ndarray,
    v: np.ndarray,
    early: float,
    final: float,
    initial: float,
    total: float,
    start: Start,
    p: Params,
) -> tuple[str, str]:
    """Severity and words for a flat loss; the advice fits how the log starts."""
    a, b = int(st[0]), int(st[-1])
    change = (final - early) / abs(early)
    after = f"after warmup (step {a})" if start.warmup and a >= start.warmup_end else f"at step {a}"
    if float(np.ptp(v)) == 0.0:
        return "warning", (
            f"the loss is exactly {final:.7g} at every logged step from {a} to {b}: no update "
            "reaches the loss; check that the LR is not zero, that the parameters are not "
            "frozen or detached, and that the loss depends on the model's output"
        )
    if start.resumed:
        return "info", (
            f"{start.resumed}, so it resumes a run (or is an excerpt of one), and its loss is "
            f"flat from step {a} to {b} ({early:.4g} → {final:.4g}, {change:+.1%}): expected "
            "when the run it resumes had converged; if it should still be learning, check "
            "that the LR after resuming is not zero and that the optimizer state was restored"
        )
    if total < p.min_total_decrease:
        return "warning", (
            f"the loss has not decreased: {early:.4g} {after}, {final:.4g} at the end (step "
            f"{b}), {change:+.1%}, still near its initial {initial:.4g}; check the LR (not zero "
            "or far too small), frozen or detached parameters, and that labels match the inputs"
        )
    when = "during warmup" if start.warmup and a >= start.warmup_end else "in its first points"
    return "info", (
        f"the loss fell from {initial:.4g} only {when} and has been flat since step "
        f"{a} ({early:.4g} → {final:.4g}, {change:+.1%}); if this is not a converged "
        "fine-tune, the LR may be too small"
    )


def _median3(v: np.ndarray) -> np.ndarray:
    """Each point's median with the next two (the last points repeat the last value)."""
    a = np.r_[v, v[-1], v[-1]]
    return median3(a[:-2], a[1:-1], a[2:])  # (finite values: the middle one, as np.median)


def _departure(
    v: np.ndarray, sm: np.ndarray, b: int, a: int, w: int, low: float, margin: float, p: Params
) -> int:
    """Where a rise that the smoothed loss shows at index ``a`` left the loss' tail around
    its minimum (index ``b``): after the last point whose 3-point median still lay in the
    minimum's noise band, not where it crossed the margin. The band is the noise there
    (``noise_k`` sigmas of a 3-point median, from the residuals within ``w`` points of the
    minimum, at least ``rise_rel`` of it): a loss that spans decades (version_13: 0.3 down
    to 0.0009) has a run-wide noise far above the noise at its minimum. The centered
    median crosses up to w/2 points early or late, so the search runs to there; without a
    point over the margin the smoothed crossing stands."""
    fwd3 = _median3(v)
    lo, hi = b + 1, min(v.size, a + w // 2 + 1)
    over = np.flatnonzero(fwd3[lo:hi] > low + margin)
    if not over.size:
        return a
    cross = lo + int(over[0])
    near = slice(max(0, b - w), min(v.size, b + w + 1))
    res = v[near] - sm[near]
    sigma = median(np.abs(res - median(res))) * MAD_TO_SIGMA
    sigma3 = 1.2533 * sigma / np.sqrt(3)  # of a 3-point median
    band = low + max(p.noise_k * sigma3, p.rise_rel * abs(low))
    inside = np.flatnonzero(fwd3[lo:cross] <= band)
    return lo + int(inside[-1]) + 1 if inside.size else lo


def _diverging(
    st: np.ndarray,
    v: np.ndarray,
    sm: np.ndarray,
    noise: float,
    w: int,
    initial: float,
    steps_all: np.ndarray,
    start: Start,
    p: Params,
) -> list[Finding]:
    runmin = np.minimum.accumulate(sm)
    # the running minimum of a noisy curve is itself an extreme: over m = n / w independent
    # smoothed values it lies about sqrt(2 ln m) sigmas below the level, so a rise back to
    # the level is not one (a flat 49-point excerpt "rose 8 % from its minimum"). Short logs
    # only (the shortest window, under 250 points): on long ones the noise is one run-wide
    # number that a loss spanning decades already overstates at its low end (version_13)
    m = st.size / w
    depth = float(np.sqrt(2.0 * np.log(m))) if w == 5 and m > 1 else 0.0
    margin = np.fmax(p.rise_rel * np.abs(runmin), (p.noise_k + depth) * noise)
    above = (sm - runmin) > margin
    span = max(int(steps_all[-1] - steps_all[0]), 1)
    raw3 = _median3(v)
    out: list[Finding] = []
    prev_end = -1
    for a, e in runs_of(above):
        after_prev, prev_end = prev_end + 1, e
        length = int(st[e] - st[a])
        if e - a + 1 < p.min_run_points or length < p.min_frac * span:
            continue
        low = float(runmin[a])
        if not low < initial - max(p.rise_rel * abs(initial), p.noise_k * noise):
            continue  # it never fell: a loss that does not decrease (LOSS002)
        b = int(np.flatnonzero(sm[: a + 1] == low)[-1])
        # the minimum is where the loss was, not before it got there: the centered median is
        # truncated at the log's start, and its first point is the median of the next w/2
        # points alone. A loss that falls from 3.9 to 0.01 within them (a Lightning BYOL
        # run: 25 of 18,750 points, w = 375) had its smoothed minimum at the first logged
        # step, and the rise after the floor was dated to the second one
        reached = np.flatnonzero(raw3[: a + 1] <= low + margin[a])
        if reached.size and int(reached[0]) > b:
            b = int(reached[0])
        a = _departure(v, sm, max(b, after_prev - 1), a, w, low, margin[a], p)
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
        if start.warmup and int(st[a]) < start.warmup_end:
            # the LR was still climbing: the LR the warmup heads for is the suspect
            tail += (
                f" (it began inside the warmup — {start.warmup}: the LR it warms up to is "
                "likely too high; lower the peak LR or lengthen the warmup)"
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
                in_warmup=bool(start.warmup and int(st[a]) < start.warmup_end),
                stretch_steps=length,
                smooth_window=w,
            )
        )
    return out
