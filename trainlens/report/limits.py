"""Drawing decisions that depend on the data: where a y axis ends, where a line breaks,
and when an axis is logarithmic.

These decide how a series is *drawn*; they never judge the run (that is the detectors'
job, and the report does not run them).

- **Robust y limits.** A loss of 11 at step 0, or 284 in the first logged row, would
  leave a 20k-step curve living between 3 and 5 as a flat line at the bottom of its
  panel. The limits come from the body of what is drawn (its 10th–90th percentiles)
  and reach :data:`FENCE` body widths beyond it — about Tukey's "far out" fence for
  normal noise — so only values far outside the body are cut, and only when cutting
  them at least doubles the room the rest gets. TensorBoard's "ignore outliers
  in chart scaling" does the same with fixed 5 %/95 % quantiles; a fence in body widths
  keeps modest spikes on the plot. What is cut is drawn at the edge by the caller.
- **Step gaps.** An excerpt, a resumed log or a log that skips steps has intervals far
  longer than its usual one: the line breaks there instead of bridging the gap.
- **Decades.** A series whose positive values span at least :data:`DECADES_FOR_LOG`
  decades gets a log axis: on a linear one, everything below 1/100 of the top is
  squeezed into the bottom pixels.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

BODY_QUANTILES = (0.10, 0.90)
# body widths beyond the body. For normal noise q90 + 1.5 (q90 − q10) is 5.1σ above the
# mean, about Tukey's "far out" fence Q3 + 3 IQR (4.7σ): noise is never cut, a start
# at 11 over a body at 3–4.5 is (modded-nanogpt: the body then fills half the axis,
# against an eighth before)
FENCE = 1.5
# below this many values the 10th/90th percentiles are interpolated from the outliers
# themselves (with 12 values, two of them 284 and 161, the 90th percentile is 146): the
# body is then the quartiles, with a wider fence so a lone spike among 19 stays drawn
SMALL_N = 50
SMALL_BODY_QUANTILES = (0.25, 0.75)
SMALL_FENCE = 6.0  # Q3 + 6 IQR: 8.8σ for normal noise, lenient where each value counts
# a nearly constant series has a body of width ~0: every ripple would be "far out".
# The body is at least this wide: a quarter of the median level on a linear axis
# (throughput halving stays on the plot), 0.1 decade on a log axis.
REL_FLOOR = 0.25
LOG_FLOOR = 0.1
# values just past the fence are not worth cutting (a spike to 0.99 cut at 0.83 reads as
# an arbitrary line): the limits reach out to anything within this share of the kept range
SLACK = 0.25
WORTH_CLIPPING = 0.5  # cut only when the kept range is at most half of the full range
MARGIN = 0.05  # matplotlib's default axes margin
# quantiles of a long series from a strided subset: an estimate is all a limit needs
# (the 10th percentile of 50k values is within ±0.2 percentile points)
QUANTILE_SAMPLE = 50_000
GAP_FACTOR = 5.0  # an interval this many times the typical one is a gap
GAP_WINDOW = 8  # neighbouring intervals on each side that give the local typical one
DECADES_FOR_LOG = 2.0


def _drawn(arrays: Sequence[np.ndarray], log: bool) -> np.ndarray:
    parts = []
    for a in arrays:
        v = np.asarray(a, dtype=np.float64)
        ok = np.isfinite(v) & (v > 0) if log else np.isfinite(v)
        parts.append(v[ok])
    out = np.concatenate(parts) if parts else np.empty(0)
    if log:
        with np.errstate(divide="ignore"):
            out = np.log10(out)
    return out


def robust_ylim(
    arrays: Sequence[np.ndarray], *, log: bool = False, keep: Sequence[float] = ()
) -> tuple[float, float] | None:
    """Limits (lo, hi) that leave far-out values off the axis, or None when every value
    fits (the axis then autoscales as usual). ``keep``: values that must stay on the
    axis whatever they are (a finding's peak, the best validation loss)."""
    vals = _drawn(arrays, log)
    if vals.size < 3:
        return None
    sample = vals[:: max(1, vals.size // QUANTILE_SAMPLE)]
    small = vals.size < SMALL_N
    (b_lo, b_hi), fence = (SMALL_BODY_QUANTILES, SMALL_FENCE) if small else (BODY_QUANTILES, FENCE)
    q_lo, med, q_hi = np.quantile(sample, [b_lo, 0.5, b_hi])
    width = max(float(q_hi - q_lo), LOG_FLOOR if log else REL_FLOOR * abs(float(med)))
    if width <= 0:
        return None  # constant: any departure is the story, draw it all
    fence_lo, fence_hi = q_lo - fence * width, q_hi + fence * width
    full_lo, full_hi = float(vals.min()), float(vals.max())
    if full_lo >= fence_lo and full_hi <= fence_hi:
        return None  # the common case: nothing far out
    inside = vals[(vals >= fence_lo) & (vals <= fence_hi)]
    kept = _drawn([np.asarray(keep, dtype=np.float64)], log)
    lo = float(min(inside.min(initial=np.inf), kept.min(initial=np.inf)))
    hi = float(max(inside.max(initial=-np.inf), kept.max(initial=-np.inf)))
    if full_lo >= lo and full_hi <= hi:
        return None
    if not hi > lo or hi - lo > WORTH_CLIPPING * (full_hi - full_lo):
        return None
    reach = SLACK * (hi - lo)
    lo = float(vals[vals >= lo - reach].min(initial=lo))
    hi = float(vals[vals <= hi + reach].max(initial=hi))
    pad = MARGIN * (hi - lo)
    lo, hi = lo - pad, hi + pad
    if log:
        return float(10**lo), float(10**hi)
    return lo, hi


def step_gaps(steps: np.ndarray, min_gap: float = 0.0) -> np.ndarray:
    """Indices ``i`` where ``steps[i] → steps[i + 1]`` is a gap: at least
    :data:`GAP_FACTOR` times both the series' median interval and the median of the
    :data:`GAP_WINDOW` intervals on each side (so a log that changes its interval, every
    step then every 10, has no gap where it changes), and longer than ``min_gap`` (a gap
    narrower than a pixel column cannot be seen). ``steps`` sorted ascending."""
    s = np.asarray(steps, dtype=np.float64)
    d = np.diff(s)
    if d.size < 2:
        return np.empty(0, dtype=np.int64)
    if d.max(initial=0.0) <= max(min_gap, GAP_FACTOR * d.min(initial=0.0)):
        return np.empty(0, dtype=np.int64)  # regular logging: no median needed
    typical = np.median(d[:: max(1, d.size // QUANTILE_SAMPLE)])
    cand = np.flatnonzero((d > GAP_FACTOR * typical) & (d > min_gap))
    if cand.size == 0:
        return cand
    offsets = np.r_[np.arange(-GAP_WINDOW, 0), np.arange(1, GAP_WINDOW + 1)]
    idx = cand[:, None] + offsets[None, :]
    inside = (idx >= 0) & (idx < d.size)
    near = np.where(inside, d[np.clip(idx, 0, d.size - 1)], np.nan)
    local = np.nanmedian(near, axis=1)  # every candidate has a neighbour: d.size ≥ 2
    return cand[d[cand] > GAP_FACTOR * local]


def gap_breaks(steps: np.ndarray, gaps: np.ndarray) -> np.ndarray:
    """Where to put a NaN so the line breaks over each gap: the middle of the gap."""
    s = np.asarray(steps, dtype=np.float64)
    return (s[gaps] + s[gaps + 1]) / 2


def isolated(n: int, gaps: np.ndarray) -> np.ndarray:
    """Indices of points with a gap (or the series' end) on both sides: drawn as a line,
    they would be invisible."""
    if gaps.size == 0:
        return np.empty(0, dtype=np.int64)
    starts = np.r_[0, gaps + 1]
    ends = np.r_[gaps, n - 1]
    return starts[starts == ends]


def spans_decades(arrays: Sequence[np.ndarray]) -> bool:
    """Whether the positive finite values span at least :data:`DECADES_FOR_LOG` decades."""
    vals = _drawn(arrays, log=True)
    return vals.size > 1 and float(vals.max() - vals.min()) >= DECADES_FOR_LOG


__all__ = ["gap_breaks", "isolated", "robust_ylim", "spans_decades", "step_gaps"]
