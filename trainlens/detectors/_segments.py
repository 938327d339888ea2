"""Segmentation of a series into regimes of constant level (throughput, data_path).

Detector-level machinery, not plain statistics: its penalties and merge rules (how short
a level may be, how different two levels must be) are detection choices, so it sits
beside the detectors rather than in :mod:`trainlens.core.stats`.
"""

from __future__ import annotations

import heapq
import itertools
import math

import numpy as np

from trainlens.core.dataclass import dataclass
from trainlens.core.stats import (
    centered_median,
    median,
    median_rows,
    median_step,
    noise_sigma,
    odd,
    robust_sigma,
)


def refine_split(y: np.ndarray, lo: int, hi: int, left: float, right: float) -> int:
    """The index k in [lo, hi] splitting y[lo:hi] into a part at level ``left`` and a part
    at level ``right`` with the least absolute deviation (ties: the earliest)."""
    w = y[lo:hi]
    c1 = np.concatenate(([0.0], np.cumsum(np.abs(w - left))))
    c2 = np.concatenate(([0.0], np.cumsum(np.abs(w - right))))
    cost = c1 + (c2[-1] - c2)
    return lo + int(np.argmin(cost))


def binary_segmentation(
    f: np.ndarray, min_len: int, penalty: float, max_cps: int = 24
) -> list[int]:
    """Change points of ``f`` (indices where a new segment starts) by binary segmentation
    on the L2 cost, largest gain first; every segment keeps ``min_len`` points."""
    f = f - float(np.mean(f))
    n = len(f)
    heap: list[tuple[float, int, int, int]] = []

    def push(a: int, b: int) -> None:
        m = b - a
        if m < 2 * min_len:
            return
        cs = np.cumsum(f[a:b])
        tot = cs[-1]
        k = np.arange(min_len, m - min_len + 1)
        left = cs[k - 1]
        gain = left**2 / k + (tot - left) ** 2 / (m - k) - tot**2 / m
        j = int(np.argmax(gain))
        heapq.heappush(heap, (-float(gain[j]), a + int(k[j]), a, b))

    push(0, n)
    cps: list[int] = []
    while heap and len(cps) < max_cps:
        g, t, a, b = heapq.heappop(heap)
        if -g < penalty:
            break
        cps.append(t)
        push(a, t)
        push(t, b)
    return sorted(cps)


@dataclass
class Levels:
    """Segments [bounds[i], bounds[i+1]) of a series and their medians."""

    bounds: list[int]
    levels: list[float]


def segment_levels(
    y: np.ndarray,
    steps: np.ndarray,
    *,
    min_points: int,
    min_frac: float,
    min_span: float,
    min_effect: float,
    z_min: float,
    max_filter: int = 101,
    max_blocks: int = 20000,
) -> Levels:
    """Piecewise-constant levels of ``y``: median filter, binary segmentation, then merge
    segments that are too short (points or steps) or not different enough."""
    n = len(y)
    min_len = max(min_points, math.ceil(min_frac * n), 1)
    if n < 2 * min_len:
        return Levels([0, n], [float(np.median(y))])
    dstep = median_step(steps)
    # long series: segment block medians (each block far shorter than a level must
    # last), then map the boundaries back; the levels below use every value
    block = max(1, n // max_blocks)
    if block > 1:
        nb = n // block
        fb = median_rows(y[: nb * block].reshape(nb, block))
        min_len_b = max(2, min_len // block)
        window = min(odd(min_len_b), odd(max_filter))
        f = centered_median(fb, window) if window >= 3 else fb
        sigma = noise_sigma(fb)
        penalty = max(0.25 * min_len_b * min_effect**2, 2.0 * sigma**2 * math.log(max(nb, 2)))
        cps = [c * block for c in binary_segmentation(f, min_len_b, penalty)]
    else:
        window = min(odd(min_len), odd(max_filter))
        f = centered_median(y, window) if window >= 3 else y
        sigma = noise_sigma(y)
        penalty = max(0.25 * min_len * min_effect**2, 2.0 * sigma**2 * math.log(max(n, 2)))
        cps = binary_segmentation(f, min_len, penalty)
    return _merged(
        y,
        steps,
        [0, *cps, n],
        dstep,
        min_points=min_points,
        min_span=min_span,
        min_effect=min_effect,
        z_min=z_min,
    )


def _merged(
    y: np.ndarray,
    steps: np.ndarray,
    bounds: list[int],
    dstep: float,
    *,
    min_points: int,
    min_span: float,
    min_effect: float,
    z_min: float,
) -> Levels:
    """The segments between ``bounds`` and their medians, merged until each lasts
    ``min_points`` and ``min_span`` steps and neighbours differ by ``min_effect`` and
    ``z_min`` standard errors (the shortest, then the least different, first)."""
    n = len(y)
    levels = [median(y[a:b]) for a, b in itertools.pairwise(bounds)]
    resid = np.concatenate(
        [y[a:b] - lv for a, b, lv in zip(bounds[:-1], bounds[1:], levels, strict=True)]
    )
    pooled = max(robust_sigma(resid), 1e-12)
    last_step = float(steps[-1]) + dstep

    def span(a: int, b: int) -> float:
        end = float(steps[b]) if b < n else last_step
        return end - float(steps[a])

    def merge(i: int) -> None:
        """Remove boundary i (1..len-2): segments i-1 and i become one."""
        del bounds[i]
        a, b = bounds[i - 1], bounds[i]
        levels[i - 1 : i + 1] = [float(np.median(y[a:b]))]

    while len(levels) > 1:
        k = len(levels)
        sizes = [bounds[i + 1] - bounds[i] for i in range(k)]
        short = [
            i
            for i in range(k)
            if sizes[i] < min_points or span(bounds[i], bounds[i + 1]) < min_span
        ]
        if short:
            i = min(short, key=lambda j: sizes[j])
            if i == 0:
                merge(1)
            elif i == k - 1:
                merge(k - 1)
            else:
                left = abs(levels[i] - levels[i - 1])
                right = abs(levels[i] - levels[i + 1])
                merge(i if left <= right else i + 1)
            continue
        diffs = []
        for i in range(1, k):
            d = abs(levels[i] - levels[i - 1])
            se = 1.2533 * pooled * math.sqrt(1.0 / sizes[i - 1] + 1.0 / sizes[i])
            if d < min_effect or d < z_min * se:
                diffs.append((d, i))
        if not diffs:
            break
        merge(min(diffs)[1])
    return Levels(bounds, levels)
