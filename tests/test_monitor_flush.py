"""When the monitor writes: every ``flush_every`` steps, or sooner so that no record waits
``flush_seconds`` for the file, and at once after a step with a non-finite value. A fake
flush clock makes the step rate whatever a test needs; the file is read back after each
step (once the writer thread wrote what the step handed over, except where a test says
the record is on disk when the step returns)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import trainlens  # noqa: E402
from trainlens.monitor import Monitor  # noqa: E402


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _rows(out: Path) -> list[dict[str, Any]]:
    path = out / "metrics.jsonl"
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return [r for r in rows if "event" not in r]  # (the end record close() writes)


def _run(
    out: Path,
    seconds_per_step: float,
    steps: int,
    *,
    nan_at: int | None = None,
    extra_inf_at: int | None = None,
    **kw: Any,
) -> list[int]:
    """Train a tiny linear model ``steps`` steps, each ``seconds_per_step`` long on the
    flush clock; return how many records the file held after each step."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    clock = FakeClock()
    mon = Monitor(model, opt, out=out, flush_clock=clock, **kw)
    on_disk = []
    for step in range(1, steps + 1):
        clock.t += seconds_per_step
        loss = model(torch.ones(2, 4)).pow(2).mean()
        if step == nan_at:
            loss = loss * math.nan
        loss.backward()
        opt.step()
        opt.zero_grad()
        extra = {"reward": math.inf} if step == extra_inf_at else {}
        mon.step(loss=loss, **extra)
        # what the step handed to the writer thread is written (drain); what it did not
        # hand over is not: the count says which steps flushed
        mon.drain()
        on_disk.append(len(_rows(out)))
    mon.close()
    return on_disk


def test_at_half_a_second_a_step_records_are_written_within_the_interval(tmp_path: Path) -> None:
    # 0.5 s a step, 2 s allowed: the fourth record would make the first 2 s old by the
    # fifth, so the four go together, far before flush_every's 50
    on_disk = _run(tmp_path, 0.5, 10, flush_seconds=2.0)
    assert on_disk == [0, 0, 0, 4, 4, 4, 4, 8, 8, 8]
    assert [r["step"] for r in _rows(tmp_path)] == list(range(1, 11))


def test_a_step_longer_than_the_interval_is_written_at_once(tmp_path: Path) -> None:
    on_disk = _run(tmp_path, 10.0, 5)  # the default 2 s
    assert on_disk == [1, 2, 3, 4, 5]  # the first step is timed from the monitor's start


def test_fast_steps_are_written_every_flush_every_not_every_step(tmp_path: Path) -> None:
    on_disk = _run(tmp_path, 0.001, 120, flush_every=50)
    assert sorted(set(on_disk)) == [0, 50, 100]
    assert on_disk.index(50) == 49 and on_disk.index(100) == 99


def test_flush_seconds_none_writes_by_count_only(tmp_path: Path) -> None:
    on_disk = _run(tmp_path, 60.0, 6, flush_every=3, flush_seconds=None)
    assert on_disk == [0, 0, 3, 3, 3, 6]


def test_a_nan_loss_is_on_disk_right_after_its_step(tmp_path: Path) -> None:
    on_disk = _run(tmp_path, 0.001, 12, nan_at=7, flush_seconds=3600.0)
    assert on_disk[5] == 0 and on_disk[6] == 7  # nothing before the NaN step, all after
    rows = _rows(tmp_path)
    assert [r["step"] for r in rows[:7]] == list(range(1, 8))
    assert math.isnan(rows[6]["train/loss"]) and math.isfinite(rows[5]["train/loss"])
    [run] = trainlens.read(tmp_path / "metrics.jsonl")
    steps, values = run.series("train/loss")
    assert list(steps) == list(range(1, 13)) and math.isnan(values[6])


def test_an_infinite_logged_scalar_is_on_disk_right_after_its_step(tmp_path: Path) -> None:
    on_disk = _run(tmp_path, 0.001, 5, extra_inf_at=3, flush_seconds=3600.0)
    assert on_disk[:3] == [0, 0, 3]
    assert _rows(tmp_path)[2]["reward"] == math.inf


def test_flush_seconds_must_be_positive(tmp_path: Path) -> None:
    model = torch.nn.Linear(2, 1)
    with pytest.raises(ValueError, match="flush_seconds"):
        Monitor(model, torch.optim.SGD(model.parameters(), lr=0.1), out=tmp_path, flush_seconds=0)


def test_with_several_ranks_the_flush_uses_only_what_every_rank_knows(tmp_path: Path) -> None:
    """Every rank must flush at the same steps (FSDP2's flush is a collective): the rule
    there is the records waiting x the slowest rank's gathered step time, never a rank's
    own clock or values. (tests/test_monitor_ddp.py runs the gather on 2 processes.)"""
    model = torch.nn.Linear(2, 1)
    clock = FakeClock()
    mon = Monitor(
        model, torch.optim.SGD(model.parameters(), lr=0.1), out=tmp_path, flush_clock=clock
    )
    mon.hw.world_size = 2
    mon._shared_step_time = 0.5  # as _finish sets it from hw.per_rank
    due = []
    for k in range(1, 6):
        clock.t += 3600.0  # a rank's own clock says each step took an hour: not consulted
        mon._records.append({"step": float(k), "train/loss": torch.tensor(math.nan)})
        due.append(mon._flush_due())
    assert due == [False, False, False, True, True]  # 4 records x 0.5 s reach 2 s
    mon.hw.world_size = 1
    mon._records = []
    mon.close()
