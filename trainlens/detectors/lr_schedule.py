"""LR schedule: the realized learning rate against the declared schedule, or against what
any sane schedule does when none is declared.

What it flags
    With a declared schedule (config, ``--schedule``, or a run config beside the run), the
    logged ``lr`` (or the param group ``lr/pgN`` that follows it) is compared step by
    step with the plan, after trying the conventions real code differs in (LR logged
    before or after ``scheduler.step()``, warmup counted from step 0 or 1, HF's ramp from
    0 vs nanoGPT's from peak/W vs PyTorch LinearLR's from a start factor, the log's print
    precision, sparse logging). When they differ, it names the
    pattern: LR002 ``lr-schedule-advanced-twice`` (realized(t) ≈ declared(k·t): the
    scheduler is stepped k times per optimizer step, e.g. twice, or once per micro-batch);
    LR003 ``lr-flat-after-warmup`` (the LR stops changing where decay was declared: the
    scheduler stopped stepping); LR004 ``lr-warmup-missing`` (the LR starts at peak
    although a warmup was declared); LR005 ``lr-zero`` (LR exactly 0 where the plan
    trains); LR006 ``lr-schedule-reset`` (from some step the plan starts over:
    realized(t) ≈ declared(t − t0), e.g. a resume that did not restore the scheduler);
    otherwise LR001 ``lr-schedule-mismatch`` with the first deviating step, the stretch,
    and the largest relative deviation. Before any of these, a log that departs from the
    plan at its logged steps but follows it at an offset, realized(step) ≈
    declared(step + t0) (a resumed run whose step count restarted while the scheduler
    went on, an excerpt counted from 0, per-epoch vs global counters), is aligned: the
    plan is inverted at a few logged values, the median offset is checked on the whole
    log, and the log is judged against declared(step + t0); LR008 ``lr-schedule-offset``
    (info) says so, or that the schedule could not be aligned when the log sits where
    the plan is flat and many offsets fit. A log that starts at the plan's start is
    aligned only at a pinned offset past twice the warmup (else: LR004 at peak, LR001).
    Without a declared schedule it flags only what no
    sane schedule does: LR007 ``lr-schedule-anomaly`` for the LR rising again after its
    decay began, jumping up after a long plateau (or briefly, and falling back), or
    dropping far faster than its neighbouring steps change it (steady decays and step
    decays, which drop by a factor on an otherwise flat LR, are fine), and a negative LR;
    LR005 for exact zeros mid-run (a zero on the very first step of a warmup and at the
    end of a decay to zero are fine).

Why it matters
    The schedule is the one hyperparameter that is easy to get silently wrong: a
    scheduler stepped twice (or per micro-batch) decays to its floor halfway through; a
    scheduler that is not stepped, or not restored on resume, leaves the LR at peak or
    replays the warmup; a missing warmup is a classic cause of early divergence. None of
    these crash, and the loss curve alone rarely shows them.

Default thresholds
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

Known false positives
    Cyclic schedules (SGDR warm restarts, triangular CLR, multi-cycle cosine) without a
    declaration are reported as LR007 (by design: declare them). A hand-tuned LR change
    mid-run (OPT/BLOOM logbooks) is reported, correctly but perhaps knowingly. A declared
    schedule whose ``total_steps`` differs from what the code used (e.g. HF computing
    steps from epochs) is a real mismatch and is reported (LR001 with the time scale).
    Logs whose step axis is not optimizer steps (samples, tokens) mismatch any declared
    schedule in steps. Adaptive optimizers that log a changing effective LR (D-Adaptation,
    Prodigy) are fine unless their LR falls and then rises. A resumed run whose step count
    restarted at most two warmups into the plan looks like a fresh run without warmup
    (LR004). Missed: an LR stuck on a value the plan holds over a long flat stretch (a
    WSD plateau, the floor after the decay) in a log that does not start at the plan's
    start is only an LR008 note; a log off the plan over more than a tenth of its points
    is judged at its logged steps (flagged, but not told it is offset).

Example
    ``WARNING  LR002  steps 1–1000  lr follows the declared cosine schedule advanced 2
    steps per optimizer step (realized(t) ≈ declared(2t-1)) from step 1: it reaches the
    end of the plan at step ~501 instead of 1000 — scheduler.step() is probably called 2
    times per step (or per micro-batch).``
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

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
