"""LR schedule: the realized learning rate against the declared schedule, or against what
any sane schedule does when none is declared.

The plan itself: `trainlens/core/schedules.py`, `declared_lr(schedule,
steps)`, which the report plots as "LR vs plan". Needs: `lr` (or a param-group LR
`lr/pg1`, … — Lightning's `lr-AdamW/pg1` maps there); skipped with "needs lr, not
logged" otherwise.

Severity by code
    | code | name | severity |
    |---|---|---|
    | LR001 | lr-schedule-mismatch | warning (≥ 10 % off), info below |
    | LR002 | lr-schedule-advanced-twice | warning |
    | LR003 | lr-flat-after-warmup | warning |
    | LR004 | lr-warmup-missing | warning |
    | LR005 | lr-zero | warning (info: zeros after the schedule ended) |
    | LR006 | lr-schedule-reset | warning |
    | LR007 | lr-schedule-anomaly | warning |
    | LR008 | lr-schedule-offset | info |

What it flags
    **With a declared schedule** — from `[tool.trainlens.schedule]`, `--schedule`, or a run config
    archived beside the run (`config.json`, `hparams.yaml`, …; keys `shape`, `warmup_steps`,
    `peak_lr`, `min_lr`, `total_steps`, `decay_steps`, `stable_steps`, `step_size`, `gamma`,
    `first_step`) — the logged LR is compared with the plan at every logged step. Before calling
    anything a mismatch it tries the conventions real code differs in, and keeps the one that
    explains most points:

    - LR read before or after `scheduler.step()`, and warmup counted from step 0 or 1: the realized
      LR may equal the plan up to three steps earlier or later;
    - the warmup ramp: from peak/W at the first step (nanoGPT, llm.c, Megatron), from 0 (Hugging
      Face's `get_*_schedule_with_warmup`), or from a start factor (PyTorch's `LinearLR`, default 1/3);
    - the param group: the first LR series that follows the plan is used (`lr`, `lr/pg1`, …);
    - the log's print precision (llm.c prints `lr:%f`: 1e-6; Megatron `%.3E`), float32 rounding,
      sparse logging.

    When the LR still departs from the plan it names the pattern, each tested as a time map of the
    plan that must explain 90 % of the logged points:

    - **LR002** realized(t) ≈ declared(k·t): the scheduler is stepped k times per optimizer step
      (twice, or once per micro-batch with gradient accumulation);
    - **LR003** the LR goes flat to the end where the plan decays: the scheduler stopped stepping
      (after warmup, or at a later step, which the message names);
    - **LR004** the LR is at (or near) its peak during the declared warmup;
    - **LR005** the LR is exactly 0 where the plan trains;
    - **LR006** from step t0 the plan starts over, realized(t) ≈ declared(t − t0): a resume that
      restored the model but not the scheduler;
    - **LR001** anything else, per stretch: first step, last step, the worst point (realized vs
      planned) and the largest relative deviation; "it is 40× the plan throughout" when the ratio is
      constant (a wrong peak, an LR multiplier), or "decays over ~800 steps, not the declared 1000"
      when the code's total steps differ from the config.

    **A log whose steps are offset from the plan's.** A resumed run whose logged step restarted
    while its scheduler went on (Lightning's `step` after a resume, with `epoch` carrying on), an
    excerpt whose steps count from 0, a per-epoch counter against a global one: the LR does not
    match `declared(step)` but does match `declared(step + t0)` for one offset t0. Before calling
    anything a mismatch, when the plan at the logged steps explains less than 90 % of the points,
    the detector looks for that offset:

    1. the plan is inverted at 48 logged values spread over the log (`value_positions` in
       `_schedules.py`: on each monotone stretch of the plan, the step where it takes the value; on
       a flat stretch, the whole stretch), which gives each value the offsets it allows;
    2. the offsets most of those values agree on (a sweep over the allowed ranges) are scored on
       the log, and the best is the median of its values' exact inversions;
    3. that offset must explain 90 % of the logged points (the detector's usual tolerance and
       timing conventions), the first ones among them, with the log's first point at or after the
       plan's start (a reset mid-log is LR006, not an offset);
    4. it must be pinned down by the data: no other, distinct offset explains the log as well, the
       offsets that fit span no more than the log's own length, and the aligned plan changes by at
       least 2 % (twice `rtol`) over the log.

    When all hold, the log is judged against `declared(step + t0)` — every finding carries
    `evidence.step_offset` — and **LR008** (info) says so: "lr follows the declared cosine schedule
    with the log's steps offset by +62,499 from the schedule's: logged step 9 (0.000781) is the
    plan's step 62,508 (0.000781); its epoch starts at 100, not 0 — a resumed run …". When the log
    matches the plan only where the plan is flat (a WSD plateau, the floor after the decay, a
    constant), many offsets fit: LR008 says the schedule could not be aligned (`evidence.aligned:
    false`, `offset_range`), and the log is not judged against the plan. A log off the plan over
    more than a tenth of its points after the offset is judged at its logged steps (still flagged).

    A fresh run without its warmup is itself the plan at an offset (`declared(step + W)`). So a log
    that starts at the plan's start (its first point in the first half of the declared warmup, or in
    the first three steps without one) is taken at its word unless the data pin an offset past twice
    the warmup: one that starts at its peak is a missing warmup (LR004), one stuck on the plan's floor
    a mismatch (LR001), never an offset.

    **Without a declared schedule** it flags only what no sane schedule does:

    - **LR007** the LR rising again more than 1 % above its lowest value since its decay began (a
      shock, a scheduler reset on resume, an undeclared cyclic schedule), to 1 % of its peak or
      more (below that, a cosine annealed past its end by a few print units, no update changes);
    - **LR007** a jump up out of a plateau that is not a warmup: the LR held the plateau over 3× as
      long as the ramp took to reach it, or falls back to it sooner than it held it (a staircase
      warmup stepped per epoch is fine);
    - **LR007** a drop of ×1.5 or more in one logging interval that is 20× steeper (per step) than
      the median change of the 10 intervals on each side — a step decay drops on a flat LR (median
      change 0) and is fine, so is ReduceLROnPlateau;
    - **LR007** a negative LR;
    - **LR005** exact zeros mid-run. Not: a 0 at the first step of a warmup from 0, the last one or
      two steps of a decay to 0, or a tiny LR printed as 0 at the log's resolution. A longer run of
      zeros at the end (the run trained on after the schedule ended) is info.

Why it matters
    The schedule is easy to get silently wrong and nothing crashes when it is: a scheduler stepped
    per micro-batch reaches its floor long before the run ends; one that is not stepped (or not
    restored on resume) leaves the LR at peak or replays the warmup; a missing warmup is a classic
    cause of early loss spikes with Adam. The loss curve rarely shows which of these happened; the
    LR curve does, if someone compares it with the plan.

Default thresholds and their source
    ``rtol`` 1 % relative plus an absolute floor of 0.1 % of the peak LR, one unit of
    the log's print resolution (llm.c prints ``lr:%f``, so 1e-6) and half a unit of its
    last printed digit (``%.2e``): wider than float32 rounding (~1e-7), far narrower than
    any schedule bug. Timing conventions: realized(t) may equal declared(t ± 1..3) — the ±1 of
    logging before/after ``scheduler.step()`` (PyTorch's documented call order) and
    first_step 0 vs 1 — so a step-timing convention is never a mismatch. A diagnosis must
    explain ``explain_frac`` = 90 % of the logged points. LR001 is a warning at 10 %
    deviation or more, info below. Without a declaration: a rise of more than 1 % above
    the lowest LR since decay began (plain and cosine/linear/step/WSD/inverse-sqrt
    schedules never rise after their peak — Loshchilov & Hutter's SGDR restarts and
    cyclical LRs do, and must be declared); a drop is a "jump" when it is at least
    ×1.5 in one logging interval and its per-step rate is 20× the median rate of the
    10 intervals on each side (a step decay drops on a flat LR, whose median rate is 0),
    in log terms and in the LR's own units both (a linear phase nearing its floor, like
    OneCycleLR's three-phase kink, is steep only in log terms);
    a plateau of 3+ points must precede an upward jump. An offset must explain 90 % of
    the points from the log's first ones on, be the only one that does, be known to
    within the log's length, and the aligned plan must change by 2 % (twice rtol) over
    the log.

    | parameter | default | why |
    |---|---|---|
    | `rtol` | 0.01 | far above float32 rounding (~1e-7) and 3-significant-digit logs (≤ 0.5 %), far below any schedule bug (a double step is 10–100 % off) |
    | `atol_frac` | 1e-3 | absolute floor as a share of the peak, so the tail of a decay to 0 is not judged in relative terms; raised to the log's print resolution (`%f`: 1e-6) and to half a unit of the last printed digit (`%.2e`) when the values are rounded — a log is not judged beyond its precision |
    | `max_shift` | 2 | ±1 for logging before/after `scheduler.step()` (PyTorch's documented call order), ±1 for first_step 0 vs 1; each candidate also accepts its ±1 neighbours |
    | `explain_frac` | 0.9 | a diagnosis must explain 90 % of the logged points |
    | `warn_rel_dev` | 0.10 | LR001 is a warning from 10 % off |
    | `rise_rtol` | 0.01 | no schedule in PyTorch's `lr_scheduler` or HF's `optimization` rises after its peak except the cyclic ones (SGDR, Loshchilov & Hutter 2017; CyclicLR, Smith 2017) |
    | `plateau_points` | 3 | an upward jump needs a plateau of 3+ points before it |
    | `drop_factor`, `drop_rate_ratio`, `neighbour_window` | 1.5, 20, 10 | a drop counts as a jump when it is one-third or more in one interval and 20× steeper than its neighbours |
    | `align_min_change` | 0.02 | an offset is pinned only where the aligned plan changes by twice `rtol` over the log — on a flatter stretch any offset on it fits |
    | `max_findings` | 5 | per code; the rest are summarized |

    Declared shapes follow the formulas of PyTorch's and Hugging Face's schedulers (tested against
    both in `tests/test_lr_schedule_real.py`): cosine `min + (peak − min)(1 + cos πp)/2` (PyTorch's
    `CosineAnnealingLR` and HF's `get_cosine_schedule_with_warmup` are this curve), linear, constant,
    inverse-sqrt (`peak·sqrt(W/n)`, fairseq; HF's `get_inverse_sqrt_schedule`), step (`StepLR`,
    gamma 0.1 unless given), warmup-stable-decay (HF's `get_wsd_schedule`; `decay_shape` linear,
    cosine or 1-sqrt; with neither `decay_steps` nor `stable_steps` the decay is the last 20 % of
    the steps after warmup, Hägele et al. 2024). Steps past `total_steps` keep the final value.

Known false positives
    - Cyclic schedules (SGDR warm restarts, triangular CLR, multi-cycle cosine) without a declaration
      are reported as LR007, by design: declare them, or ignore LR007 for such runs.
    - A hand-tuned LR change mid-run (the OPT-175B and BLOOM logbooks have them) is reported —
      correctly, but perhaps knowingly.
    - A declared schedule whose `total_steps` differs from what the code built (HF computing steps
      from epochs; `max_steps: -1`) is a real mismatch and is reported as LR001 with the time scale.
    - Logs whose step axis is not optimizer steps (samples, tokens, epochs) mismatch a schedule
      declared in steps.
    - An LR logged as the mean over the logging interval lags the plan by half an interval during
      warmup (LR001 info/warning there).
    - Adaptive optimizers that log a changing effective LR (D-Adaptation, Prodigy) are fine unless
      that LR falls and then rises.
    - A resumed run whose step count restarted at most two warmups into the plan cannot be told
      from a fresh run without warmup: LR004.
    - Missed: an LR stuck on a value the plan holds over a long flat stretch, in a log that does not
      start at the plan's start, is only an LR008 note (an offset cannot be told from a stuck
      scheduler there); a log off the plan over more than a tenth of its points is judged at its
      logged steps — flagged, but its messages do not know about the offset.

Example
    ```
    WARNING  LR002  steps 1–1000  lr follows the declared cosine schedule advanced 2 steps per
    optimizer step (realized(t) ≈ declared(2t-1)) from step 1: it reaches the end of the plan at
    step ~501 instead of 1000 — scheduler.step() is probably called 2 times per step (or per
    micro-batch).
    WARNING  LR001  step 400  lr deviates from the declared cosine schedule at step 400 (first at
    step 400; worst 0.0877 vs planned 0.00219 at step 400, 3900.0% off) — check the LR the
    optimizer actually uses against the config.
    WARNING  LR007  steps 601–1000  lr rises from 0.00123 to 0.003 (×2.43) at step 601 after its
    decay began at step 68 (peak 0.003): no standard schedule rises after its decay — a shock, a
    scheduler reset on resume, or a cyclic schedule that was not declared.
    ```

Measured
    - modded-nanogpt llm.c record log (19 560 steps, `lr:%f`): silent undeclared, silent against
      llm.c's own schedule (cosine, 700 warmup, peak 6e-4, to 0 at 19 560, first_step 0 or 1);
      the same real curve made to step twice → LR002, frozen after warmup → LR003; against a
      linear plan → LR001 from step ~900.
    - BLOOM-176B chronicles (18 sparse `learning rate` values, 4 significant digits): silent.
    - Fixture runs (`fixtures/make_runs.py`): lr_double_step → LR002 at step 1; lr_no_decay → LR003
      at step 51; lr_shock_recover and lr_shock_diverge → LR001 at step 400 (the one step whose LR
      is 40× the plan); healthy_cosine, healthy_wsd, healthy_constant, crash_resume → nothing.
    - `declared_lr` equals Hugging Face's cosine, linear, constant, inverse-sqrt, cosine-with-min-lr
      and WSD schedulers as the Trainer logs them, PyTorch's StepLR and CosineAnnealingLR, and the
      fixture generator's plan (tests/test_lr_schedule_real.py).
    - A seeded sweep of sane schedules (4 shapes, warmups, first step 0/1, LR read before/after the
      step, sparse logging, float32 and `%f`/`%.2e`/`%.6g` printing): no warnings, declared or not;
      the same schedules with each bug injected are named with the right code and nothing else.
    - `Arshya-Guru_deepmind-research/lightning_logs/version_18` (Lightning CSVLogger, resumed at
      epoch 100; hparams.yaml: cosine, warmup 6250, peak 1e-3, 187 500 steps; logged `step`
      restarts at 9): LR008 info, offset +62,499 (epoch 100 × 625 steps per epoch = 62 500), no
      warning — before the alignment it got LR004 (steps 9–4609) and LR001 (steps 4719–14669).
      `version_13` (fresh, ends at step 7269 inside its 12 500-step warmup): silent.
    - Megatron logs (`stark-sim_megatron-deepspeed-lock-clock`, `elena-lyulina_…`) with the
      schedule their arguments print: silent at their real iteration numbers, their last two
      thirds as an excerpt: silent; renumbered from 0: LR008 with the offset (the 15-step runs
      with a 2-step warmup, renumbered, are LR004: an offset of 4 steps is too early to tell).
    - All 17 Lightning CSVLogger folders of Arshya-Guru/deepmind-research (hparams.yaml declares
      the cosine): version_18 LR008 as above, the others silent.
    - A seeded sweep of 60 sane schedules cut at a random step and renumbered from the start: LR008
      with the offset found within ±3 steps in all, no warning.
    - 1M logged steps: ~0.4 s when the run follows the plan, ~0.8 s at an offset (aligned; 0.35 vs
      0.76 s in one run, 0.69 vs 1.01 s in another on a loaded machine), ~1.4 s with a diagnosis (hypotheses
      are screened on 20 000 points), ~0.2 s undeclared.
"""  # noqa: E501  (tables: one row a line)

from __future__ import annotations

from dataclasses import replace

import numpy as np

from trainlens.core.dataclass import dataclass
from trainlens.core.findings import Finding
from trainlens.core.run import Run
from trainlens.core.schedules import missing_keys, shape_of
from trainlens.detectors._lr_declared import declared
from trainlens.detectors._lr_inferred import undeclared
from trainlens.detectors.base import Context, Skip

CODES = {
    "LR001": "lr-schedule-mismatch",
    "LR002": "lr-schedule-advanced-twice",
    "LR003": "lr-flat-after-warmup",
    "LR004": "lr-warmup-missing",
    "LR005": "lr-zero",
    "LR006": "lr-schedule-reset",
    "LR007": "lr-schedule-anomaly",
    "LR008": "lr-schedule-offset",
}
#: the finding that carries a pinned ``step_offset`` (read by run_detectors for the others)
OFFSET_CODE = "LR008"


@dataclass(frozen=True)
class Params:
    #: relative tolerance between realized and declared LR
    rtol: float = 0.01
    #: absolute floor of the tolerance, as a fraction of the peak LR
    atol_frac: float = 1e-3
    #: largest step offset tried between realized and declared (logging before/after
    #: scheduler.step(), first_step 0 vs 1); each candidate also allows ±1 around it
    max_shift: int = 2
    #: share of the logged points a diagnosis (LR002/3/4/6) must explain
    explain_frac: float = 0.9
    #: LR001 is a warning from this relative deviation on, info below
    warn_rel_dev: float = 0.10
    #: no declaration: a rise above the lowest LR since decay began larger than this
    rise_rtol: float = 0.01
    #: no declaration: points of flat LR that must precede an upward jump
    plateau_points: int = 3
    #: no declaration: a drop is a jump from this factor in one interval ...
    drop_factor: float = 1.5
    #: ... and this many times the median per-step rate of its neighbours
    drop_rate_ratio: float = 20.0
    #: neighbouring intervals on each side for that median
    neighbour_window: int = 10
    #: an offset between the log's steps and the plan's is pinned only where the aligned
    #: plan changes by this much over the log (twice rtol: more than its tolerance band);
    #: on a flatter stretch many offsets fit
    align_min_change: float = 0.02
    #: at most this many findings per code (the rest summarized in the last one)
    max_findings: int = 5


# ---- the detector ----------------------------------------------------------------------


def _lr_metric_names(run: Run) -> list[str]:
    names = run.metrics
    out = [m for m in names if m == "lr"]
    out += sorted((m for m in names if m.startswith("lr/")), key=lambda m: (len(m), m))
    return out


def _first_value(run: Run, metric: str) -> float | None:
    if not run.has(metric):
        return None
    _, v = run.series(metric, finite=True)
    return float(v[0]) if len(v) else None


def _series(run: Run, metric: str) -> tuple[np.ndarray, np.ndarray]:
    s, v = run.series(metric, finite=True)
    return s.astype(np.int64), v.astype(np.float64)


def _named(found: list[Finding]) -> list[Finding]:
    """Each finding named from CODES (the helpers name a finding by its code)."""
    return [replace(f, name=CODES[f.code]) for f in found]


def detect(run: Run, params: Params, ctx: Context) -> list[Finding]:
    names = _lr_metric_names(run)
    if not names:
        raise Skip("needs lr, not logged")
    loaded: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def load(metric: str) -> tuple[np.ndarray, np.ndarray] | None:
        if metric not in loaded:
            loaded[metric] = _series(run, metric)
        sv = loaded[metric]
        return sv if len(sv[0]) >= 2 else None

    primary = next((m for m in names if load(m) is not None), None)
    if primary is None:
        raise Skip("needs lr with at least 2 finite values")
    schedule = dict(ctx.schedule or {})
    if schedule.get("shape"):
        try:
            shape_of(schedule)
            incomplete = missing_keys(schedule)
        except ValueError:
            incomplete = ["shape"]
        if not incomplete or incomplete == ["peak_lr"]:
            found = declared(names, load, schedule, params, ctx, _first_value(run, "epoch"))
            return _named(found)
    s, r = loaded[primary]
    return _named(undeclared(s, r, primary, params))
