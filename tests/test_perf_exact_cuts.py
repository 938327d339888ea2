"""Exact cuts that skip a whole-series computation (issue 13's noisy 1M-step run): each
skip happens only where the full computation could not have changed a result."""

from __future__ import annotations

import dataclasses

import numpy as np
import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from trainlens.detectors import tensors


@settings(max_examples=300, deadline=None)
@given(
    n=st.integers(25, 400),
    window=st.integers(1, 40),
    min_frac=st.sampled_from([0.01, 0.05, 0.2, 0.5]),
    p_low=st.sampled_from([0.0, 0.01, 0.05, 0.2]),
    p_high=st.sampled_from([0.0, 0.01, 0.05, 0.2]),
    on_bound=st.booleans(),
    seed=st.integers(0, 2**31),
)
def test_band_skipped_only_when_no_median_could_leave_it(
    n: int,
    window: int,
    min_frac: float,
    p_low: float,
    p_high: float,
    on_bound: bool,
    seed: int,
) -> None:
    p = dataclasses.replace(tensors.Params(), window=window, min_frac=min_frac)
    rng = np.random.default_rng(seed)
    v = 10 ** rng.uniform(-4, -2, n)
    u = rng.random(n)
    # outside values in clumps (where medians leave the band) or exactly on the bounds
    low, high = (p.band_low, p.band_high) if on_bound else (p.band_low / 3, p.band_high * 3)
    v[u < p_low] = low
    v[u > 1 - p_high] = high
    if rng.random() < 0.5:
        v = np.sort(v)
    if not tensors._may_leave_band(v, p):
        med = pl.Series(v).rolling_median(window, min_samples=window // 2).to_numpy()
        for frac in (np.nanmean(med < p.band_low), np.nanmean(med > p.band_high)):
            assert frac < min_frac


def test_band_is_computed_when_medians_leave_it() -> None:
    v = np.full(1000, 1e-3)
    v[:300] = 1.0  # 30 % above the band: TENSOR002 material
    assert tensors._may_leave_band(v, tensors.Params())
    assert not tensors._may_leave_band(np.full(1000, 1e-3), tensors.Params())
