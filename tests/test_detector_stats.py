"""The shared statistics of the detectors give what the libraries they replace give."""

from __future__ import annotations

import functools
import warnings

import numpy as np
import pytest
from scipy import stats

from trainlens.core.stats import theil_sen


@functools.cache
def _cases() -> list[tuple[np.ndarray, np.ndarray, float]]:
    rng = np.random.default_rng(7)
    out = []
    for i in range(400):
        n = int(rng.integers(2, 90))
        kind = i % 4
        if kind == 0:  # distinct x
            x = np.sort(rng.normal(size=n)) * 100
        else:  # tied x (steps logged twice, bucket medians that coincide)
            x = rng.integers(0, max(2, n // 3), n).astype(np.float64)
        y = rng.normal(size=n) + 0.3 * x
        if kind == 2:  # tied y: values printed with one decimal
            y = np.round(y, 1)
        if kind == 3:  # heavily tied y
            y = rng.integers(0, 4, n).astype(np.float64)
        out.append((y, x, (0.95, 0.99, 0.9, 0.5)[i % 4]))
    return out


@pytest.mark.parametrize("case", range(400))
def test_theil_sen_is_scipys(case: int) -> None:
    y, x, confidence = _cases()[case]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = stats.theilslopes(y, x, alpha=confidence)
    got = theil_sen(y, x, confidence)
    np.testing.assert_array_equal(np.array(got), np.array([float(v) for v in want]))


def test_theil_sen_without_two_distinct_x_is_nan() -> None:
    got = theil_sen(np.array([1.0, 2.0, 3.0]), np.array([5.0, 5.0, 5.0]))
    assert all(np.isnan(v) for v in got)


def test_theil_sen_recovers_a_line_with_outliers() -> None:
    x = np.arange(50, dtype=np.float64)
    y = 2.0 * x + 1.0
    y[[5, 17, 33]] += 1000.0  # a least-squares fit would be pulled far off
    got = theil_sen(y, x, 0.99)
    assert got.slope == 2.0
    assert got.intercept == float(np.median(y) - 2.0 * np.median(x))  # scipy's "separate"
    assert got.low_slope <= 2.0 <= got.high_slope
