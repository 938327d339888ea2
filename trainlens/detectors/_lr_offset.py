"""A log whose steps are offset from the plan's: find the offset t0 with
realized(step) ≈ plan(step + t0), and say so (LR008)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from trainlens.core.dataclass import dataclass
from trainlens.core.findings import Finding, Severity
from trainlens.core.schedules import offset_candidates
from trainlens.detectors._lr_fit import Convention, fit_plan, fmt, lr_finding, plan_of, thin

if TYPE_CHECKING:
    from trainlens.detectors.lr_schedule import Params


#: logged values the plan is inverted at to find an offset (evenly spread over the log)
ALIGN_ANCHORS = 48


#: points an offset candidate is scored on before the full log is fitted
ALIGN_SCREEN = 4000


@dataclass
class Alignment:
    """Where a log sits on the plan: realized(n) ≈ plan(n + offset)."""

    offset: int
    pinned: bool
    explained: float  # share of the logged points the aligned plan explains
    change: float  # relative change of the aligned plan over the log
    lo: int  # offsets that explain the log as well: lo..hi (None: no end, a flat tail)
    hi: int | None
    planned_first: float  # the aligned plan at the first logged point


def align(
    s: np.ndarray,
    n: np.ndarray,
    r: np.ndarray,
    sched: dict[str, Any],
    conv: Convention,
    atol: np.ndarray,
    params: Params,
) -> Alignment | None:
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
    sub = thin(np.arange(len(r)), ALIGN_SCREEN)
    d = plan_of(sched, conv)
    scored: list[tuple[int, int, float, float]] = []  # score, offset, lo, hi
    for t0, r_lo, r_hi in cands:
        if n[0] + t0 < 1 - params.max_shift:
            continue  # the log would start before the plan does
        f = fit_plan(r[sub], n[sub] + t0, d, params.max_shift, params.rtol, atol[sub])
        scored.append((f.score, t0, r_lo, r_hi))
    if not scored:
        return None
    scored.sort(key=lambda c: -c[0])
    score, t0, r_lo, r_hi = scored[0]
    if abs(t0) <= params.max_shift + 1:
        return None  # a timing convention, which the plain fit tried
    full = fit_plan(r, n + t0, d, params.max_shift, params.rtol, atol)
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
    return Alignment(
        offset=int(t0),
        pinned=pinned,
        explained=explained,
        change=change,
        lo=int(np.floor(lo_all)),
        hi=int(np.ceil(hi_all)) if np.isfinite(hi_all) else None,
        planned_first=float(plan[0]),
    )


def offset_note(
    metric: str,
    s: np.ndarray,
    r: np.ndarray,
    al: Alignment,
    ctxinfo: dict[str, Any],
    first_epoch: float | None,
) -> Finding:
    t0 = al.offset
    epoch = ""
    if first_epoch is not None and first_epoch >= 1:  # (HF's fractional epoch of a first log)
        epoch = f"; its epoch starts at {first_epoch:g}, not 0"
    return lr_finding(
        "LR008",
        Severity.INFO,
        f"{metric} follows the declared {ctxinfo['shape']} schedule with the log's steps "
        f"offset by {t0:+,} from the schedule's: logged step {s[0]} ({fmt(float(r[0]))}) is "
        f"the plan's step {s[0] + t0:,} ({fmt(al.planned_first)}){epoch} — a resumed run "
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


def unaligned_note(
    metric: str, s: np.ndarray, r: np.ndarray, al: Alignment, ctxinfo: dict[str, Any]
) -> Finding:
    span = f"from {al.lo:+,} to {al.hi:+,} steps" if al.hi is not None else f"from {al.lo:+,} on"
    return lr_finding(
        "LR008",
        Severity.INFO,
        f"{metric} does not follow the declared {ctxinfo['shape']} schedule at the logged "
        f"steps, and the schedule could not be aligned with the log: it matches the plan "
        f"where the plan barely changes ({fmt(float(np.min(r)))}–{fmt(float(np.max(r)))}), "
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
