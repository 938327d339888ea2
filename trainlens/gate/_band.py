"""The statistics of golden curves: a band learned from reference runs, and where a
candidate's curve leaves it.

Every curve is smoothed by a **trailing** mean (or median, for heavy-tailed metrics such
as step time) over ``window`` steps: the smoothed value at step s depends on steps
(s - window, s] only, so a change at step t first shows at t, never before it, and
references and candidate lag alike.

With k >= 2 references (seeds of one config) the band at each step is:

- center: the mean of the references' smoothed values (the median from 5 references on,
  so one odd seed does not move it);
- scale (one band unit): the spread between the references' smoothed values, pooled over
  neighbouring steps by a running median of their per-step variance (one reference with a
  few outliers widens the band only where they are, and a median of a chi-square variable
  is corrected to its mean), times sqrt(1 + 1/k) — a new seed is compared with a center
  that is itself a mean of k seeds — plus what a sparser candidate adds (fewer points per
  window: more noise in its smoothed value), and never below a small floor
  (``rtol_floor`` x |center|, ``atol``): identical references (the LR of one config) give
  a band of zero width, and the floor makes "any difference" mean a real one.

With one reference the band is a tolerance: scale = max(atol, rtol x |reference|), and
a departure is any stretch outside it.

A candidate departs where its smoothed value is more than ``z`` band units from the
center, on one side, for at least ``min_stretch`` steps; it comes back when it has been
within ``z_back`` units for ``window`` steps. The departure's first step is found by
walking back from where it was detected while the candidate stayed on that side by more
than ``z_onset`` units: where it started to leave, not where a threshold was crossed.
"""

from __future__ import annotations

import math
from dataclasses import field, replace
from typing import Any

import numpy as np

from trainlens.core.dataclass import dataclass

#: band units a seed band must be left by (normal quantile ~ 1e-4 one-sided per point;
#: the points of a smoothed curve are far from independent, and k references estimate
#: the spread with few degrees of freedom: see docs/gate.md for what it passes and fails)
Z_SEEDS = 4.0
Z_BACK = 1.0  # within this many units again: on the way back
Z_ONSET = 1.0  # the departure started where the candidate first left by this much


@dataclass
class Band:
    """A metric's band over an axis (steps, or tokens), as stored in a golden file."""

    metric: str
    x: np.ndarray  # float64, increasing
    center: np.ndarray
    scale: np.ndarray  # one band unit at each x (> 0)
    window: float  # smoothing window, axis units
    z: float  # band units to leave by
    n_refs: int
    kind: str  # "seeds" | "tolerance"
    robust: bool = False  # trailing median instead of mean
    density: float = 1.0  # reference points per axis unit (median), for sparser candidates
    noise: float = 0.0  # per-point noise of the references about their smoothed curve
    rtol: float = 0.0
    atol: float = 0.0
    identical: bool = False  # every reference is the same curve (bit for bit)
    raw: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict, repr=False)

    def at(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(center, scale) at the given axis points (linear between stored points)."""
        return np.interp(x, self.x, self.center), np.interp(x, self.x, self.scale)

    def to_json(self) -> dict[str, Any]:
        return {
            "x": [_num(v) for v in self.x],
            "center": [_num(v) for v in self.center],
            "scale": [_num(v) for v in self.scale],
            "window": self.window,
            "z": self.z,
            "n_refs": self.n_refs,
            "kind": self.kind,
            "robust": self.robust,
            "density": self.density,
            "noise": self.noise,
            "rtol": self.rtol,
            "atol": self.atol,
        }


def _num(v: float) -> float | int:
    f = float(v)
    return int(f) if f.is_integer() and abs(f) < 2**53 else float(f"{f:.9g}")


def smooth(x: np.ndarray, v: np.ndarray, window: float, *, robust: bool) -> np.ndarray:
    """Trailing mean (median when ``robust``) over (x - window, x] at every point.

    ``x`` increasing; ``v`` finite. O(n) for the mean (cumulative sums); the median is
    a polars rolling median by the axis."""
    n = len(x)
    if n == 0:
        return v.astype(np.float64)
    if robust:
        d = np.diff(x)
        if n > 1 and d[0] > 0 and np.all(d == d[0]):  # a regular grid: a fixed window
            from scipy.ndimage import median_filter

            w = max(1, int(window // d[0]))
            w -= 1 - w % 2  # odd: scipy's median of an even count is the upper middle
            if w == 1:
                return v.astype(np.float64)
            # size w, shifted so the window is (i - w, i]: trailing, as the mean
            return np.asarray(
                median_filter(v.astype(np.float64), size=w, mode="nearest", origin=(w - 1) // 2),
                dtype=np.float64,
            )
        import polars as pl

        df = pl.DataFrame({"x": x.astype(np.float64), "v": v.astype(np.float64)})
        # polars' by-windows need an integer or temporal axis: scale to integer units
        xi = np.round((x - x[0]) * 1000.0).astype(np.int64)
        w = max(1, round(window * 1000.0))
        df = df.with_columns(pl.Series("xi", xi))
        out = df.select(
            pl.col("v").rolling_median_by("xi", window_size=f"{w}i", closed="right")
        ).to_series()
        return out.to_numpy().astype(np.float64)
    lo = np.searchsorted(x, x - window, side="right")
    c = np.concatenate([[0.0], np.cumsum(v, dtype=np.float64)])
    idx = np.arange(n)
    return (c[idx + 1] - c[lo]) / (idx + 1 - lo)


def _density(x: np.ndarray) -> float:
    if len(x) < 2:
        return 1.0
    d = float(np.median(np.diff(x)))
    return 1.0 / d if d > 0 else 1.0


def _chi2_median_ratio(nu: int) -> float:
    """median(chi2_nu) / nu: the median of a sample variance over its mean. Exact for 1
    and 2 degrees of freedom, Wilson-Hilferty beyond (within 0.7 %)."""
    if nu == 1:
        return 0.454936423119572
    if nu == 2:
        return math.log(2.0)
    return float((1.0 - 2.0 / (9.0 * nu)) ** 3)


def _median_filter(v: np.ndarray, half: int) -> np.ndarray:
    """Centered running median over 2*half+1 points (edges: the window shrinks)."""
    if half <= 0 or len(v) < 3:
        return v.copy()
    from scipy.ndimage import median_filter

    if half <= 64:
        return np.asarray(median_filter(v, size=2 * half + 1, mode="nearest"), dtype=np.float64)
    # a wide window (a long run): the running median of block medians, blocks of
    # ~half/16 points, spread back by interpolation — O(n) instead of O(n x half)
    block = max(1, half // 16)
    n = len(v)
    m = -(-n // block)
    full = n // block
    med = np.median(v[: full * block].reshape(full, block), axis=1)
    if full < m:
        med = np.append(med, np.median(v[full * block :]))
    pooled = median_filter(med, size=2 * (half // block) + 1, mode="nearest")
    centers = np.arange(m) * block + (block - 1) / 2.0
    return np.interp(np.arange(n, dtype=np.float64), centers, pooled)


def build_band(
    metric: str,
    refs: dict[str, tuple[np.ndarray, np.ndarray]],
    *,
    window: float,
    robust: bool = False,
    rtol: float,
    atol: float = 0.0,
    rtol_floor: float = 1e-3,
    z: float = Z_SEEDS,
    pool: float | None = None,
) -> Band | None:
    """The band of one metric from the references' (axis, value) series (finite values
    only). None when the references share no stretch of the axis."""
    series = {n: (x, v) for n, (x, v) in refs.items() if len(x) > 0}
    if not series:
        return None
    lo = max(float(x[0]) for x, _ in series.values())
    hi = min(float(x[-1]) for x, _ in series.values())
    if hi < lo:
        return None
    # the densest reference's points inside the common stretch are the band's axis
    dense_x = max(series.values(), key=lambda xv: len(xv[0]))[0]
    grid = dense_x[(dense_x >= lo) & (dense_x <= hi)].astype(np.float64)
    if len(grid) == 0:
        return None
    smoothed = []
    resid = []
    for x, v in series.values():
        s = smooth(x, v, window, robust=robust)
        smoothed.append(np.interp(grid, x, s))
        resid.append(v - s)
    S = np.vstack(smoothed)
    k = len(series)
    identical = k > 1 and all(
        len(series_x) == len(next(iter(series.values()))[0])
        and np.array_equal(series_x, next(iter(series.values()))[0])
        and np.array_equal(series_v, next(iter(series.values()))[1])
        for series_x, series_v in series.values()
    )
    r_all = np.concatenate(resid) if resid else np.zeros(1)
    noise = float(1.4826 * np.median(np.abs(r_all - np.median(r_all)))) if r_all.size else 0.0
    density = float(np.median([_density(x) for x, _ in series.values()]))
    if k == 1:
        center = S[0]
        scale = np.maximum(np.abs(center) * rtol, atol)
        kind, zz = "tolerance", 1.0
    else:
        center = np.median(S, axis=0) if k >= 5 else S.mean(axis=0)
        var = S.var(axis=0, ddof=1)
        span = float(grid[-1] - grid[0]) if len(grid) > 1 else 0.0
        pool_w = pool if pool is not None else max(2.0 * window, 0.05 * span)
        step = float(np.median(np.diff(grid))) if len(grid) > 1 else 1.0
        half = max(1, round(pool_w / max(step, 1e-12)))
        nu = k - 1
        pooled = _median_filter(var, half) / _chi2_median_ratio(nu)
        sigma = np.sqrt(pooled * (1.0 + 1.0 / k))
        floor = np.maximum(np.abs(center) * rtol_floor, atol)
        scale = np.maximum(sigma, floor)
        kind, zz = "seeds", z
    scale = np.where(scale > 0, scale, max(atol, 1e-12))
    return Band(
        metric=metric,
        x=grid,
        center=center,
        scale=scale,
        window=window,
        z=zz,
        n_refs=k,
        kind=kind,
        robust=robust,
        density=density,
        noise=noise,
        rtol=rtol if k == 1 else rtol_floor,
        atol=atol,
        identical=identical,
    )


def decimate(band: Band, max_points: int = 2000) -> Band:
    """Fewer stored points: the widest regular stride (at least n / ``max_points``) at which
    linear interpolation between the kept points stays within a quarter band unit of
    every center left out, and within 25 % of every band unit (a departure needs 4 units)."""
    n = len(band.x)

    def kept(stride: int) -> np.ndarray:
        return np.unique(np.concatenate([np.arange(0, n, stride), [n - 1]]))

    def close(keep: np.ndarray) -> bool:
        c = np.interp(band.x, band.x[keep], band.center[keep])
        u = np.interp(band.x, band.x[keep], band.scale[keep])
        return bool(
            np.all(np.abs(c - band.center) <= 0.25 * band.scale)
            and np.all(np.abs(u - band.scale) <= 0.25 * band.scale)
        )

    least = max(1, math.ceil(n / max_points))
    stride = least
    while stride * 2 <= n // 8 and close(kept(stride * 2)):
        stride *= 2
    if stride == 1:
        return band
    keep = kept(stride)
    # a stride forced by max_points may cut a corner (the end of an LR warmup): the points
    # interpolation misses most are put back, up to max_points more
    for _ in range(3):
        c = np.interp(band.x, band.x[keep], band.center[keep])
        err = np.abs(c - band.center) / band.scale
        worst = np.flatnonzero(err > 0.25)
        if len(worst) == 0:
            break
        worst = worst[np.argsort(err[worst])[::-1][: max(1, max_points // 3)]]
        keep = np.union1d(keep, worst)
    return replace(band, x=band.x[keep], center=band.center[keep], scale=band.scale[keep])


@dataclass
class Departure:
    metric: str
    start: float  # axis value where it began to leave
    detected: float  # where it was first more than z units out
    end: float  # last point out by more than z units
    side: int  # +1 above the band, -1 below
    peak_units: float  # largest distance, band units
    peak_delta: float  # candidate - center there, the metric's own units
    peak_rel: float  # ... relative to |center|
    peak_at: float
    came_back: bool
    non_finite: bool = False


def compare(
    band: Band,
    x: np.ndarray,
    v: np.ndarray,
    *,
    min_stretch: float | None = None,
) -> tuple[list[Departure], dict[str, Any]]:
    """Where the candidate's (axis, value) series leaves ``band``; and what was compared.

    ``x`` increasing; ``v`` may hold NaN/Inf: the first non-finite value inside the band's
    stretch, where every reference was finite, is a departure of its own."""
    lo, hi = float(band.x[0]), float(band.x[-1])
    inside = (x >= lo) & (x <= hi)
    info: dict[str, Any] = {
        "compared": int(inside.sum()),
        "before": int((x < lo).sum()),
        "after": int((x > hi).sum()),
        "first": float(x[inside][0]) if inside.any() else None,
        "last": float(x[inside][-1]) if inside.any() else None,
    }
    out: list[Departure] = []
    xs, vs = x[inside], v[inside]
    bad = ~np.isfinite(vs)
    if bad.any():
        at = float(xs[np.argmax(bad)])
        out.append(
            Departure(
                band.metric,
                at,
                at,
                float(xs[bad][-1]),
                1,
                math.inf,
                math.nan,
                math.nan,
                at,
                False,
                non_finite=True,
            )
        )
    ok = ~bad
    xs, vs = xs[ok], vs[ok]
    if len(xs) == 0:
        return out, info
    s = smooth(xs, vs, band.window, robust=band.robust)
    center, scale = band.at(xs)
    if band.kind == "seeds" and band.noise > 0:
        # a candidate sparser than the references averages fewer points per window
        n_ref = max(1.0, band.window * band.density)
        n_c = max(1.0, band.window * _density(xs))
        if n_c < n_ref:
            extra = band.noise**2 * (1.0 / n_c - 1.0 / n_ref)
            scale = np.sqrt(scale**2 + extra)
    z = (s - center) / scale
    # at least a window, and at least two of the candidate's points (one eval is noise)
    own_step = float(np.median(np.diff(xs))) if len(xs) > 1 else 1.0
    stretch = max(band.window, 2 * own_step) if min_stretch is None else min_stretch
    out.extend(_episodes(band, xs, s, z, center, stretch))
    info["max_units"] = float(np.max(np.abs(z)))
    return out, info


def _back_ends(x: np.ndarray, back: np.ndarray, window: float) -> tuple[np.ndarray, np.ndarray]:
    """For each stretch of ``back`` points lasting at least ``window`` on the axis: its
    first index, and the index where it has lasted ``window`` (the episode's end)."""
    d = np.diff(np.concatenate([[0], back.view(np.int8), [0]]))
    starts = np.flatnonzero(d == 1)
    ends = np.flatnonzero(d == -1) - 1
    done = np.searchsorted(x, x[starts] + window, side="left")
    ok = done <= ends
    return starts[ok], done[ok]


def _episodes(
    band: Band, x: np.ndarray, s: np.ndarray, z: np.ndarray, center: np.ndarray, stretch: float
) -> list[Departure]:
    """Vectorized over the points (a 1M-step curve costs numpy passes, not a Python loop
    per point): one Python iteration per episode."""
    thr = band.z
    n = len(x)
    out: list[Departure] = []
    cand = np.flatnonzero(np.abs(z) > thr)
    if len(cand) == 0:
        return out
    step = float(np.median(np.diff(x))) if n > 1 else 1.0
    ends = {side: _back_ends(x, z * side < Z_BACK, band.window) for side in (1, -1)}
    ptr = 0
    while ptr < len(cand):
        i = int(cand[ptr])
        side = 1 if z[i] > 0 else -1
        b_start, b_done = ends[side]
        r = int(np.searchsorted(b_start, i, side="right"))
        came_back = r < len(b_start)
        j = int(b_done[r]) if came_back else n  # exclusive end of the episode
        lo, hi = ptr, int(np.searchsorted(cand, j, side="left"))
        sub = cand[lo:hi]
        out_idx = sub[z[sub] * side > thr]
        last_out = int(out_idx[-1])
        span = len(out_idx) * step  # the time spent out: points out x the step they stand for
        if span >= stretch or (last_out == n - 1 and len(out_idx) >= 3):
            zs = z[: i + 1] * side
            below = np.flatnonzero(zs[:i] <= Z_ONSET)
            start = int(below[-1]) + 1 if len(below) else 0
            k = int(out_idx[np.argmax(np.abs(z[out_idx]))])
            delta = float(s[k] - center[k])
            out.append(
                Departure(
                    metric=band.metric,
                    start=float(x[start]),
                    detected=float(x[i]),
                    end=float(x[last_out]),
                    side=side,
                    peak_units=float(abs(z[k])),
                    peak_delta=delta,
                    peak_rel=delta / abs(center[k]) if center[k] != 0 else math.inf,
                    peak_at=float(x[k]),
                    came_back=came_back,
                )
            )
        ptr = max(hi, ptr + 1)
    return out
