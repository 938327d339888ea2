"""The LR detector with a declared schedule: the logged LR compared with the plan,
step by step, after the conventions real code differs in and a possible step offset."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from trainlens.core.findings import Finding, Severity
from trainlens.core.schedules import shape_of
from trainlens.detectors._lr_diagnoses import Hypothesis, diagnosis, hypotheses
from trainlens.detectors._lr_fit import (
    SCREEN_POINTS,
    Convention,
    Fit,
    conventions,
    fit_plan,
    fmt,
    lr_finding,
    merged_runs,
    plan_of,
    rel_dev,
    thin,
)
from trainlens.detectors._lr_inferred import undeclared
from trainlens.detectors._lr_offset import align, offset_note, unaligned_note
from trainlens.detectors._lr_precision import print_halfunit, print_quantum
from trainlens.detectors.base import Context

if TYPE_CHECKING:
    from trainlens.detectors.lr_schedule import Params


def declared(
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
            return undeclared(first[0], first[1], metric, params)  # no scale to judge by
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
    al = align(s, n, r, sched, conv, atol, params)
    if al is None:
        return _judge(metric, s, n, r, sched, conv, fit, atol, params, ctxinfo)
    if not al.pinned:
        return [unaligned_note(metric, s, r, al, ctxinfo)]
    note = offset_note(metric, s, r, al, ctxinfo, first_epoch)
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
) -> tuple[str, Convention, Fit, np.ndarray] | None:
    """The LR series (param group) and warmup convention that match the plan best, or
    None when one matches at every point (the first param group that does ends the
    search)."""
    peak = float(sched["peak_lr"])
    best: tuple[str, Convention, Fit, np.ndarray] | None = None
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
        for conv in conventions(sched, n, r):
            f = fit_plan(r, n, plan_of(sched, conv), params.max_shift, params.rtol, atol)
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
    fit: Fit,
    atol: np.ndarray,
    params: Params,
    ctxinfo: dict[str, Any],
) -> list[Finding]:
    """The findings for a log that departs from the plan at some points."""
    d = plan_of(sched, conv)
    shape = str(ctxinfo["shape"])
    out: list[Finding] = []
    mismatch = ~fit.ok
    zeros = _zeros_off_plan(r, fit, atol, mismatch)
    rest = mismatch & ~zeros
    if not rest.any():
        return _zero_findings(zeros, s, r, fit, metric, shape, ctxinfo)

    hyps = hypotheses(sched, d, s, n, r, rest, fit, atol, params, conv)
    hyp = _screened(hyps, n, r, fit, rest, ~zeros, atol, params)
    if hyp is not None:
        hf = fit_plan(r, n, hyp.h, params.max_shift, params.rtol, atol)
        out.append(diagnosis(hyp, hf, d, s, n, r, fit, rest, metric, sched, atol, ctxinfo, params))
        # what the diagnosis leaves unexplained is reported against the plan below
        rest = rest & ~hf.ok
    # zeros are reported even when a diagnosis explains how they came about: a stretch
    # with no training is the symptom a person acts on
    out.extend(_zero_findings(zeros, s, r, fit, metric, shape, ctxinfo))
    if not rest.any():
        return out
    if hyp is None:
        no_warmup, rest = _missing_warmup(metric, s, n, r, sched, fit, rest, ctxinfo)
        if no_warmup is not None:
            out.append(no_warmup)
    out.extend(_mismatches(metric, s, r, fit, rest, atol, shape, params, ctxinfo))
    return out


def _zeros_off_plan(r: np.ndarray, fit: Fit, atol: np.ndarray, mismatch: np.ndarray) -> np.ndarray:
    """Exact zeros where the plan (and its timing neighbours) train: LR005, beside any
    diagnosis (a schedule run too fast reaches a floor of 0 early)."""
    zeros = (r == 0) & (fit.lo > atol) & mismatch
    q = print_quantum(r)
    for a, b in merged_runs(zeros, gap=0):
        near = [abs(float(r[i])) for i in (a - 1, b + 1) if 0 <= i < len(r)]
        if q > 0 and all(x <= 10 * q for x in near):
            zeros[a : b + 1] = False  # a tiny LR printed as 0: judged as a mismatch
    return zeros


def _screened(
    hyps: list[Hypothesis],
    n: np.ndarray,
    r: np.ndarray,
    fit: Fit,
    rest: np.ndarray,
    usable: np.ndarray,
    atol: np.ndarray,
    params: Params,
) -> Hypothesis | None:
    """The hypothesis that explains the log best, or None. Screened on a sample (uniform,
    plus the mismatched points); the one chosen is then fitted on every point."""
    uniform = thin(np.arange(len(r)), SCREEN_POINTS)
    wrong = thin(np.flatnonzero(rest), SCREEN_POINTS)
    sub = np.union1d(uniform, wrong)
    at_u, at_w = np.searchsorted(sub, uniform), np.searchsorted(sub, wrong)
    base_score = int(fit.ok[sub].sum())
    accepted: list[tuple[Hypothesis, int]] = []
    for hyp in hyps:
        hf = fit_plan(r[sub], n[sub], hyp.h, params.max_shift, params.rtol, atol[sub])
        if (
            hf.ok[at_u][usable[uniform]].mean() >= params.explain_frac
            and hf.ok[at_w].mean() >= params.explain_frac
            and hf.score > base_score
        ):
            accepted.append((hyp, hf.score))
    if not accepted:
        return None
    return max(accepted, key=lambda t: t[1])[0]  # the first wins ties (list order)


def _missing_warmup(
    metric: str,
    s: np.ndarray,
    n: np.ndarray,
    r: np.ndarray,
    sched: dict[str, Any],
    fit: Fit,
    rest: np.ndarray,
    ctxinfo: dict[str, Any],
) -> tuple[Finding | None, np.ndarray]:
    """LR004 for a log already high inside the declared warmup, and the mismatches it
    leaves."""
    peak = float(sched["peak_lr"])
    warm = int(float(sched.get("warmup_steps") or 0))
    in_warm = rest & (n <= warm) & (r > fit.hi)
    first_in = np.flatnonzero(n <= warm)
    starts_high = len(first_in) > 0 and n[first_in[0]] <= warm / 2 and r[first_in[0]] >= 0.5 * peak
    if warm > 0 and in_warm.any() and starts_high:
        idx = np.flatnonzero(in_warm)
        a, b = int(idx[0]), int(idx[-1])
        found = lr_finding(
            "LR004",
            Severity.WARNING,
            f"{metric} is already {fmt(r[a])} at step {s[a]}, inside the declared "
            f"{warm}-step warmup (planned {fmt(fit.center[a])}): the warmup is "
            "missing — check the warmup scheduler is attached and stepped.",
            metric=metric,
            step_start=s[a],
            step_end=s[b],
            warmup_steps=warm,
            realized_lr=float(r[a]),
            declared_lr=float(fit.center[a]),
            **ctxinfo,
        )
        return found, rest & ~in_warm
    return None, rest


def _mismatches(
    metric: str,
    s: np.ndarray,
    r: np.ndarray,
    fit: Fit,
    rest: np.ndarray,
    atol: np.ndarray,
    shape: str,
    params: Params,
    ctxinfo: dict[str, Any],
) -> list[Finding]:
    """LR001 for the stretches off the plan that no diagnosis explains."""
    dev = rel_dev(r, fit, atol)
    segments = merged_runs(rest, gap=max(2, len(r) // 100))
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
            lr_finding(
                "LR001",
                sev,
                f"{metric} deviates from the declared {shape} schedule at {span} "
                f"({share}first at step {s[a]}; worst {fmt(r[w])} vs planned "
                f"{fmt(fit.center[w])} at step {s[w]}, {max_dev:.1%} off{extra}) — "
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
    return generic


def _zero_findings(
    zeros: np.ndarray,
    s: np.ndarray,
    r: np.ndarray,
    fit: Fit,
    metric: str,
    shape: str,
    ctxinfo: dict[str, Any],
) -> list[Finding]:
    out = []
    for a, b in merged_runs(zeros, gap=0):
        out.append(
            lr_finding(
                "LR005",
                Severity.WARNING,
                f"{metric} is exactly 0 at steps {s[a]}–{s[b]} ({b - a + 1} logged points) "
                f"where the declared {shape} schedule gives {fmt(fit.center[a])}: no "
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
