"""DATA002 on a clock of whole seconds: Stable-Baselines3 logs `time/time_elapsed` as an
int, so on a fast run a gap reads as 0, 1 or 2 s by where the second ticks. A real PPO run
under load read a 2 s gap among 0 and 1 s ones as a stall; such a gap may have lasted
just over a second. Written with SB3's own logger (progress.csv)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

import trainlens


def _sb3_log(root: Path, pause_at: int | None, pause_s: float) -> Path:
    logger_mod = pytest.importorskip("stable_baselines3.common.logger")
    logger = logger_mod.configure(str(root), ["csv"])
    t = 0.9  # (iteration 29 ends at 13.95 s: just before a second ticks)
    for it in range(1, 61):
        t += 0.45 + (pause_s if it == pause_at else 0.0)  # true seconds per iteration
        logger.record("time/iterations", it)
        logger.record("time/total_timesteps", 64 * it)
        logger.record("time/time_elapsed", int(t))  # as SB3 does: int(time since start)
        logger.record("time/fps", 140)
        logger.record("train/loss", 1.0 / it)
        logger.dump(step=64 * it)
    logger.close()
    return root / "progress.csv"


def _stalls(path: Path) -> list[trainlens.Finding]:
    (a,) = trainlens.analyze(path)
    return [f for f in a.findings if f.code == "DATA002"]


def test_a_gap_the_seconds_clock_rounds_up_is_no_stall(tmp_path: Path) -> None:
    # iteration 30 takes 1.15 s (a 0.7 s pause, under min_gap_s), read as 13 s -> 15 s
    path = _sb3_log(tmp_path, pause_at=30, pause_s=0.7)
    (a,) = trainlens.analyze(path)
    wall = a.run.series_frame("train/rl_loss").get_column("wall_time").to_list()
    gaps = [b - c for b, c in zip(wall[1:], wall[:-1], strict=True)]
    assert all(float(w).is_integer() for w in wall) and max(gaps) == 2.0 and min(gaps) == 0.0
    assert _stalls(path) == []


def test_a_real_pause_on_a_seconds_clock_is_still_a_stall(tmp_path: Path) -> None:
    path = _sb3_log(tmp_path, pause_at=30, pause_s=20.0)
    [stall] = _stalls(path)
    assert stall.step_start == 64 * 30
    assert math.isclose(stall.evidence["gap_seconds"], 20.45, abs_tol=1)
