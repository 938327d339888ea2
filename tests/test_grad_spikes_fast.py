"""grad_spikes' fast path on noisy runs gives what the exact computation gives.

On a noisy run the screen cannot rule spikes out, so ``_scores`` computes the rolling
MAD-sigma only at the points that can spike and at those the come-back quantile needs
(numpy medians of their windows, the way polars rounds them). These tests hold it to the
full computation (polars' rolling MAD over the whole series): the same baseline, spikes,
come-back z and events, and the same sigma wherever the fast path gives one.
"""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainlens.core.stats import centered_rolling_median, medians_before
from trainlens.detectors import _grad_baseline as gb
from trainlens.detectors import _grad_events as ge
from trainlens.detectors import grad_spikes as gs


def _noisy(seed: int, n: int, grad_scale: float, loss_scale: float, df: int) -> tuple:
    """Steps, a grad norm and a loss like a real log's: Student-t noise, a falling trend,
    grad spikes of 3-50x, some with a loss spike a few steps after, loss-only spikes."""
    rng = np.random.default_rng(seed)
    steps = np.arange(n) if seed % 2 else np.cumsum(rng.integers(1, 4, n))
    frac = np.arange(n) / n
    grad = (0.25 + np.exp(-30 * frac)) * np.exp(grad_scale * rng.standard_t(df, n))
    loss = (2.0 + 8.0 * np.exp(-6 * frac)) * np.exp(loss_scale * rng.standard_t(df + 2, n))
    for i in rng.integers(0, n - 10, max(1, n // 2000)).tolist():
        grad[i : i + int(rng.integers(1, 4))] *= math.exp(rng.uniform(math.log(3), math.log(50)))
        if rng.random() < 0.5:
            j = i + int(rng.integers(1, 6))
            loss[j : j + int(rng.integers(1, 8))] *= 1 + rng.uniform(0.05, 1.0)
    if seed % 5 == 0:
        loss = np.round(loss, 3)  # printed values: ties
    return steps, grad, loss


def _grad_args(steps: np.ndarray, g: np.ndarray, p: gs.Params) -> tuple:
    judged = steps >= int(steps[0]) + 50
    return (
        np.log(g),
        steps,
        judged,
        int(steps[0]) + 50,
        p,
        p.grad_z,
        lambda med: math.log(p.grad_ratio),
        lambda med: p.grad_sigma_floor,
    )


def _loss_args(steps: np.ndarray, v: np.ndarray, p: gs.Params) -> tuple:
    judged = steps >= int(steps[0]) + 50
    return (
        v,
        steps,
        judged,
        int(steps[0]) + 50,
        p,
        p.loss_z,
        lambda med: p.loss_min_rel * np.abs(med),
        lambda med: np.fmax(p.loss_sigma_floor_rel * np.abs(np.nan_to_num(med)), 1e-12),
    )


def _exact(args: tuple, monkeypatch: pytest.MonkeyPatch, screen: bool) -> tuple | None:
    with monkeypatch.context() as m:
        m.setattr(gb, "_SIGMA_AT_POINTS_MAX", -1.0)  # always the full rolling MAD
        return gb._scores(*args, screen=screen)


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("which", ["grad", "loss"])
def test_fast_scores_equal_the_full_computation(
    seed: int, which: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(1000 + seed)
    n = int(rng.integers(200, 30_000))
    steps, g, v = _noisy(seed, n, rng.choice([0.02, 0.05, 0.1]), rng.choice([0.003, 0.01]), 3)
    p = gs.Params()
    args = _grad_args(steps, g, p) if which == "grad" else _loss_args(steps, v, p)
    fast = gb._scores(*args, screen=False)
    exact = _exact(args, monkeypatch, screen=False)
    assert fast is not None and exact is not None
    med, sig, spike, k = fast
    emed, esig, espike, ek = exact
    assert np.array_equal(med, emed, equal_nan=True)
    assert np.array_equal(spike, espike)
    assert k == ek
    known = ~np.isnan(sig)
    assert known[spike].all()  # every spike has its sigma (events read it)
    assert np.array_equal(sig[known], esig[known])


@pytest.mark.parametrize("tail", [0, 1, 99, 100, 5000])
@pytest.mark.parametrize("which", ["grad", "loss"])
def test_fast_scores_with_a_short_tail(
    tail: int, which: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Warmup ending near or after the last step: the come-back quantile over fewer than
    100 points (or none) is no quantile, with or without the million-point z array."""
    steps, g, v = _noisy(1, 20_000, 0.05, 0.01, 3)
    p = gs.Params()
    args = list(_grad_args(steps, g, p) if which == "grad" else _loss_args(steps, v, p))
    args[3] = int(steps[-1]) + 1 - tail  # steps run 0, 1, 2, ... (odd seed)
    fast = gb._scores(*args, screen=False)
    exact = _exact(tuple(args), monkeypatch, screen=False)
    assert fast is not None and exact is not None
    assert np.array_equal(fast[2], exact[2]) and fast[3] == exact[3]
    if which == "grad" and tail < 100:  # no quantile: the fast path is always exact
        assert np.isnan(fast[1]).mean() > 0.5  # and was taken


def test_the_fast_path_is_taken_on_realistic_noise(monkeypatch: pytest.MonkeyPatch) -> None:
    """On llm.c-like noise (log grad norm MAD-sigma ~0.056) few points need a sigma, so the
    fast path runs (sigma NaN elsewhere) and agrees with the full one."""
    steps, g, _ = _noisy(1, 50_000, 0.05, 0.01, 3)
    p = gs.Params()
    args = _grad_args(steps, g, p)
    fast = gb._scores(*args, screen=True)
    exact = _exact(args, monkeypatch, screen=True)
    assert fast is not None and exact is not None
    assert np.isnan(fast[1]).mean() > 0.9
    assert fast[2].sum() > 5 and np.array_equal(fast[2], exact[2]) and fast[3] == exact[3]


@pytest.mark.parametrize("seed", range(60))
def test_fast_events_equal_the_full_computation(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(60, 20_000))
    scale = rng.choice([0.01, 0.05, 0.2])
    steps, g, v = _noisy(seed, n, scale, scale / 5, int(rng.integers(2, 6)))
    p = gs.Params()
    w_end = int(steps[0]) + 50

    def events() -> tuple[list, list]:
        return ge._grad_events(steps, g, p, w_end), ge._loss_events(steps, v, p, w_end, (steps, v))

    fast = events()
    monkeypatch.setattr(gb, "_SIGMA_AT_POINTS_MAX", -1.0)
    assert fast == events()


@settings(max_examples=150, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.integers(1, 400),
    st.integers(1, 60),
    st.integers(1, 5),
    st.sampled_from([1e-3, 1.0, 1e6]),
    st.booleans(),
)
def test_medians_before_is_polars_rolling_median(
    seed: int, n: int, window: int, min_count: int, scale: float, rounded: bool
) -> None:
    rng = np.random.default_rng(seed)
    a = rng.standard_t(3, n) * scale
    if rounded:
        a = np.round(a, 1)  # ties
    idx = np.arange(n + 1)
    ref = pl.Series(a).rolling_median(window, min_samples=min(min_count, window)).to_numpy()
    ref = np.r_[np.nan, ref]  # the median of the values before each point
    got = medians_before(a, idx, window, min(min_count, window))
    assert np.array_equal(got, ref, equal_nan=True)


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 300), st.booleans())
def test_centered_median_of_five_is_polars(seed: int, n: int, rounded: bool) -> None:
    rng = np.random.default_rng(seed)
    x = rng.standard_t(2, n)
    if rounded:
        x = np.round(x, 1)
    ref = pl.Series(x).rolling_median(5, center=True, min_samples=1).to_numpy()
    assert np.array_equal(centered_rolling_median(x, 5), ref)


@pytest.mark.parametrize("seed", range(60))
@pytest.mark.parametrize("which", ["grad", "loss"])
def test_the_quick_proof_of_a_spike_is_right(seed: int, which: str) -> None:
    """may_spike's first stage says "a spike" (without a baseline: (True, None) on finite
    values) only when the exact computation finds one at the point it tested."""
    rng = np.random.default_rng(500 + seed)
    n = int(rng.integers(60, 20_000))
    scale = rng.choice([0.01, 0.05, 0.2])
    steps, g, v = _noisy(seed, n, scale, scale / 5, int(rng.integers(2, 6)))
    p = gs.Params()
    args = _grad_args(steps, g, p) if which == "grad" else _loss_args(steps, v, p)
    x, judged, z, least_excess, sigma_floor = args[0], args[2], args[5], args[6], args[7]
    possible, med = gb.may_spike(x, judged, p.window, p.min_baseline, z, least_excess, sigma_floor)
    exact = gb._scores(*args, screen=False)
    assert exact is not None
    if possible and med is None:  # the largest jump over the median of the three before
        before = np.median(np.stack([x[:-3], x[1:-2], x[2:-1]]), axis=0)
        i = 3 + int(np.argmax((x[3:] - before) / np.fmax(sigma_floor(np.abs(before)), 1e-300)))
        assert exact[2][i]
    if not possible:
        assert not exact[2].any()
