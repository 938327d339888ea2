"""The LR detector without a declared schedule: only what no sane schedule does (LR007
rises, jumps and drops; LR005 zeros; a negative LR)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from trainlens.core.findings import Finding, Severity
from trainlens.core.stats import runs_of
from trainlens.detectors._lr_fit import fmt, lr_finding
from trainlens.detectors._lr_precision import print_halfunit, print_quantum

if TYPE_CHECKING:
    from trainlens.detectors.lr_schedule import Params


def undeclared(s: np.ndarray, r: np.ndarray, metric: str, params: Params) -> list[Finding]:
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
            lr_finding(
                "LR007",
                Severity.WARNING,
                f"{metric} is negative ({fmt(float(r[a]))}) at step {s[a]} "
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
        lr_finding(
            "LR007",
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
            lr_finding(
                "LR005",
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


#: a rise after decay that stays under this share of the peak changes no update that
#: matters (PaddleClas' cosine, one epoch past its end: 1e-08 to 9e-08 of a 1e-3 peak)
NEGLIGIBLE = 0.01


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
        events += _rises_after_decay(s, r, d0, runmax, pos, eps, tol)
    # before decay began: an upward jump out of a plateau is not warmup when the LR sat on
    # the plateau over 3x as long as the warmup took to get there, or falls back soon after
    if d0 < 2:
        return events
    return events + _plateau_jumps(s, r, d0, tiny, eps, params)


def _rises_after_decay(
    s: np.ndarray,
    r: np.ndarray,
    d0: int,
    runmax: np.ndarray,
    pos: np.ndarray,
    eps: np.ndarray,
    tol: float,
) -> list[dict[str, Any]]:
    """Rises above the lowest LR since decay began (at point ``d0``)."""
    events: list[dict[str, Any]] = []
    runmin = np.minimum.accumulate(pos[d0:])
    risen = np.zeros(len(r), dtype=bool)
    risen[d0:] = (r[d0:] > runmin * (1 + tol) + eps[d0:]) & np.isfinite(runmin)
    for a, b in runs_of(risen):
        base = float(runmin[a - d0])
        top = int(a + np.argmax(r[a : b + 1]))
        peak_before = float(runmax[d0])
        if float(r[top]) < NEGLIGIBLE * peak_before:
            continue  # (a cosine annealed past its end, by a few print units near 0)
        events.append(
            {
                "a": a,
                "b": b,
                "message": (
                    f"{{metric}} rises from {fmt(base)} to {fmt(float(r[top]))} "
                    f"(×{r[top] / base:.3g}) at step {s[a]} after its decay began at "
                    f"step {s[d0]} (peak {fmt(peak_before)}): no standard schedule "
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
    return events


def _plateau_jumps(
    s: np.ndarray, r: np.ndarray, d0: int, tiny: float, eps: np.ndarray, params: Params
) -> list[dict[str, Any]]:
    """Upward jumps out of a plateau before decay began that are no warmup stair."""
    events: list[dict[str, Any]] = []
    tol = params.rise_rtol
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
                    f"{{metric}} jumps from {fmt(level)} to {fmt(float(r[j]))} "
                    f"(×{r[j] / level:.3g}) at step {s[j]} after holding {fmt(level)} since "
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
                    f"{{metric}} drops from {fmt(float(r[i]))} to {fmt(float(r[i + 1]))} "
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
        lr_finding(
            last.code,
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
