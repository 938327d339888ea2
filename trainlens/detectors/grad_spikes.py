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

from dataclasses import dataclass

import numpy as np

from trainlens.core.findings import Finding
from trainlens.core.run import Run
from trainlens.detectors._grad_bounds import _bounds
from trainlens.detectors._grad_common import GRAD, LOSS, _Series, typical_interval
from trainlens.detectors._grad_events import _grad_events, _loss_events
from trainlens.detectors._grad_messages import _resolve
from trainlens.detectors._grad_pairing import _pair
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
            out.extend(_bounds(st, gv, loss, w_end, p, CODES))
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
    pending = _pair(gs, ls, p, CODES, no_grad)
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
    out.extend(_resolve(pending, p, CODES))
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
