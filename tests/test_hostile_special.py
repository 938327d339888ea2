"""Special files and unbounded names (issue 23, item 6).

A FIFO named on the command line hung ``analyze`` and ``checkpoints`` for ever (opening a
FIFO for reading blocks until a writer comes), and gate and watch skipped one without a
word. Now anything that is no regular file or folder is refused in one sentence, and the
ones met inside folders are listed (gate) or noted once (watch). Each command runs in a
subprocess with a timeout, so a regression fails instead of hanging the suite.

A JSONL with 100k distinct metric names took over 400 s (a polars call per metric, in
the reader, the summary and the detectors); every such loop is now one pass over the
frame above :data:`~trainlens.core.frame.MANY_METRICS` metrics, and gives the same
numbers as the per-metric paths (compared here on the fixture runs).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FIXTURE_RUNS, REPO

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")

FIFO_SENTENCE = "is a FIFO, not a file or folder trainlens can read"
TIMEOUT = 60  # seconds: the old behaviour was for ever; a loaded 2-core CI takes ~3 s


def _cli(*args: str, timeout: float = TIMEOUT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trainlens", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,  # (TimeoutExpired fails the test: the command hung)
        env={**os.environ, "TRAINLENS_DEBUG": ""},
    )


def _jsonl_run(folder: Path, steps: int = 30) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "metrics.jsonl"
    with path.open("w") as fh:
        for i in range(steps):
            fh.write(json.dumps({"step": i, "loss": 2.0 / (i + 1), "lr": 1e-3}) + "\n")
    return path


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "metrics.jsonl"  # a run's name: only its kind tells it is no file
    os.mkfifo(path)
    return path


@pytest.mark.parametrize(
    "command",
    [
        ["analyze", "{p}"],
        ["analyze", "--json", "{p}"],
        ["checkpoints", "{p}"],
        ["report", "{p}", "-o", "{out}"],
        ["convert", "{p}", "-o", "{out}.jsonl"],
        ["watch", "--once", "{p}"],
        ["gate", "{p}", "--jobs", "1"],
    ],
    ids=lambda c: c[0] + ("-json" if "--json" in c else ""),
)
def test_a_fifo_on_the_command_line_is_refused_in_one_sentence(
    fifo: Path, tmp_path: Path, command: list[str]
) -> None:
    args = [a.format(p=fifo, out=tmp_path / "out") for a in command]
    proc = _cli(*args)
    assert proc.returncode == 2, proc.stderr
    assert f"{fifo} {FIFO_SENTENCE}" in proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr


def test_fifos_given_as_options_are_refused(fifo: Path, tmp_path: Path) -> None:
    run = _jsonl_run(tmp_path / "run")
    for args in (
        ["analyze", str(run), "--config", str(fifo)],
        ["analyze", str(run), "--checkpoints", str(fifo)],
        ["checkpoints", str(run.parent), "--run", str(fifo)],
    ):
        proc = _cli(*args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert f"{fifo} is a FIFO, not a" in proc.stderr, (args, proc.stderr)


@pytest.mark.parametrize("device", ["/dev/null", "/dev/zero"])
def test_a_character_device_is_refused(device: str) -> None:
    if not os.path.exists(device):
        pytest.skip(f"no {device}")
    proc = _cli("analyze", device)
    assert proc.returncode == 2
    assert f"{device} is a character device, not a file or folder" in proc.stderr


def test_a_unix_socket_is_refused(tmp_path: Path) -> None:
    import socket

    path = tmp_path / "s.jsonl"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))
        proc = _cli("analyze", str(path))
    assert proc.returncode == 2
    assert f"{path} is a socket, not a file or folder" in proc.stderr


def test_the_gate_lists_the_fifos_it_skipped_in_every_output(tmp_path: Path) -> None:
    from trainlens.formatters.gate import render
    from trainlens.gate import gate

    root = tmp_path / "runs"
    _jsonl_run(root / "a")
    os.mkfifo(root / "b.jsonl")  # a metrics suffix: once taken (and opened) as a run
    os.mkfifo(root / "a" / "pipe")
    for spec in ([str(root)], [f"{root}/*"]):
        result = gate(spec, jobs=1)
        assert [r.name for r in result.reports] == ["a"]
        assert result.exit_code() == 0  # skipped, not unreadable: the runs there still pass
        paths = [s["path"] for s in result.skipped]
        assert paths == [str(root / "a" / "pipe"), str(root / "b.jsonl")], spec
        assert all(s["kind"] == "a FIFO" for s in result.skipped)
        text = render(result, "text")
        assert f"skipped: {root / 'b.jsonl'} {FIFO_SENTENCE}" in text
        from trainlens.core.sanitize import markdown

        # a path in <code>, escaped as every input string in Markdown (no backtick span)
        expected = f"<code>{markdown(str(root / 'b.jsonl'))}</code>: a FIFO"
        assert expected in render(result, "markdown")
        doc = json.loads(render(result, "json"))
        assert [s["path"] for s in doc["skipped"]] == paths


def test_a_folder_holding_only_a_fifo_says_so(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "metrics.jsonl")
    proc = _cli("gate", str(tmp_path), "--jobs", "1")
    assert proc.returncode == 2
    assert "no runs found in this directory" in proc.stderr
    assert FIFO_SENTENCE in proc.stderr


def test_watch_notes_a_fifo_in_its_folder_once(tmp_path: Path) -> None:
    from trainlens.readers import ReadOptions
    from trainlens.watch.discovery import Discovery

    root = tmp_path / "runs"
    _jsonl_run(root / "a")
    os.mkfifo(root / "live.jsonl")
    disc = Discovery([root], format=None, options=ReadOptions())
    assert [f.name for f in disc.poll()] == ["a"]
    assert [s.path for s in disc.new_skipped()] == [str(root / "live.jsonl")]
    disc.poll()
    assert disc.new_skipped() == []  # said once for the whole watch, not every poll

    proc = _cli("watch", "--once", "--json", str(root))
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    notes = [e for e in events if FIFO_SENTENCE in e["message"]]
    assert len(notes) == 1 and notes[0]["event"] == "read-issue"
    assert notes[0]["source"] == str(root / "live.jsonl")
    assert any(e["event"] == "run-appeared" and e["run"] == "a" for e in events)


def test_a_fifo_among_tensorboard_event_files_is_not_opened(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from torch.utils.tensorboard import SummaryWriter

    logdir = tmp_path / "tb"
    with SummaryWriter(str(logdir)) as w:
        for i in range(20):
            w.add_scalar("loss", 1.0 / (i + 1), i)
    os.mkfifo(logdir / "events.out.tfevents.0.host.1.0")
    proc = _cli("analyze", "--json", str(logdir))
    assert proc.returncode == 0, proc.stderr
    run = json.loads(proc.stdout)["runs"][0]
    assert run["summary"]["metrics"]["train/loss"]["values"] == 20


# ---- many metrics ---------------------------------------------------------------------------


def _many_names(path: Path, names: int, steps: int = 3) -> Path:
    rng = random.Random(0)
    with path.open("w") as fh:
        for s in range(steps):
            row: dict[str, float] = {"step": s}
            row.update({f"m/{i:06d}": round(rng.random(), 6) for i in range(names)})
            fh.write(json.dumps(row) + "\n")
    return path


def test_a_jsonl_with_many_metric_names_is_analyzed_whole(tmp_path: Path) -> None:
    # 20k names (the grouped paths start at MANY_METRICS = 512): every name read, every
    # value kept. How the cost grows with the names (linear: 100k names in ~7 s of CPU,
    # over 400 s before) is measured in bench/many_names.py, not asserted here.
    path = _many_names(tmp_path / "wide.jsonl", 20_000)
    from trainlens.api import analyze

    (a,) = analyze([path])
    assert a.findings == []
    assert a.run.frame.height == 20_000 * 3
    assert len(a.run.metrics) == 20_000


def _json_of(path: Path) -> str:
    from trainlens.api import analyze
    from trainlens.formatters.json import render

    return render(analyze([path]))


@pytest.mark.parametrize("run", ["nan_divergence", "crash_resume", "slow_loader", "overfit"])
def test_the_grouped_paths_give_what_the_per_metric_paths_give(
    run: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = FIXTURE_RUNS / run
    if not path.is_dir():
        pytest.skip(f"fixture {run} not generated")
    per_metric = _json_of(path)
    import trainlens.core.frame
    import trainlens.detectors.nonfinite
    import trainlens.detectors.stalls
    import trainlens.summary

    for module in (trainlens.core.frame, trainlens.detectors.nonfinite, trainlens.detectors.stalls):
        monkeypatch.setattr(module, "MANY_METRICS", 0)
    monkeypatch.setattr(trainlens.summary, "MANY_METRICS", 0)
    assert _json_of(path) == per_metric
