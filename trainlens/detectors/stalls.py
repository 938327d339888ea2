"""Stalls: wall-clock gaps between logged steps far above the run's own step time.

Needs wall-clock times (the frame's `wall_time`: a `time`/`timestamp` key in JSONL/CSV,
TensorBoard's event wall time, …) · fixtures and restarts:
`tests/test_system_detectors_real.py`

Severity by code
    | code | name | severity |
    |---|---|---|
    | DATA002 | stall | info · warning (the pause is ≥ 5 % of the run's wall-clock span) |

What it flags
    A pause in the wall clock between two consecutive logged points far longer than the
    run's own time per step explains: the step after the pause (`step_start`), `gap_seconds`,
    `expected_seconds` (typical per-step time × the steps in the interval), `excess_seconds`,
    `typical_step_seconds`, `median_gap_seconds`, `previous_step`, `share_of_run`,
    `routine_pause_seconds` (see below) and `across_restart`.

    ### Method

    - Every logged point's time is the **earliest** wall time of any metric at that step, so
      an eval's or a checkpoint's duration shows up as a gap before the next step.
    - Points are taken in **wall-clock order**, not step order: after a resume the replayed
      steps add no false gap, and the pause before the resume is measured as it happened
      (`across_restart` true, "between step 700 and the resumed step 601").
    - The typical time per step is the median of gap / Δstep. A gap is a candidate when its
      excess over the expected length is at least (`factor` − 1) typical steps, it at least
      doubles the expected interval (sparse logging), and the excess is at least
      `min_gap_s`.
    - **One step axis.** A series whose points were written when the densest one stood at
      10× their steps or more is on another axis (Keras' `epoch_loss` at step = epoch
      beside `batch_loss` at step = iteration): it adds no points, and a gap in which it
      logged (or within a second after it) is the end of an epoch — the validation and
      the epoch's logs — not a stall. Runs of more than 512 metrics are grouped at once
      and not split by axis.
    - **Routine pauses**: when at least `min_recurring` candidates exist (evals, periodic
      checkpoints), their median excess is the routine pause — or, where pauses of
      several kinds recur, the level of the longest kind that recurs (at least
      `min_recurring` times and a quarter of the candidates, within ×1.5 of one
      another: 15 s epoch-end validations beside 5 s pauses) — and only gaps
      `recurring_factor` × longer are reported.
    - **No training step**: a test loop's results (`test_*`, `test/…`), Lightning's
      `hp_metric` placeholder, and the epoch counter at steps where only those were
      logged add no points: the minutes between `fit` and `test` are no stall.

Why it matters
    A stalled job burns its allocation without training: a hung collective (an NCCL
    timeout pending), a blocked checkpoint write to a slow filesystem, a data loader waiting
    on storage, a preempted or requeued job. Stalls that recur at the same place point to a
    bug; one long stall points to infrastructure.

Default thresholds and their source
    | parameter | default | meaning / source |
    |---|---|---|
    | `factor` | 10 | an order of magnitude above the run's own step time — the judgment is relative, so a 4 s pause in a run of 10 ms steps counts, while a 60 s eval in a run of 2 s steps does not once it recurs (an absolute bound like 60 s would miss the first and flag the second) |
    | `min_gap_s` | 1.0 s | pauses under a second are garbage collection and logging |
    | `min_recurring`, `recurring_factor` | 3, 3 | three similar pauses are routine (eval, checkpoint cadence); only 3x longer ones are stalls |
    | `warn_run_frac` | 0.05 | a single pause of 5 % of the run's wall-clock span is a warning |
    | `max_findings` | 10 | the longest ones |

Known false positives
    - An eval or checkpoint that happens only once or twice (nothing routine to compare with).
    - Coarse clocks in very fast runs; a clock of whole seconds is judged by the shortest
      each gap can have been (a gap read as 2 s is at least 1 s).
    - Runs stitched from separate jobs where the queueing time between them is expected
      (reported, with `across_restart`).
    - A wall clock that jumped (NTP) on one host.

Measured
    - Fixture `crash_resume` (a 4 s pause before step 300 in a run of ~12 ms steps; a
      crash after 700 and a resume from 601 with no pause): **warning at 300** (4.01 s,
      343× the expected 0.0117 s; label 300 ± 0); nothing at the resume.
    - Healthy fixtures (val every 50 steps) and the other fault runs: nothing.
    - A JSONL crash-resume written in the test: no stall without a requeue pause; a 900 s
      requeue → warning at the resumed step 601 (`across_restart`).
    - Real logs: none carries wall-clock times (skipped).
    - A Keras-style logdir of two 3000-batch epochs with a 25 s validation after each
      (`tests/test_stalls_axes.py`): warnings at steps 3000 and 6000 before the axes were
      told apart, nothing after; a 60 s pause at batch 1200 is still a warning there.

Example
    ```
      WARNING  DATA002   step 300         no step was logged for 4.01 s between step 299 and step 300 (343× the expected 0.0117 s); look for a blocked checkpoint write, a hung collective or a data loader waiting on storage.
    ```
"""  # noqa: E501  (tables: one row a line)

from __future__ import annotations

import re
from typing import NamedTuple

import numpy as np
import polars as pl

from trainlens.core.dataclass import dataclass
from trainlens.core.findings import Finding
from trainlens.core.frame import MANY_METRICS
from trainlens.core.run import Run
from trainlens.core.stats import median
from trainlens.detectors.base import Context, Skip, finding

CODES = {"DATA002": "stall"}


@dataclass(frozen=True)
class Params:
    #: a gap's excess over its expected length (typical × Δstep) must be worth
    #: this many typical steps minus one
    factor: float = 10.0
    #: ... and this many seconds
    min_gap_s: float = 1.0
    #: this many candidate gaps make a routine-pause level ...
    min_recurring: int = 3
    #: ... and only gaps this much longer than it are reported
    recurring_factor: float = 3.0
    #: a stall this large a fraction of the run's wall-clock span is a warning
    warn_run_frac: float = 0.05
    #: at most this many findings (the longest)
    max_findings: int = 10


def _fmt_s(x: float) -> str:
    if x >= 3600:
        return f"{x / 3600:.3g} h"
    if x >= 120:
        return f"{x / 60:.3g} min"
    return f"{x:.3g} s"


def _other_axis(
    dense_steps: np.ndarray, clock: np.ndarray, steps: np.ndarray, wall: np.ndarray
) -> bool:
    """Whether a series is logged against another step axis than the densest one: Keras'
    ``epoch_loss`` at step = epoch beside ``batch_loss`` at step = iteration. When its
    points were written the dense series stood at ``axis_ratio`` times their steps or more
    (epoch 1 is written when the batches are at step 3000); a series of the same axis —
    an eval at step 1500, written when the batches are at 1500 — stands at about 1.
    ``clock``: the densest series' running maximum wall time (:func:`_clock`)."""
    ok = (steps >= 1) & np.isfinite(wall)
    if not ok.any() or dense_steps.size < 2:
        return False
    at = np.searchsorted(clock, wall[ok], side="right") - 1
    seen = at >= 0
    if not seen.any():
        return False
    stood = dense_steps[at[seen]] / steps[ok][seen]
    return median(stood) >= AXIS_RATIO  # (np.median's float, by one partition)


def _clock(dense_wall: np.ndarray) -> np.ndarray:
    """The densest series' wall time as it stood at each point (a clock never going back)."""
    return np.maximum.accumulate(np.where(np.isfinite(dense_wall), dense_wall, -np.inf))


#: a series whose points were written when the densest one stood at this many times
#: their steps is on another step axis (epochs beside iterations)
AXIS_RATIO = 10.0


# points on no training step: a test loop's results (Lightning's trainer.test() after
# fit, test_acc / test_loss in an event file written minutes later) and Lightning's
# hp_metric placeholder (-1 at step 0, written again by the test run's logger). The wait
# before them is the time between fit and test, not a stall (two public Lightning
# logdirs: DATA002 "11.8 min between step 7600 and the resumed step 0")
_TEST = re.compile(r"^(?:test(?:[/_]|$)|hp_metric$)")


def _test_only_steps(run: Run, others: list[pl.DataFrame]) -> pl.Series | None:
    """Steps at which only a test loop's results were logged (and the epoch counter that
    Lightning logs beside everything: `epoch` at the test step 7601), or None; ``others``:
    the series of the timed metrics other than the epoch counter."""
    tests = [m for m in run.metrics if _TEST.match(m)]
    if not tests or not others:
        return None
    at = pl.concat([run.series_frame(m).get_column("step") for m in tests]).unique()
    trained = pl.concat([sf.get_column("step") for sf in others]).unique()
    only = at.filter(~at.is_in(trained.implode()))
    return only if only.len() else None


_ROWS = ("step", "superseded", "wall_time")


class _Timed(NamedTuple):
    """What :func:`_timed_rows` finds: the densest timed metric's series (None when no
    metric is timed), the other rows that carry a step's wall time (frames of
    step, superseded, wall_time), and the wall times of another axis' points."""

    dense: pl.DataFrame | None
    parts: list[pl.DataFrame]
    ends: np.ndarray


def _timed_rows(run: Run) -> _Timed:
    """The rows that carry every step's wall time: the densest timed metric's series, and
    what only sparser metrics have (and superseded rows).

    Grouping the whole long frame (12M rows for 1M steps × 12 metrics) costs more than
    reading it; metrics logged on the same lines share steps and times, so the densest
    timed metric plus the steps only sparser metrics have (and superseded rows) give the
    same points. With many metrics, a view and a search per metric cost more than one
    grouping: :func:`_timed_rows_grouped`.

    Series of another step axis (:func:`_other_axis`) are left out of the rows; their
    wall times come back as the third item: when an epoch ended (Keras writes the epoch's
    logs after its validation)."""
    if len(run.metrics) > MANY_METRICS:
        return _Timed(None, [_timed_rows_grouped(run)], np.empty(0))
    timed: list[tuple[pl.DataFrame, np.ndarray, np.ndarray]] = []
    names: list[str] = []
    for metric in run.metrics:
        if _TEST.match(metric):
            continue  # (a test loop's results: see _TEST)
        sf = run.series_frame(metric)
        if sf.height and sf.get_column("wall_time").null_count() < sf.height:
            steps = sf.get_column("step").to_numpy()
            timed.append((sf, steps, sf.get_column("wall_time").to_numpy()))
            names.append(metric)
    if not timed:
        return _Timed(None, [], np.empty(0))
    test_steps = _test_only_steps(
        run, [t[0] for t, n in zip(timed, names, strict=True) if n != "epoch"]
    )
    if test_steps is not None:
        kept = [t[0].filter(~pl.col("step").is_in(test_steps.implode())) for t in timed]
        timed = [
            (sf, sf.get_column("step").to_numpy(), sf.get_column("wall_time").to_numpy())
            for sf in kept
        ]
    timed.sort(key=lambda t: -t[0].height)
    dense, dense_steps, dense_wall = timed[0]  # steps increasing (series_frame)
    clock = _clock(dense_wall)  # (once: the same for every series compared with it)
    same_axis: list[tuple[pl.DataFrame, np.ndarray, np.ndarray]] = []
    other: list[tuple[pl.DataFrame, np.ndarray, np.ndarray]] = []
    # a metric logged on the densest one's lines has its steps and times: the same answer
    # for each (12 searches of every point a run, a quarter of this detector's time)
    as_dense: list[bool] = []
    for t in timed[1:]:
        if np.array_equal(t[1], dense_steps) and np.array_equal(t[2], dense_wall, equal_nan=True):
            if not as_dense:
                as_dense.append(_other_axis(dense_steps, clock, dense_steps, dense_wall))
            off_axis = as_dense[0]
        else:
            off_axis = _other_axis(dense_steps, clock, t[1], t[2])
        (other if off_axis else same_axis).append(t)
    ends = np.concatenate([t[2] for t in other]) if other else np.empty(0)
    parts: list[pl.DataFrame] = []
    for sf, steps, wall in same_axis:
        if np.array_equal(steps, dense_steps):
            # logged on the same lines as the densest metric (most metrics of a long run):
            # each row's step is the dense row's at its own index, no search and no gather
            # (~15 ms a metric on 1M steps, 0.15 s on the noisy 1M run's 11 metrics)
            off_dense = np.zeros(steps.size, dtype=bool)
            dense_at = dense_wall
        else:
            at = np.minimum(np.searchsorted(dense_steps, steps), dense_steps.size - 1)
            off_dense = dense_steps[at] != steps
            dense_at = dense_wall[at]
        # a step logged twice (HF's train summary, then the final eval, both at the last
        # step, each with an `epoch`) keeps the densest metric's later time: another
        # metric written earlier at that step is the step's time, not the eval's end
        # (a T5 run: a 54-minute final eval read as a stall before the last step)
        earlier = np.greater(dense_at, wall, where=~np.isnan(wall), out=np.zeros(wall.size, bool))
        keep = off_dense | earlier
        if keep.any():  # no filter of a 1M-row frame for nothing
            extra = sf.filter(pl.Series(keep))
            parts.append(extra.select("step", pl.lit(False).alias("superseded"), "wall_time"))
    if run.frame.get_column("superseded").any():
        parts.append(run.frame.filter(pl.col("superseded")).select(_ROWS))
    return _Timed(dense, parts, ends[np.isfinite(ends)])


def _timed_rows_grouped(run: Run) -> pl.DataFrame:
    """What :func:`_timed_rows` gives, by grouping the frame once: each metric's last row
    at a step (as its series has it), then the earliest of those per step. The rows
    :func:`_timed_rows` leaves out (a later time than the densest metric's at that step)
    never were a step's earliest, so the points :func:`_points` makes are the same."""
    cols = ["step", "superseded", "wall_time"]
    standing = run.standing()
    standing = standing.filter(~pl.col("metric").cast(pl.String).str.contains(_TEST.pattern))
    last = standing.unique(subset=["metric", "step"], keep="last").filter(
        pl.col("wall_time").is_finite()  # (as _points filters rows: before the minimum)
    )
    parts = [
        last.group_by("step")
        .agg(pl.col("wall_time").min())
        .select("step", pl.lit(False).alias("superseded"), "wall_time")
    ]
    if run.frame.get_column("superseded").any():
        parts.append(run.frame.filter(pl.col("superseded")).select(cols))
    return pl.concat(parts)


def _points(run: Run) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Step and wall time of each logged point of the run's step axis (the earliest wall
    time of any metric at that step; superseded values apart), in wall-clock order; and
    the wall times of the points of another axis (epoch ends)."""
    dense, parts, ends = _timed_rows(run)
    if dense is None and not parts:
        return np.empty(0, dtype=np.int64), np.empty(0), ends
    if not parts and dense is not None:
        # one row per step, the densest series' (usual): in numpy, no frame built
        s = dense.get_column("step").to_numpy()
        w = dense.get_column("wall_time").to_numpy()  # (a null is NaN here)
        ok = np.isfinite(w)
        if not ok.all():
            s, w = s[ok], w[ok]
        if bool(np.all(w[1:] >= w[:-1])):
            return s, w, ends  # in step order, one per step, and the clock never goes back
    if dense is not None:
        parts = [dense.select("step", pl.lit(False).alias("superseded"), "wall_time"), *parts]
    rows = pl.concat(parts)
    rows = rows.filter(pl.col("wall_time").is_not_null() & pl.col("wall_time").is_finite())
    pts = (
        rows.group_by("step", "superseded").agg(pl.col("wall_time").min()).sort("wall_time", "step")
    )
    return pts.get_column("step").to_numpy(), pts.get_column("wall_time").to_numpy(), ends


def _routine(excess: np.ndarray, min_recurring: int) -> float:
    """The routine pause: the median of the candidates' excess, or, where pauses of
    several kinds recur (an eval at each epoch's end, ~15 s, beside ~5 s ones), the level
    of the longest kind that recurs — at least ``min_recurring`` times and a quarter of
    the candidates, within a factor of 1.5 of one another. With the median alone, ten
    15 s epoch-end validations of a healthy Lightning run were 3.7x a 4 s routine."""
    level = float(np.median(excess))
    e = np.sort(excess)
    need = max(min_recurring, int(np.ceil(0.25 * e.size)))
    for x in e[::-1]:  # the longest first
        near = e[(e >= x / 1.5) & (e <= x * 1.5)]
        if near.size >= need:
            return max(level, float(np.median(near)))
    return level


def _resolution(w: np.ndarray) -> float:
    """The clock's resolution when it counts whole seconds (every time a whole number), else
    0: a finer clock's rounding is far below ``min_gap_s``."""
    return 1.0 if w.size and bool(np.all(w == np.round(w))) else 0.0


def _epoch_ends(w: np.ndarray, ends: np.ndarray, slack: float) -> np.ndarray:
    """For each gap between consecutive points, whether another axis logged in it (or
    within ``slack`` seconds after it): the end of an epoch, whose validation and epoch
    logs fill the gap — not a stall."""
    if not ends.size:
        return np.zeros(max(w.size - 1, 0), dtype=bool)
    e = np.sort(ends)
    first = np.searchsorted(e, w[:-1], side="right")  # the first end after the gap opens
    last = np.searchsorted(e, w[1:] + slack, side="right")
    return last > first


def detect(run: Run, params: Params, ctx: Context) -> list[Finding]:
    s, w, ends = _points(run)
    if s.size == 0:
        raise Skip("needs wall-clock times (a time/timestamp per logged step), not logged")
    if s.size < 3:
        raise Skip(f"wall-clock times at only {s.size} steps, too few to judge (3)")
    gap = np.diff(w)
    ds = np.diff(s)
    fwd = (ds > 0) & (gap > 0)
    if fwd.sum() < 2:
        raise Skip("wall-clock times do not advance with the steps")
    typical = median(gap[fwd] / ds[fwd])
    expected = typical * np.maximum(ds, 1)
    # the pause beyond what the steps in the interval explain must be worth
    # ``factor`` - 1 step times; with sparse logging the interval must also at least double
    excess = gap - expected
    # a clock that counts whole seconds (Stable-Baselines3's `time_elapsed`) reads a gap
    # up to a second long: judged by the shortest it can have been, 2 s read is 1 s
    short = gap - _resolution(w)
    cand = (
        (short - expected >= (params.factor - 1.0) * typical)
        & (short >= 2.0 * expected)
        & (short - expected >= params.min_gap_s)
        & ~_epoch_ends(w, ends, max(params.min_gap_s, typical))
    )
    routine = None
    if cand.sum() >= params.min_recurring:
        routine = _routine(excess[cand], params.min_recurring)
        cand &= excess >= params.recurring_factor * routine
    idx = np.flatnonzero(cand)
    if len(idx) == 0:
        return []
    total = float(w[-1] - w[0])
    idx = idx[np.argsort(-gap[idx])][: params.max_findings]
    out: list[Finding] = []
    median_interval = median(gap[gap >= 0])
    for i in sorted(idx.tolist()):
        g, prev, nxt = float(gap[i]), int(s[i]), int(s[i + 1])
        sev = "warning" if total > 0 and g >= params.warn_run_frac * total else "info"
        lost = (
            f", {_fmt_s(float(excess[i]))} more than {int(ds[i])} steps take" if ds[i] > 1 else ""
        )
        where = (
            f"between step {prev} and the resumed step {nxt}"
            if nxt <= prev
            else f"between step {prev} and step {nxt}"
        )
        msg = (
            f"no step was logged for {_fmt_s(g)} {where}{lost} ({g / expected[i]:.0f}× the "
            f"expected {_fmt_s(float(expected[i]))}); look for a blocked checkpoint write, a "
            "hung collective or a data loader waiting on storage."
        )
        out.append(
            finding(
                "DATA002",
                CODES["DATA002"],
                sev,
                msg,
                metric="wall_time",
                step_start=nxt,
                step_end=nxt,
                gap_seconds=round(g, 4),
                expected_seconds=float(expected[i]),
                excess_seconds=float(excess[i]),
                typical_step_seconds=typical,
                median_gap_seconds=median_interval,
                previous_step=prev,
                share_of_run=round(g / total, 4) if total > 0 else None,
                routine_pause_seconds=routine,
                across_restart=bool(nxt <= prev),
            )
        )
    return out
