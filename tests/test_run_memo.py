"""Run.memo: computed once per frame object, recomputed when the frame changes; the LR
ramp run_start takes from it is the one lr_ramp_end finds on the run's LR; and
_stats.median_step is np.median of the step differences."""

from __future__ import annotations

import warnings

import numpy as np
import polars as pl

from trainlens.core.run import Run, build_run
from trainlens.core.stats import median_step
from trainlens.detectors._start import lr_ramp_end, run_start


def _run(n: int = 400) -> Run:
    steps = np.arange(1, n + 1)
    lr = np.minimum(steps / 50, 1.0) * 3e-4
    rows = [
        {"step": int(s), "metric": m, "value": float(v)}
        for s, a, b in zip(steps, lr, np.linspace(4, 2, n), strict=True)
        for m, v in (("lr", a), ("loss", b))
    ]
    return build_run(pl.DataFrame(rows), name="r", source="mem", fmt="jsonl")


def test_memo_once_per_frame() -> None:
    run = _run()
    calls: list[int] = []

    def compute() -> int:
        calls.append(1)
        return len(calls)

    assert run.memo("k", compute) == 1
    assert run.memo("k", compute) == 1  # not computed again
    run.add_derived("x", run.series_frame("lr"))  # a new frame: computed again
    assert run.memo("k", compute) == 2


def test_run_start_takes_the_ramp_of_the_runs_lr() -> None:
    run = _run()
    s, lr = run.series("lr", finite=True)
    ramp = lr_ramp_end(s, lr)
    assert ramp == 48  # 95 % of the peak: 0.95 * 50 -> step 48
    assert run_start(run, s, None).warmup_end == ramp
    assert run_start(run, s[20:], None).warmup_end == ramp  # asked again: the same ramp
    assert run_start(run, s[100:], None).warmup_end == 101  # the ramp is before the series


def test_median_step_is_the_median_difference() -> None:
    rng = np.random.default_rng(0)
    for _ in range(300):
        d = rng.choice([1, 2, 5, 10], size=int(rng.integers(0, 30)), p=[0.1, 0.1, 0.1, 0.7])
        if rng.random() < 0.5:
            d[:] = d[0] if d.size else 0
        steps = np.concatenate(([0], np.cumsum(d))).astype(rng.choice([np.int64, np.float64]))
        with np.errstate(invalid="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # the median of no difference
            want = np.median(np.diff(steps))
            got = median_step(steps)
        assert got == want or (np.isnan(got) and np.isnan(want))
