"""Fitting a planned LR curve to a logged one: the shared machinery of the LR detector's
declared path (lr_schedule.py holds the detector; this module no finding logic)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from trainlens.core.dataclass import dataclass
from trainlens.core.findings import Finding, Severity
from trainlens.core.schedules import lr_at
from trainlens.core.stats import runs_of
from trainlens.detectors.base import finding


def lr_finding(code: str, severity: Severity | str, message: str, **kw: Any) -> Finding:
    """A finding of the LR detector, named by its code until
    :func:`trainlens.detectors.lr_schedule.detect` names it from ``CODES`` (the one table
    of names lives in the detector's module; importing it here would be an import cycle)."""
    return finding(code, code, severity, message, **kw)


def fmt(x: float) -> str:
    return f"{x:.3g}"


@dataclass
class Fit:
    """How well a hypothesis h(n) explains the realized LR."""

    ok: np.ndarray  # bool per point
    shift: int
    center: np.ndarray  # h(n + shift)
    lo: np.ndarray
    hi: np.ndarray

    @property
    def score(self) -> int:
        return int(self.ok.sum())


def fit_plan(
    r: np.ndarray,
    n: np.ndarray,
    h: Callable[[np.ndarray], np.ndarray],
    max_shift: int,
    rtol: float,
    atol: float | np.ndarray,
) -> Fit:
    """Best step offset b in [-max_shift, max_shift]; a point matches when it lies within
    tolerance of h(n+b-1) .. h(n+b+1)."""
    cache: dict[int, np.ndarray] = {}

    def at(b: int) -> np.ndarray:
        if b not in cache:
            cache[b] = h(n + b)
        return cache[b]

    best: Fit | None = None
    for b in sorted(range(-max_shift, max_shift + 1), key=abs):
        lo = np.minimum(np.minimum(at(b - 1), at(b)), at(b + 1))
        hi = np.maximum(np.maximum(at(b - 1), at(b)), at(b + 1))
        ok = (r >= lo * (1 - rtol) - atol) & (r <= hi * (1 + rtol) + atol)
        cand = Fit(ok, b, at(b), lo, hi)
        if best is None or cand.score > best.score:
            best = cand
            if best.score == len(r):
                break  # everything explained: no need to try other offsets
    assert best is not None
    return best


def rel_dev(r: np.ndarray, fit: Fit, atol: np.ndarray) -> np.ndarray:
    """|realized - plan| / plan where the point is outside the tolerated band, else 0."""
    outside = ~fit.ok
    rel = np.abs(r - fit.center) / np.maximum(np.abs(fit.center), atol)
    return np.where(outside, rel, 0.0)


#: points a hypothesis is screened on (uniformly spread, plus as many mismatched ones)
SCREEN_POINTS = 20_000


def thin(idx: np.ndarray, at_most: int) -> np.ndarray:
    """At most about ``at_most`` evenly strided entries of ``idx``."""
    if len(idx) <= at_most:
        return idx
    return idx[:: -(-len(idx) // at_most)]


def merged_runs(mask: np.ndarray, gap: int = 2) -> list[tuple[int, int]]:
    """Runs of true (index ranges), merging runs separated by at most ``gap`` points."""
    out: list[tuple[int, int]] = []
    for a, b in runs_of(mask):
        if out and a - out[-1][1] - 1 <= gap:
            out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out


Plan = Callable[[np.ndarray], np.ndarray]


#: a warmup convention: the start factor of the ramp (0: from 0)
Convention = float


def plan_of(sched: dict[str, Any], conv: Convention = 0.0) -> Plan:
    return lambda n: lr_at(sched, n, warmup_start_factor=conv)


def conventions(sched: dict[str, Any], n: np.ndarray, r: np.ndarray) -> list[Convention]:
    """Warmup ramps real code uses: from 0 (nanoGPT, llm.c, Megatron, HF — the last one
    step later, which the step offsets cover) and from a start factor (PyTorch's
    LinearLR, default 1/3; detectron2's warmup_factor), fitted from the first logged point
    when it lies in the first half of the warmup below half the peak."""
    out: list[Convention] = [0.0]
    warm = float(sched.get("warmup_steps") or 0)
    peak = float(sched["peak_lr"])
    if warm > 1 and 1 <= n[0] <= warm / 2 and 0 < r[0] <= 0.5 * peak:
        done = n[0] / warm
        f = float((r[0] / peak - done) / (1 - done))
        if 0.01 < f <= 0.5:
            out.append(f)
    return out
