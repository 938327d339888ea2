"""Where a run's warmup ends and whether its log resumes a run (detectors/_start.py)."""

from __future__ import annotations

import numpy as np

from tests.detector_cases.series import run_of
from trainlens.detectors._start import declared_warmup, lr_ramp_end, run_start
from trainlens.detectors.base import Context


def test_lr_ramp_end_is_where_the_lr_reaches_95_percent_of_its_peak() -> None:
    st = np.arange(1, 501)
    lr = np.where(st <= 100, 3e-4 * st / 100, 3e-4 * (1 - (st - 100) / 800))
    assert lr_ramp_end(st, lr) == 95
    # a ramp that never levels off covers the log (version_13: the whole file warms up)
    assert lr_ramp_end(st, 1e-6 * st) == 475
    # no ramp: constant, decaying from its peak, or starting above half its peak
    assert lr_ramp_end(st, np.full(st.size, 3e-4)) is None
    assert lr_ramp_end(st, 3e-4 * (1 - st / 1000)) is None
    assert lr_ramp_end(st, np.r_[2e-4, np.full(st.size - 1, 3e-4)]) is None
    # a one-step LR shock after the warmup (lr_shock_recover: x40 at 400) is no peak the
    # warmup ramps to: the warmup still ends where the LR levels off
    shocked = lr.copy()
    shocked[399] *= 40
    assert lr_ramp_end(st, shocked) == 95


def test_a_declared_warmup_is_compared_with_the_real_steps() -> None:
    ctx = Context(schedule={"warmup_steps": 2000})
    st = np.arange(29020, 30020, 10)
    late = run_start(run_of({"train/loss": (st, np.full(st.size, 2.3))}), st, ctx)
    assert late.warmup_end == 29020 and late.warmup is None
    assert late.resumed == "the log starts at step 29020"
    st = np.arange(0, 5000, 10)
    fresh = run_start(run_of({"train/loss": (st, np.full(st.size, 2.3))}), st, ctx)
    assert fresh.warmup_end == 2000 and fresh.resumed is None
    assert declared_warmup(Context(schedule={"warmup_steps": "n/a"})) == 0


def test_first_step_one_interval_in_is_a_fresh_start() -> None:
    # Megatron logs iteration 10 first with --log-interval 10; HF logs logging_steps first
    for first, every in ((10, 10), (1, 1), (500, 500), (49, 50)):
        st = np.arange(first, first + 100 * every, every)
        start = run_start(run_of({"train/loss": (st, np.full(st.size, 3.0))}), st, Context())
        assert start.resumed is None, (first, every)


def test_an_epoch_counter_that_starts_late_is_a_resume() -> None:
    st = np.arange(9, 14669, 10)
    run = run_of({"train/loss": (st, np.full(st.size, 0.38)), "epoch": (st, 100.0 + st // 640)})
    assert run_start(run, st, Context()).resumed == "the log starts at epoch 100"
