"""Gradient-norm tail spikes and loss spikes, paired by lead and lag; absolute grad bounds.

Needs `grad_norm` (pre-clip) and/or `train/loss` · real logs:
`tests/test_spikes_real.py`

Severity by code
    | code | name | severity |
    |---|---|---|
    | GRAD001 | grad-spike-precedes-loss-spike | info (one-off) · warning (persisted, recovered) · error (never recovered / non-finite) |
    | GRAD002 | grad-spike-without-loss-response | info (one-off) · warning (stayed up, or repeated) |
    | GRAD003 | grad-norm-vanishing | warning (fell below 1e-2 after warmup and the loss stalled) · info otherwise |
    | GRAD004 | grad-norm-exploding | warning (rose above 100, or the loss is not falling) · info (there from the start; or settled there, level, while the loss fell by a tenth or more) |
    | LOSS001 | loss-spike | as GRAD001 |
    | DATA006 | metric-not-computed | info (a data-quality note) |

What it flags
    - **GRAD001** — the pre-clip grad norm jumped far above its rolling median and the
      training loss jumped above its own trend at the same step or within the lag window
      after it. One finding per event, with `lead_step` (the grad spike), `lag_step` (the
      loss spike) and `lag` in **steps** (0 when both moved at the same step). Also:
      `grad_ratio` (peak / baseline), `grad_ratio_at_lead`, `grad_baseline`, `grad_peak`,
      `grad_peak_step`, `loss_baseline`, `loss_peak`, `loss_peak_step`, `loss_excess`,
      `loss_excess_rel`, `loss_z`, `recovered_step`, `nonfinite_step`.
    - **GRAD002** — a grad-norm spike the loss did not follow: an early warning. Repeated
      grad-only spikes (a cluster the run's own spike rate does not explain) are one warning
      listing their steps.
    - **LOSS001** — a loss spike with no grad-norm spike leading it, or with the grad norm
      not logged; what moved before it (the LR, the loss scale, …) is named (below), and "a
      bad batch or corrupt data" is said only when nothing did. When the grad norm spikes only *after* the
      loss, the finding says so (`grad_spike_step`).
    - **GRAD003 / GRAD004** — the grad norm below `1e-2` / above `100` (5-point median) for a
      sustained stretch. The finding starts where the norm **left its tail** (the band of
      the `window` points before the stretch: their median ×/÷ max(e^(3σ), 1.5)), not where
      it happened to cross the bound; `crossed_step` keeps the crossing. A norm that rose
      above the bound and then sits there, level (its last fifth's median under 1.5× its
      first fifth's), while the loss falls by a tenth of its level or more over the same
      steps is the scale of that loss, not gradients exploding: info (an MMDetection
      D-FINE run, 37 summed loss parts under max_norm 0.1 clipping: ~140 for 1,350
      iterations while the loss fell 20 → 5.6). One that keeps climbing is still a warning.
    - **DATA006** — the grad norm is exactly 0 at 3 logged steps or more (at every step, from
      some step to the end, or here and there): it was not computed there (Megatron prints
      `grad norm: 0.000` when it does not compute it, and at skipped fp16-overflow steps; a
      real gradient norm is not exactly 0.0 in floating point). A data-quality note; exact
      zeros are never judged (no GRAD003 "vanishing", no spike baseline).

    ### Short, excerpted and resumed logs

    Nothing is skipped as "the first N logged steps". Every point with a value before it is
    judged: the first `min_sigma_points` = 10 points (too few before them for a robust
    sigma — the MAD of three normal values is below a third of their sigma one time in
    six) only for gross jumps over the median of what came before (loss ×1.5, grad norm
    ×5: a loss going 2.77 → 7.34 in the second point of an excerpt is a blow-up at any
    length); the loss there is also judged against the robust local trend of its
    neighbours (the median of as many values either side, up to two, and at least both next
    points; noise from the MAD of one-step changes around their median change): a fresh
    run's loss falls fast, the median of what came before lies above the trend and would hide
    a spike (gated_flash: 10.88 at iteration 6 between 9.91 and 9.76). From then on the
    rolling test. The grad norm's very first value is no baseline for a gross jump (two
    values before are needed: at initialization the norm can sit far from where the first
    updates take it), and a grad-only excursion (GRAD002) that starts in the first 10 points
    is info, the norm settling after initialization. Over the first `window` points the sigma is the
    smaller of the deviations' MAD and a trend-free MAD of one-step changes / √2, because at
    the start of a run the series falls fast and the lagged median trails it (llama3-1b:
    1.7 against 0.4 in log space, which hid a 29x grad spike at step 30). A gross jump that
    every later point of a short log stays above is an error (never came back) once two
    points follow it. The z-scores `grad_z` / `loss_z` are caps: a run of n points needs the
    two-sided normal quantile at 0.001 / n (Bonferroni; 6.1 at 1M points, 4.5 at 128), never
    below `min_z` = 4. The run's own warmup (the LR ramp seen in the log, or a declared
    warmup against the real step numbers; `trainlens/detectors/_start.py`) only decides
    whether a GRAD003/GRAD004 stretch "moved in" after it and which points set how noisy
    "back" may be: spikes during warmup are judged (warmup instabilities are real ones).
    Fewer than 2 values of both series: the detector is skipped, with its reason.

    Severity says what happened after the spike: **info** for a one-step outlier the loss
    shrugs off at once (back within 5 logged points); **warning** when the loss (or grad
    norm) stayed up longer and then recovered; **error** when the loss never came back near
    its pre-spike level, or became non-finite.

    ### What moved first (all loss events)

    After every detector has run, one shared step (`trainlens/detectors/_causes.py`, not a
    detector) explains each loss event — GRAD001, LOSS001, LOSS003 (loss_trend) and NAN001 on
    `train/loss` (nonfinite). In a look-back window before the loss onset (max(50 steps, 10
    logging intervals); for LOSS003, a slow rise seen late, at least 5 % of the run) it finds where each optimizer-side signal first left its own tail,
    orders them by step, and puts the chain in the message and in `evidence.chain` /
    `evidence.first_mover` / `evidence.first_mover_step` (docs/json.md). The lead/lag
    evidence (`lead_step`, `lag_step`, `lag`) stays as it was.

    ```
    … what moved first: lr rose ×40 at step 400 against its declared schedule (0.0877 vs planned 0.00219 at step 400) → grad norm left its tail at step 400 (87, ×48.7 its median 1.79) → update ratio left its tail at step 400 (0.249, ×38.1 its median 0.00653) → loss at step 401; check the scheduler and the LR the optimizer actually used at that step.
    ```

    | signal | departure (the onset is where it left the band, not where a large threshold is crossed) | advice when first |
    |---|---|---|
    | `lr`, declared schedule | off the planned value (the step either side allowed) by more than ×1.1, confirmed at ×1.5; a warmup ramp or step decay that follows the plan is never a mover | check the scheduler and the LR the optimizer actually used |
    | `lr`, no declaration | a jump of its log step change beyond 6 σ of the previous changes and ≥ ×1.5 in one interval (warmup and cosine/linear decay change smoothly, by a few % per interval); for a sustained rise (LOSS003, or a loss back only after ≥ 50 points) also an LR still climbing to its highest yet, ×2 or more since its last low | as above; for the climb: lower the peak LR or lengthen the warmup |
    | `loss_scale` | any drop (its growth every N steps is not a departure); where overflows are routine, only more drops in the window than the run's own rate explains (Poisson, 1 %) | an fp16 overflow |
    | `grad_norm` | beyond max(3 σ, ×1.5) of its tail — the median of the 10 points before; σ the MAD of the successive log differences of the 50 points before, which a trend does not inflate — and reaching max(6 σ, ×3) (this detector's spike rule) before the loss; or non-finite strictly before the loss (not in fp16 runs) | tighten clipping or lower the LR (at the loss' own step: a bad batch or a step too large) |
    | `update_ratio` | as the grad norm | the optimizer state (Adam's moments after a reset or resume) and the LR |

    A move must start in the window and last until at most the pairing lag (10 steps or 3
    intervals) before the loss: a spike that was over before that is another event. At one
    step the order is lr, loss scale, grad norm, update ratio (the LR is set before the step;
    the update follows the gradient). When nothing moved first the finding says "nothing
    optimizer-side (…) moved before the loss at step N" and, for a spike, "look at the
    batches at that step" — only then. An LR climbing in its *declared* warmup before a
    sustained rise is not a mover; the message says the planned peak may be too high
    (`evidence.planned_lr_ramp`).

    Measured (`tests/test_causes.py`): `lr_shock_recover` / `lr_shock_diverge` → lr at 400
    (×40 against the plan), grad norm and update ratio at 400, loss at 401 (without the
    declared schedule the LR's own history finds the same jump); `resume_lr_reset` LOSS003 →
    lr fell ×0.0575 from 601 (the reset); `nan_divergence` → nothing moved before the NaN at
    450; BLOOM-176B → grad norm left its tail at 31215 (0.947, ×4.6), a step before the loss
    (31216); Lightning `version_13` → lr climbing since step 9 (×410 to 2.95e-4) before the
    loss turned up at 3689; Megatron-DeepSpeed fp16 (loss scale doubling every 500) never
    names the scale. Calibration: 24 simulated runs with bad-batch spikes (inside and after
    an undeclared warmup; cosine LR, fp16 scale growth, log-normal grad norm and update ratio
    with σ up to 0.3) name nothing. Cost on a 1M-step run: 0.06–0.15 s.

Why it matters
    Loss spikes in large runs (PaLM, OPT, BLOOM) are typically preceded by a grad-norm spike a
    step or a few steps earlier (Molybog et al. 2023, *A Theory on Adam Instability in
    Large-Scale Machine Learning*; Takase et al. 2023, *Spike No More*): the grad norm is the
    early warning and the lag is the time there was to react. A spike the run never recovers
    from wastes every later step; PaLM's remedy (Chowdhery et al. 2022, §5.1) is to restart
    from a checkpoint ~100 steps before the spike and skip the batches around it, or to lower
    the LR. Vanishing or exploding grad norms for a long stretch mean the updates are
    useless or all clipped.

Default thresholds and their source
    | parameter | default | meaning / source |
    |---|---|---|
    | `window` | 50 | causal rolling baseline, in **logged points** (so sparse logging works). Lightning `SpikeDetection` uses `window=10`; 50 gives a steadier median/MAD. |
    | `min_baseline` | 3 | points the rolling median needs (sparse notes logs) |
    | `min_sigma_points` | 10 | before this many points only gross jumps are judged (see above) |
    | `gross_loss_rel`, `gross_grad_ratio` | 0.5, 5 | a gross jump: the loss ×1.5, the grad norm ×5 over the median before it |
    | `spike_alpha`, `min_z` | 0.001, 4 | the z a spike needs in a run of n points: the normal quantile at `spike_alpha` / n, between `min_z` and `grad_z` / `loss_z` |
    | `grad_z` | 6 | (a cap, see `spike_alpha`) robust z of log grad norm (MAD × 1.4826, floored at `grad_sigma_floor` = 0.05): the W&B-style z-score anomaly filter, set high because a 1M-step run makes a million tests |
    | `grad_ratio` | 3 | AND at least 3x the rolling median: Lightning `SpikeDetection(rtol=2.0)` flags a value ≥ (1 + rtol) × its running mean |
    | `loss_z` | 6 | (a cap) robust z of the loss against its rolling median (its trend) |
    | `loss_min_rel` | 0.05 | AND at least 5 % above the trend. Megatron's `check_for_spiky_loss` (10x the largest loss seen) only catches blow-ups; BLOOM's documented spike was +130 %, its lead-in +17 % |
    | `lag_window`, `lag_window_points` | 10, 3 | a loss spike starting within 10 steps (or 3 logging intervals, if longer) after the grad spike — or while it lasts — follows it |
    | `recover_k`, `recover_rel`, `recover_points` | 3, 0.02, 3 | back = the value and the median of the next 3 points within max(3 σ, 2 %) of the pre-spike trend (grad norm: within max(3 σ, 1.5x)) |
    | `transient_points` | 5 | back within 5 logged points: a one-off (info) |
    | `min_points_after` | 10 | logged points after a spike needed to call "never recovered" an error (fewer: warning) |
    | `repeat_count`, `repeat_window`, `repeat_alpha` | 3, 200, 0.001 | grad-only spikes: ≥ 3 in 200 logged points, and more than the run's own spike rate explains (Poisson tail, Bonferroni over the run's sliding windows, level 0.1 %) |
    | `recover_quantile` | 0.99 | "back" is also never stricter than the run's own 99th percentile of excess over the baseline: with heavy-tailed noise 3 σ is crossed often by chance |
    | `vanish_below`, `explode_above` | 1e-2, 100 | absolute bounds; typical pre-clip LLM grad norms are 0.1–10 (BLOOM-176B ≈ 0.15–0.25, GPT-2 in llm.c ≈ 0.25–2) |
    | `sustain_points`, `sustain_frac` | 50, 0.05 | "sustained" = ≥ 50 consecutive logged points or ≥ 5 % of the run |
    | `bound_hysteresis` | 1.5 | a stretch lasts until the norm is back past the bound ×/÷ 1.5, so dips around the bound do not split it |
    | `max_info_findings` | 5 | at most this many info findings per code (the largest); each carries `similar_total` |

    Spike points are grouped into excursions: an excursion starts at a spike point and lasts
    until the series is back (against the level frozen at its start); every spike point
    before that belongs to it.

    **Gaps in the log** (a step jump over `gap_intervals` = 3 typical logging intervals: an
    excerpt, notes spliced from several restarts, a resumed log): a grad excursion not back
    by a gap ends there (its come-back unknown) and spike points after the gap start their
    own; a loss spike after a gap is never paired with a grad spike before it (BigScience's
    tr8b-104B chronicles paired 12000 with 17062, "lag 5062"). Across a gap where the loss
    level moved by more than a gross jump (×1.5 either way, medians of 3 points each side)
    the loss is judged piece by piece: a restart with other settings (tr8-104B: 6.4–10
    before, 3.3 after) is no baseline for the next piece. The grad norm, whose band a run
    keeps, keeps the whole log as its baseline. A loss stuck at exactly one value (0.0 when
    no loss is computed) has no spike. Non-finite values are skipped (NAN001 reports them), except
    that a loss turning non-finite during an excursion makes it an error.

Known false positives
    - A deliberate change of data mix, sequence length or batch size mid-run moves the loss
      level: reported as a loss spike that does not come back.
    - Grad norms logged after clipping cap spikes (missed rather than falsely flagged);
      fp16 loss-scale overflow steps logged with a scaled grad norm look like spikes.
    - Per-step losses of small-batch runs are right-skewed (hard batches): the modded-nanogpt
      records show 6–15 σ one-step loss outliers. They are reported as capped one-off
      **info** findings, never warnings.
    - Grad norms are scaled per implementation (sum vs mean reduction, loss scaling): a run
      that sits outside [1e-2, 100] from its start gets only info.

Measured
    - BLOOM-176B chronicles (sparse, quoted log lines): **GRAD001 warning** — grad norm
      left its baseline (0.24) at step 31216 (2.39, 9.9x; peak 960 at 31219), the loss
      peaked at 31219 (5.10; lag 3); back by 31250, as the notes say. What moved first: the
      grad norm left its tail a step earlier, at 31215 (0.947, ×4.6 its 0.21). The notes hold
      only 18 loss values, so 31216 (the 4th) is among the first points, judged only for a
      gross jump or against its neighbours: its +17 % (2.60 vs 2.22) stays under the neighbour
      test's noise, which the excerpts' jumps inflate (it was lag 0 when the rolling test
      judged it from a 3-value MAD).
    - Short real logs (issue 13): gated_flash GRAD001 info at 3 (loss back up at 6, lag 3);
      llama3-1b rank 3 GRAD002 info at 5 and 30 ("the loss rose only 3.1 %"); sink_torch
      DATA006 (grad norm 0.000 at every step) instead of GRAD003; MetaMath LOSS001 info at 28
      (z ≈ 4.7 of 128 points, over the Bonferroni 4.5); a 5-line Megatron excerpt going
      2.77 → 7.34 → 8.72: LOSS001 error.
    - modded-nanogpt records (AdamW, Muon, llm.c 19 560 steps with grad norm every step): no
      warning or error; info only (llm.c: grad-only one-offs at 4233, 9025, 9954 and a
      same-step grad/loss one-off at 7435).
    - Fixture runs: `lr_shock_recover` GRAD001 warning at 400, lag 1; `lr_shock_diverge`
      GRAD001 error at 400, lag 1, and GRAD004 warning 401–1000 (the 40x LR keeps the grad
      norm above 100); `entropy_collapse` GRAD003 info (the norm falls to 2e-4 once the model
      copies the leaked label, while the loss keeps falling; it leaves its tail at 527 and
      crosses 1e-2 at 646); healthy runs, `nan_divergence`
      and the other fault runs: nothing.
    - 1M steps of Student-t(3) noise on loss and grad norm: no warning (thousands of info
      outliers, listed as the 5 largest per code); about 1–2 s per million logged steps.

Example
    ```
      WARNING  GRAD001   steps 31216–31222 grad_norm spiked at step 31216 (2.39, 9.9x its rolling median 0.242; peak 960 at step 31219) and loss followed at step 31219 (lag 3): 5.098 at step 31219 vs trend 2.293; a one-off: the loss was back by step 31250; grad_norm stayed elevated for 34 steps (7 logged points) and was back by step 31250; what moved first: grad norm left its tail at step 31215 (0.947, ×4.61 its median 0.205; ×4.68e+03 at step 31219) → loss at step 31219; tighten gradient clipping or lower the LR.
    ```
"""  # noqa: E501  (tables: one row a line)

from __future__ import annotations

import numpy as np

from trainlens.core.dataclass import dataclass
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
