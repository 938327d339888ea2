"""TPUT001's machinery: the levels of a throughput signal, its drop episodes, and how each
is measured, judged and told. The detector (:mod:`trainlens.detectors.throughput`) finds
the signal and calls :func:`_drops`."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from trainlens.core.dataclass import dataclass
from trainlens.core.findings import Finding
from trainlens.core.stats import median_step
from trainlens.detectors._segments import refine_split, segment_levels
from trainlens.detectors.base import finding

if TYPE_CHECKING:
    from trainlens.detectors.throughput import Params


@dataclass
class Signal:
    metric: str  # what was logged
    steps: np.ndarray
    y: np.ndarray  # log throughput (higher is faster)
    kind: str  # "rate" or "time"
    note: str = ""

    def natural(self, level: float) -> float:
        """A level of y back in the metric's own units."""
        return math.exp(level) if self.kind == "rate" else math.exp(-level)


def _fmt(x: float) -> str:
    return f"{x:.4g}" if abs(x) < 1e4 else f"{x:.3g}"


@dataclass
class _Levels:
    """A throughput series cut into levels, and the scales a drop is judged on."""

    sig: Signal
    params: Params
    b: list[int]  # level i is y[b[i]:b[i+1]]
    lv: list[float]
    dstep: float
    span_total: float  # the run's step span
    min_span: float  # the least span a low stretch must last
    min_effect: float  # a drop of min_drop, in log units

    @property
    def n(self) -> int:
        return len(self.sig.y)

    def step_at(self, i: int) -> float:
        steps = self.sig.steps
        return float(steps[i]) if i < self.n else float(steps[-1]) + self.dstep

    def refine(self, i: int) -> int:
        """Boundary i (between segments i-1 and i) refined on the raw values."""
        b, lv = self.b, self.lv
        r = max(3, (b[i] - b[i - 1]) // 4, (b[i + 1] - b[i]) // 4)
        lo, hi = max(b[i - 1] + 1, b[i] - r), min(b[i + 1] - 1, b[i] + r)
        return refine_split(self.sig.y, lo, hi, lv[i - 1], lv[i]) if hi > lo else b[i]


def _levels(sig: Signal, params: Params) -> _Levels:
    steps, y = sig.steps, sig.y
    dstep = median_step(steps)
    span_total = float(steps[-1] - steps[0]) + dstep
    min_span = params.min_duration_frac * span_total
    min_effect = -math.log1p(-params.min_drop)  # a drop of min_drop, in log units
    seg = segment_levels(
        y,
        steps,
        min_points=params.min_points,
        min_frac=params.min_duration_frac,
        min_span=min_span,
        min_effect=min_effect,
        z_min=params.z_min,
        max_filter=params.max_filter,
    )
    return _Levels(sig, params, seg.bounds, seg.levels, dstep, span_total, min_span, min_effect)


def _episodes(lev: _Levels) -> list[tuple[int, int, int]]:
    """Each fall of the levels as (first, quick, last): the boundary where it starts, the
    level a quick staircase reaches, and the lowest level of the episode."""
    lv, b, params = lev.lv, lev.b, lev.params
    out: list[tuple[int, int, int]] = []
    i = 1
    while i < len(lv):
        if lv[i] >= lv[i - 1]:
            i += 1
            continue
        first = i  # the boundary where the fall starts
        # a quick staircase down (short intermediate levels) is one transition ...
        while (
            i + 1 < len(lv)
            and lv[i + 1] < lv[i]
            and lev.step_at(b[i + 1]) - lev.step_at(b[i])
            < params.sustained_frac * lev.span_total / 2
        ):
            i += 1
        quick = i
        # ... which starts at its first substantial step (a small dip just before the
        # main fall is part of the level before)
        falls = [lv[j - 1] - lv[j] for j in range(first, quick + 1)]
        first += next(j for j, f in enumerate(falls) if f >= 0.5 * max(falls))
        # ... and later, smaller falls with no rise in between continue the same
        # episode (a larger one starts its own)
        main_fall = lv[first - 1] - lv[quick]
        while i + 1 < len(lv) and 0 < lv[i] - lv[i + 1] <= main_fall:
            i += 1
        out.append((first, quick, i))
        i += 1
    return out


@dataclass
class _Drop:
    """One fall of throughput, measured (log levels; indices into the series)."""

    first: int
    quick: int
    last: int
    before: float
    after: float
    lowest: float
    total: float  # the whole fall, as a fraction
    kept: float  # what is still lost
    k: int  # refined start
    stop: int  # refined end (n: to the end)
    rec: int | None  # the level it recovered at
    part: int | None  # the level from which it partly recovered
    duration: float
    recent: float  # the typical level over the stretch just before
    established: bool
    sev: str = "info"
    stages: list[int] | None = None


def _measure(lev: _Levels, first: int, quick: int, last: int) -> _Drop | None:
    """The drop of one episode, or None when it is too small or too short."""
    steps, y, n, b, lv, params = lev.sig.steps, lev.sig.y, lev.n, lev.b, lev.lv, lev.params
    before, after, lowest = lv[first - 1], lv[quick], lv[last]
    # judged against everything before too: a return from a fast stretch is no drop
    pre = float(np.median(y[: b[first]]))
    total = 1.0 - math.exp(lowest - before)
    if pre - lowest < lev.min_effect or total < params.min_drop:
        return None
    # recovered: a later level back within a quarter of the fall from the level
    # before (the lower of the level just before and the median of all before);
    # partly: back at least half-way
    ref = min(before, pre)
    back_at = ref - max(lev.min_effect, 0.25 * (ref - after))
    rec = next((j for j in range(last + 1, len(lv)) if lv[j] >= back_at), None)
    # partly: from some later level on, the rest of the run is half-way back
    half_at = lowest + 0.5 * (ref - lowest)
    part = (
        next(
            (j for j in range(last + 1, len(lv)) if float(np.median(y[b[j] :])) >= half_at),
            None,
        )
        if rec is None
        else None
    )
    k = lev.refine(first)
    stop = lev.refine(rec) if rec is not None else n
    # the low stretch, from the refined start, must itself be sustained
    if (
        stop - k < max(params.min_points, math.ceil(params.min_duration_frac * n))
        or lev.step_at(stop) - float(steps[k]) < lev.min_span
    ):
        return None
    if quick == first:
        after = float(np.median(y[k : b[quick + 1]]))
        if last == quick:
            lowest = after
    total = 1.0 - math.exp(lowest - before)
    if total < params.min_drop:
        return None
    duration = lev.step_at(stop) - float(steps[k])
    # what is still lost: from the partial recovery on, or over the whole stretch
    kept = 1.0 - math.exp(float(np.median(y[b[part] if part is not None else k : stop])) - ref)
    window = params.sustained_frac * lev.span_total
    established = float(steps[k]) - float(steps[0]) >= window
    recent_sel = (steps >= steps[k] - window) & (steps < steps[k])
    recent = float(np.median(y[recent_sel])) if recent_sel.any() else before
    return _Drop(
        first,
        quick,
        last,
        before,
        after,
        lowest,
        total,
        kept,
        k,
        stop,
        rec,
        part,
        duration,
        recent,
        established,
    )


def _judge(lev: _Levels, d: _Drop) -> bool:
    """Set the drop's severity (and its equal stages); False for a dip not reported."""
    steps, y, params = lev.sig.steps, lev.sig.y, lev.params
    # persisting to the end, a drop must last sustained_frac of the run to be a
    # warning; one that ended by itself (contention from a neighbour, a slow
    # filesystem for a while) must last recovered_frac
    need = params.recovered_frac if d.rec is not None else params.sustained_frac
    sustained = d.duration >= need * lev.span_total
    # a warning compares with the typical level over the stretch just before (as
    # long as a sustained drop lasts), which must exist: after a short fast stretch
    # — an idle machine at the start of a run, a pause in a neighbour's load — the
    # lower level may be the normal one
    window = params.sustained_frac * lev.span_total
    vs_recent = 1.0 - math.exp(d.after - d.recent)
    low = y[lev.b[d.part] if d.part is not None else d.k : d.stop]
    kept_recent = 1.0 - math.exp(float(np.median(low)) - d.recent)
    serious = min(d.total, d.kept, vs_recent, kept_recent) >= params.warn_drop
    if d.rec is not None and d.total < params.warn_drop and d.duration < window:
        return False  # a small dip that went away: the noise of a shared machine
    d.sev = "warning" if serious and sustained and d.established else "info"
    d.stages = equal_stages(
        lev.sig,
        [int(steps[d.k])] + [int(steps[lev.refine(j)]) for j in range(d.first + 1, d.last + 1)],
        params.stage_tol_frac * lev.span_total + lev.dstep,
    )
    if d.stages:
        d.sev = "info"
    return True


def _message(lev: _Levels, d: _Drop) -> str:
    sig, steps, b = lev.sig, lev.sig.steps, lev.b
    start = int(steps[d.k])
    nb, na = sig.natural(d.before), sig.natural(d.after)
    pct = 100.0 * (1.0 - math.exp(d.after - d.before))
    at = (
        f"between step {start} and step {int(steps[b[d.quick]])}"
        if d.quick > d.first
        else f"at step {start}"
    )
    if sig.kind == "time":
        what = (
            f"{sig.metric} rose {100 * (math.exp(d.before - d.after) - 1):.0f}% {at} "
            f"(from {_fmt(nb)} s to {_fmt(na)} s per step, throughput -{pct:.0f}%)"
        )
    else:
        what = f"{sig.metric} fell {pct:.0f}% {at} (from {_fmt(nb)} to {_fmt(na)})"
    if d.last > d.quick:
        what += (
            f", kept falling to {_fmt(sig.natural(d.lowest))} by step {int(steps[b[d.last]])} "
            f"(-{100 * d.total:.0f}% in all)"
        )
    if d.rec is not None:
        tail = f"recovered at step {int(steps[d.stop])} ({d.duration:.0f} steps later)"
    elif d.part is not None:
        tail = (
            f"partly recovered from step {int(steps[b[d.part]])} (still "
            f"-{100 * d.kept:.0f}% on average to the last logged step {int(steps[-1])})"
        )
    else:
        tail = f"stayed there to the last logged step ({int(steps[-1])}, {d.duration:.0f} steps)"
    hint = (
        "look for a slow or throttled GPU, a competing process, or a data-loader/IO "
        "change at that step"
        if d.sev == "warning" or (d.rec is None and d.part is None)
        else "a transient slowdown (contention from another job, a slow filesystem)"
    )
    if d.stages:
        hint = (
            f"the rises come in equal stages (steps {', '.join(map(str, d.stages))}, one every "
            f"{d.stages[0] - int(steps[0])} steps from the start): the shape of a planned "
            "batch-size or sequence-length schedule, more work per step rather than a "
            "slower machine; if none was planned, " + hint
        )
    return f"{what} and {tail}; {hint}."


def _drop_finding(lev: _Levels, d: _Drop, name: str) -> Finding:
    sig, steps, b = lev.sig, lev.sig.steps, lev.b
    ev: dict[str, Any] = {
        "before": sig.natural(d.before),
        "after": sig.natural(d.after),
        "drop_pct": round(100.0 * (1.0 - math.exp(d.after - d.before)), 2),
        "total_drop_pct": round(100 * d.total, 2),
        "kept_drop_pct": round(100 * d.kept, 2),
        "lowest": sig.natural(d.lowest),
        "n_before": b[d.first] - b[d.first - 1],
        "n_after": b[d.last + 1] - d.k,
        "fall_end_step": int(steps[b[d.quick]]),
        "lowest_step": int(steps[b[d.last]]),
        "recovered_step": int(steps[d.stop]) if d.rec is not None else None,
        "partly_recovered_step": int(steps[b[d.part]]) if d.part is not None else None,
        "duration_steps": d.duration,
        "share_of_run": round(d.duration / lev.span_total, 4),
        "recent_level": sig.natural(d.recent),
        "established_before": d.established,
        "source": sig.metric,
    }
    if sig.note:
        ev["note"] = sig.note
    return finding(
        "TPUT001",
        name,
        d.sev,
        _message(lev, d),
        metric=sig.metric,
        step_start=int(steps[d.k]),
        step_end=int(steps[d.stop - 1]),
        **ev,
    )


def drops(sig: Signal, params: Params, name: str) -> list[Finding]:
    """TPUT001 findings of ``sig`` (``name``: the code's name, from the detector's CODES)."""
    lev = _levels(sig, params)
    out: list[Finding] = []
    for first, quick, last in _episodes(lev):
        d = _measure(lev, first, quick, last)
        if d is not None and _judge(lev, d):
            out.append(_drop_finding(lev, d, name))
    out.sort(key=lambda f: (-f.severity.rank, -float(f.evidence["drop_pct"])))
    return sorted(out[: params.max_findings], key=lambda f: f.step_start or 0)


def equal_stages(sig: Signal, rises: list[int], tol: float) -> list[int]:
    """The steps of a step-time staircase that rises at equal stages from the run's start
    (the k-th rise within ``tol`` steps of k times the first; at least two), or none.
    Step time alone cannot tell more work per step from a slower machine, but a schedule
    that grows the batch or the sequence in equal stages (modded-nanogpt's batch-size
    schedule in thirds of the run) moves it exactly so; a slowdown of the machine has no
    reason to come back at the same spacing."""
    if sig.kind != "time" or len(rises) < 2:
        return []
    origin = int(sig.steps[0])
    first = rises[0] - origin
    if first <= tol:
        return []
    if any(abs((r - origin) - (i + 1) * first) > tol for i, r in enumerate(rises)):
        return []
    return rises


# ---- TPUT002 ------------------------------------------------------------------------------
