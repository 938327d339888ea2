"""Throughput: a sustained drop in tokens/s (or samples/s, or a rise in step time), and
per-rank stragglers.

What it flags
    TPUT001 ``throughput-drop``: a change point after which the run's throughput stays
    lower — the step it began, the level before and after (in the metric's own units)
    and the percentage lost, and the step it recovered if it did. The signal is the
    first of ``tokens_per_sec``, ``samples_per_sec``, ``step_time`` (a rise in step
    time is a drop in throughput) or the per-step increments of a cumulative
    ``train_time`` that the run logged; with none of those but per-rank metrics, the
    median over ranks.

    TPUT002 ``straggler-rank``: when per-rank metrics exist, one rank persistently
    slower than the median of the others. Supported names: ``<metric>/rank<N>``,
    ``<metric>_rank<N>``, ``<metric>.rank<N>``, ``<metric>-rank<N>`` and
    ``rank<N>/<metric>`` (``rank_<N>`` too), where ``<metric>`` is any spelling the alias
    table maps to ``tokens_per_sec``, ``samples_per_sec`` or ``step_time`` (so
    ``step_time_ms/rank3`` works).

    Method: the log of the throughput (rate, or 1/step time) is median-filtered with a
    window of about half the minimum duration, so slow stretches shorter than that
    (an eval, a checkpoint save, a recompile) vanish; binary segmentation (the L2 cost
    of Scott & Knott 1974 / Killick & Eckley's ``changepoint`` package, with a BIC-style
    penalty of 2 σ² log n on the robust noise σ) cuts it into levels; segments that are
    too short (in points or in steps) or whose medians differ by less than the smallest
    reported drop or not significantly (robust z < 5) are merged; then each fall
    between consecutive levels (a staircase down counts as one episode) is a drop,
    judged against the median of everything before it. The step is refined on the raw
    values (the split that minimizes the absolute deviation from the two levels).

Why it matters
    Throughput is cost: a 10 % drop in a month-long job is three lost days on every
    GPU. A sudden sustained drop usually has one cause worth finding — a slow or
    throttling GPU (BLOOM-176B lost ~5 % to one slow GPU from iteration 42783), a
    degraded network link, a host process competing for CPU, a data-loader or storage
    change. A synchronous job runs at the speed of its slowest rank, so one straggler
    slows everybody.

Default thresholds
    ``min_drop`` 3 % (smaller level shifts are within what shared clusters and
    data-dependent step times produce: MLPerf Training's rules treat run-to-run timing
    variation of a few percent as noise), reported as info; ``warn_drop`` 10 % makes
    it a warning (a loss of that size is worth an engineer's hour on any cluster; the
    BLOOM drop of ~5 % is therefore info — it is real there, but on shared or
    data-dependent clusters 5 % moves are common; set ``warn_drop = 0.05`` on a
    dedicated cluster). A level must last at least ``min_duration_frac`` 2 % of the
    run's steps and ``min_points`` 3 logged points: a few slow steps (eval,
    checkpoint) and the slow first steps (warmup, compilation — a rise, never a drop)
    are not a drop. A warning also needs the drop to last ``sustained_frac`` 10 % of
    the run when it persists to the end, ``recovered_frac`` 25 % when it ended by
    itself (transient slowdowns that go away are usually a neighbour's job on a shared
    node: info), and to be ≥ 10 % against the median level over the 10 % of the run
    before it (which must exist) and in what is still lost at the end; a dip under
    10 % that recovered within 10 % of the run is not reported. Stragglers:
    ``straggler_min`` 5 % slower than the median of the other ranks for the same 2 % of
    the run (info), ``straggler_warn`` 10 % (warning) — the same bands as the drop.

Known false positives
    Planned changes in work per step: a sequence-length or batch-size ramp
    (Megatron's ``--rampup-batch-size``; one in equal stages from the start, as
    modded-nanogpt's batch-size schedule in thirds, is recognised in step time and
    reported as info), curriculum data with longer sequences, a
    switch to a larger eval set inside the timed region; a job that moved to other
    hardware on a restart. ``tokens_per_sec`` that counts only non-padding tokens
    falls when padding rises (see DATA003).

Example
    ``WARNING  TPUT001  step 500  tokens_per_sec fell 32% at step 500 (from 4.35e+04
    to 2.95e+04) and stayed there to the last logged step (1000, 501 steps); look for a
    slow or throttled GPU, a competing process, or a data-loader/IO change at that
    step.``
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from trainlens.core.findings import Finding
from trainlens.core.names import AliasTable
from trainlens.core.run import Run
from trainlens.core.stats import (
    centered_median,
    median_step,
    nanmedian_rows,
    odd,
    robust_sigma,
    runs_of,
)
from trainlens.detectors._segments import refine_split, segment_levels
from trainlens.detectors.base import Context, Skip, finding

CODES = {"TPUT001": "throughput-drop", "TPUT002": "straggler-rank"}

RATE_METRICS = ("tokens_per_sec", "samples_per_sec")
TIME_METRICS = ("step_time",)
RANKED_BASES = ("tokens_per_sec", "samples_per_sec", "step_time")

_RANK_PATTERNS = (
    re.compile(r"^(?P<base>.+?)[/_.\-]rank[_\-]?(?P<rank>\d+)$", re.IGNORECASE),
    re.compile(r"^rank[_\-]?(?P<rank>\d+)[/_.\-](?P<base>.+)$", re.IGNORECASE),
)


@dataclass(frozen=True)
class Params:
    #: smallest sustained drop reported (fraction of the level before), as info
    min_drop: float = 0.03
    #: a drop at least this large is a warning
    warn_drop: float = 0.10
    #: a level must last this fraction of the run's step span ...
    min_duration_frac: float = 0.02
    #: ... and at least this many logged points
    min_points: int = 3
    #: a drop is a warning only when it lasts this fraction of the run (or more);
    #: shorter ones that recover are transient (info)
    sustained_frac: float = 0.10
    #: ... and one that recovered by itself, this fraction
    recovered_frac: float = 0.25
    #: two levels must differ by this many robust standard errors
    z_min: float = 5.0
    #: the largest median-filter window (points)
    max_filter: int = 101
    #: a step-time staircase whose rises sit at equal stages from the run's start (the
    #: k-th within this share of the run of k times the first) is a planned schedule
    stage_tol_frac: float = 0.01
    #: a rank this much slower than the median of the others is a straggler (info)
    straggler_min: float = 0.05
    #: ... and a warning from this much
    straggler_warn: float = 0.10
    #: at most this many findings per code
    max_findings: int = 5


# ---- TPUT001 ------------------------------------------------------------------------------


@dataclass
class _Signal:
    metric: str  # what was logged
    steps: np.ndarray
    y: np.ndarray  # log throughput (higher is faster)
    kind: str  # "rate" or "time"
    note: str = ""

    def natural(self, level: float) -> float:
        """A level of y back in the metric's own units."""
        return math.exp(level) if self.kind == "rate" else math.exp(-level)


def _signal(run: Run, ranked: dict[str, dict[int, str]]) -> _Signal | None:
    for m in RATE_METRICS:
        if run.has(m):
            s, v = run.series(m, finite=True)
            ok = v > 0
            return _Signal(m, s[ok], np.log(v[ok]), "rate")
    for m in TIME_METRICS:
        if run.has(m):
            s, v = run.series(m, finite=True)
            ok = v > 0
            return _Signal(m, s[ok], -np.log(v[ok]), "time")
    if run.has("train_time"):
        s, v = run.series("train_time", finite=True)
        ds, dv = np.diff(s), np.diff(v)
        ok = (ds > 0) & (dv > 0)  # a reset of the timer (dv < 0) is not a step
        if ok.sum() >= 3:
            per_step = dv[ok] / ds[ok]
            return _Signal(
                "train_time",
                s[1:][ok],
                -np.log(per_step),
                "time",
                note="seconds per step from the increments of train_time",
            )
    for base in RANKED_BASES:
        ranks = ranked.get(base)
        if not ranks:
            continue
        wide = run.wide(list(ranks.values()))
        mat = wide.select(list(ranks.values())).to_numpy().astype(np.float64)
        mat[~(mat > 0)] = np.nan
        med = nanmedian_rows(np.log(mat))
        s = wide.get_column("step").to_numpy()
        ok = np.isfinite(med)
        kind = "time" if base == "step_time" else "rate"
        y = med[ok] if kind == "rate" else -med[ok]
        return _Signal(base, s[ok], y, kind, note=f"median over {len(ranks)} ranks")
    return None


def _fmt(x: float) -> str:
    return f"{x:.4g}" if abs(x) < 1e4 else f"{x:.3g}"


@dataclass
class _Levels:
    """A throughput series cut into levels, and the scales a drop is judged on."""

    sig: _Signal
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


def _levels(sig: _Signal, params: Params) -> _Levels:
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
    d.stages = _equal_stages(
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


def _drop_finding(lev: _Levels, d: _Drop) -> Finding:
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
        CODES["TPUT001"],
        d.sev,
        _message(lev, d),
        metric=sig.metric,
        step_start=int(steps[d.k]),
        step_end=int(steps[d.stop - 1]),
        **ev,
    )


def _drops(sig: _Signal, params: Params) -> list[Finding]:
    lev = _levels(sig, params)
    out: list[Finding] = []
    for first, quick, last in _episodes(lev):
        d = _measure(lev, first, quick, last)
        if d is not None and _judge(lev, d):
            out.append(_drop_finding(lev, d))
    out.sort(key=lambda f: (-f.severity.rank, -float(f.evidence["drop_pct"])))
    return sorted(out[: params.max_findings], key=lambda f: f.step_start or 0)


def _equal_stages(sig: _Signal, rises: list[int], tol: float) -> list[int]:
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


def _finite_median(x: np.ndarray) -> float:
    x = x[np.isfinite(x)]
    return float(np.median(x)) if len(x) else 0.0


def ranked_metrics(metrics: list[str]) -> dict[str, dict[int, str]]:
    """``{canonical base: {rank: metric name}}`` for the per-rank names this module reads."""
    table = AliasTable()
    out: dict[str, dict[int, str]] = {}
    for name in metrics:
        for pat in _RANK_PATTERNS:
            m = pat.match(name)
            if not m:
                continue
            base = m.group("base")
            alias = table.lookup(base)
            canon = alias.canonical if alias is not None else base
            if canon in RANKED_BASES:
                out.setdefault(canon, {})[int(m.group("rank"))] = name
            break
    return {k: v for k, v in out.items() if len(v) >= 2}


def _stragglers(run: Run, ranked: dict[str, dict[int, str]], params: Params) -> list[Finding]:
    base = max(ranked, key=lambda k: (len(ranked[k]), -RANKED_BASES.index(k)))
    ranks = sorted(ranked[base])
    names = [ranked[base][r] for r in ranks]
    wide = run.wide(names)
    steps = wide.get_column("step").to_numpy()
    mat = wide.select(names).to_numpy().astype(np.float64)
    mat[~(mat > 0)] = np.nan
    y = np.log(mat)
    if base == "step_time":
        y = -y
    n, nr = y.shape
    if n < 2 * params.min_points:
        return []
    out: list[Finding] = []
    span_total = float(steps[-1] - steps[0])
    min_len = max(params.min_points, math.ceil(params.min_duration_frac * n))
    thr = -math.log1p(-params.straggler_min)
    med_all = nanmedian_rows(y) if nr > 64 else None
    for j, rank in enumerate(ranks):
        others = med_all if med_all is not None else nanmedian_rows(np.delete(y, j, axis=1))
        lag = others - y[:, j]  # > 0: this rank is slower
        sigma = max(robust_sigma(lag), 1e-12)
        smooth = centered_median(lag, min(odd(min_len), odd(params.max_filter)))
        mask = np.nan_to_num(smooth, nan=0.0) >= thr
        best: tuple[float, int, int] | None = None
        for a, bb in runs_of(mask):
            if bb - a + 1 < min_len:
                continue
            width = float(steps[bb] - steps[a])
            if width < params.min_duration_frac * span_total:
                continue
            med_lag = _finite_median(lag[a : bb + 1])
            if med_lag < params.z_min * 1.2533 * sigma / math.sqrt(bb - a + 1):
                continue  # not distinguishable from the noise between ranks
            score = med_lag * (bb - a + 1)
            if best is None or score > best[0]:
                best = (score, a, bb)
        if best is None:
            continue
        _, a, bb = best
        med_lag = _finite_median(lag[a : bb + 1])
        slow = 1.0 - math.exp(-med_lag)
        if slow < params.straggler_min:
            continue
        share = (bb - a + 1) / n
        sev = "warning" if slow >= params.straggler_warn else "info"
        msg = (
            f"rank {rank} ran {100 * slow:.0f}% slower than the median of the other "
            f"{nr - 1} ranks ({base}) from step {int(steps[a])} to step {int(steps[bb])} "
            f"({100 * share:.0f}% of logged steps); check that node's GPU (clocks, "
            "thermals, ECC errors) and network link — a synchronous job runs at its "
            "slowest rank's pace."
        )
        out.append(
            finding(
                "TPUT002",
                CODES["TPUT002"],
                sev,
                msg,
                metric=names[j],
                step_start=int(steps[a]),
                step_end=int(steps[bb]),
                rank=rank,
                slower_pct=round(100 * slow, 2),
                ranks=nr,
                share_of_steps=round(share, 4),
                source=base,
            )
        )
    out.sort(key=lambda f: -float(f.evidence["slower_pct"]))
    return out[: params.max_findings]


def detect(run: Run, params: Params, ctx: Context) -> list[Finding]:
    ranked = ranked_metrics(run.metrics)
    sig = _signal(run, ranked)
    if sig is None and not ranked:
        raise Skip(
            "needs tokens_per_sec, samples_per_sec, step_time or train_time "
            "(or per-rank <metric>/rank<N>), not logged"
        )
    out: list[Finding] = []
    if sig is not None:
        if len(sig.y) < 2 * params.min_points + 1:
            if not ranked:
                raise Skip(f"{sig.metric}: only {len(sig.y)} values, too few to judge")
        else:
            out.extend(_drops(sig, params))
    if ranked:
        out.extend(_stragglers(run, ranked, params))
    return out
