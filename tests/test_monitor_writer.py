"""The monitor's writer thread (trainlens.monitor.writer): what a flush hands over reaches
the file in order, ``close`` drains it, a failure of the writer is raised on the training
thread, a record with a NaN is on disk when its step returns, sinks that are not
thread-safe are written on the training thread, and a monitor never closed is drained at
exit. Content and order are asserted; waits are bounded, no timing threshold is."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from trainlens.monitor import Monitor  # noqa: E402
from trainlens.monitor.writer import WriteError, Writer  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


class SlowSink:
    """A thread-safe sink that takes ``seconds`` per write and keeps what it got."""

    thread_safe = True

    def __init__(self, seconds: float = 0.0, fail_on: set[int] | None = None) -> None:
        self.seconds = seconds
        self.fail_on = fail_on or set()
        self.rows: list[dict[str, Any]] = []
        self.writes = 0
        self.threads: set[str] = set()
        self.closed = False

    def write(self, rows: list[dict[str, Any]]) -> None:
        self.writes += 1
        self.threads.add(threading.current_thread().name)
        time.sleep(self.seconds)
        if self.writes in self.fail_on:
            raise OSError(28, "No space left on device")
        self.rows.extend(rows)

    def close(self) -> None:
        self.closed = True


def _lines(out: Path) -> list[dict[str, Any]]:
    path = out / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def _model() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    return model, torch.optim.SGD(model.parameters(), lr=0.01)


def _step(mon: Monitor, model: torch.nn.Module, opt: Any, nan: bool = False) -> None:
    loss = model(torch.ones(2, 4)).pow(2).mean()
    if nan:
        loss = loss * math.nan
    loss.backward()
    opt.step()
    opt.zero_grad()
    mon.step(loss=loss)


def test_close_drains_every_record_then_writes_the_end_last(tmp_path: Path) -> None:
    model, opt = _model()
    slow = SlowSink(seconds=0.05)
    mon = Monitor(model, opt, out=tmp_path, flush_every=3, flush_seconds=None)
    mon.add_sink(slow)
    for _ in range(10):
        _step(mon, model, opt)
    mon.close()  # 3 flushes handed over, 1 record still waiting, then the end
    lines = _lines(tmp_path)
    assert [r.get("step") for r in lines] == [*range(1, 11), 10]
    assert lines[-1]["event"] == "end" and lines[-1]["state"] == "finished"
    assert [r["step"] for r in slow.rows] == list(range(1, 11))
    assert slow.threads == {"trainlens-monitor-writer"} and slow.closed
    assert not mon._writer.active  # its thread joined


def test_a_record_with_a_nan_is_on_disk_when_its_step_returns(tmp_path: Path) -> None:
    """No drain before reading: the step itself waited for the writer (a slow sink after
    the JSONL one shows that it waited for every sink, not only the first)."""
    model, opt = _model()
    slow = SlowSink(seconds=0.2)
    mon = Monitor(model, opt, out=tmp_path, flush_every=1000, flush_seconds=3600.0)
    mon.add_sink(slow)
    for _ in range(4):
        _step(mon, model, opt)
    assert _lines(tmp_path) == [] and slow.rows == []  # nothing flushed yet
    _step(mon, model, opt, nan=True)
    lines = _lines(tmp_path)
    assert [r["step"] for r in lines] == [1, 2, 3, 4, 5]
    assert math.isnan(lines[-1]["train/loss"]) and math.isfinite(lines[-2]["train/loss"])
    assert [r["step"] for r in slow.rows] == [1, 2, 3, 4, 5]
    mon.close()


def test_a_failing_sink_is_raised_on_the_training_thread_and_writing_goes_on(
    tmp_path: Path,
) -> None:
    model, opt = _model()
    bad = SlowSink(fail_on={1})
    mon = Monitor(model, opt, out=tmp_path, flush_every=2, flush_seconds=None)
    mon.add_sink(bad)
    _step(mon, model, opt)
    _step(mon, model, opt)  # the first flush: the bad sink fails on the writer thread
    with pytest.raises(WriteError, match=r"metrics\.jsonl: OSError: .*No space left") as got:
        mon.drain()
    assert isinstance(got.value.__cause__, OSError)
    mon.drain()  # reported once
    for _ in range(3):
        _step(mon, model, opt)
    mon.close()
    # the JSONL sink (written before the bad one) lost nothing; the bad one lost its batch
    assert [r.get("step") for r in _lines(tmp_path)] == [1, 2, 3, 4, 5, 5]
    assert [r["step"] for r in bad.rows] == [3, 4, 5]


def test_a_failure_at_the_last_flush_is_raised_by_close_after_the_end_is_written(
    tmp_path: Path,
) -> None:
    model, opt = _model()
    bad = SlowSink(fail_on={1})
    mon = Monitor(model, opt, out=tmp_path, flush_every=100, flush_seconds=None)
    mon.add_sink(bad)
    for _ in range(3):
        _step(mon, model, opt)
    with pytest.raises(WriteError, match="No space left"):
        mon.close()
    lines = _lines(tmp_path)
    assert [r.get("step") for r in lines] == [1, 2, 3, 3] and lines[-1]["event"] == "end"
    assert bad.closed and not mon._hooks
    mon.close()  # a second call does nothing


def test_the_runs_own_exception_is_not_replaced_by_a_write_failure(tmp_path: Path) -> None:
    model, opt = _model()
    bad = SlowSink(fail_on={1})
    mon = Monitor(model, opt, out=tmp_path, flush_every=100, flush_seconds=None)
    mon.add_sink(bad)
    with pytest.raises(ValueError, match="the batch had no rows"), mon:
        _step(mon, model, opt)
        raise ValueError("the batch had no rows")
    end = _lines(tmp_path)[-1]
    assert (end["state"], end["error"]) == ("crashed", "ValueError")


def test_a_sink_that_is_not_thread_safe_is_written_on_the_training_thread(
    tmp_path: Path,
) -> None:
    model, opt = _model()
    plain = SlowSink()
    plain.thread_safe = False  # type: ignore[misc]
    mon = Monitor(model, opt, out=tmp_path, flush_every=2, flush_seconds=None)
    mon.add_sink(plain)
    for _ in range(5):
        _step(mon, model, opt)
    mon.close()
    assert [r["step"] for r in plain.rows] == [1, 2, 3, 4, 5]
    assert plain.threads == {threading.main_thread().name}


def test_a_full_queue_makes_the_training_thread_wait_for_room() -> None:
    """Bounded: with one batch being written and ``max_batches`` waiting, the next
    hand-over waits until the writer takes one."""
    gate = threading.Event()

    class Gated(SlowSink):
        def write(self, rows: list[dict[str, Any]]) -> None:
            gate.wait(30)
            super().write(rows)

    sink = Gated()
    writer = Writer([sink], lambda batch: [dict(r) for r in batch], "test", max_batches=2)
    for k in range(2):
        writer.put([{"step": k}], converted=True)
    third = threading.Thread(target=writer.put, args=([{"step": 2}],), kwargs={"converted": True})
    third.start()
    third.join(0.5)
    assert third.is_alive()  # no room: it waits (the first batch is held at the gate)
    gate.set()
    third.join(30)
    assert not third.is_alive()
    writer.close()
    assert [r["step"] for r in sink.rows] == [0, 1, 2]


def test_a_monitor_never_closed_still_writes_what_it_handed_over_at_exit(
    tmp_path: Path,
) -> None:
    code = (
        "import sys, torch\n"
        "from trainlens.monitor import Monitor\n"
        "model = torch.nn.Linear(4, 1)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.01)\n"
        "mon = Monitor(model, opt, out=sys.argv[1], flush_every=5, flush_seconds=None)\n"
        "class Slow:\n"
        "    thread_safe = True\n"
        "    def write(self, rows):\n"
        "        import time; time.sleep(0.2)\n"
        "    def close(self): pass\n"
        "mon.add_sink(Slow())\n"
        "for _ in range(12):\n"
        "    model(torch.ones(2, 4)).sum().backward(); opt.step(); opt.zero_grad()\n"
        "    mon.step(loss=1.0)\n"
    )
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True, cwd=ROOT)
    # two flushes handed over reach the file; the two records never flushed do not, and
    # there is no end record (the run was not closed)
    assert [r.get("step") for r in _lines(tmp_path)] == list(range(1, 11))


def test_a_tensor_of_several_values_is_refused_at_the_step(tmp_path: Path) -> None:
    model, opt = _model()
    mon = Monitor(model, opt, out=tmp_path)
    with pytest.raises(ValueError, match=r"'reward' must be a number or a one-element"):
        mon.step(loss=1.0, reward=torch.ones(3))
    mon.step(loss=1.0, reward=torch.ones(1))  # one element: its value
    mon.close()
