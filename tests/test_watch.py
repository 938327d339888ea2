"""trainlens watch: the loop, the judging lifecycle, early warnings, exit codes.

Live tests run a real writer (a JSONL training loop) in a subprocess while ``trainlens
watch --json`` runs in another, and read the events it printed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

from trainlens.api import analyze
from trainlens.core.config import Config
from trainlens.core.errors import ConfigError
from trainlens.core.findings import Finding, Severity
from trainlens.readers import ReadOptions
from trainlens.watch.early import EarlyWarnings
from trainlens.watch.follow import OffsetFollower
from trainlens.watch.live import LiveRun, Tracked, _change
from trainlens.watch.settings import WatchSettings

WRITER = textwrap.dedent(
    """
    import json, math, random, sys, time
    path, steps, rate, fault = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
    random.seed(0)
    with open(path, "a") as fh:
        for s in range(steps):
            loss = 3.0 * math.exp(-s / 300) + 1.5 + random.gauss(0, 0.02)
            g = 1.0 + random.gauss(0, 0.05)
            if s >= fault:
                loss = g = float("nan")
            fh.write(json.dumps({"step": s, "loss": loss, "grad_norm": g, "lr": 1e-3}) + "\\n")
            fh.flush()
            if s == fault:
                print(f"FAULT {time.time()}", flush=True)
            time.sleep(1 / rate)
    print(f"DONE {time.time()}", flush=True)
    """
)


def _watch(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "trainlens", "watch", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _events(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _finding_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["event"] == "finding-opened"]


# ---- a finished file: the same findings as analyze ---------------------------------------


@pytest.mark.parametrize("name", ["lr_shock_diverge", "nan_divergence", "healthy_cosine"])
def test_once_on_a_finished_run_gives_analyzes_findings(
    fixture_runs: Path, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from trainlens.cli import main

    path = fixture_runs / name
    assert main(["watch", str(path), "--once", "--json"]) == 0
    events = _events(capsys.readouterr().out)
    got = sorted(
        (e["finding"]["code"], e["finding"]["step_start"], e["finding"]["message"])
        for e in _finding_events(events)
    )
    want = sorted((f.code, f.step_start, f.message) for f in analyze(path)[0].findings)
    assert got == want
    assert events[0]["event"] == "run-appeared" and events[-1]["event"] == "watch-ended"


# ---- live: a writer in a subprocess ------------------------------------------------------


@pytest.mark.slow
def test_nan_is_announced_while_the_run_is_written(tmp_path: Path) -> None:
    run = tmp_path / "run.jsonl"
    run.touch()
    watcher = _watch(str(run), "--json", "--until-idle", "2")
    time.sleep(1.0)
    writer = subprocess.run(
        [sys.executable, "-c", WRITER, str(run), "600", "100", "400"],
        capture_output=True,
        text=True,
        check=True,
    )
    out, err = watcher.communicate(timeout=60)
    assert watcher.returncode == 0, err
    marks = dict(line.split() for line in writer.stdout.splitlines())
    fault, done = float(marks["FAULT"]), float(marks["DONE"])
    nan = [e for e in _finding_events(_events(out)) if e["finding"]["code"] == "NAN001"]
    assert nan, out
    first = nan[0]
    assert first["finding"]["step_start"] == 400
    # announced after the fault was written and before the writer was done (2 s later)
    assert fault <= first["time"] < done, (fault, first["time"], done)
    assert first["time"] - fault < 2.0


def test_exit_on_error_ends_the_watch_with_1(tmp_path: Path) -> None:
    run = tmp_path / "run.jsonl"
    run.touch()
    watcher = _watch(str(run), "--json", "--exit-on", "error")
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(run), "3000", "200", "300"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        out, _ = watcher.communicate(timeout=60)
    finally:
        writer.kill()
        writer.wait()
    assert watcher.returncode == 1
    events = _events(out)
    assert any(e["finding"] and e["finding"]["code"] == "NAN001" for e in events)
    assert "exit-on" in events[-1]["message"]


def test_ctrl_c_ends_cleanly_with_0(tmp_path: Path) -> None:
    run = tmp_path / "run.jsonl"
    run.write_text('{"step": 0, "loss": 2.0}\n')
    watcher = _watch(str(run), "--json")
    assert watcher.stdout is not None
    first = json.loads(watcher.stdout.readline())  # the watch is running
    assert first["event"] == "run-appeared"
    time.sleep(0.5)
    watcher.send_signal(signal.SIGINT)
    out, err = watcher.communicate(timeout=30)
    assert watcher.returncode == 0, err
    assert "Traceback" not in err
    assert _events(out)[-1]["event"] == "watch-ended"


# ---- followers ---------------------------------------------------------------------------


def test_a_partial_last_line_waits_for_its_newline(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    path.write_text('{"step": 0, "loss": 2.0}\n{"step": 1, "lo')
    f = OffsetFollower(path, "jsonl", ReadOptions())
    first = f.poll()
    assert first is not None and first.frame["step"].to_list() == [0]
    assert not first.issues  # not reported as corrupt: its writer is still at it
    assert f.poll() is None
    with path.open("a") as fh:
        fh.write('ss": 1.9}\n')
    second = f.poll()
    assert second is not None and second.frame["value"].to_list() == [1.9]


def test_a_replaced_file_is_followed_from_its_start(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    path.write_text("".join(f'{{"step": {s}, "loss": {3 - s / 10}}}\n' for s in range(10)))
    f = OffsetFollower(path, "jsonl", ReadOptions())
    assert f.poll() is not None
    new = tmp_path / "new.jsonl"
    new.write_text('{"step": 5, "loss": 2.2}\n')
    os.replace(new, path)  # a resumed job wrote a new file
    chunk = f.poll()
    assert chunk is not None and chunk.replaced
    assert chunk.frame["step"].to_list() == [5]


def test_chunks_add_up_to_the_finished_file(tmp_path: Path) -> None:
    """Following a file as it is written gives, chunk by chunk, the rows trainlens.read
    gives for the finished file (a restart at step 200 -> 0 included)."""
    from trainlens.api import read
    from trainlens.core.run import mark_restarts

    path = tmp_path / "run.jsonl"
    path.touch()
    f = OffsetFollower(path, "jsonl", ReadOptions())
    frames = []
    rng = np.random.default_rng(0)
    for s in range(300):
        with path.open("a") as fh:
            fh.write(json.dumps({"step": s % 200, "loss": float(rng.normal(2, 0.1))}) + "\n")
        if s % 7 == 0 and (chunk := f.poll()) is not None:
            frames.append(chunk.frame)
    if (chunk := f.poll()) is not None:
        frames.append(chunk.frame)
    got = pl.concat(
        [c.drop("superseded").with_columns(pl.col("metric").cast(pl.String)) for c in frames]
    )
    got, _ = mark_restarts(got, source=str(path))
    want = read(path)[0].frame
    key = ["step", "value", "superseded"]
    assert got.select(key).sort(key).equals(want.select(key).sort(key))
    assert want["superseded"].sum() == 200  # the restart at step 0 supersedes 0..199


def test_judging_reads_the_source_not_a_copy_kept_in_memory(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    path.write_text("".join(f'{{"step": {s}, "loss": 2.0}}\n' for s in range(50)))
    live = LiveRun(OffsetFollower(path, "jsonl", ReadOptions()), _job())
    chunk = live.follower.poll()
    assert chunk is not None
    live.add(chunk)
    assert not [v for v in vars(live).values() if isinstance(v, pl.DataFrame)]
    assert live.run().frame.height == 50


# ---- the lifecycle of a finding ----------------------------------------------------------


def _finding(
    code: str = "LOSS001", sev: str = "warning", start: int = 10, end: int = 20
) -> Finding:
    return Finding(code, "x", Severity.parse(sev), "train/loss", start, end, f"{code} at {start}")


def _job() -> Any:
    from trainlens.gate.rules import parse_rules
    from trainlens.gate.runner import GateJob

    cfg = Config()
    return GateJob(cfg=cfg, rules=parse_rules(cfg), fail_rank=3)


def test_lifecycle_opens_once_changes_and_closes(tmp_path: Path) -> None:
    live = LiveRun(OffsetFollower(tmp_path / "x.jsonl", "jsonl", ReadOptions()), _job())
    live.last_step = 20
    opened = live._lifecycle([_finding()])
    assert [e.kind for e in opened] == ["finding-opened"]
    assert live._lifecycle([_finding(end=25)]) == []  # the same finding, grown: silent
    live.last_step = 40
    up = live._lifecycle([_finding(sev="error", end=40)])
    assert [(e.kind, e.change) for e in up] == [("finding-changed", "severity-up")]
    ended = live._lifecycle([_finding(sev="error", end=30)])  # stops before the data does
    assert [(e.kind, e.change) for e in ended] == [("finding-changed", "ended")]
    closed = live._lifecycle([])
    assert [e.kind for e in closed] == ["finding-closed"]
    assert live._lifecycle([]) == []


def test_change_is_none_when_nothing_that_matters_moved() -> None:
    a = Tracked(_finding(), ongoing=False)
    assert _change(a, Tracked(_finding(end=21), ongoing=False)) is None


# ---- early warnings ----------------------------------------------------------------------


def _frame(metric: str, steps: np.ndarray, values: np.ndarray) -> pl.DataFrame:
    return pl.DataFrame(
        {"step": steps, "metric": [metric] * len(steps), "value": values.astype(float)}
    )


def _noise(n: int, level: float, seed: int = 0) -> np.ndarray:
    return level * (1 + 0.05 * np.random.default_rng(seed).standard_normal(n))


def test_a_grad_spike_before_the_loss_answers_is_an_early_warning() -> None:
    ew = EarlyWarnings()
    steps = np.arange(300)
    assert (
        ew.feed(
            pl.concat(
                [
                    _frame("grad_norm", steps, _noise(300, 1.0)),
                    _frame("train/loss", steps, _noise(300, 2.0, 1)),
                ]
            )
        )
        == []
    )
    spike = ew.feed(_frame("grad_norm", np.array([300]), np.array([40.0])))
    assert len(spike) == 1 and spike[0].spike.step == 300 and spike[0].earlier == 0
    # the excursion goes on: no second warning until the grad norm came back
    assert ew.feed(_frame("grad_norm", np.array([301, 302]), np.array([50.0, 45.0]))) == []
    # the loss answered: that spike counts as followed for the next one's record
    ew.feed(_frame("train/loss", np.array([301]), np.array([9.0])))
    ew.feed(_frame("grad_norm", np.arange(303, 400), _noise(97, 1.0, 2)))
    again = ew.feed(_frame("grad_norm", np.array([400]), np.array([40.0])))
    assert len(again) == 1 and (again[0].earlier, again[0].followed) == (1, 1)


def test_no_early_warning_when_the_loss_already_answered_in_the_same_rows() -> None:
    ew = EarlyWarnings()
    steps = np.arange(300)
    ew.feed(
        pl.concat(
            [
                _frame("grad_norm", steps, _noise(300, 1.0)),
                _frame("train/loss", steps, _noise(300, 2.0, 1)),
            ]
        )
    )
    both = pl.concat(
        [
            _frame("grad_norm", np.array([300]), np.array([40.0])),
            _frame("train/loss", np.array([301]), np.array([9.0])),
        ]
    )
    assert ew.feed(both) == []  # GRAD001 says it, with the lag


def test_a_smooth_series_wiggle_is_no_spike() -> None:
    """1.3x a very smooth median is a huge z, but not grad_ratio (3x) over it."""
    ew = EarlyWarnings()
    ew.feed(_frame("grad_norm", np.arange(300), np.full(300, 1.0) + 1e-6 * np.arange(300)))
    assert ew.feed(_frame("grad_norm", np.array([300]), np.array([1.3]))) == []


# ---- settings ----------------------------------------------------------------------------


def test_watch_settings_are_validated() -> None:
    s = WatchSettings.from_table({"poll": 2, "exit_on": "Error", "notify": "json://h/p"})
    assert (s.poll, s.exit_on, s.notify) == (2.0, "error", ["json://h/p"])
    with pytest.raises(ConfigError, match=r"unknown key 'pol'.*poll"):
        WatchSettings.from_table({"pol": 1})
    with pytest.raises(ConfigError, match="exit_on"):
        WatchSettings.from_table({"exit_on": "fatal"})
    with pytest.raises(ConfigError, match="HOST:PORT"):
        WatchSettings.from_table({"prometheus": "localhost:notaport"})
    flags = s.with_flags(notify=["json://other/p"], poll=None)
    assert flags.notify == ["json://h/p", "json://other/p"] and flags.poll == 2.0


def test_a_bad_flag_is_a_usage_error_not_a_traceback(tmp_path: Path) -> None:
    run = tmp_path / "run.jsonl"
    run.write_text('{"step": 0, "loss": 2.0}\n')
    p = subprocess.run(
        [sys.executable, "-m", "trainlens", "watch", str(run), "--exit-on", "fatal"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (
        p.returncode == 2 and "--exit-on must be one of" in p.stderr and "Traceback" not in p.stderr
    )
    # a missing path is waited for, except where it cannot appear (tests/test_watch_wait.py)
    p = subprocess.run(
        [sys.executable, "-m", "trainlens", "watch", str(tmp_path / "no" / "nope.jsonl")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2 and "no such file" in p.stderr


def test_import_trainlens_imports_no_watch_dependency() -> None:
    code = (
        "import sys, trainlens, trainlens.cli; "
        "bad = [m for m in ('watchfiles', 'rich', 'apprise', 'prometheus_client') "
        "if m in sys.modules]; print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_docs_list_every_watch_key_and_event() -> None:
    from trainlens.watch.events import KINDS
    from trainlens.watch.settings import WATCH_KEYS

    text = (Path(__file__).resolve().parents[1] / "docs" / "watch.md").read_text()
    missing = [k for k in WATCH_KEYS if f"\n{k} = " not in text]
    assert not missing, f"docs/watch.md's config example lacks {missing}"
    assert not [k for k in KINDS if f"`{k}`" not in text]


def test_an_unreadable_source_is_told_once_not_a_crash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from trainlens.cli import main

    run = tmp_path / "run.jsonl"
    run.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 12\n")
    assert main(["watch", str(run), "--once", "--json", "--format", "jsonl"]) == 0
    events = _events(capsys.readouterr().out)
    issues = [e for e in events if e["event"] == "read-issue"]
    assert len(issues) == 1 and "LFS" in issues[0]["message"]
    assert not _finding_events(events)


REPLAY = textwrap.dedent(
    """
    import os, sys, time
    src, dst, rate = sys.argv[1], sys.argv[2], float(sys.argv[3])
    holds = {int(step): flag for step, flag in (a.split("=", 1) for a in sys.argv[4:])}
    with open(src) as fh:
        lines = fh.readlines()
    with open(dst, "a") as out:
        for line in lines:
            out.write(line)
            out.flush()
            head = line.split(",", 1)[0]
            step = int(head.split(":", 1)[1]) if head.startswith('{"step":') else -1
            flag = holds.pop(step, None)
            # a slow step, as a large model's: the trainer writes nothing more until the
            # watch has said what it saw (60 s at most), so the test does not race the clock
            deadline = time.time() + 60
            while flag is not None and not os.path.exists(flag) and time.time() < deadline:
                time.sleep(0.05)
            time.sleep(1 / rate)
    print(f"DONE {time.time()}", flush=True)
    """
)


def _follow(watcher: subprocess.Popen[str], seen: list[dict[str, Any]], flags: dict) -> None:
    """Collect the watch's JSON events as they come; touch a flag file when the event the
    replay waits for has been told (``flags``: (event, code) -> path)."""
    assert watcher.stdout is not None
    for line in watcher.stdout:
        if not line.strip():
            continue
        event = json.loads(line)
        seen.append(event)
        code = (event.get("finding") or {}).get("code") or event["details"].get("code")
        for (kind, want), flag in flags.items():
            if event["event"] == kind and want in (None, code):
                Path(flag).touch()


def test_an_lr_shock_is_told_while_the_run_is_written(fixture_runs: Path, tmp_path: Path) -> None:
    """The fixture run with an LR shock at step 400, replayed line by line as its trainer
    wrote it (with its config beside it): the grad-norm spike at 400 is an early warning
    before the loss at 401 exists, and the LR finding and GRAD001 are told before the run
    ends. Order and content, not latency: the replay holds after step 400 until the early
    warning is told and after step 440 until GRAD001 is (bench/watch.py measures how soon)."""
    import threading

    src = fixture_runs / "lr_shock_diverge"
    run = tmp_path / "lr_shock_diverge"
    run.mkdir()
    (run / "metrics.config.json").write_text((src / "metrics.config.json").read_text())
    (run / "metrics.jsonl").write_text("")
    watcher = _watch(str(run / "metrics.jsonl"), "--json", "--until-idle", "3")
    early_flag, grad_flag = tmp_path / "early.told", tmp_path / "grad.told"
    events: list[dict[str, Any]] = []
    flags = {("early-warning", None): early_flag, ("finding-opened", "GRAD001"): grad_flag}
    follower = threading.Thread(target=_follow, args=(watcher, events, flags), daemon=True)
    follower.start()
    replay = subprocess.run(
        [
            sys.executable,
            "-c",
            REPLAY,
            str(src / "metrics.jsonl"),
            str(run / "metrics.jsonl"),
            "150",
            f"400={early_flag}",
            f"440={grad_flag}",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    watcher.wait(timeout=120)
    follower.join(timeout=30)
    assert watcher.returncode == 0, watcher.stderr.read() if watcher.stderr else ""
    assert replay.stdout.startswith("DONE")
    last_step = json.loads((src / "metrics.jsonl").read_text().splitlines()[-1])["step"]
    opened = {e["finding"]["code"]: e for e in _finding_events(events)}
    assert {"LR001", "GRAD001"} <= set(opened), sorted(opened)
    assert opened["LR001"]["finding"]["step_start"] == 400
    early = [e for e in events if e["event"] == "early-warning"]
    # told while the run was at step 400: before the loss at 401 was written
    assert early and early[0]["details"]["lead_step"] == 400 and early[0]["step"] == 400
    assert events.index(early[0]) < events.index(opened["GRAD001"])
    # told while the run was being written, not after its last step
    assert opened["LR001"]["step"] < last_step and opened["GRAD001"]["step"] <= 440 < last_step


@pytest.mark.slow
def test_a_monitored_training_job_is_watched_from_its_folder(tmp_path: Path) -> None:
    """The real thing: `trainlens watch runs/` started before the job, then a small GPT
    trained on the CPU with trainlens.monitor (examples/tiny_gpt.py) into runs/nan, a NaN
    injected at step 250: the run is found when it appears, and the NaN loss is an error
    finding at step 250 told before the job has finished."""
    import signal
    import threading

    pytest.importorskip("torch")
    runs = tmp_path / "runs"
    runs.mkdir()
    # no idle limit: an idle watch ended before a job slowed by load had imported torch
    # (15 s at a load of 8); the test stops the watch itself once the job has ended and
    # the NaN has been told (or 60 s after, and then fails on what it did not see)
    watcher = _watch(str(runs), "--json")
    told = tmp_path / "nan.told"
    events: list[dict[str, Any]] = []
    follower = threading.Thread(
        target=_follow, args=(watcher, events, {("finding-opened", "NAN001"): told}), daemon=True
    )
    follower.start()
    example = Path(__file__).resolve().parents[1] / "examples" / "tiny_gpt.py"
    job = subprocess.run(
        [
            sys.executable,
            str(example),
            "--out",
            str(runs / "nan"),
            "--steps",
            "700",
            "--inject",
            "nan@250",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    deadline = time.time() + 60
    while not told.exists() and time.time() < deadline:
        time.sleep(0.1)
    watcher.send_signal(signal.SIGINT)
    watcher.wait(timeout=60)
    follower.join(timeout=30)
    assert watcher.returncode == 0, watcher.stderr.read() if watcher.stderr else ""
    assert [e["run"] for e in events if e["event"] == "run-appeared"] == ["nan"], job.stdout
    nan = [
        e
        for e in _finding_events(events)
        if e["finding"]["code"] == "NAN001" and e["finding"]["metric"] == "train/loss"
    ]
    assert nan and nan[0]["severity"] == "error" and nan[0]["finding"]["step_start"] == 250
    # order and content; how soon it is told is measured in bench/watch.py (a wall-clock
    # assertion here failed under load by about a second)
    appeared = next(i for i, e in enumerate(events) if e["event"] == "run-appeared")
    assert appeared < events.index(nan[0])
