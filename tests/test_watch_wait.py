"""``trainlens watch`` started before its job: a path that does not exist yet is waited
for (said once on stderr) and followed when it appears, a file or a folder, with file
events or polling; Ctrl-C while waiting ends cleanly; options that read what is there
(``--once``) and a path with no folder to appear in are errors; ``--until-idle`` ends.

The run that appears is the fixture run nan_divergence (written by fixtures/make_runs.py
with trainlens.monitor), copied in after the watch began. Order and content are asserted,
not latency."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest


class Watch:
    """``trainlens watch --json ARGS`` in a subprocess; its events and stderr lines
    collected as they come."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "trainlens", "watch", "--json", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.events: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self._threads = [
            threading.Thread(target=self._read_events, daemon=True),
            threading.Thread(target=self._read_errors, daemon=True),
        ]
        for t in self._threads:
            t.start()

    def _read_events(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.strip():
                self.events.append(json.loads(line))

    def _read_errors(self) -> None:
        assert self.proc.stderr is not None
        self.errors.extend(self.proc.stderr)

    def wait_for(self, what: Any, seconds: float = 90) -> None:
        deadline = time.monotonic() + seconds
        while not what() and time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        code = self.proc.wait(timeout=60)
        for t in self._threads:
            t.join(timeout=30)
        return code


def _nan_loss(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        e
        for e in events
        if e["event"] == "finding-opened"
        and e["finding"]["code"] == "NAN001"
        and e["finding"]["metric"] == "train/loss"
    ]


@pytest.mark.parametrize(
    ("layout", "flags"),
    [("folder", []), ("file", []), ("folder", ["--poll", "0.2"])],
    ids=["folder-events", "file-events", "folder-polled"],
)
def test_a_path_that_appears_later_is_followed(
    fixture_runs: Path, tmp_path: Path, layout: str, flags: list[str]
) -> None:
    src = fixture_runs / "nan_divergence"
    runs = tmp_path / "runs"
    runs.mkdir()
    target = runs / "exp1" if layout == "folder" else runs / "exp1.jsonl"
    watch = Watch(str(target), *flags)
    watch.wait_for(lambda: any("waiting for" in line for line in watch.errors))
    assert watch.proc.poll() is None, "".join(watch.errors)
    assert not target.exists()
    if layout == "folder":
        target.mkdir()
        shutil.copy(src / "metrics.config.json", target)
        shutil.copy(src / "metrics.jsonl", target)
    else:
        shutil.copy(src / "metrics.jsonl", target)
    watch.wait_for(lambda: _nan_loss(watch.events))
    assert watch.stop() == 0, "".join(watch.errors)
    assert [line.strip() for line in watch.errors] == [f"waiting for {target} to appear"]
    kinds = [e["event"] for e in watch.events]
    assert kinds.count("run-appeared") == 1 and kinds[-1] == "watch-ended"
    [nan] = _nan_loss(watch.events)
    # the label: loss NaN from step 450 (fixtures/labels.json)
    assert nan["severity"] == "error" and nan["finding"]["step_start"] == 450
    assert kinds.index("run-appeared") < watch.events.index(nan)


def test_ctrl_c_while_waiting_ends_cleanly(tmp_path: Path) -> None:
    target = tmp_path / "later.jsonl"
    watch = Watch(str(target))
    watch.wait_for(lambda: watch.errors)
    assert watch.stop() == 0
    assert "Traceback" not in "".join(watch.errors)
    assert [e["event"] for e in watch.events] == ["watch-ended"]
    assert "0 runs watched" in watch.events[0]["message"]


def test_until_idle_does_not_wait_for_ever(tmp_path: Path) -> None:
    watch = Watch(str(tmp_path / "never"), "--until-idle", "0.5")
    assert watch.proc.wait(timeout=60) == 0
    assert watch.stop() == 0
    assert [e["event"] for e in watch.events] == ["watch-ended"]


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["{tmp}/later.jsonl", "--once"], "--once reads what is there"),
        (["{tmp}/no/such/run"], "nor is there a folder {tmp}/no to wait for it in"),
    ],
    ids=["once", "no-parent"],
)
def test_what_cannot_be_waited_for_is_a_usage_error(
    tmp_path: Path, args: list[str], said: str
) -> None:
    p = subprocess.run(
        [sys.executable, "-m", "trainlens", "watch", *(a.format(tmp=tmp_path) for a in args)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2, p.stderr
    assert said.format(tmp=tmp_path) in p.stderr and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1
