"""Known LR bugs as time maps of the declared plan (LR002/3/4/6, LR001 with a cause):
the hypotheses tried on a log off the plan, and the finding for the one that fits."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from trainlens.core.dataclass import dataclass, field
from trainlens.core.findings import Finding, Severity
from trainlens.core.schedules import shape_of
from trainlens.core.stats import runs_of
from trainlens.detectors._lr_fit import Convention, Fit, Plan, fmt, lr_finding, plan_of, rel_dev
from trainlens.detectors._lr_precision import print_quantum

if TYPE_CHECKING:
    from trainlens.detectors.lr_schedule import Params


@dataclass
class Hypothesis:
    code: str
    h: Callable[[np.ndarray], np.ndarray]
    info: dict[str, Any] = field(default_factory=dict)


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


def hypotheses(
    sched: dict[str, Any],
    d: Callable[[np.ndarray], np.ndarray],
    s: np.ndarray,
    n: np.ndarray,
    r: np.ndarray,
    rest: np.ndarray,
    fit: Fit,
    atol: np.ndarray,
    params: Params,
    conv: Convention,
) -> list[Hypothesis]:
    """Known bugs as time maps of the plan, in order of preference on ties."""
    warm = int(float(sched.get("warmup_steps") or 0))
    out = _advanced(sched, d, n, r, atol, params)
    out += _stopped_early(d, n, r, atol, params)
    # LR004: no warmup (the same schedule with W = 0, or the plan shifted by W)
    if warm > 0:
        nowarm = {**sched, "warmup_steps": 0}
        out.append(Hypothesis("LR004", plan_of(nowarm), {"variant": "no-warmup"}))
        out.append(Hypothesis("LR004", _offset(d, warm), {"variant": "skipped"}))
    out += _other_length(sched, n, r, atol, params, conv)
    out += _restarts(d, n, r, rest, atol, params)
    return out


def _advanced(
    sched: dict[str, Any], d: Plan, n: np.ndarray, r: np.ndarray, atol: np.ndarray, params: Params
) -> list[Hypothesis]:
    """LR002: k scheduler steps per optimizer step, realized(n) = plan(k n); k guessed from
    when the realized LR reaches the peak or the floor."""
    warm = int(float(sched.get("warmup_steps") or 0))
    total = float(sched.get("total_steps") or 0)
    peak = float(sched["peak_lr"])
    lo_lr = float(sched.get("min_lr") or 0.0)
    ks = {2, 3, 4}
    tol = params.rtol * peak + atol
    at_peak = np.flatnonzero(r >= peak - tol)
    if warm > 1 and len(at_peak) and n[at_peak[0]] > 0:
        ks.add(round(float(warm / n[at_peak[0]])))
    if total > warm and lo_lr < peak * (1 - params.rtol):
        at_floor = np.flatnonzero((r <= lo_lr + tol) & (n > warm))
        if len(at_floor) and n[at_floor[0]] > 0:
            ks.add(round(float(total / n[at_floor[0]])))
    return [
        Hypothesis("LR002", _scaled(d, k), {"factor": k})
        for k in sorted(k for k in ks if 2 <= k <= 256)
    ]


def _stopped_early(
    d: Plan, n: np.ndarray, r: np.ndarray, atol: np.ndarray, params: Params
) -> list[Hypothesis]:
    """LR003: the scheduler stopped stepping where the realized LR goes flat to the end
    (exactly flat, as a scheduler that is not stepped leaves it, or flat within tolerance)."""
    out: list[Hypothesis] = []
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
                Hypothesis("LR003", _stopped(d, n_stop, flat), {"stop_n": n_stop, "flat_index": j})
            )
    return out


def _other_length(
    sched: dict[str, Any],
    n: np.ndarray,
    r: np.ndarray,
    atol: np.ndarray,
    params: Params,
    conv: Convention,
) -> list[Hypothesis]:
    """LR001 with a cause: the code decays over a different number of steps than declared
    (estimated by inverting the cosine/linear decay at the points inside its range)."""
    warm = int(float(sched.get("warmup_steps") or 0))
    total = float(sched.get("total_steps") or 0)
    peak = float(sched["peak_lr"])
    lo_lr = float(sched.get("min_lr") or 0.0)
    tol = params.rtol * peak + atol
    shape = shape_of(sched)
    if not (shape in ("cosine", "linear") and total > warm):
        return []
    inside = (n > warm + 1) & (r < peak * (1 - params.rtol)) & (r > lo_lr + 2 * tol)
    if inside.sum() < 3:
        return []
    frac = np.clip((r[inside] - lo_lr) / (peak - lo_lr), 0.0, 1.0)
    p = np.arccos(2 * frac - 1) / np.pi if shape == "cosine" else 1 - frac
    est = warm + (n[inside] - warm) / np.maximum(p, 1e-9)
    t_est = float(np.median(est))
    if abs(t_est - total) > 0.01 * total and warm < t_est < 100 * total:
        return [
            Hypothesis(
                "LR001",
                plan_of({**sched, "total_steps": round(t_est)}, conv),
                {"total_steps": round(t_est)},
            )
        ]
    return []


def _restarts(
    d: Plan, n: np.ndarray, r: np.ndarray, rest: np.ndarray, atol: np.ndarray, params: Params
) -> list[Hypothesis]:
    """LR006: from step n0 the plan starts over; n0 from where the first unexplained
    realized value sits on the plan."""
    out: list[Hypothesis] = []
    k0 = int(np.flatnonzero(rest)[0])
    if k0 <= 0:
        return out
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
                out.append(Hypothesis("LR006", _restarted(d, n0), {"restart_n": n0}))
    return out


@dataclass
class _Case:
    """What the finding for an accepted hypothesis reads."""

    hyp: Hypothesis
    hf: Fit  # the hypothesis fitted on every point
    d: Plan
    s: np.ndarray
    n: np.ndarray
    r: np.ndarray
    fit: Fit  # the plain plan's fit
    sched: dict[str, Any]
    params: Params
    shape: str
    idx: np.ndarray  # the points off the plan
    a: int  # the first of them
    max_dev: float
    step0: int  # the step number of n = 1
    warm: int
    metric: str
    common: dict[str, Any]  # evidence every diagnosis carries


def diagnosis(
    hyp: Hypothesis,
    hf: Fit,
    d: Plan,
    s: np.ndarray,
    n: np.ndarray,
    r: np.ndarray,
    fit: Fit,
    rest: np.ndarray,
    metric: str,
    sched: dict[str, Any],
    atol: np.ndarray,
    ctxinfo: dict[str, Any],
    params: Params,
) -> Finding:
    """The finding for the hypothesis that explains the log."""
    shape = ctxinfo["shape"]
    idx = np.flatnonzero(rest)
    a = int(idx[0])
    dev = rel_dev(r, fit, atol)
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
    c = _Case(
        hyp, hf, d, s, n, r, fit, sched, params, shape, idx, a, max_dev, step0, warm, metric, common
    )
    build = {
        "LR002": _advanced_finding,
        "LR003": _flat_finding,
        "LR004": _no_warmup_finding,
        "LR001": _length_finding,
    }.get(hyp.code, _reset_finding)
    return build(c)


def _advanced_finding(c: _Case) -> Finding:
    """LR002: the plan advanced k steps per optimizer step."""
    hyp, hf, s = c.hyp, c.hf, c.s
    sched, shape, a, step0 = c.sched, c.shape, c.a, c.step0
    metric, common = c.metric, c.common
    k = int(hyp.info["factor"])
    off = -(k - 1) + hf.shift * k
    total = float(sched.get("total_steps") or 0)
    reach = ""
    if total > 0:
        reach = (
            f": it reaches the end of the plan at step ~{int(step0 + (total - 1 + k - 1) / k)} "
            f"instead of {int(step0 + total - 1)}"
        )
    return lr_finding(
        "LR002",
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


def _flat_finding(c: _Case) -> Finding:
    """LR003: the LR went flat where the plan decays."""
    hyp, d, s, n = c.hyp, c.d, c.s, c.n
    r, fit, sched, shape = c.r, c.fit, c.sched, c.shape
    a, max_dev, warm, metric = c.a, c.max_dev, c.warm, c.metric
    common = c.common
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
    return lr_finding(
        "LR003",
        Severity.WARNING,
        f"{metric} stays flat at {fmt(flat)} from step {s[j]} while the declared "
        f"{shape} schedule decays (to {fmt(float(fit.center[-1]))} at step {s[-1]}; "
        f"off by more than tolerance from step {s[a]}, up to {max_dev:.0%}): {when}.",
        step_start=min(start, int(s[a])),
        step_end=int(s[-1]),
        flat_from_step=int(s[j]),
        flat_lr=flat,
        **common,
    )


def _no_warmup_finding(c: _Case) -> Finding:
    """LR004: the declared warmup is missing."""
    hyp, s, r, fit = c.hyp, c.s, c.r, c.fit
    idx, a, warm, metric = c.idx, c.a, c.warm, c.metric
    common = c.common
    return lr_finding(
        "LR004",
        Severity.WARNING,
        f"{metric} starts at {fmt(float(r[0]))} at step {s[0]} although a {warm}-step "
        f"warmup was declared (planned {fmt(float(fit.center[0]))}): the warmup is "
        "missing — check the warmup scheduler is attached and stepped.",
        step_start=int(s[a]),
        step_end=int(s[idx[-1]]),
        warmup_steps=warm,
        variant=hyp.info["variant"],
        realized_lr=float(r[0]),
        declared_lr=float(fit.center[0]),
        **common,
    )


def _length_finding(c: _Case) -> Finding:
    """LR001 with a cause: the plan decays over another number of steps."""
    hyp, s, sched, params = c.hyp, c.s, c.sched, c.params
    shape, idx, a, max_dev = c.shape, c.idx, c.a, c.max_dev
    metric, common = c.metric, c.common
    t_real = int(hyp.info["total_steps"])
    total = int(float(sched.get("total_steps") or 0))
    return lr_finding(
        "LR001",
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


def _reset_finding(c: _Case) -> Finding:
    """LR006: from some step the plan starts over."""
    hyp, hf, s, r = c.hyp, c.hf, c.s, c.r
    fit, shape, step0 = c.fit, c.shape, c.step0
    metric, common = c.metric, c.common
    n0 = float(hyp.info["restart_n"]) - hf.shift  # h(n + shift) restarts at n0 - shift
    restart_step = round(step0 + n0 - 1)
    k = int(np.searchsorted(s, restart_step))
    k = min(k, len(s) - 1)
    return lr_finding(
        "LR006",
        Severity.WARNING,
        f"from step {restart_step} {metric} replays the declared {shape} schedule from its "
        f"start ({fmt(float(r[k]))} at step {s[k]}, planned {fmt(float(fit.center[k]))}): "
        "the schedule was reset — e.g. a resume that restored the model but not the "
        "scheduler's state or step count.",
        step_start=restart_step,
        step_end=int(s[-1]),
        restart_step=restart_step,
        **common,
    )
