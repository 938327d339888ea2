"""Memory creep: a steady upward trend of allocated, reserved or resident memory.

Needs `mem/allocated`, `mem/reserved` or `mem/rss` (bytes) · fixtures:
`tests/test_system_detectors_real.py`

Severity by code
    | code | name | severity |
    |---|---|---|
    | MEM001 | memory-creep | info (5–10 % growth) · warning (≥ 10 %) · error (the device fills before the declared `total_steps`) |

What it flags
    A memory series rising steadily after warmup until the end of the run, one finding per
    metric: the step the rise began (`step_start`), the slope (`slope_bytes_per_step`, Theil–Sen,
    with its 99 % interval `slope_ci_low`/`slope_ci_high`), `kendall_tau` and `p_value`,
    the total growth `growth_bytes` and `growth_pct` (of the trend's level at the onset),
    `level_at_onset`, `level_at_end`, `floor_rising_frac`. For `mem/allocated` and
    `mem/reserved`, when the device's memory is known — `device_memory_bytes` in the model
    context, or a `gpu` name looked up in the hardware table (`trainlens.calculators.hardware.lookup_gpu`)
    — also `device_memory_bytes`, `device` and `exhausted_at_step`: where this rate fills it.

    ### Method

    1. The first `warmup_frac` (10 %) of the run's steps is dropped.
    2. The rest is decimated to at most 200 bucket medians; a hinge — flat, then linear — is
       fitted by least squares for every candidate onset (vectorized), leaving at least
       `min_creep_frac` of the post-warmup run after it; the best onset is refined on the raw
       values near it.
    3. From the onset to the end the creep must be:
       - **steady**: the minimum of each of 8 consecutive chunks rises in ≥ 70 % of the
         chunk-to-chunk steps, and no single step holds more than half of the total rise. A
         caching allocator's sawtooth and RSS noise leave the floor flat; a one-off jump (the
         first eval's buffers, a checkpoint's staging memory) is one step, two jumps are two;
       - **still rising at the end**: the Theil–Sen slope over the second half at least half
         the whole one (a rise that levels off — allocator or page-cache warmup,
         fragmentation that saturates — is not a leak);
       - **highly significant**: the lower end of the 99 % Theil–Sen interval above zero and
         Kendall's p < 1e-3 on the bucket medians;
       - **large**: total growth at least `min_growth` (5 %) of the level at the onset.

Why it matters
    Memory that grows every step ends in an out-of-memory crash, hours or days in, usually
    past the last checkpoint anyone looked at. The usual causes: tensors kept alive across
    steps (accumulating `loss` instead of `loss.item()`, storing outputs or attention maps
    for logging), growing Python-side caches, allocator fragmentation under changing shapes.

Default thresholds and their source
    | parameter | default | meaning / source |
    |---|---|---|
    | `warmup_frac` | 0.10 | allocator warmup, lazily created optimizer state and the first eval happen early; PyTorch's caching allocator reaches its working set within the first iterations |
    | `min_points` | 20 | post-warmup points needed to judge |
    | `min_growth`, `warn_growth` | 0.05, 0.10 | below a few percent, RSS drifts in healthy runs (glibc arenas, Python heap); a steady 10 % is a leak that will keep going |
    | `min_creep_frac` | 0.20 | the creep must cover the last 20 % of the post-warmup run at least |
    | `chunks`, `min_rising_frac`, `max_jump_share` | 8, 0.7, 0.5 | the rising-floor test |
    | `min_tail_slope_ratio` | 0.5 | still rising at the end |
    | `confidence`, `max_p` | 0.99, 1e-3 | Theil–Sen interval (Sen 1968, `scipy.stats.theilslopes`) and Mann–Kendall (`scipy.stats.kendalltau`); both robust to outliers but they assume independent residuals — that is why the chunk-floor test must pass too |
    | `max_buckets` | 200 | decimation (bucket medians) for the fits |

Known false positives
    - Growth that is planned: a sequence-length or batch-size ramp, a replay buffer or cache
      sized to the data, a mid-run change of gradient accumulation or activation
      checkpointing.
    - RSS that grows as a memory-mapped dataset is paged in (the kernel frees it under
      pressure — compare with `mem/allocated`).
    - A slow random walk of RSS over a long run can look like a small (info) creep.

Measured
    - Fixture `memory_leak` (1.5 MB of tensors kept per step from step 300; RSS +895 MB):
      **warning at 307** and at 302 in a second generation (label 300 ± 50), +894 MiB
      (+261 %), 1.51 MiB/step.
    - Healthy fixtures (RSS growth after step 100 < 8 MB) and the other fault runs: nothing.
    - Synthetic: 30 random walks of RSS (0.3 MB/step σ, 3000 steps): 2 info findings
      (5.9 %, 7.3 %), no warning; bounded AR(1) RSS noise: nothing; a 4 GB caching-allocator
      sawtooth with a 1 MB/step floor rise: found; 1M steps of flat noise: nothing, 0.5 s.
    - Real logs: none logs memory (skipped).

Example
    ```
      WARNING  MEM001    steps 307–900    mem/rss grew steadily from step 307 to the end of the run: +894 MiB (+261%) to 1.21 GiB, about 1.51 MiB per step (99% CI 1.51 MiB–1.51 MiB), Kendall p<1e-300; look for tensors kept alive across steps (e.g. a list of loss tensors), growing caches or logging buffers.
      ERROR    MEM001    steps 499–1999   mem/allocated grew steadily from step 499 to the end of the run: +859 MiB (+9%) to 10.1 GiB, about 586 KiB per step (99% CI 585 KiB–588 KiB), Kendall p=4e-97; at this rate the 16 GB device is full by step 10,500, before the planned 20,000 steps; look for tensors kept alive across steps (e.g. a list of loss tensors), growing caches or logging buffers.
    ```
"""  # noqa: E501  (tables: one row a line)

from __future__ import annotations

import math
from typing import Any

import numpy as np

from trainlens.core.dataclass import dataclass
from trainlens.core.findings import Finding
from trainlens.core.run import Run
from trainlens.core.stats import run_medians, theil_sen
from trainlens.detectors.base import Context, Skip, finding

CODES = {"MEM001": "memory-creep"}

METRICS = ("mem/allocated", "mem/reserved", "mem/rss")
DEVICE_METRICS = ("mem/allocated", "mem/reserved")


@dataclass(frozen=True)
class Params:
    #: the first fraction of the run's steps is warmup
    warmup_frac: float = 0.10
    #: fewest post-warmup points to judge
    min_points: int = 20
    #: total growth (fraction of the level at the onset) reported as info
    min_growth: float = 0.05
    #: ... and as a warning
    warn_growth: float = 0.10
    #: the creep must cover at least this fraction of the post-warmup run
    min_creep_frac: float = 0.20
    #: chunks for the rising-floor test
    chunks: int = 8
    #: share of chunk-to-chunk steps in which the floor must rise
    min_rising_frac: float = 0.7
    #: no single chunk-to-chunk step may hold more than this share of the rise
    max_jump_share: float = 0.5
    #: confidence of the Theil–Sen interval
    confidence: float = 0.99
    #: Kendall tau p-value bound
    max_p: float = 1e-3
    #: the slope over the second half must be at least this fraction of the whole
    min_tail_slope_ratio: float = 0.5
    #: decimate to at most this many bucket medians
    max_buckets: int = 200


def fmt_bytes(x: float, is_bytes: bool = True) -> str:
    """Binary units for byte counts; plain numbers for values that are not bytes."""
    a = abs(x)
    if not is_bytes:
        return f"{x:.4g}"
    for unit, k in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if a >= k:
            return f"{x / k:.3g} {unit}"
    return f"{x:.0f} B"


def _buckets(x: np.ndarray, y: np.ndarray, nb: int) -> tuple[np.ndarray, np.ndarray]:
    n = len(x)
    if n <= nb:
        return x.astype(np.float64), y.astype(np.float64)
    # bucket b: the points i with i * nb // n == b, runs of n // nb or n // nb + 1 points;
    # their medians as polars' group_by median gave them, without grouping 1M rows
    starts = -(-np.arange(nb) * n // nb)  # the first i of each bucket
    return run_medians(x.astype(np.float64), starts), run_medians(y.astype(np.float64), starts)


def _hinge_sse(x: np.ndarray, y: np.ndarray, taus: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """SSE and slope of y ≈ a + b·max(0, x − τ) for each τ (vectorized over τ)."""
    h = np.maximum(0.0, x[None, :] - taus[:, None])
    hm = h.mean(axis=1, keepdims=True)
    yc = y - y.mean()
    hc = h - hm
    shh = (hc**2).sum(axis=1)
    shy = (hc * yc[None, :]).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        slope = np.where(shh > 0, shy / shh, 0.0)
        sse = float((yc**2).sum()) - np.where(shh > 0, shy**2 / shh, 0.0)
    return sse, slope


def _onset(x: np.ndarray, y: np.ndarray, params: Params) -> float | None:
    """Step where the rise begins (hinge fit on bucket medians, refined on raw values)."""
    bx, by = _buckets(x, y, params.max_buckets)
    span = bx[-1] - bx[0]
    if span <= 0:
        return None
    latest = bx[-1] - params.min_creep_frac * span
    cand = bx[bx <= latest]
    if len(cand) == 0:
        return None
    sse, slope = _hinge_sse(bx, by, cand)
    sse = np.where(slope > 0, sse, np.inf)
    if not np.isfinite(sse).any():
        return None
    k = int(np.argmin(sse))
    tau = float(cand[k])
    if len(bx) < len(x):
        # refine on raw points within a few buckets of the coarse onset
        j = int(np.searchsorted(bx, tau))
        lo = bx[max(j - 5, 0)]
        hi = bx[min(j + 5, len(bx) - 1)]
        sel = (x >= lo) & (x <= hi)
        xr, yr = x[sel].astype(np.float64), y[sel].astype(np.float64)
        if len(xr) > 2000:
            stride = math.ceil(len(xr) / 2000)
            xr, yr = xr[::stride], yr[::stride]
        near = xr[(xr >= bx[max(j - 2, 0)]) & (xr <= min(bx[min(j + 2, len(bx) - 1)], latest))]
        if len(near) > 300:
            near = near[:: math.ceil(len(near) / 300)]
        if len(near) and len(xr) > 3:
            sse_r, slope_r = _hinge_sse(xr, yr, near.astype(np.float64))
            sse_r = np.where(slope_r > 0, sse_r, np.inf)
            if np.isfinite(sse_r).any():
                tau = float(near[int(np.argmin(sse_r))])
    return tau


def _capacity(ctx: Context | None) -> tuple[float | None, str | None]:
    model = ctx.model if ctx else {}
    cap = model.get("device_memory_bytes")
    if isinstance(cap, (int, float)) and cap > 0:
        return float(cap), "device_memory_bytes"
    gpu = model.get("gpu")
    if isinstance(gpu, str) and gpu:
        try:
            from trainlens.calculators.hardware import lookup_gpu

            row = lookup_gpu(gpu)
            if row.memory_bytes:
                return float(row.memory_bytes), row.name
        except Exception:  # unknown GPU or no table: no forecast
            return None, None
    return None, None


def _judge(
    metric: str, x: np.ndarray, y: np.ndarray, params: Params, ctx: Context | None
) -> Finding | None:
    tau0 = _onset(x, y, params)
    if tau0 is None:
        return None
    sel = x >= tau0
    xs, ys = x[sel], y[sel]
    if len(xs) < params.min_points:
        return None
    # (1) steady: the floor of consecutive chunks rises
    k = min(params.chunks, len(xs) // 3)
    if k < 4:
        return None
    parts = np.array_split(np.arange(len(xs)), k)
    floors = np.array([float(ys[p].min()) for p in parts])
    rises = np.diff(floors)
    total_rise = float(floors[-1] - floors[0])
    if total_rise <= 0:
        return None
    rising = float(np.mean(rises > 0))
    jump = float(rises.max()) / total_rise
    if rising < params.min_rising_frac or jump > params.max_jump_share:
        return None
    # (2) significant
    bx, by = _buckets(xs, ys, params.max_buckets)
    slope, intercept, lo_slope, hi_slope = theil_sen(by, bx, params.confidence)
    if not (lo_slope > 0 and slope > 0):
        return None
    # scipy.stats takes ~0.5 s of CPU to import: only a significant rise pays it
    from scipy import stats

    kt = stats.kendalltau(bx, by)
    p_value = float(kt.pvalue) if np.isfinite(kt.pvalue) else 1.0
    if not p_value < params.max_p:
        return None
    # still rising at the end: a rise that levels off (allocator or page-cache warmup,
    # fragmentation that saturates) is not a leak
    half = len(bx) // 2
    if half >= 5:
        tail_slope = theil_sen(by[half:], bx[half:]).slope
        if tail_slope < params.min_tail_slope_ratio * slope:
            return None
    # (3) large
    start_level = intercept + slope * float(xs[0])  # the trend's level at the onset
    if start_level <= 0:
        start_level = float(np.median(ys[parts[0]]))
    if start_level <= 0:
        return None
    growth = slope * float(xs[-1] - xs[0])
    rel = growth / start_level
    if rel < params.min_growth:
        return None
    end_level = intercept + slope * float(xs[-1])
    sev = "warning" if rel >= params.warn_growth else "info"
    start = int(xs[0])
    evidence: dict[str, Any] = {
        "slope_bytes_per_step": slope,
        "slope_ci_low": lo_slope,
        "slope_ci_high": hi_slope,
        "kendall_tau": float(kt.statistic),
        "p_value": p_value,
        "growth_bytes": growth,
        "growth_pct": round(100 * rel, 2),
        "level_at_onset": start_level,
        "level_at_end": end_level,
        "floor_rising_frac": rising,
    }
    tail = ""
    nb = end_level >= 1e5  # values this large are bytes; smaller ones are MB/GB as logged

    def fb(v: float) -> str:
        return fmt_bytes(v, nb)

    cap, cap_src = _capacity(ctx) if metric in DEVICE_METRICS else (None, None)
    if cap is not None and 0.01 * cap <= end_level < cap:
        oom_step = int(x[-1] + (cap - end_level) / slope)
        evidence.update(device_memory_bytes=cap, device=cap_src, exhausted_at_step=oom_step)
        tail = f"; at this rate the {cap / 1e9:.3g} GB device is full by step {oom_step:,}"
        total = ctx.schedule.get("total_steps") if ctx and ctx.schedule else None
        if isinstance(total, (int, float)) and oom_step <= total:
            sev = "error"
            tail += f", before the planned {int(total):,} steps"
    pv = "<1e-300" if p_value == 0 else f"={p_value:.1g}"
    # an onset at the first judged point may be earlier: the warmup is not judged
    since = (
        f"the end of warmup (step {start}) or earlier" if start == int(x[0]) else f"step {start}"
    )
    msg = (
        f"{metric} grew steadily from {since} to the end of the run: "
        f"+{fb(growth)} (+{100 * rel:.0f}%) to {fb(end_level)}, about "
        f"{fb(slope)} per step ({100 * params.confidence:.0f}% CI {fb(lo_slope)}–{fb(hi_slope)}), "
        f"Kendall p{pv}{tail}; look for tensors kept alive across steps (e.g. a "
        "list of loss tensors), growing caches or logging buffers."
    )
    return finding(
        "MEM001",
        CODES["MEM001"],
        sev,
        msg,
        metric=metric,
        step_start=start,
        step_end=int(xs[-1]),
        **evidence,
    )


def detect(run: Run, params: Params, ctx: Context) -> list[Finding]:
    present = [m for m in METRICS if run.has(m)]
    if not present:
        raise Skip(f"needs one of {', '.join(METRICS)}, not logged")
    out: list[Finding] = []
    judged = 0
    for metric in present:
        s, v = run.series(metric, finite=True)
        if len(s) < 2:
            continue
        cut = float(s[0]) + params.warmup_frac * float(s[-1] - s[0])
        keep = s >= cut
        x, y = s[keep], v[keep]
        if len(x) < params.min_points:
            continue
        judged += 1
        f = _judge(metric, x, y, params, ctx)
        if f is not None:
            out.append(f)
    if not judged:
        raise Skip(f"{', '.join(present)}: fewer than {params.min_points} values after warmup")
    return out
