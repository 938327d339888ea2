"""How a log starts: where the run's own LR warmup ends, and whether the log resumes a run.

Detectors used to skip "the first max(50, 2 %) logged steps" as warmup. That is wrong
three ways on logs people have: an excerpt that starts at iteration 29,020 has no warmup
in it; a 15-point log is then never judged; a resumed run's first 50 steps are skipped
though nothing warms up there. Warmup is what the run shows or declares:

- the LR ramp seen in the log: the LR starts at or below half its peak and climbs; the
  warmup ends at the first step where it reaches ``reach`` = 95 % of its largest value
  (of its 5-point centered median: a one- or two-step LR shock is no peak; a ramp that
  never levels off covers the whole log);
- a declared warmup (``ctx.schedule["warmup_steps"]``) compared with the REAL step numbers:
  a log starting at step 29,020 with 2,000 warmup steps has no warmup in it.

Otherwise there is none. A log resumes a run when its first step lies well past where a
fresh run logs first (more than two logging intervals past step 1), or its epoch
counter starts at 2 or more (a Lightning ``version_N`` folder whose step counter
restarted while the epoch did not).
"""

from __future__ import annotations

import math

import numpy as np

from trainlens.core.dataclass import dataclass
from trainlens.core.run import Run
from trainlens.core.stats import centered_rolling_median, median_step
from trainlens.detectors.base import Context

LR = "lr"
EPOCH = "epoch"
#: points of the centered median the LR's peak is taken from (a shock is no warmup peak)
RAMP_SMOOTH = 5


@dataclass(frozen=True)
class Start:
    """``warmup_end``: the first step after the warmup (the log's first step when there
    is no warmup in it); ``warmup``: where that came from, or None; ``resumed``: why the
    log looks like it continues an earlier run (an excerpt or a resume), or None."""

    first_step: int
    warmup_end: int
    warmup: str | None
    resumed: str | None

    def in_warmup(self, step: int) -> bool:
        return step < self.warmup_end


def declared_warmup(ctx: Context | None) -> int:
    raw = ctx.schedule.get("warmup_steps") if ctx is not None and ctx.schedule else None
    try:
        w = float(raw) if raw is not None else 0.0
    except (TypeError, ValueError):
        return 0
    return int(w) if math.isfinite(w) and w > 0 else 0


def lr_ramp_end(steps: np.ndarray, lr: np.ndarray, reach: float = 0.95) -> int | None:
    """The first step where an LR that starts low reaches ``reach`` of its largest value
    (None when the log shows no ramp: the LR starts above half its peak, or falls).

    Its largest value is that of its centered 5-point median: an LR shock of a step or
    two (lr_shock_recover: x40 for one step at 400, after a 50-step warmup) is no peak a
    warmup ramps to, and taking it for one made the whole run before it "warmup"."""
    ok = np.isfinite(lr) & (lr > 0)
    if ok.sum() < 2:
        return None
    s, v = steps[ok], centered_rolling_median(lr[ok], RAMP_SMOOTH)
    peak = float(v.max())
    if not v[0] <= 0.5 * peak or int(np.argmax(v)) == 0:
        return None
    return int(s[int(np.argmax(v >= reach * peak))])


def resumed_reason(run: Run, first: int, interval: int) -> str | None:
    """Why the log looks like it continues an earlier run, or None for a fresh start."""
    if first > 2 * max(interval, 1) + 1:
        return f"the log starts at step {first}"
    restored = run.metadata.get("restored_checkpoint")  # (readers/_run_resume.py)
    if isinstance(restored, str):
        return f"the log restored a training checkpoint before its first step ({restored})"
    if run.has(EPOCH):
        _, ep = run.series(EPOCH, finite=True)
        if ep.size and ep[0] >= 2:
            return f"the log starts at epoch {ep[0]:g}"
    return None


def run_start(run: Run, steps: np.ndarray, ctx: Context | None) -> Start:
    """Where the series at ``steps`` (a metric's logged steps, sorted) leaves the run's
    warmup, and whether its log resumes a run."""
    first = int(steps[0]) if steps.size else 0
    interval = max(1, int(median_step(steps))) if steps.size >= 2 else 1
    resumed = resumed_reason(run, first, interval)
    end, why = first, None
    if run.has(LR):
        # the run's, whatever series asks: four detectors ask for it
        ramp = run.memo("lr_ramp_end", lambda: lr_ramp_end(*run.series(LR, finite=True)))
        if ramp is not None and ramp > first:
            end, why = ramp, f"the LR ramps up until step {ramp}"
    # the declared warmup counts the schedule's steps, which a resumed log may not
    w = declared_warmup(ctx)
    offset = ctx.step_offset if ctx is not None else 0
    if w - offset > end:
        end, why = w - offset, f"declared warmup of {w} steps"
    return Start(first, end, why, resumed)
