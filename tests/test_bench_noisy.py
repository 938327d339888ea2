"""bench/generate.py --noisy: real-log-like runs, deterministic by seed, and the clean
run unchanged (the bench's history compares against it)."""

from __future__ import annotations

import hashlib
import sys
from types import ModuleType

import numpy as np
import polars as pl
import pytest

from tests.conftest import BENCH


@pytest.fixture(scope="module")
def generate() -> ModuleType:
    sys.path.insert(0, str(BENCH))
    try:
        import generate as mod  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(BENCH))
    return mod  # type: ignore[no-any-return]


def _frame(generate: ModuleType, **kw: object) -> pl.DataFrame:
    return pl.concat(list(generate.Plan(**kw).chunks()))


def test_clean_run_is_unchanged(generate: ModuleType) -> None:
    """The clean run's values: those of bench/generate.py at 349a5a2, before --noisy."""
    df = _frame(generate, steps=3000, restart=0.6)
    digest = hashlib.sha256(df.write_csv().encode()).hexdigest()
    assert digest == "c7df105a3fedcb6ff6b632033d4547b961f6fb1e648e792b48ede377e2e565c3"


def test_noisy_run_is_deterministic_and_differs_by_seed(generate: ModuleType) -> None:
    a = _frame(generate, steps=60_000, noisy=True)
    assert a.equals(_frame(generate, steps=60_000, noisy=True))
    assert not a.equals(_frame(generate, steps=60_000, noisy=True, seed=1))


def test_noisy_run_looks_like_a_real_log(generate: ModuleType) -> None:
    """Heavy-tailed noise of llm.c's size, grad spikes of 3-50x, loss spikes."""
    df = _frame(generate, steps=200_000, noisy=True).filter(pl.col("step") > 20_000)
    g = np.log(df["grad_norm"].to_numpy())
    base = pl.Series(g).rolling_median(51, center=True).to_numpy()
    r = (g - base)[100:-100]
    mad_sigma = 1.4826 * np.median(np.abs(r - np.median(r)))
    assert 0.04 < mad_sigma < 0.08  # llm.c's record log: 0.056
    beyond = np.mean(np.abs(r) > 6 * mad_sigma)
    assert 0.002 < beyond < 0.02  # heavy tails (a normal: 2e-9); llm.c: 0.006
    ratio = np.exp(r)
    assert np.sum(ratio > 3) >= 10 and ratio.max() < 100  # spikes of 3-50x, not more
    loss = df["loss"].to_numpy()
    lbase = pl.Series(loss).rolling_median(51, center=True).to_numpy()
    assert np.nansum(loss / lbase > 1.05) >= 5  # loss spikes of +5 % and more
    tput = df["tokens_per_sec"].to_numpy()
    assert np.min(tput) < 0.8 * np.median(tput)  # throughput drops
