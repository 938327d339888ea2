"""Validation/train divergence: val loss rising while train loss keeps falling.

What it flags
    VAL001 ``val-train-divergence``: after its best evaluation, a validation loss that
    rises clearly and persistently while the training loss over the same steps still
    falls — overfitting (or a train/val distribution split). Each per-domain validation
    loss (``val/loss/<domain>``) is judged on its own, never pooled with the others.
    The finding names the best step: the checkpoint to keep.

Why it matters
    Past that point more training makes the model worse on what you care about; the
    compute is wasted and the last checkpoint is not the best one. Pooled validation
    losses hide a domain that degrades while the others improve.

Default thresholds
    At least ``min_evals`` = 5 evaluations, ``min_after`` = 3 of them after the best;
    the rise from the best to the mean of the last three evaluations must exceed both
    ``min_rise`` = 2 % of the best value and ``noise_k`` = 3 times the evaluation noise
    (robust scale of successive differences, MAD × 1.4826 / √2), and the Theil–Sen slope
    of the evaluations after the best must be positive. The best level is the median
    of the five evaluations around the best one, so a lucky low evaluation among
    thousands of noisy ones is not taken for a turning point. The training loss must have
    fallen over the same steps (smoothed, by more than its own noise). This is the
    "generalization loss" criterion of early stopping (Prechelt 1998, "Early Stopping —
    But When?", GL_α with α = 2 %) with a noise guard. Severity: warning; error when
    the rise exceeds ``error_rise`` = 10 %.

Known false positives
    A deliberate change of the validation set mid-run; validation on a tiny set, whose
    noise is larger than the guard estimates from few points; schedules that raise the
    LR again (cyclic), which lift val and train loss together (not flagged when train
    rises too).

Example
    ``WARNING  VAL001  steps 400–1000  val/loss rose 8.1 % from its best 1.52 at step
    400 to 1.64 while train/loss fell 0.31; keep the step-400 checkpoint.``
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainlens.core.findings import Finding
from trainlens.core.run import Run
from trainlens.detectors._stats import MAD_TO_SIGMA, theil_sen
from trainlens.detectors.base import Context, Skip, finding

CODES = {"VAL001": "val-train-divergence"}


@dataclass(frozen=True)
class Params:
    min_evals: int = 5
    min_after: int = 3
    min_rise: float = 0.02
    noise_k: float = 3.0
    error_rise: float = 0.10
    tail: int = 3


def _noise(v: np.ndarray) -> float:
    if v.size < 3:
        return 0.0
    d = np.diff(v)
    return float(np.median(np.abs(d - np.median(d))) * MAD_TO_SIGMA / np.sqrt(2))


def _train_change(run: Run, start: int, end: int) -> tuple[float, float] | None:
    """Smoothed train loss at ``start`` and at ``end`` (medians of nearby points)."""
    if not run.has("train/loss"):
        return None
    s, v = run.series("train/loss", finite=True)
    if v.size < 4:
        return None
    span = max(end - start, 1)
    w = max(span // 10, 1)
    before = v[(s >= start - w) & (s <= start + w)]
    after = v[(s >= end - 2 * w) & (s <= end)]
    if before.size == 0 or after.size == 0:
        return None
    return float(np.median(before)), float(np.median(after))


def detect(run: Run, params: Params, ctx: Context) -> list[Finding]:
    metrics = [m for m in run.metrics if m == "val/loss" or m.startswith("val/loss/")]
    if not metrics:
        raise Skip("needs val/loss, not logged")
    out: list[Finding] = []
    for metric in metrics:
        s, v = run.series(metric, finite=True)
        if v.size < params.min_evals:
            continue
        best = int(np.argmin(v))
        after = v[best + 1 :]
        if after.size < params.min_after:
            continue
        best_v = float(v[best])
        tail_mean = float(after[-params.tail :].mean())
        # the rise is measured from the level around the best evaluation, not from the
        # single lowest one: among thousands of noisy evaluations the lowest is an
        # outlier, and every later evaluation would look like a rise from it
        best_level = float(np.median(v[max(best - 2, 0) : best + 3]))
        rise = tail_mean - best_level
        rel = rise / max(abs(best_level), 1e-12)
        noise = _noise(v)
        if rel < params.min_rise or rise < params.noise_k * noise:
            continue
        slope = theil_sen(np.r_[best_v, after], np.r_[s[best], s[best + 1 :]]).slope
        if not slope > 0:
            continue
        train = _train_change(run, int(s[best]), int(s[-1]))
        if train is not None:
            t0, t1 = train
            if not t1 < t0:
                continue  # train rose too: not a generalization gap (LR restart, divergence)
            train_text = f"while train/loss fell {t0 - t1:.3g} ({t0:.4g} → {t1:.4g})"
        else:
            train_text = "(train/loss not logged, so the gap is not confirmed)"
        severity = "error" if rel >= params.error_rise else "warning"
        if train is None:
            severity = "info"
        out.append(
            finding(
                "VAL001",
                CODES["VAL001"],
                severity,
                f"{metric} rose {rel:.1%} from its best {best_v:.4g} at step {int(s[best])} "
                f"to {tail_mean:.4g} {train_text}; keep the step-{int(s[best])} checkpoint.",
                metric=metric,
                step_start=int(s[best]),
                step_end=int(s[-1]),
                best_step=int(s[best]),
                best_val=best_v,
                final_val=float(v[-1]),
                rise=rise,
                rise_rel=rel,
                eval_noise=noise,
                train_at_best=train[0] if train else None,
                train_final=train[1] if train else None,
                gap_at_best=(best_v - train[0]) if train else None,
                gap_final=(tail_mean - train[1]) if train else None,
            )
        )
    return out
