"""What grad_spikes' helper modules share: the series and events they pass along, the
parameters they read, and the step arithmetic of a log (a helper of the ``grad_spikes``
detector, not a detector)."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple, Protocol

import numpy as np
import polars as pl

import trainlens.core.stats as _stats
from trainlens.core.dataclass import dataclass, field
from trainlens.core.findings import Finding
from trainlens.core.stats import median3

GRAD = "grad_norm"
LOSS = "train/loss"

#: a bound of a spike test as a function of the baseline median (a number or per point)
Bound = Callable[[np.ndarray], "np.ndarray | float"]


class SpikeParams(Protocol):
    """The thresholds the helpers read: ``grad_spikes.Params`` (documented there), typed
    here so that no helper imports the detector module."""

    @property
    def window(self) -> int: ...

    @property
    def min_baseline(self) -> int: ...

    @property
    def min_sigma_points(self) -> int: ...

    @property
    def gross_loss_rel(self) -> float: ...

    @property
    def gross_grad_ratio(self) -> float: ...

    @property
    def grad_z(self) -> float: ...

    @property
    def grad_ratio(self) -> float: ...

    @property
    def grad_sigma_floor(self) -> float: ...

    @property
    def loss_z(self) -> float: ...

    @property
    def spike_alpha(self) -> float: ...

    @property
    def min_z(self) -> float: ...

    @property
    def loss_min_rel(self) -> float: ...

    @property
    def loss_sigma_floor_rel(self) -> float: ...

    @property
    def lag_window(self) -> int: ...

    @property
    def lag_window_points(self) -> int: ...

    @property
    def recover_k(self) -> float: ...

    @property
    def recover_rel(self) -> float: ...

    @property
    def recover_points(self) -> int: ...

    @property
    def recover_quantile(self) -> float: ...

    @property
    def transient_points(self) -> int: ...

    @property
    def gap_intervals(self) -> float: ...

    @property
    def min_points_after(self) -> int: ...

    @property
    def repeat_count(self) -> int: ...

    @property
    def repeat_window(self) -> int: ...

    @property
    def repeat_alpha(self) -> float: ...

    @property
    def vanish_below(self) -> float: ...

    @property
    def explode_above(self) -> float: ...

    @property
    def sustain_points(self) -> int: ...

    @property
    def sustain_frac(self) -> float: ...

    @property
    def bound_hysteresis(self) -> float: ...

    @property
    def max_info_findings(self) -> int: ...


@dataclass
class _Event:
    start: int  # index into the series
    end: int
    count: int  # spike points in the event
    last_spike: int  # index of its last spike point
    peak: int
    base: float  # pre-spike baseline (value units)
    sigma: float  # its robust scale (loss units; log units for the grad norm)
    recovered: int | None = None  # index where it came back
    nonfinite_step: int | None = None
    extra: dict[str, float] = field(default_factory=dict)


@dataclass
class _Series:
    steps: np.ndarray
    values: np.ndarray
    events: list[_Event]
    interval: int
    judged_from: int  # first step judged (after warmup)


class _Pending(NamedTuple):
    """A finding decided but not yet built (one-off outliers can number thousands on a
    long run; only the largest are built and listed)."""

    code: str
    severity: str
    score: float
    step: int
    build: Callable[[], Finding]


def forward_median(x: np.ndarray, k: int) -> np.ndarray:
    """Median of x[i : i + k] at each i (shorter at the end)."""

    def by_polars(v: np.ndarray) -> np.ndarray:
        rev = pl.Series(v[::-1].copy(), dtype=pl.Float64)
        return rev.rolling_median(k, min_samples=1).to_numpy()[::-1]

    if k != 3 or x.size < 3 or np.isnan(x).any():
        return by_polars(x)
    out = np.empty(x.size)
    out[:-2] = median3(x[:-2], x[1:-1], x[2:])  # a few times cheaper than polars
    out[-2:] = by_polars(x[-2:])
    return out


def typical_interval(steps: np.ndarray) -> int:
    if steps.size < 2:
        return 1
    return max(1, int(_stats.median_step(steps)))


def gaps_in(steps: np.ndarray, interval: int, gap_intervals: float) -> np.ndarray:
    """Indices followed by a gap in the log: a step jump over ``gap_intervals`` typical
    logging intervals (an excerpt, a log spliced from pieces, a resumed log)."""
    if steps.size < 2:
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(np.diff(steps) > gap_intervals * interval)
