"""Per-tensor signals: dead (frozen or detached) tensors, and update/weight ratios out of band.

What it flags
    TENSOR001 ``dead-tensor``: a per-tensor gradient norm (``grad_norm/<tensor>``) or
    update ratio (``update_ratio/<tensor>``) that is exactly zero — or stops being
    logged — for a sustained stretch while the other tensors' keep moving: the tensor is
    frozen, detached from the graph, or its gradient is lost.
    TENSOR002 ``update-ratio-out-of-band``: the global or a per-tensor update/weight
    ratio ||Δw||/||w|| whose rolling median stays outside its healthy band for a
    sustained stretch.

Why it matters
    A detached embedding or a layer accidentally left frozen trains nothing while the
    loss still falls (the rest of the network compensates), so the loss curve does not
    show it. An update ratio far below ~1e-3 means the tensor barely learns (LR too low,
    or vanishing gradients); far above means each step rewrites the weights (LR too
    high, instability ahead).

Default thresholds
    Dead: zero (|x| ≤ ``zero_atol`` = 0) on at least ``dead_frac`` = 50 % of the logged
    steps after warmup, while the median of the other tensors is non-zero. Band: the
    ~1e-3 rule of thumb for update/weight ratios (Karpathy, CS231n "Neural Networks
    Part 3: babysitting the learning process"; "makemore part 3"), with two orders of
    magnitude either side as the band [``band_low`` = 1e-5, ``band_high`` = 1e-1]; the
    rolling median (window ``window`` = 25 logged points) must be outside it for at
    least ``min_frac`` = 20 % of the logged steps after ``warmup_frac`` = 5 %.

    Biases (a per-tensor ratio whose tensor name ends in ``bias``) are not held to the
    band (``judge_biases`` = false): the rule of thumb is stated for weight matrices, and
    a bias initialized to zero (GPT-2, nanoGPT, most transformer code) has no scale of its
    own — under Adam each element moves ~lr a step, so ``||Δb||/||b||`` starts at 1 and
    stays above 0.1 for hundreds of steps while ``||b||`` grows (measured on the fixture
    runs logged by trainlens.monitor: 0.10-0.15 until step ~400 at a constant LR 1e-3 in
    ``healthy_constant``). LARS and LAMB leave biases out of their layer-wise trust ratio
    for the same reason (You et al. 2017, arXiv:1708.03888; 2019, arXiv:1904.00962).
    They are still checked for being dead (TENSOR001).

    The first ``warmup_frac`` of the steps is only left out of the fractions: a finding
    starts where the condition began — a tensor frozen (or a ratio out of band) from the
    first logged step starts there, not where judging began. With too few values for
    either check (a dead tensor needs two tensors over 10 steps; a band 20 values or
    ``window``), the detector is skipped with that reason.

Known false positives
    Tensors frozen on purpose (fine-tuning with a frozen embedding or backbone): ignore
    the code or the tensor in config. Optimizers with per-parameter normalization
    (Adam) keep ratios near lr, so a very small LR (e.g. late in a decay to 0) gives low
    ratios by design — the detector ignores the last ``tail_frac`` = 10 % of the run.

Example
    ``WARNING  TENSOR001  steps 0–999  grad_norm/embed is exactly 0 on 100 % of steps
    while the other tensors' gradients move: the tensor is frozen or detached.``
"""

from __future__ import annotations

import math

import numpy as np
import polars as pl

from trainlens.core.dataclass import dataclass
from trainlens.core.findings import Finding
from trainlens.core.run import Run
from trainlens.core.stats import runs_of
from trainlens.detectors.base import Context, Skip, finding

CODES = {"TENSOR001": "dead-tensor", "TENSOR002": "update-ratio-out-of-band"}


@dataclass(frozen=True)
class Params:
    zero_atol: float = 0.0
    dead_frac: float = 0.5
    band_low: float = 1e-5
    band_high: float = 1e-1
    window: int = 25
    min_frac: float = 0.2
    warmup_frac: float = 0.05
    tail_frac: float = 0.10
    #: hold per-tensor update ratios of biases to the band too (see Default thresholds)
    judge_biases: bool = False


def _is_bias(metric: str) -> bool:
    """``update_ratio/blocks.0.attn.proj.bias`` and the like (last name part ends in bias)."""
    return metric.replace("/", ".").rsplit(".", 1)[-1].lower().endswith("bias")


def _per_tensor(run: Run, prefix: str) -> list[str]:
    return [m for m in run.metrics if m.startswith(prefix + "/")]


def _table(run: Run, names: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Steps and a (step × metric) array of standing values, NaN where not logged: what
    ``run.wide(names)`` holds, built from the per-metric series (no pivot of the whole
    frame); when every metric was logged at the same steps the columns are stacked."""
    series = [run.series(m) for m in names]
    first = series[0][0]
    if all(np.array_equal(st, first) for st, _ in series[1:]):
        return first, np.column_stack([v for _, v in series])
    joined = pl.DataFrame({"step": first, names[0]: series[0][1]})
    for name, (st, v) in zip(names[1:], series[1:], strict=True):
        joined = joined.join(
            pl.DataFrame({"step": st, name: v}), on="step", how="full", coalesce=True
        )
    joined = joined.sort("step")
    return joined.get_column("step").to_numpy(), joined.select(names).to_numpy()


def _dead(run: Run, prefix: str, params: Params) -> list[Finding]:
    names = _per_tensor(run, prefix)
    if len(names) < 2:
        return []
    steps, table = _table(run, names)
    n = steps.size
    if n < 10:
        return []
    start = int(n * params.warmup_frac)
    vals = table[start:]
    present = ~np.isnan(vals)  # missing cells are null -> NaN in numpy
    zero = np.abs(vals) <= params.zero_atol  # False where missing (NaN)
    moving = present & ~zero
    n_moving = moving.sum(axis=1)
    k = len(names)
    out = []
    for j, name in enumerate(names):
        # at least half of the other tensors move (counted, not averaged per row)
        rows = 2 * (n_moving - moving[:, j]) >= k - 1
        n_rows = int(rows.sum())
        if not n_rows:
            continue
        dead_zero = np.count_nonzero(zero[:, j] & rows) / n_rows
        missing = np.count_nonzero(~present[:, j] & rows) / n_rows
        # missing only counts when the tensor was logged before and stopped
        stopped = missing >= params.dead_frac and present[:, j].any()
        if dead_zero >= params.dead_frac or stopped:
            idx = np.flatnonzero(rows & (zero[:, j] | ~present[:, j]))
            # the judged part starts after warmup_frac; a condition already there
            # (frozen from the first step) starts where it began, not where judging did
            col = table[: start + int(idx[0]), j]
            alive = np.flatnonzero(~np.isnan(col) & (np.abs(col) > params.zero_atol))
            if dead_zero < params.dead_frac:  # stopped: dead from after its last value
                alive = np.flatnonzero(~np.isnan(col))
            first = int(steps[int(alive[-1]) + 1 if alive.size else 0])
            last = int(steps[start + idx[-1]])
            if dead_zero >= params.dead_frac:
                what = f"is exactly 0 on {dead_zero:.0%} of steps"
            else:
                last_logged = int(steps[start + np.flatnonzero(present[:, j])[-1]])
                what = f"stops being logged after step {last_logged}"
            out.append(
                finding(
                    "TENSOR001",
                    CODES["TENSOR001"],
                    "warning",
                    f"{name} {what} while the other tensors' values move: the tensor is "
                    "frozen or detached from the graph (intended? then ignore TENSOR001 "
                    "for it).",
                    metric=name,
                    step_start=first,
                    step_end=last,
                    zero_fraction=float(dead_zero),
                    missing_fraction=float(missing),
                    tensors_compared=len(names) - 1,
                )
            )
    return out


def _may_leave_band(v: np.ndarray, params: Params) -> bool:
    """Whether ``min_frac`` of the rolling medians of ``v`` could lie outside the band.

    A median of m values lies above the band only when at least ceil(m / 2) of them lie
    at or above it (m >= ``window // 2``, the fewest a median is taken of), and each value
    sits in at most ``window`` windows: so at most window x (values at or above) /
    ceil(m / 2) medians lie above, and likewise below. When that is under ``min_frac`` of
    the points (halved, so no rounding decides), the rolling median — 40 ms of a 1M-step
    run, whose update ratio leaves the band at a few points only — cannot give a finding."""
    need = max(1, math.ceil(max(params.window // 2, 1) / 2))
    most = 0.5 * params.min_frac * v.size
    # at or beyond the bound: a median of two values just inside rounds to the bound
    outside = (
        int(np.count_nonzero(v <= params.band_low)),
        int(np.count_nonzero(v >= params.band_high)),
    )
    return any(c and params.window * c / need >= most for c in outside)


def _band(run: Run, metric: str, params: Params) -> Finding | None:
    s, v = run.series(metric, finite=True)
    first_step = int(s[0]) if s.size else 0
    n = v.size
    if n < max(20, params.window):
        return None
    lo_i, hi_i = int(n * params.warmup_frac), int(n * (1 - params.tail_frac))
    s, v = s[lo_i:hi_i], v[lo_i:hi_i]
    if v.size < params.window or np.all(v == 0):
        return None  # all-zero ratios are a dead tensor, not a band problem
    if not _may_leave_band(v, params):
        return None
    med = pl.Series(v).rolling_median(params.window, min_samples=params.window // 2).to_numpy()
    outside_low = med < params.band_low
    outside_high = med > params.band_high
    for mask, side in ((outside_high, "above"), (outside_low, "below")):
        frac = float(np.nanmean(mask))
        if frac < params.min_frac:
            continue
        spans = runs_of(mask)
        a, b = max(spans, key=lambda ab: ab[1] - ab[0])
        # outside since the first judged median: the condition was there from the start
        start = first_step if not (np.isfinite(med[:a]) & ~mask[:a]).any() else int(s[a])
        level = float(np.nanmedian(v[mask]))
        bound = params.band_high if side == "above" else params.band_low
        hint = (
            "each step rewrites a large part of the weights: lower the LR or check the optimizer"
            if side == "above"
            else "the tensor barely learns: LR too low or gradients vanishing"
        )
        return finding(
            "TENSOR002",
            CODES["TENSOR002"],
            "warning",
            f"{metric} stays {side} {bound:g} (median {level:.2g}) on {frac:.0%} of the run; "
            f"{hint}.",
            metric=metric,
            step_start=start,
            step_end=int(s[b]),
            median=level,
            fraction_outside=frac,
            band_low=params.band_low,
            band_high=params.band_high,
        )
    return None


def _judgeable(
    run: Run, per_grad: list[str], per_upd: list[str], has_global: bool, params: Params
) -> bool:
    """Whether any check has enough values (the same counts _dead and _band need)."""
    for names in (per_grad, per_upd):
        if len(names) >= 2 and max(run.series(m)[0].size for m in names) >= 10:
            return True
    ratios = (["update_ratio"] if has_global else []) + per_upd
    need = max(20, params.window)
    return any(run.series(m, finite=True)[0].size >= need for m in ratios)


def detect(run: Run, params: Params, ctx: Context) -> list[Finding]:
    per_grad = _per_tensor(run, "grad_norm")
    per_upd = _per_tensor(run, "update_ratio")
    has_global = run.has("update_ratio")
    if not (per_grad or per_upd or has_global):
        raise Skip("needs grad_norm/<tensor> or update_ratio, not logged")
    if not _judgeable(run, per_grad, per_upd, has_global, params):
        raise Skip(
            "too few values to judge per-tensor signals (a dead tensor needs two tensors "
            f"over 10 steps; an update ratio {max(20, params.window)} values)"
        )
    out = _dead(run, "grad_norm", params) + _dead(run, "update_ratio", params)
    dead_metrics = {f.metric for f in out}
    for metric in (["update_ratio"] if has_global else []) + per_upd:
        if metric in dead_metrics or (
            metric != "update_ratio" and not params.judge_biases and _is_bias(metric)
        ):
            continue
        f = _band(run, metric, params)
        if f is not None:
            out.append(f)
    return out
