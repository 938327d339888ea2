"""Early warnings: a grad-norm value far out of its recent tail, before the loss answers.

GRAD001 (the full detector) asks for a grad-norm spike *and* the loss spike that follows
it, so it can only speak once the loss has moved. While a run trains, the grad-norm spike
alone is worth saying at once — with the run's own record: how many earlier spikes of this
run were followed by a loss spike. This module finds them, in time proportional to the
new rows (the trailing windows are carried from one chunk to the next):

The thresholds are GRAD001's own (:class:`trainlens.detectors.grad_spikes.Params`, with the
configured overrides), so a warning here and a finding there mean the same spike:

- a spike is a grad-norm value whose robust z in log space over the trailing ``window``
  values (median, 1.4826 x MAD, the MAD floored at ``grad_sigma_floor``) is at least
  ``grad_z`` *and* that is at least ``grad_ratio`` times the trailing median; one warning
  per excursion: another is not raised until the grad norm came back under its median x
  ``sqrt(grad_ratio)``;
- it is announced only when the loss has not already answered in the rows read so far
  (when it has, the full judging reports GRAD001 with the lag within its duty cycle);
- a loss spike "follows" when within ``lag_window`` steps the loss rises at least
  ``loss_z`` robust sigmas and ``loss_min_rel`` over its own trailing median.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from trainlens.core.dataclass import dataclass, field

MAD_TO_SIGMA = 1.4826
#: the fewest trailing values a median is taken from
MIN_VALUES = 10


def spike_params(overrides: dict[str, Any] | None = None) -> Any:
    """GRAD001's parameters, with the configured overrides."""
    from trainlens.detectors import grad_spikes, make_params

    return make_params("grad_spikes", grad_spikes, dict(overrides or {}))


@dataclass
class Spike:
    """A grad-norm spike, and what the loss did after it (filled as rows arrive)."""

    step: int
    value: float
    median: float
    z: float
    loss_median: float | None
    loss_sigma: float | None
    loss_bar: float = np.inf  # the loss above which it counts as a spike
    loss_worst: float = -np.inf  # the highest loss seen within the lag after

    @property
    def followed(self) -> bool:
        return self.loss_worst >= self.loss_bar


@dataclass
class Warning_:
    spike: Spike
    earlier: int  # spikes before this one in the run
    followed: int  # ... of which a loss spike followed


def _robust(values: np.ndarray) -> tuple[float, float]:
    med = float(np.median(values))
    sigma = float(np.median(np.abs(values - med))) * MAD_TO_SIGMA
    return med, sigma


def _series(frame: pl.DataFrame, metric: str) -> tuple[np.ndarray, np.ndarray]:
    s = frame.filter(pl.col("metric") == metric).sort("step", maintain_order=True)
    steps = s["step"].to_numpy()
    values = s["value"].to_numpy().astype(float)
    keep = np.isfinite(values)
    return steps[keep], values[keep]


@dataclass
class EarlyWarnings:
    params: Any = field(default_factory=spike_params)
    grad_tail: np.ndarray = field(default_factory=lambda: np.empty(0))
    loss_steps: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    loss_tail: np.ndarray = field(default_factory=lambda: np.empty(0))
    spikes: list[Spike] = field(default_factory=list)
    in_excursion: bool = False

    def feed(self, frame: pl.DataFrame) -> list[Warning_]:
        lsteps, lvals = _series(frame, "train/loss")
        for sp in self.spikes[-8:]:  # only recent spikes can still be inside their lag
            near = (lsteps >= sp.step) & (lsteps <= sp.step + self.params.lag_window)
            if near.any():
                sp.loss_worst = max(sp.loss_worst, float(lvals[near].max()))
        gsteps, gvals = _series(frame, "grad_norm")
        out: list[Warning_] = []
        if gsteps.size:
            z, med = self._z(gvals)
            for i in self._spike_indices(z):
                out.extend(
                    self._spike(int(gsteps[i]), float(gvals[i]), med[i], z[i], lsteps, lvals)
                )
            self.grad_tail = np.concatenate([self.grad_tail, gvals])[-self.params.window :]
        if lsteps.size:
            self.loss_steps = np.concatenate([self.loss_steps, lsteps])[-self.params.window :]
            self.loss_tail = np.concatenate([self.loss_tail, lvals])[-self.params.window :]
        return out

    def _z(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each new value's robust z (log space) over the ``window`` values before it (NaN
        while fewer than MIN_VALUES), and the trailing median; vectorized (polars' rolling
        median), in time proportional to the new values plus one window."""
        p = self.params
        allv = np.concatenate([self.grad_tail, values])
        logv = np.log(np.fmax(allv, 1e-30))
        prior = pl.Series(logv).shift(1)
        med = prior.rolling_median(p.window, min_samples=MIN_VALUES).to_numpy()
        dev = (pl.Series(logv) - pl.Series(med)).abs().shift(1)
        mad = dev.rolling_median(p.window, min_samples=MIN_VALUES).to_numpy() * MAD_TO_SIGMA
        z = (logv - med) / np.fmax(mad, p.grad_sigma_floor)
        # a spike must also be grad_ratio x its median: z alone flags a 1.3x wiggle of a
        # very smooth series
        z = np.where(logv - med >= np.log(p.grad_ratio), z, np.fmin(z, 0.0))
        n = self.grad_tail.size
        return z[n:], np.exp(med[n:])

    def _spike_indices(self, z: np.ndarray) -> list[int]:
        """Indices where an excursion starts: z at least grad_z after the series came back
        to (or under) its median since the last one."""
        out: list[int] = []
        high = np.flatnonzero(z >= self.params.grad_z)
        calm = np.flatnonzero(~(z > 0))  # back at or under its median (NaN: not yet judged)
        if not high.size:
            if calm.size:
                self.in_excursion = False
            return out
        last = -1
        for i in high.tolist():
            if self.in_excursion:
                # has the series come back since the excursion's last high value?
                back = calm[np.searchsorted(calm, last + 1) :]
                if not (back.size and back[0] < i):
                    last = i
                    continue
            out.append(i)
            self.in_excursion = True
            last = i
        if calm.size and calm[-1] > high[-1]:
            self.in_excursion = False
        return out

    def _spike(
        self, step: int, value: float, med: float, z: float, lsteps: np.ndarray, lvals: np.ndarray
    ) -> list[Warning_]:
        p = self.params
        before = np.concatenate([self.loss_tail, lvals[lsteps < step]])[-p.window :]
        sp = Spike(step, value, med, z, None, None)
        if before.size >= MIN_VALUES:
            lmed, lsig = _robust(before)
            lsig = max(lsig, p.loss_sigma_floor_rel * abs(lmed))
            sp.loss_median, sp.loss_sigma = lmed, lsig
            sp.loss_bar = lmed + max(p.loss_z * lsig, p.loss_min_rel * abs(lmed))
        after = lvals[(lsteps >= step) & (lsteps <= step + self.params.lag_window)]
        if after.size:
            sp.loss_worst = float(after.max())
        earlier = len(self.spikes)
        followed = sum(s.followed for s in self.spikes)
        self.spikes.append(sp)
        if sp.followed:  # the loss already answered: GRAD001 will say so, with the lag
            return []
        return [Warning_(sp, earlier, followed)]
