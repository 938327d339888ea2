"""grad_spikes' cheap screen (may_spike) never rules out a point the exact test would
call a spike: with and without it, the events are the same, on series built to put
spikes right at the thresholds."""

from __future__ import annotations

import numpy as np
import pytest

from trainlens.detectors import _grad_baseline as gb
from trainlens.detectors import _grad_events as ge
from trainlens.detectors import grad_spikes as gs


def _series(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Steps, a grad norm and a loss with heavy-tailed noise and spikes near the
    thresholds (3x the median for the grad norm, +5 % and 6 sigma for the loss)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(60, 4000))
    steps = np.cumsum(rng.integers(1, 4, n)) if seed % 3 == 0 else np.arange(n)
    noise = rng.standard_t(3, n) * rng.choice([0.01, 0.05, 0.2])
    grad = 0.8 * np.exp(noise)
    level = rng.choice([-3.0, 0.02, 2.0, 10.0])  # losses can be negative (an ELBO)
    loss = level + rng.choice([0.001, 0.01, 0.05]) * rng.standard_t(4, n)
    for i in rng.integers(0, n, int(rng.integers(0, 6))):
        grad[i : i + int(rng.integers(1, 4))] *= rng.uniform(2.5, 3.6)
        loss[i : i + int(rng.integers(1, 4))] += abs(level) * rng.uniform(0.03, 0.08)
    if seed % 5 == 0:
        loss = np.round(loss, 2)  # printed values: ties, and deviations of exactly 0
    return steps, grad, loss


def _events(steps: np.ndarray, g: np.ndarray, v: np.ndarray) -> tuple[list, list]:
    p = gs.Params()
    w_end = int(steps[0]) + 5
    raw = (steps, v)
    return ge._grad_events(steps, g, p, w_end), ge._loss_events(steps, v, p, w_end, raw)


@pytest.mark.parametrize("seed", range(300))
def test_screen_changes_no_event(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    steps, g, v = _series(seed)
    screened = _events(steps, g, v)
    monkeypatch.setattr(gb, "may_spike", lambda *args: (True, None))
    assert screened == _events(steps, g, v)


def test_screen_rules_out_a_quiet_series_and_keeps_a_spike() -> None:
    rng = np.random.default_rng(0)
    x = np.log(0.8) + 0.05 * rng.standard_normal(5000)
    judged = np.ones(x.size, dtype=bool)

    def screen(values: np.ndarray) -> bool:
        return gb.may_spike(values, judged, 50, 3, 6.0, lambda m: np.log(3.0), lambda m: 0.05)[0]

    assert not screen(x)
    x[3000] += np.log(4.0)
    assert screen(x)
