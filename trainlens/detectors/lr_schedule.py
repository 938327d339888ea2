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

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from trainlens.core.findings import Finding, Severity
from trainlens.core.run import Run
from trainlens.core.schedules import (
    lr_at,
    missing_keys,
    offset_candidates,
    shape_of,
)
from trainlens.core.stats import runs_of
from trainlens.detectors.base import Context, Skip, finding

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


# ---- helpers ---------------------------------------------------------------------------


def print_quantum(
    values: np.ndarray, *, min_distinct: int = 10, max_decimals: int = 12, cap_frac: float = 0.05
) -> float:
    """The print resolution of a logged series (1e-6 for ``%f``), or 0 when it looks
    unrounded. Round numbers are not rounding: a few values (a step decay 0.1, 0.01,
    0.001) count only when one of them uses two digits or more at that resolution
    (0.000038); with many values, a resolution coarser than ``cap_frac`` of the largest
    one (a tiny LR printed with ``%f``) only when the series repeats values below its
    peak, as rounding a changing LR does (an exact ramp 1e-4, 2e-4, ... does not)."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if len(v) > 50_000:  # a strided sample decides as well, and keeps 1M-step runs cheap
        v = v[:: len(v) // 50_000]
    u = np.unique(np.abs(v))
    if len(u) < 2 or u[-1] <= 0:
        return 0.0
    for d in range(max_decimals + 1):
        x = u * 10.0**d
        if not np.all(np.abs(x - np.round(x)) <= 1e-6):
            continue
        q = 10.0**-d
        if len(u) < min_distinct:
            mant = np.round(x[x >= 1])
            two_digits = bool(np.any((mant >= 10) & (mant % 10 != 0)))
            return q if two_digits and q <= 0.5 * u[-1] else 0.0
        if q <= cap_frac * u[-1]:
            return q
        repeats = (v[1:] == v[:-1]) & (v[1:] < u[-1])
        return q if q <= 0.5 * u[-1] and repeats.sum() >= 3 else 0.0
    return 0.0


def print_halfunit(values: np.ndarray, max_digits: int = 6) -> np.ndarray:
    """Half a unit of the last printed digit of each value, for a log that prints a fixed
    number of significant digits (``%.2e``: 3) — at most ``max_digits`` — else 0. The
    digits are those most values use (90th percentile: 3.70e-06 prints as 3.7e-06)."""
    v = np.asarray(values, dtype=np.float64)
    mag = np.abs(v)
    ok = np.isfinite(v) & (mag > 0)
    if not ok.any():
        return np.zeros(v.shape)
    expo = np.floor(np.log10(np.where(ok, mag, 1.0)))
    # 10 ** (k - 1 - expo) looked up in a table of the few exponents there are: a pow of
    # every value cost 6 ms a pass on a 1M-step LR, six passes (numpy's array pow, the
    # same numbers; Python's scalar pow can differ in the last bit)
    e0 = int(expo.min())
    at = (expo - e0).astype(np.intp)
    exps = np.arange(e0, int(expo.max()) + 1, dtype=np.float64)
    digits = np.full(v.shape, max_digits + 1)
    todo = ok.copy()
    for k in range(1, max_digits + 1):
        x = mag * (10.0 ** (k - 1 - exps))[at]
        hit = todo & (np.abs(x - np.round(x)) <= 1e-6 * np.maximum(x, 1.0))
        digits[hit] = k
        todo &= ~hit
    k = int(np.quantile(digits[ok], 0.9, method="higher"))
    if k > max_digits:
        return np.zeros(v.shape)
    return np.where(ok, 0.5 * 10.0 ** (expo - k + 1), 0.0)


def _fmt(x: float) -> str:
    return f"{x:.3g}"


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


@dataclass
class _Fit:
    """How well a hypothesis h(n) explains the realized LR."""

    ok: np.ndarray  # bool per point
    shift: int
    center: np.ndarray  # h(n + shift)
    lo: np.ndarray
    hi: np.ndarray

    @property
    def score(self) -> int:
        return int(self.ok.sum())


def _fit(
    r: np.ndarray,
    n: np.ndarray,
    h: Callable[[np.ndarray], np.ndarray],
    max_shift: int,
    rtol: float,
    atol: float | np.ndarray,
) -> _Fit:
    """Best step offset b in [-max_shift, max_shift]; a point matches when it lies within
    tolerance of h(n+b-1) .. h(n+b+1)."""
    cache: dict[int, np.ndarray] = {}

    def at(b: int) -> np.ndarray:
        if b not in cache:
            cache[b] = h(n + b)
        return cache[b]

    best: _Fit | None = None
    for b in sorted(range(-max_shift, max_shift + 1), key=abs):
        lo = np.minimum(np.minimum(at(b - 1), at(b)), at(b + 1))
        hi = np.maximum(np.maximum(at(b - 1), at(b)), at(b + 1))
        ok = (r >= lo * (1 - rtol) - atol) & (r <= hi * (1 + rtol) + atol)
        cand = _Fit(ok, b, at(b), lo, hi)
        if best is None or cand.score > best.score:
            best = cand
            if best.score == len(r):
                break  # everything explained: no need to try other offsets
    assert best is not None
    return best


def _rel_dev(r: np.ndarray, fit: _Fit, atol: np.ndarray) -> np.ndarray:
    """|realized - plan| / plan where the point is outside the tolerated band, else 0."""
    outside = ~fit.ok
    rel = np.abs(r - fit.center) / np.maximum(np.abs(fit.center), atol)
    return np.where(outside, rel, 0.0)


#: points a hypothesis is screened on (uniformly spread, plus as many mismatched ones)
SCREEN_POINTS = 20_000


def _thin(idx: np.ndarray, at_most: int) -> np.ndarray:
    """At most about ``at_most`` evenly strided entries of ``idx``."""
    if len(idx) <= at_most:
        return idx
    return idx[:: -(-len(idx) // at_most)]


def _segments(mask: np.ndarray, gap: int = 2) -> list[tuple[int, int]]:
    """Runs of true (index ranges), merging runs separated by at most ``gap`` points."""
    out: list[tuple[int, int]] = []
    for a, b in runs_of(mask):
        if out and a - out[-1][1] - 1 <= gap:
            out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out


def _capped(found: list[Finding], cap: int) -> list[Finding]:
    if len(found) <= cap:
        return found
    kept = found[: cap - 1]
    rest = found[cap - 1 :]
    last = rest[0]
    steps = [f.step_start for f in rest if f.step_start is not None]
    ends = [f.step_end for f in rest if f.step_end is not None]
    sev = max((f.severity for f in rest), key=lambda s: s.rank)
    kept.append(
        finding(
            last.code,
            last.name,
            sev,
            f"{len(rest)} more stretches from step {min(steps)} to {max(ends)}; the first: "
            + last.message,
            metric=last.metric,
            step_start=min(steps),
            step_end=max(ends),
            **{**last.evidence, "n_stretches": len(rest)},
        )
    )
    return kept


# ---- the detector ----------------------------------------------------------------------


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
            return _declared(names, load, schedule, params, ctx, _first_value(run, "epoch"))
    s, r = loaded[primary]
    return _undeclared(s, r, primary, params)


# ---- with a declared schedule ------------------------------------------------------------


@dataclass
class _Hypothesis:
    code: str
    h: Callable[[np.ndarray], np.ndarray]
    info: dict[str, Any] = field(default_factory=dict)


def _declared(
    names: list[str],
    load: Callable[[str], tuple[np.ndarray, np.ndarray] | None],
    schedule: dict[str, Any],
    params: Params,
    ctx: Context,
    first_epoch: float | None = None,
) -> list[Finding]:
    first_step = int(float(schedule.get("first_step") or 0))
    peak_assumed = False
    if not schedule.get("peak_lr") or float(schedule["peak_lr"]) <= 0:
        # no peak declared: judge the shape against the realized peak
        metric = next(m for m in names if load(m) is not None)
        first = load(metric)
        assert first is not None
        if float(np.max(first[1])) <= 0:
            return _undeclared(first[0], first[1], metric, params)  # no scale to judge by
        schedule["peak_lr"] = float(np.max(first[1]))
        peak_assumed = True
    sched = schedule
    peak = float(sched["peak_lr"])
    ctxinfo: dict[str, Any] = {
        "shape": shape_of(sched),
        "peak_lr": peak,
        "schedule_source": ctx.schedule_source,
    }
    if peak_assumed:
        ctxinfo["peak_lr_assumed"] = True

    tolerances: dict[str, np.ndarray] = {}  # per LR series: its print resolution is costly
    chosen = _choose(names, load, sched, first_step, params, tolerances)
    if chosen is None:
        return []
    metric, conv, fit, atol = chosen
    sv = load(metric)
    assert sv is not None
    s, r = sv
    n = (s - first_step + 1).astype(np.float64)
    if fit.score >= params.explain_frac * len(r):
        return _judge(metric, s, n, r, sched, conv, fit, atol, params, ctxinfo)

    # most of the log is off the plan: a resumed run whose step count restarted, or steps
    # counted from another origin, follow the plan at an offset the data may pin down
    al = _align(s, n, r, sched, conv, atol, params)
    if al is None:
        return _judge(metric, s, n, r, sched, conv, fit, atol, params, ctxinfo)
    if not al.pinned:
        return [_unaligned_note(metric, s, r, al, ctxinfo)]
    note = _offset_note(metric, s, r, al, ctxinfo, first_epoch)
    if al.explained == 1.0:
        return [note]
    sched = {**sched, "first_step": first_step - al.offset}
    chosen = _choose(names, load, sched, first_step - al.offset, params, tolerances)
    if chosen is None:
        return [note]
    metric, conv, fit, atol = chosen
    sv = load(metric)
    assert sv is not None
    s, r = sv
    n = (s - first_step + al.offset + 1).astype(np.float64)
    found = _judge(metric, s, n, r, sched, conv, fit, atol, params, ctxinfo)
    said = f" (judged with the log's steps offset by {al.offset:+,}: see LR008)"
    return [note] + [
        replace(f, message=f.message + said, evidence={**f.evidence, "step_offset": al.offset})
        for f in found
    ]


def _choose(
    names: list[str],
    load: Callable[[str], tuple[np.ndarray, np.ndarray] | None],
    sched: dict[str, Any],
    first_step: int,
    params: Params,
    tolerances: dict[str, np.ndarray],
) -> tuple[str, Convention, _Fit, np.ndarray] | None:
    """The LR series (param group) and warmup convention that match the plan best, or
    None when one matches at every point (the first param group that does ends the
    search)."""
    peak = float(sched["peak_lr"])
    best: tuple[str, Convention, _Fit, np.ndarray] | None = None
    for metric in names:
        sv = load(metric)
        if sv is None:
            continue
        s, r = sv
        n = (s - first_step + 1).astype(np.float64)
        if metric not in tolerances:
            floor = max(params.atol_frac * peak, print_quantum(r))
            tolerances[metric] = np.maximum(floor, print_halfunit(r))
        atol = tolerances[metric]
        for conv in _conventions(sched, n, r):
            f = _fit(r, n, _plan(sched, conv), params.max_shift, params.rtol, atol)
            # another ramp convention must explain a few more points than the plain one
            margin = 0 if conv == 0.0 else 2
            if best is None or f.score - margin > best[2].score * len(r) / len(best[2].ok):
                best = (metric, conv, f, atol)
            if f.ok.all():
                return None
    assert best is not None
    return best


def _judge(
    metric: str,
    s: np.ndarray,
    n: np.ndarray,
    r: np.ndarray,
    sched: dict[str, Any],
    conv: Convention,
    fit: _Fit,
    atol: np.ndarray,
    params: Params,
    ctxinfo: dict[str, Any],
) -> list[Finding]:
    """The findings for a log that departs from the plan at some points."""
    peak = float(sched["peak_lr"])
    d = _plan(sched, conv)
    shape = str(ctxinfo["shape"])
    out: list[Finding] = []
    mismatch = ~fit.ok

    # exact zeros where the plan (and its timing neighbours) train: LR005, beside any
    # diagnosis below (a schedule run too fast reaches a floor of 0 early)
    zeros = (r == 0) & (fit.lo > atol) & mismatch
    q = print_quantum(r)
    for a, b in _segments(zeros, gap=0):
        near = [abs(float(r[i])) for i in (a - 1, b + 1) if 0 <= i < len(r)]
        if q > 0 and all(x <= 10 * q for x in near):
            zeros[a : b + 1] = False  # a tiny LR printed as 0: judged as a mismatch below
    rest = mismatch & ~zeros
    if not rest.any():
        return _zero_findings(zeros, s, r, fit, metric, shape, ctxinfo)

    usable = ~zeros
    hyps = _hypotheses(sched, d, s, n, r, rest, fit, atol, params, conv)
    # screen the hypotheses on a sample (uniform, plus the mismatched points); the one
    # chosen is then fitted on every point
    uniform = _thin(np.arange(len(r)), SCREEN_POINTS)
    wrong = _thin(np.flatnonzero(rest), SCREEN_POINTS)
    sub = np.union1d(uniform, wrong)
    at_u, at_w = np.searchsorted(sub, uniform), np.searchsorted(sub, wrong)
    base_score = int(fit.ok[sub].sum())
    accepted: list[tuple[_Hypothesis, int]] = []
    for hyp in hyps:
        hf = _fit(r[sub], n[sub], hyp.h, params.max_shift, params.rtol, atol[sub])
        if (
            hf.ok[at_u][usable[uniform]].mean() >= params.explain_frac
            and hf.ok[at_w].mean() >= params.explain_frac
            and hf.score > base_score
        ):
            accepted.append((hyp, hf.score))
    if accepted:
        hyp, _ = max(accepted, key=lambda t: t[1])  # the first wins ties (list order)
        hf = _fit(r, n, hyp.h, params.max_shift, params.rtol, atol)
        out.append(_diagnosis(hyp, hf, d, s, n, r, fit, rest, metric, sched, atol, ctxinfo, params))
        # what the diagnosis leaves unexplained is reported against the plan below
        rest = rest & ~hf.ok
    # zeros are reported even when a diagnosis explains how they came about: a stretch
    # with no training is the symptom a person acts on
    out.extend(_zero_findings(zeros, s, r, fit, metric, shape, ctxinfo))
    if not rest.any():
        return out
    if not accepted:
        warm = int(float(sched.get("warmup_steps") or 0))
        in_warm = rest & (n <= warm) & (r > fit.hi)
        first_in = np.flatnonzero(n <= warm)
        starts_high = (
            len(first_in) > 0 and n[first_in[0]] <= warm / 2 and r[first_in[0]] >= 0.5 * peak
        )
        if warm > 0 and in_warm.any() and starts_high:
            idx = np.flatnonzero(in_warm)
            a, b = int(idx[0]), int(idx[-1])
            out.append(
                finding(
                    "LR004",
                    CODES["LR004"],
                    Severity.WARNING,
                    f"{metric} is already {_fmt(r[a])} at step {s[a]}, inside the declared "
                    f"{warm}-step warmup (planned {_fmt(fit.center[a])}): the warmup is "
                    "missing — check the warmup scheduler is attached and stepped.",
                    metric=metric,
                    step_start=s[a],
                    step_end=s[b],
                    warmup_steps=warm,
                    realized_lr=float(r[a]),
                    declared_lr=float(fit.center[a]),
                    **ctxinfo,
                )
            )
            rest = rest & ~in_warm
    dev = _rel_dev(r, fit, atol)
    segments = _segments(rest, gap=max(2, len(r) // 100))
    if len(segments) > 3:
        # the plan and the realized curve cross back and forth: one finding for the lot
        segments = [(segments[0][0], segments[-1][1])]
    generic: list[Finding] = []
    for a, b in segments:
        seg = np.arange(a, b + 1)
        seg = seg[rest[seg]]
        w = int(seg[np.argmax(dev[seg])])
        max_dev = float(dev[w])
        ratio = r[seg] / np.maximum(fit.center[seg], 1e-300)
        med_ratio = float(np.median(ratio))
        const = bool(
            len(seg) >= 3 and med_ratio > 0 and np.mean(np.abs(ratio / med_ratio - 1) < 0.02) >= 0.9
        )
        sev = Severity.WARNING if max_dev >= params.warn_rel_dev else Severity.INFO
        span = f"step {s[a]}" if a == b else f"steps {s[a]}–{s[b]}"
        share = f"{len(seg)} of {b - a + 1} logged points, " if len(seg) < b - a + 1 else ""
        extra = f"; it is {med_ratio:.3g}× the plan throughout" if const else ""
        generic.append(
            finding(
                "LR001",
                CODES["LR001"],
                sev,
                f"{metric} deviates from the declared {shape} schedule at {span} "
                f"({share}first at step {s[a]}; worst {_fmt(r[w])} vs planned "
                f"{_fmt(fit.center[w])} at step {s[w]}, {max_dev:.1%} off{extra}) — "
                "check the LR the optimizer actually uses against the config.",
                metric=metric,
                step_start=s[a],
                step_end=s[b],
                first_step=s[a],
                n_points=len(seg),
                max_rel_deviation=max_dev,
                worst_step=s[w],
                realized_lr=float(r[w]),
                declared_lr=float(fit.center[w]),
                ratio=med_ratio if const else None,
                shift=fit.shift,
                **ctxinfo,
            )
        )
    out.extend(generic)
    return out


# ---- a log whose steps are offset from the plan's ----------------------------------------

#: logged values the plan is inverted at to find an offset (evenly spread over the log)
ALIGN_ANCHORS = 48
#: points an offset candidate is scored on before the full log is fitted
ALIGN_SCREEN = 4000


@dataclass
class _Alignment:
    """Where a log sits on the plan: realized(n) ≈ plan(n + offset)."""

    offset: int
    pinned: bool
    explained: float  # share of the logged points the aligned plan explains
    change: float  # relative change of the aligned plan over the log
    lo: int  # offsets that explain the log as well: lo..hi (None: no end, a flat tail)
    hi: int | None
    planned_first: float  # the aligned plan at the first logged point


def _align(
    s: np.ndarray,
    n: np.ndarray,
    r: np.ndarray,
    sched: dict[str, Any],
    conv: Convention,
    atol: np.ndarray,
    params: Params,
) -> _Alignment | None:
    """The offset t0 with realized(n) ≈ plan(n + t0) over the whole log, or None.

    The plan is inverted at up to ALIGN_ANCHORS logged values (:func:`offset_candidates`:
    the offsets most of them allow, each the median of their exact inversions); the
    candidates are scored on the log and the best one is fitted on every point. None
    unless that explains ``explain_frac`` (90 %) of the points, the log's first points
    among them, with the first point at or after the plan's start: what it leaves
    unexplained is then judged against the aligned plan, and a log off the plan over more
    than that is judged at its logged steps (still flagged, by the plain findings).

    The offset is not pinned when other, distinct offsets explain the log as well, when
    the offsets that fit span more than the log's own length, or when the aligned plan
    changes by less than ``align_min_change`` over the log (a flat stretch: any offset on
    it fits). A fresh log (first point in the first half of a declared warmup, or in the
    first steps without one) is aligned only at a pinned offset past twice the warmup.
    """
    pos = np.flatnonzero(r > 0)
    if len(pos) < 3:
        return None
    pick = np.unique(np.linspace(0, len(pos) - 1, min(len(pos), ALIGN_ANCHORS)).round())
    idx = pos[pick.astype(np.int64)]
    cands = offset_candidates(
        sched, n[idx], r[idx], params.rtol * r[idx] + atol[idx], warmup_start_factor=conv
    )
    span = float(n[-1] - n[0])
    sub = _thin(np.arange(len(r)), ALIGN_SCREEN)
    d = _plan(sched, conv)
    scored: list[tuple[int, int, float, float]] = []  # score, offset, lo, hi
    for t0, r_lo, r_hi in cands:
        if n[0] + t0 < 1 - params.max_shift:
            continue  # the log would start before the plan does
        f = _fit(r[sub], n[sub] + t0, d, params.max_shift, params.rtol, atol[sub])
        scored.append((f.score, t0, r_lo, r_hi))
    if not scored:
        return None
    scored.sort(key=lambda c: -c[0])
    score, t0, r_lo, r_hi = scored[0]
    if abs(t0) <= params.max_shift + 1:
        return None  # a timing convention, which the plain fit tried
    full = _fit(r, n + t0, d, params.max_shift, params.rtol, atol)
    head = full.ok[: max(3, len(r) // 20)]
    explained = full.score / len(r)
    if head.mean() <= 0.5 or explained < params.explain_frac:
        return None
    rivals = [c for c in scored[1:] if c[0] >= score - max(2, 0.02 * len(sub))]
    lo_all = min([r_lo] + [c[2] for c in rivals])
    hi_all = max([r_hi] + [c[3] for c in rivals])
    plan = full.center
    change = float((plan.max() - plan.min()) / max(float(plan.max()), 1e-300))
    # pinned: one offset, known to within the log's own length, on a stretch where the
    # plan moves by more than its tolerance band
    narrow = hi_all - lo_all <= max(span, 2.0 * (params.max_shift + 1))
    pinned = not rivals and narrow and change >= params.align_min_change
    # a log that starts at the plan's start is taken at its word unless the data pin an
    # offset past twice the warmup: one that starts where its warmup should end is a run
    # without warmup (LR004), one stuck on a flat stretch a real mismatch
    warm = float(sched.get("warmup_steps") or 0)
    if n[0] <= max(warm / 2, 1 + params.max_shift) and (not pinned or lo_all <= 2 * warm):
        return None
    return _Alignment(
        offset=int(t0),
        pinned=pinned,
        explained=explained,
        change=change,
        lo=int(np.floor(lo_all)),
        hi=int(np.ceil(hi_all)) if np.isfinite(hi_all) else None,
        planned_first=float(plan[0]),
    )


def _offset_note(
    metric: str,
    s: np.ndarray,
    r: np.ndarray,
    al: _Alignment,
    ctxinfo: dict[str, Any],
    first_epoch: float | None,
) -> Finding:
    t0 = al.offset
    epoch = ""
    if first_epoch is not None and first_epoch >= 1:  # (HF's fractional epoch of a first log)
        epoch = f"; its epoch starts at {first_epoch:g}, not 0"
    return finding(
        "LR008",
        CODES["LR008"],
        Severity.INFO,
        f"{metric} follows the declared {ctxinfo['shape']} schedule with the log's steps "
        f"offset by {t0:+,} from the schedule's: logged step {s[0]} ({_fmt(float(r[0]))}) is "
        f"the plan's step {s[0] + t0:,} ({_fmt(al.planned_first)}){epoch} — a resumed run "
        "whose step count restarted while its scheduler went on, or steps counted from "
        f"another origin; it is judged against the plan at (step {t0:+,}).",
        metric=metric,
        step_start=int(s[0]),
        step_end=int(s[-1]),
        step_offset=t0,
        offset_range=[al.lo, al.hi],
        explained_frac=round(al.explained, 4),
        first_epoch=first_epoch,
        **ctxinfo,
    )


def _unaligned_note(
    metric: str, s: np.ndarray, r: np.ndarray, al: _Alignment, ctxinfo: dict[str, Any]
) -> Finding:
    span = f"from {al.lo:+,} to {al.hi:+,} steps" if al.hi is not None else f"from {al.lo:+,} on"
    return finding(
        "LR008",
        CODES["LR008"],
        Severity.INFO,
        f"{metric} does not follow the declared {ctxinfo['shape']} schedule at the logged "
        f"steps, and the schedule could not be aligned with the log: it matches the plan "
        f"where the plan barely changes ({_fmt(float(np.min(r)))}–{_fmt(float(np.max(r)))}), "
        f"so any offset {span} fits it alike — a resumed or "
        "excerpted log counted from another origin, or an LR that stopped following the "
        "schedule; it is not judged against the plan.",
        metric=metric,
        step_start=int(s[0]),
        step_end=int(s[-1]),
        aligned=False,
        offset_range=[al.lo, al.hi],
        explained_frac=round(al.explained, 4),
        **ctxinfo,
    )


def _zero_findings(
    zeros: np.ndarray,
    s: np.ndarray,
    r: np.ndarray,
    fit: _Fit,
    metric: str,
    shape: str,
    ctxinfo: dict[str, Any],
) -> list[Finding]:
    out = []
    for a, b in _segments(zeros, gap=0):
        out.append(
            finding(
                "LR005",
                CODES["LR005"],
                Severity.WARNING,
                f"{metric} is exactly 0 at steps {s[a]}–{s[b]} ({b - a + 1} logged points) "
                f"where the declared {shape} schedule gives {_fmt(fit.center[a])}: no "
                "training happens there — check the scheduler and the optimizer's LR.",
                metric=metric,
                step_start=s[a],
                step_end=s[b],
                n_points=b - a + 1,
                declared_lr=float(fit.center[a]),
                **ctxinfo,
            )
        )
    return out


Plan = Callable[[np.ndarray], np.ndarray]


#: a warmup convention: the start factor of the ramp (0: from 0)
Convention = float


def _plan(sched: dict[str, Any], conv: Convention = 0.0) -> Plan:
    return lambda n: lr_at(sched, n, warmup_start_factor=conv)


def _conventions(sched: dict[str, Any], n: np.ndarray, r: np.ndarray) -> list[Convention]:
    """Warmup ramps real code uses: from 0 (nanoGPT, llm.c, Megatron, HF — the last one
    step later, which the step offsets cover) and from a start factor (PyTorch's
    LinearLR, default 1/3; detectron2's warmup_factor), fitted from the first logged point
    when it lies in the first half of the warmup below half the peak."""
    out: list[Convention] = [0.0]
    warm = float(sched.get("warmup_steps") or 0)
    peak = float(sched["peak_lr"])
    if warm > 1 and 1 <= n[0] <= warm / 2 and 0 < r[0] <= 0.5 * peak:
        done = n[0] / warm
        f = float((r[0] / peak - done) / (1 - done))
        if 0.01 < f <= 0.5:
            out.append(f)
    return out


def _scaled(d: Plan, k: int) -> Plan:
    """k scheduler steps per optimizer step: step n uses the plan's step k(n-1)+1."""
    return lambda n: d(k * n - (k - 1))


def _stopped(d: Plan, n_stop: float, flat: float) -> Plan:
    """The plan until n_stop, then stuck at the value it had reached."""
    return lambda n: np.where(n < n_stop, d(n), flat)


def _offset(d: Plan, w: float) -> Plan:
    return lambda n: d(n + w)


def _restarted(d: Plan, n0: float) -> Plan:
    return lambda n: np.where(n < n0, d(n), d(n - n0 + 1))


def _hypotheses(
    sched: dict[str, Any],
    d: Callable[[np.ndarray], np.ndarray],
    s: np.ndarray,
    n: np.ndarray,
    r: np.ndarray,
    rest: np.ndarray,
    fit: _Fit,
    atol: np.ndarray,
    params: Params,
    conv: Convention,
) -> list[_Hypothesis]:
    """Known bugs as time maps of the plan, in order of preference on ties."""
    warm = int(float(sched.get("warmup_steps") or 0))
    total = float(sched.get("total_steps") or 0)
    peak = float(sched["peak_lr"])
    lo_lr = float(sched.get("min_lr") or 0.0)
    out: list[_Hypothesis] = []

    # LR002: k scheduler steps per optimizer step, realized(n) = plan(k n); k guessed from
    # when the realized LR reaches the peak or the floor
    ks = {2, 3, 4}
    tol = params.rtol * peak + atol
    at_peak = np.flatnonzero(r >= peak - tol)
    if warm > 1 and len(at_peak) and n[at_peak[0]] > 0:
        ks.add(round(float(warm / n[at_peak[0]])))
    if total > warm and lo_lr < peak * (1 - params.rtol):
        at_floor = np.flatnonzero((r <= lo_lr + tol) & (n > warm))
        if len(at_floor) and n[at_floor[0]] > 0:
            ks.add(round(float(total / n[at_floor[0]])))
    for k in sorted(k for k in ks if 2 <= k <= 256):
        out.append(_Hypothesis("LR002", _scaled(d, k), {"factor": k}))

    # LR003: the scheduler stopped stepping where the realized LR goes flat to the end
    # (exactly flat, as a scheduler that is not stepped leaves it, or flat within tolerance)
    starts: set[int] = set()
    for band in (1e-6 * abs(r[-1]) + print_quantum(r), params.rtol * abs(r[-1]) + atol):
        not_flat = np.flatnonzero(np.abs(r - r[-1]) > band)
        starts.add(int(not_flat[-1]) + 1 if len(not_flat) else 0)
    for j in sorted(starts, reverse=True):
        if j >= len(r) - 1:
            continue
        n_stop, flat = float(n[j]), float(np.median(r[j:]))
        # it stopped somewhere after the last point that moved (sparse logs: maybe long before)
        since = float(n[j - 1]) if j > 0 else n_stop - 3
        around = d(np.linspace(since - 3, n_stop + 3, 64))
        if (
            around.min() * (1 - params.rtol) - atol[j]
            <= flat
            <= around.max() * (1 + params.rtol) + atol[j]
        ):
            out.append(
                _Hypothesis("LR003", _stopped(d, n_stop, flat), {"stop_n": n_stop, "flat_index": j})
            )

    # LR004: no warmup (the same schedule with W = 0, or the plan shifted by W)
    if warm > 0:
        nowarm = {**sched, "warmup_steps": 0}
        out.append(_Hypothesis("LR004", _plan(nowarm), {"variant": "no-warmup"}))
        out.append(_Hypothesis("LR004", _offset(d, warm), {"variant": "skipped"}))

    # LR001 with a cause: the code decays over a different number of steps than declared
    # (estimated by inverting the cosine/linear decay at the points inside its range)
    shape = shape_of(sched)
    if shape in ("cosine", "linear") and total > warm:
        inside = (n > warm + 1) & (r < peak * (1 - params.rtol)) & (r > lo_lr + 2 * tol)
        if inside.sum() >= 3:
            frac = np.clip((r[inside] - lo_lr) / (peak - lo_lr), 0.0, 1.0)
            p = np.arccos(2 * frac - 1) / np.pi if shape == "cosine" else 1 - frac
            est = warm + (n[inside] - warm) / np.maximum(p, 1e-9)
            t_est = float(np.median(est))
            if abs(t_est - total) > 0.01 * total and warm < t_est < 100 * total:
                out.append(
                    _Hypothesis(
                        "LR001",
                        _plan({**sched, "total_steps": round(t_est)}, conv),
                        {"total_steps": round(t_est)},
                    )
                )

    # LR006: from step n0 the plan starts over; n0 from where the first unexplained
    # realized value sits on the plan
    k0 = int(np.flatnonzero(rest)[0])
    if k0 > 0:
        grid = np.arange(1.0, n[k0] + 1.0)
        if len(grid) > 200_000:
            grid = np.unique(np.linspace(1.0, n[k0], 200_000).round())
        dg = d(grid)
        near = np.abs(dg - r[k0]) <= params.rtol * np.abs(dg) + atol[k0]
        cands: set[float] = set()
        for a, b in runs_of(near)[:4]:
            for u in (grid[a], grid[(a + b) // 2], grid[b]):
                cands.add(float(n[k0] - u + 1))
        # each estimate ±2 steps: the timing offset found for the plan need not hold for
        # the restarted part
        base = sorted(c for c in cands if n[0] < c <= n[k0])[:6]
        seen: set[float] = set()
        for o in (0.0, -1.0, 1.0, -2.0, 2.0):  # on ties the estimate itself wins
            for c in base:
                n0 = c + o
                if n[0] < n0 <= n[k0] + 2 and n0 not in seen:
                    seen.add(n0)
                    out.append(_Hypothesis("LR006", _restarted(d, n0), {"restart_n": n0}))
    return out


def _diagnosis(
    hyp: _Hypothesis,
    hf: _Fit,
    d: Plan,
    s: np.ndarray,
    n: np.ndarray,
    r: np.ndarray,
    fit: _Fit,
    rest: np.ndarray,
    metric: str,
    sched: dict[str, Any],
    atol: np.ndarray,
    ctxinfo: dict[str, Any],
    params: Params,
) -> Finding:
    shape = ctxinfo["shape"]
    idx = np.flatnonzero(rest)
    a = int(idx[0])
    dev = _rel_dev(r, fit, atol)
    max_dev = float(dev[rest].max())
    step0 = int(s[0] - n[0] + 1)  # the step number of n = 1
    common: dict[str, Any] = {
        "metric": metric,
        "first_step": int(s[a]),
        "max_rel_deviation": max_dev,
        "n_points": int(rest.sum()),
        **ctxinfo,
    }
    warm = int(float(sched.get("warmup_steps") or 0))
    if hyp.code == "LR002":
        k = int(hyp.info["factor"])
        off = -(k - 1) + hf.shift * k
        total = float(sched.get("total_steps") or 0)
        reach = ""
        if total > 0:
            reach = (
                f": it reaches the end of the plan at step ~{int(step0 + (total - 1 + k - 1) / k)} "
                f"instead of {int(step0 + total - 1)}"
            )
        return finding(
            "LR002",
            CODES["LR002"],
            Severity.WARNING,
            f"{metric} follows the declared {shape} schedule advanced {k} steps per "
            f"optimizer step (realized(t) ≈ declared({k}t{off:+d})) from step {s[a]}{reach} "
            f"— scheduler.step() is probably called {k} times per step (or per micro-batch).",
            step_start=int(s[a]),
            step_end=int(s[-1]),
            factor=k,
            offset=off,
            **common,
        )
    if hyp.code == "LR003":
        j = int(hyp.info["flat_index"])
        flat = float(r[-1])
        # the finding starts where the plan begins to fall below the flat LR
        falls = np.flatnonzero((np.arange(len(r)) >= j) & (d(n) < flat * (1 - 1e-9)))
        start = int(s[falls[0]]) if len(falls) else int(s[a])
        at_peak = abs(flat - float(sched["peak_lr"])) <= 0.02 * float(sched["peak_lr"])
        when = (
            "the scheduler is not stepped after warmup"
            if at_peak and n[j] <= warm + 3
            else f"the scheduler stopped stepping at step {s[j]}"
        )
        return finding(
            "LR003",
            CODES["LR003"],
            Severity.WARNING,
            f"{metric} stays flat at {_fmt(flat)} from step {s[j]} while the declared "
            f"{shape} schedule decays (to {_fmt(float(fit.center[-1]))} at step {s[-1]}; "
            f"off by more than tolerance from step {s[a]}, up to {max_dev:.0%}): {when}.",
            step_start=min(start, int(s[a])),
            step_end=int(s[-1]),
            flat_from_step=int(s[j]),
            flat_lr=flat,
            **common,
        )
    if hyp.code == "LR004":
        return finding(
            "LR004",
            CODES["LR004"],
            Severity.WARNING,
            f"{metric} starts at {_fmt(float(r[0]))} at step {s[0]} although a {warm}-step "
            f"warmup was declared (planned {_fmt(float(fit.center[0]))}): the warmup is "
            "missing — check the warmup scheduler is attached and stepped.",
            step_start=int(s[a]),
            step_end=int(s[idx[-1]]),
            warmup_steps=warm,
            variant=hyp.info["variant"],
            realized_lr=float(r[0]),
            declared_lr=float(fit.center[0]),
            **common,
        )
    if hyp.code == "LR001":
        t_real = int(hyp.info["total_steps"])
        total = int(float(sched.get("total_steps") or 0))
        return finding(
            "LR001",
            CODES["LR001"],
            Severity.WARNING if max_dev >= params.warn_rel_dev else Severity.INFO,
            f"{metric} follows the declared {shape} shape but decays over ~{t_real} steps, "
            f"not the declared {total} (first off at step {s[a]}, up to {max_dev:.1%}) — "
            "the total steps the code's scheduler was built with differ from the config "
            "(epochs × steps per epoch, gradient accumulation?).",
            step_start=int(s[a]),
            step_end=int(s[idx[-1]]),
            realized_total_steps=t_real,
            declared_total_steps=total,
            **common,
        )
    # LR006
    n0 = float(hyp.info["restart_n"]) - hf.shift  # h(n + shift) restarts at n0 - shift
    restart_step = round(step0 + n0 - 1)
    k = int(np.searchsorted(s, restart_step))
    k = min(k, len(s) - 1)
    return finding(
        "LR006",
        CODES["LR006"],
        Severity.WARNING,
        f"from step {restart_step} {metric} replays the declared {shape} schedule from its "
        f"start ({_fmt(float(r[k]))} at step {s[k]}, planned {_fmt(float(fit.center[k]))}): "
        "the schedule was reset — e.g. a resume that restored the model but not the "
        "scheduler's state or step count.",
        step_start=restart_step,
        step_end=int(s[-1]),
        restart_step=restart_step,
        **common,
    )


# ---- without a declared schedule ---------------------------------------------------------


def _undeclared(s: np.ndarray, r: np.ndarray, metric: str, params: Params) -> list[Finding]:
    out: list[Finding] = []
    if len(r) < 2:
        return out
    q = print_quantum(r)
    top = float(np.max(r))
    if top <= 0:
        return out
    eps = max(2.0 * q, 1e-9 * top)
    tail_floor = max(3.0 * q, 0.05 * top)

    neg = np.flatnonzero(r < 0)
    if len(neg):
        a = int(neg[0])
        out.append(
            finding(
                "LR007",
                CODES["LR007"],
                Severity.WARNING,
                f"{metric} is negative ({_fmt(float(r[a]))}) at step {s[a]} "
                f"({len(neg)} logged points): no schedule goes below zero.",
                metric=metric,
                step_start=s[a],
                step_end=s[neg[-1]],
                n_points=len(neg),
                realized_lr=float(r[a]),
            )
        )

    out.extend(_zeros(s, r, metric, q, tail_floor, params))
    # what a rise must exceed: two print units (absolute %f, or the value's last digit)
    slack = np.maximum(eps, 2 * print_halfunit(r))
    events = _rises(s, r, 1e-9 * top, slack, params) + _drops(s, r, eps, params)
    events.sort(key=lambda e: e["a"])
    merged: list[dict[str, Any]] = []
    for e in events:
        if merged and e["a"] <= merged[-1]["b"] + 2:
            merged[-1]["b"] = max(merged[-1]["b"], e["b"])
            continue
        merged.append(dict(e))
    found = [
        finding(
            "LR007",
            CODES["LR007"],
            Severity.WARNING,
            e["message"].format(metric=metric),
            metric=metric,
            step_start=s[e["a"]],
            step_end=s[e["b"]],
            **e["evidence"],
        )
        for e in merged
    ]
    out.extend(_capped(found, params.max_findings))
    return out


def _zeros(
    s: np.ndarray, r: np.ndarray, metric: str, q: float, tail_floor: float, params: Params
) -> list[Finding]:
    out: list[Finding] = []
    last = len(r) - 1
    for a, b in runs_of(r == 0):
        before = float(r[a - 1]) if a > 0 else None
        after = float(r[b + 1]) if b < last else None
        neighbours = [x for x in (before, after) if x is not None]
        if not neighbours:
            continue  # all zero: nothing to compare against
        length = b - a + 1
        if q > 0 and all(abs(x) <= 10 * q for x in neighbours):
            continue  # a tiny LR printed as 0 at this resolution
        if a == 0 and length <= 2:
            continue  # the first step(s) of a warmup from zero
        severity = Severity.WARNING
        if b == last and length <= 2:
            continue  # the last step(s) of a decay to zero (logged sparsely, maybe)
        if b == last and before is not None and before <= tail_floor:
            severity = Severity.INFO  # trained on past the end of the schedule
        elif length == 1 and 0 < a < last and all(abs(x) <= tail_floor for x in neighbours):
            continue  # the bottom of a dip (a cyclic schedule's floor)
        span = f"step {s[a]}" if length == 1 else f"steps {s[a]}–{s[b]}"
        what = (
            "after the schedule ended (the run went on training with LR 0)"
            if severity is Severity.INFO
            else "where training should happen"
        )
        out.append(
            finding(
                "LR005",
                CODES["LR005"],
                severity,
                f"{metric} is exactly 0 at {span} ({length} logged points) {what} — "
                "those steps change nothing; check the schedule's length and the optimizer's LR.",
                metric=metric,
                step_start=s[a],
                step_end=s[b],
                n_points=length,
                lr_before=before,
                lr_after=after,
            )
        )
    return _capped(out, params.max_findings)


def _rises(
    s: np.ndarray, r: np.ndarray, tiny: float, eps: np.ndarray, params: Params
) -> list[dict[str, Any]]:
    """Rises after decay began, and jumps up out of a plateau before it.

    ``tiny`` tells flat from moving (float noise); ``eps`` (per point) is the least rise
    that counts (two units of the print resolution: a rounded ramp steps by one)."""
    events: list[dict[str, Any]] = []
    tol = params.rise_rtol
    pos = np.where(r > 0, r, np.inf)
    runmax = np.maximum.accumulate(np.where(r > 0, r, 0.0))
    fell = np.flatnonzero((r < runmax * (1 - tol) - tiny) & (r >= 0))
    d0 = int(fell[0]) if len(fell) else len(r)

    if d0 < len(r):
        runmin = np.minimum.accumulate(pos[d0:])
        risen = np.zeros(len(r), dtype=bool)
        risen[d0:] = (r[d0:] > runmin * (1 + tol) + eps[d0:]) & np.isfinite(runmin)
        for a, b in runs_of(risen):
            base = float(runmin[a - d0])
            top = int(a + np.argmax(r[a : b + 1]))
            peak_before = float(runmax[d0])
            events.append(
                {
                    "a": a,
                    "b": b,
                    "message": (
                        f"{{metric}} rises from {_fmt(base)} to {_fmt(float(r[top]))} "
                        f"(×{r[top] / base:.3g}) at step {s[a]} after its decay began at "
                        f"step {s[d0]} (peak {_fmt(peak_before)}): no standard schedule "
                        "rises after its decay — a shock, a scheduler reset on resume, or a "
                        "cyclic schedule that was not declared."
                    ),
                    "evidence": {
                        "lr_before": base,
                        "lr_max": float(r[top]),
                        "max_step": int(s[top]),
                        "factor": float(r[top] / base),
                        "decay_began_step": int(s[d0]),
                    },
                }
            )

    # before decay began: an upward jump out of a plateau is not warmup when the LR sat on
    # the plateau over 3x as long as the warmup took to get there, or falls back soon after
    if d0 < 2:
        return events
    pre = r[: d0 + 1]
    dr = np.diff(pre)
    flat = np.abs(dr) <= tol * np.abs(pre[:-1]) + tiny
    pe = eps[: len(pre)]
    up = (dr > tol * np.abs(pre[:-1]) + np.maximum(pe[:-1], pe[1:])) & (pre[:-1] > 0)
    ids = np.arange(len(dr))
    last_moving = np.maximum.accumulate(np.where(~flat, ids, -1))
    # plateau before interval i starts at point last_moving[i-1] + 1
    prev_moving = np.concatenate(([-1], last_moving[:-1]))
    start = prev_moving + 1
    plateau_pts = ids - start + 1  # points on the plateau, the jump's base included
    cand = np.flatnonzero(up & (plateau_pts >= params.plateau_points))
    for i in cand[: params.max_findings * 4]:
        p0 = int(start[i])
        held = float(s[i] - s[p0])
        ramp = float(s[p0] - s[0])
        level = float(r[i])
        back = np.flatnonzero(r[i + 2 :] <= level * (1 + tol) + eps[i + 2 :])
        excursion = float(s[i + 2 + back[0]] - s[i + 1]) if len(back) else np.inf
        # a staircase warmup holds each stair briefly and never falls back to it soon
        if not ((p0 > 0 and held > 3 * ramp) or excursion < held):
            continue
        j = i + 1
        end = i + 1 + int(back[0]) if len(back) else len(r) - 1
        events.append(
            {
                "a": j,
                "b": max(j, end),
                "message": (
                    f"{{metric}} jumps from {_fmt(level)} to {_fmt(float(r[j]))} "
                    f"(×{r[j] / level:.3g}) at step {s[j]} after holding {_fmt(level)} since "
                    f"step {s[p0]}: not a warmup ramp — an LR shock or a manual change."
                ),
                "evidence": {
                    "lr_before": level,
                    "lr_max": float(r[j]),
                    "factor": float(r[j] / level),
                    "plateau_from_step": int(s[p0]),
                },
            }
        )
    return events


def _drops(s: np.ndarray, r: np.ndarray, eps: float, params: Params) -> list[dict[str, Any]]:
    """Drops far steeper than the neighbouring changes (a step decay drops on a flat LR)."""
    if len(r) < 4:
        return []
    ds = np.diff(s).astype(np.float64)
    ok = (r[:-1] > 0) & (r[1:] > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        g = np.where(ok, np.log(np.where(ok, r[1:], 1.0) / np.where(ok, r[:-1], 1.0)), 0.0)
    moved = np.abs(np.diff(r)) > eps
    rate = np.where(moved & ok, np.abs(g) / np.maximum(ds, 1.0), 0.0)
    # the same in the LR's own units: a linear schedule changes by equal amounts, so its
    # log-rate grows tenfold as it nears its floor (OneCycleLR's three-phase kink: 0.0069
    # -> 0.0032 -> 0.00119 in equal-sized steps, then a slow anneal) and that is no shock
    lin = np.where(moved, np.abs(np.diff(r)) / np.maximum(ds, 1.0), 0.0)
    typical_gap = float(np.median(ds))
    cand = np.flatnonzero(ok & moved & (g <= -np.log(params.drop_factor)) & (ds <= 2 * typical_gap))
    events: list[dict[str, Any]] = []
    w = params.neighbour_window
    for i in cand[: params.max_findings * 4]:
        nb = np.concatenate((rate[max(0, i - w) : i], rate[i + 1 : i + 1 + w]))
        scale = float(np.median(nb)) if len(nb) else 0.0
        if scale <= 0 or rate[i] < params.drop_rate_ratio * scale:
            continue  # a step decay (flat around it) or a smooth steep stretch
        nb_lin = np.concatenate((lin[max(0, i - w) : i], lin[i + 1 : i + 1 + w]))
        if lin[i] < params.drop_rate_ratio * float(np.median(nb_lin)):
            continue  # as steep as its neighbours in the LR's own units: a linear phase
        events.append(
            {
                "a": int(i + 1),
                "b": int(i + 1),
                "message": (
                    f"{{metric}} drops from {_fmt(float(r[i]))} to {_fmt(float(r[i + 1]))} "
                    f"(÷{r[i] / r[i + 1]:.3g}) at step {s[i + 1]}, {rate[i] / scale:.0f}× "
                    "faster than it changes on the neighbouring steps: not part of a smooth "
                    "decay — an LR shock, a manual change or a reset."
                ),
                "evidence": {
                    "lr_before": float(r[i]),
                    "lr_after": float(r[i + 1]),
                    "factor": float(r[i] / r[i + 1]),
                    "rate_ratio": float(rate[i] / scale),
                },
            }
        )
    return events
