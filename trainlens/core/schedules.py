"""Declared learning-rate schedules as pure, vectorized functions of the step.

A declared schedule is a dict with the canonical keys that
:func:`trainlens.runconfig.normalize_schedule` produces: ``shape`` (constant, linear,
cosine, inverse-sqrt, step, warmup-stable-decay), ``peak_lr``, ``min_lr`` (absolute,
default 0), ``warmup_steps`` (default 0), ``total_steps``, ``decay_steps``,
``stable_steps``, ``step_size``, ``gamma`` and ``first_step`` (the step number of the
first optimizer step in the log, default 0). ``decay_shape`` (linear, cosine, 1-sqrt) and
``timescale`` are honoured when present.

Convention. With ``n = step - first_step + 1`` (1 for the first optimizer step):

- warmup, ``n <= W``: ``peak * n / W`` (the ramp reaches the peak at step W). HF's
  schedulers (ramp from 0), PyTorch's schedulers and LR read before ``scheduler.step()``
  give this whole curve one step later, which the LR schedule detector tolerates;
- after warmup, ``p = clip((n - W) / (total - W), 0, 1)``:
  cosine ``min + (peak - min) * (1 + cos(pi p)) / 2`` (PyTorch's CosineAnnealingLR and
  HF's get_cosine_schedule_with_warmup are both this curve), linear
  ``peak + (min - peak) p``, constant ``peak``;
- inverse-sqrt: ``peak / sqrt((n - W + tau) / tau)``, tau = W (or 10 000 without warmup,
  as HF's get_inverse_sqrt_schedule), which is fairseq's ``peak * sqrt(W / n)``;
- step: ``peak * gamma ** floor((n - 1 - W) / step_size)`` (PyTorch's StepLR after W
  warmup steps; gamma defaults to 0.1);
- warmup-stable-decay: peak until ``W + stable_steps`` (or ``total - decay_steps``), then
  ``decay_shape`` (linear by default) to min over ``decay_steps`` steps; with neither
  given the decay is the last 20 % of the steps after warmup (Hägele et al. 2024,
  "Scaling Laws and Compute-Optimal Training Beyond Fixed Training Durations").

Steps past ``total_steps`` keep the final value (schedulers clamp there), and nothing
goes below ``min_lr`` except during warmup.
"""

from __future__ import annotations

from typing import Any

import numpy as np

SHAPES = ("constant", "linear", "cosine", "inverse-sqrt", "step", "warmup-stable-decay")

_SHAPE_SPELLINGS = {
    "constant": "constant",
    "constant_with_warmup": "constant",
    "linear": "linear",
    "linear_with_warmup": "linear",
    "cosine": "cosine",
    "cos": "cosine",
    "cosine_with_warmup": "cosine",
    "inverse-sqrt": "inverse-sqrt",
    "inverse_sqrt": "inverse-sqrt",
    "rsqrt": "inverse-sqrt",
    "step": "step",
    "steplr": "step",
    "warmup-stable-decay": "warmup-stable-decay",
    "warmup_stable_decay": "warmup-stable-decay",
    "wsd": "warmup-stable-decay",
}

#: share of the post-warmup steps a warmup-stable-decay schedule decays over when
#: neither decay_steps nor stable_steps is declared
WSD_DEFAULT_DECAY_FRAC = 0.2


def shape_of(schedule: dict[str, Any]) -> str:
    """The canonical shape name of a declared schedule (ValueError when unknown)."""
    raw = str(schedule.get("shape", "")).strip().lower().replace(" ", "_")
    shape = _SHAPE_SPELLINGS.get(raw)
    if shape is None:
        raise ValueError(f"unknown schedule shape {schedule.get('shape')!r}")
    return shape


def _finite(schedule: dict[str, Any], key: str) -> float | None:
    """The schedule's ``key`` as a finite float, or None when absent or not a number."""
    value = schedule.get(key)
    if value is None:
        return None
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if np.isfinite(out) else None


def _positive(schedule: dict[str, Any], key: str) -> float | None:
    value = _finite(schedule, key)
    return value if value is not None and value > 0 else None


def missing_keys(schedule: dict[str, Any]) -> list[str]:
    """Keys the declared shape needs but the schedule lacks (empty when complete)."""
    shape = shape_of(schedule)
    missing = [] if _positive(schedule, "peak_lr") is not None else ["peak_lr"]
    has_total = _positive(schedule, "total_steps") is not None
    if shape in ("linear", "cosine") and not (
        has_total or _positive(schedule, "decay_steps") is not None
    ):
        missing.append("total_steps")
    if shape == "warmup-stable-decay" and not (
        has_total
        or (
            _positive(schedule, "decay_steps") is not None
            and _finite(schedule, "stable_steps") is not None
        )
    ):
        missing.append("total_steps")
    if shape == "step" and _positive(schedule, "step_size") is None:
        missing.append("step_size")
    return missing


def _decay(shape: str, p: np.ndarray, peak: float, lo: float) -> np.ndarray:
    """From peak (p = 0) to lo (p = 1)."""
    if shape == "cosine":
        return lo + (peak - lo) * 0.5 * (1.0 + np.cos(np.pi * p))
    if shape in ("1-sqrt", "1_sqrt", "sqrt"):
        return lo + (peak - lo) * (1.0 - np.sqrt(p))
    return peak + (lo - peak) * p


def lr_at(
    schedule: dict[str, Any], n: np.ndarray, *, warmup_start_factor: float = 0.0
) -> np.ndarray:
    """The declared LR at optimizer-step count ``n`` (1 = the first step; floats allowed).

    ``warmup_start_factor`` f starts the ramp above 0: ``peak * (f + (1 - f) * n / W)``
    (PyTorch's LinearLR, whose default f is 1/3, is this ramp one step later).
    """
    shape = shape_of(schedule)
    missing = missing_keys(schedule)
    if missing:
        raise ValueError(f"declared {shape} schedule lacks {', '.join(missing)}")
    n = np.asarray(n, dtype=np.float64)
    peak = float(_finite(schedule, "peak_lr") or 0.0)
    lo = _finite(schedule, "min_lr") or 0.0
    warm = max(0, int(_finite(schedule, "warmup_steps") or 0))
    total = _positive(schedule, "total_steps")
    decay_steps = _positive(schedule, "decay_steps")

    if shape == "constant":
        out = np.full(n.shape, peak)
    elif shape in ("linear", "cosine"):
        if total is None:
            total = warm + float(decay_steps or 0.0)
        p = np.clip((n - warm) / max(total - warm, 1.0), 0.0, 1.0)
        out = _decay(shape, p, peak, lo)
    elif shape == "inverse-sqrt":
        tau = _positive(schedule, "timescale") or (float(warm) if warm > 0 else 10_000.0)
        out = peak / np.sqrt(np.maximum(n - warm + tau, tau) / tau)
        out = np.maximum(out, lo)
    elif shape == "step":
        size = float(_positive(schedule, "step_size") or 1.0)
        gamma = _finite(schedule, "gamma")
        gamma = 0.1 if gamma is None else gamma
        k = np.floor(np.maximum(n - 1 - warm, 0.0) / size)
        out = np.maximum(peak * np.power(gamma, k), lo)
    else:  # warmup-stable-decay
        stable = _finite(schedule, "stable_steps")
        if decay_steps is None:
            if total is not None and stable is not None:
                decay_steps = max(total - warm - stable, 1.0)
            elif total is not None:
                decay_steps = max(WSD_DEFAULT_DECAY_FRAC * (total - warm), 1.0)
            else:
                decay_steps = 1.0
        if stable is not None:
            start = warm + max(stable, 0.0)
        else:
            assert total is not None  # missing_keys checked it
            start = total - decay_steps
        p = np.clip((n - start) / max(decay_steps, 1.0), 0.0, 1.0)
        out = _decay(str(schedule.get("decay_shape", "linear")).lower(), p, peak, lo)

    if warm > 0:
        f = warmup_start_factor
        ramp = f + (1.0 - f) * n / warm
        in_warmup = n <= warm
        out = np.where(in_warmup, peak * np.clip(ramp, 0.0, 1.0), out)
    return out


def declared_lr(schedule: dict[str, Any], steps: np.ndarray) -> np.ndarray:
    """The declared LR at each logged ``step`` (the report plots it as "LR vs plan").

    ``steps`` are the run's step numbers; ``schedule['first_step']`` (default 0) is the
    step number of the first optimizer step. Raises ValueError when the schedule lacks a
    key its shape needs (see :func:`missing_keys`).
    """
    first = int(_finite(schedule, "first_step") or 0)
    n = np.asarray(steps, dtype=np.float64) - first + 1.0
    return lr_at(schedule, n)


def _end_of_changes(schedule: dict[str, Any]) -> float:
    """The step count where the declared curve's last planned phase ends (0 if unknown)."""
    warm = float(_finite(schedule, "warmup_steps") or 0)
    total = _positive(schedule, "total_steps") or 0.0
    stable = max(_finite(schedule, "stable_steps") or 0.0, 0.0)
    decay = _positive(schedule, "decay_steps") or 0.0
    return max(warm, total, warm + stable + decay)


def plan_horizon(
    schedule: dict[str, Any], below: float, *, warmup_start_factor: float = 0.0
) -> float:
    """A step count beyond which the plan holds nothing new for values down to ``below``:
    twice where it first falls below ``below``, or 1.5x where it stops changing (a decay
    that clamps at min_lr, a constant), whichever comes first, and never before the end
    of its declared phases; at most 1e10 (inverse-sqrt and step decays never stop)."""
    probe = np.geomspace(1.0, 1e10, 512)
    values = lr_at(schedule, probe, warmup_start_factor=warmup_start_factor)
    horizon = np.inf
    under = np.flatnonzero(values < below)
    if len(under):
        horizon = 2.0 * probe[under[0]]
    moving = np.flatnonzero(np.abs(np.diff(values)) > 1e-12 * max(float(values.max()), 1e-300))
    if len(moving) == 0:
        horizon = min(horizon, 1.0)
    elif moving[-1] + 1 < len(probe) - 1:
        horizon = min(horizon, 1.5 * probe[moving[-1] + 1])
    return float(min(max(horizon, _end_of_changes(schedule), 1.0), 1e10))


def value_positions(
    schedule: dict[str, Any],
    values: np.ndarray,
    tol: np.ndarray,
    horizon: float,
    *,
    warmup_start_factor: float = 0.0,
    grid_points: int = 2048,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Where the plan takes each of ``values``: the inverse of :func:`lr_at` on its
    monotone stretches, and the stretches where it stays within ``tol`` (a flat top or
    tail holds a value over many steps).

    Returns four arrays, one entry per stretch: the index of the value, the first and
    last step count ``n`` of the stretch (widened to the neighbouring grid points), and
    the step count where the plan crosses the value inside it (linear interpolation
    between grid points; NaN where it only stays within tolerance). A stretch that reaches
    the horizon ends at +inf (a floor or a constant holds on). The plan is sampled
    on a grid of ``n`` in [1, horizon], geometric and linear (about 2 x grid_points
    points), so a 100-step warmup of a 10^6-step plan is resolved as well as its decay.
    """
    v = np.asarray(values, dtype=np.float64)[:, None]
    t = np.asarray(tol, dtype=np.float64)[:, None]
    grid = np.unique(
        np.round(
            np.concatenate(
                (np.geomspace(1.0, horizon, grid_points), np.linspace(1.0, horizon, grid_points))
            )
        )
    )
    plan = lr_at(schedule, grid, warmup_start_factor=warmup_start_factor)[None, :]
    near = np.abs(plan - v) <= t
    above = plan > v
    crosses = above[:, 1:] != above[:, :-1]  # the plan passes the value between j and j+1
    near[:, 1:] |= crosses
    near[:, :-1] |= crosses
    padded = np.zeros((near.shape[0], near.shape[1] + 2), dtype=np.int8)
    padded[:, 1:-1] = near
    edge = np.diff(padded, axis=1)
    rows, a = np.nonzero(edge == 1)
    _, b = np.nonzero(edge == -1)
    b = b - 1  # last index inside the stretch
    lo = grid[np.maximum(a - 1, 0)]
    hi = grid[np.minimum(b + 1, len(grid) - 1)]
    # the crossing inside each stretch (the first one, where there are several)
    cross = np.full(len(rows), np.nan)
    ci, cj = np.nonzero(crosses)
    if len(ci):
        key = ci * (len(grid) + 1) + cj
        stretch_key = rows * (len(grid) + 1) + a
        k = np.searchsorted(key, stretch_key)
        ok = k < len(key)
        k = np.minimum(k, len(key) - 1)
        j = cj[k]
        ok &= (ci[k] == rows) & (j <= b)
        p0, p1 = plan[0, j], plan[0, j + 1]
        x0, x1 = grid[j], grid[j + 1]
        val = v[rows, 0]
        with np.errstate(divide="ignore", invalid="ignore"):
            x = x0 + (val - p0) * (x1 - x0) / (p1 - p0)
        cross = np.where(ok & np.isfinite(x), x, np.nan)
    # a stretch that runs to the end of the grid goes on: the plan stays there
    hi = np.where(b >= len(grid) - 1, np.inf, hi)
    return rows, lo, hi, cross


def offset_candidates(
    schedule: dict[str, Any],
    n: np.ndarray,
    values: np.ndarray,
    tol: np.ndarray,
    *,
    warmup_start_factor: float = 0.0,
    quorum: float = 0.5,
    at_most: int = 6,
) -> list[tuple[int, float, float]]:
    """Offsets t at which values logged at step counts ``n`` may sit on the plan,
    ``values ≈ lr_at(n + t)``: a resumed run whose step count restarted, a log counted from
    another origin. Best first, at most ``at_most``, each ``(estimate, lo, hi)``.

    Each value allows the offsets of the stretches :func:`value_positions` finds for it; a
    sweep over those ranges counts how many values allow each offset, and the ranges that
    ``quorum`` of the values (and within 5 % of the most) allow are the candidates. The
    estimate is the median of the exact inversions inside the range (its middle where the
    plan is flat there). ``n`` and ``values`` are a handful of logged points (tens), not the
    whole log: the caller checks a candidate on every point.
    """
    n = np.asarray(n, dtype=np.float64)
    values = np.asarray(values, dtype=np.float64)
    if len(values) == 0:
        return []
    span = float(n.max() - n.min())
    below = float(np.min(values - tol))
    horizon = plan_horizon(schedule, below, warmup_start_factor=warmup_start_factor)
    rows, lo, hi, cross = value_positions(
        schedule, values, tol, horizon + span + 1, warmup_start_factor=warmup_start_factor
    )
    if len(rows) == 0:
        return []
    at = n[rows]
    o_lo, o_hi, o_x = lo - at - 1, hi - at + 1, cross - at
    # ranges of one value that overlap once widened are one: a value counts once per offset
    joined = (rows[1:] == rows[:-1]) & (o_lo[1:] <= o_hi[:-1])
    if joined.any():
        first = np.flatnonzero(np.concatenate(([True], ~joined)))
        o_lo, o_hi = o_lo[first], np.maximum.reduceat(o_hi, first)
    ends = np.concatenate((o_lo, o_hi))
    delta = np.concatenate((np.ones(len(o_lo)), -np.ones(len(o_hi))))
    order = np.lexsort((-delta, ends))  # at a tie, a range opens before one closes
    x, cover = ends[order], np.cumsum(delta[order])  # cover[k] holds on [x[k], x[k+1]]
    top = float(cover.max())
    if top < quorum * len(values):
        return []
    need = max(top - np.floor(0.05 * len(values)), quorum * len(values), 1.0)
    good = np.concatenate(([False], cover >= need, [False]))
    edges = np.flatnonzero(np.diff(good.astype(np.int8)))
    regions = list(zip(edges[0::2].tolist(), (edges[1::2] - 1).tolist(), strict=True))
    regions.sort(key=lambda ab: -float(cover[ab[0] : ab[1] + 1].max()))
    out: list[tuple[int, float, float]] = []
    for a, b in regions[:at_most]:
        r_lo, r_hi = float(x[a]), float(x[min(b + 1, len(x) - 1)])
        inside = np.isfinite(o_x) & (o_x >= r_lo) & (o_x <= r_hi)
        if inside.any():
            est = float(np.median(o_x[inside]))
        else:  # flat there: its middle (a log's length in, where it stays flat for good)
            est = (r_lo + r_hi) / 2 if np.isfinite(r_hi) else r_lo + span + 1
        out.append((round(float(est)), r_lo, r_hi))
    return out


__all__ = [
    "SHAPES",
    "declared_lr",
    "lr_at",
    "missing_keys",
    "offset_candidates",
    "plan_horizon",
    "shape_of",
    "value_positions",
]
