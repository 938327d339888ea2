"""Live: one alarm per incident. A watched NaN run pages once, at the incident's onset."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

import trainlens
from tests.conftest import fixture_path
from trainlens.cli import main
from trainlens.core.config import Config
from trainlens.core.findings import fail_rank
from trainlens.gate.rules import parse_rules
from trainlens.gate.runner import GateJob, gate_run
from trainlens.watch.incidents import IncidentTracker


def test_watching_the_nan_run_execs_once_with_the_onset(tmp_path: Path) -> None:
    out = tmp_path / "exec.txt"
    run = fixture_path("nan_divergence")
    cmd = f'echo "$TRAINLENS_INCIDENT $TRAINLENS_STEP $TRAINLENS_CODES" >> {out}'
    assert main(["watch", str(run), "--once", "--json", "--exec", cmd]) == 0
    # 21 NAN001 findings (it ran the command 21 times, each with the last step read)
    assert out.read_text().splitlines() == ["NAN001@450 450 NAN001"]


def _judged_prefixes(src: Path, tmp: Path, cuts: list[int]) -> list[list[str]]:
    """The run as a watch judges it while it is written: its first N lines, for each N."""
    lines = src.read_text().splitlines(keepends=True)
    dest = tmp / src.parent.name
    dest.mkdir()
    config = src.parent / "metrics.config.json"
    if config.is_file():
        shutil.copy(config, dest / config.name)
    cfg = Config()
    job = GateJob(cfg=cfg, rules=parse_rules(cfg), fail_rank=fail_rank("error"))
    tracker = IncidentTracker()
    told: list[list[str]] = []
    for n in cuts:
        (dest / "metrics.jsonl").write_text("".join(lines[:n]))
        [r] = trainlens.read(dest / "metrics.jsonl")
        report = gate_run(r, "run", job)
        changes = tracker.update(report.incidents, 0.0)
        told.append([f"{c.kind} {c.incident.id} {c.change or ''}".strip() for c in changes])
    return told


def test_a_growing_nan_run_opens_one_incident(tmp_path: Path) -> None:
    """Judged at 6 points as it is written: the NaN incident opens once when the NaN
    arrives and stays the one incident as it reaches the other 20 series."""
    src = fixture_path("nan_divergence")
    n = len(src.read_text().splitlines())
    told = _judged_prefixes(src, tmp_path, [300, 458, 462, 470, 480, n])
    flat = [t for step in told for t in step]
    assert flat.count("incident-opened NAN001@450") == 1, told
    assert not any(t.startswith("incident-closed NAN001") for t in flat), told
    assert not any("NAN001" in t for t in told[0])  # before the NaN: nothing about it


def test_an_lr_shock_keeps_its_id_when_a_worse_member_heads_it(tmp_path: Path) -> None:
    """While the shock is written: LR001 first (the LR at 400), then the GRAD001 it caused
    (an error, once the loss stayed up): one incident, announced once and then once more
    when its severity rose; never closed and reopened under another id."""
    src = fixture_path("lr_shock_diverge")
    told = _judged_prefixes(src, tmp_path, [405, 410, 420, 480, 700])
    flat = [t for step in told for t in step]
    opened = [t for t in flat if t.startswith("incident-opened")]
    assert len(opened) == 1, told
    first = opened[0].split()[1]
    assert not [t for t in flat if t.startswith("incident-closed")], told
    ups = [t for t in flat if t.startswith("incident-changed")]
    assert all(t == f"incident-changed {first} severity-up" for t in ups), told


@pytest.mark.parametrize("kind", ["finding-opened", "finding-changed", "finding-closed"])
def test_the_terminal_shows_incidents_not_their_findings(kind: str) -> None:
    from io import StringIO

    from trainlens.watch.events import WatchEvent
    from trainlens.watch.sinks.lines import LineSink

    out = StringIO()
    sink = LineSink(out)
    sink.emit(WatchEvent(kind, "r", "r.jsonl", 0.0, 5, "x"))
    sink.emit(WatchEvent("incident-opened", "r", "r.jsonl", 0.0, 5, "y", severity="error"))
    assert out.getvalue().splitlines() == ["[incident-opened] ERROR r @5: y"]


# ---- the hold, sparse metrics, the live view (issue 24, item 4) -----------------------------


def _replay(name: str, tmp: Path, cuts: list[int], hold: tuple[float, float]) -> Any:
    """Write fixture run ``name`` line by line and judge it through a LiveRun (the watch's
    own) at each cut (its first N lines; the last cut is the watch's final judging).
    Returns the LiveRun and its events; the clock is one second per judging."""
    from trainlens.readers import ReadOptions
    from trainlens.watch.follow import OffsetFollower
    from trainlens.watch.incidents import Hold
    from trainlens.watch.live import LiveRun

    src = fixture_path(name)
    lines = src.read_text().splitlines(keepends=True)
    dest = tmp / name
    dest.mkdir(parents=True)
    shutil.copy(src.parent / "metrics.config.json", dest / "metrics.config.json")
    path = dest / "metrics.jsonl"
    path.write_text("")
    cfg = Config()
    job = GateJob(cfg=cfg, rules=parse_rules(cfg), fail_rank=fail_rank("error"))
    live = LiveRun(
        OffsetFollower(path, "jsonl", ReadOptions()), job, incidents=IncidentTracker(Hold(*hold))
    )
    events = []
    done = 0
    for i, n in enumerate(cuts):
        with path.open("a") as fh:
            fh.write("".join(lines[done:n]))
        done = n
        chunk = live.follower.poll()
        if chunk is not None:
            live.add(chunk)
        t = 1000.0 + i
        events += live.judge(now=t, wall=t, force=True, final=n == cuts[-1])
    return live, events


def test_a_sparse_metric_is_not_ended_between_its_points(tmp_path: Path) -> None:
    """The per-parameter grad norms are logged every 10 steps: judged at step 460 (a
    logged point) and again at 467, their NaN findings still reach their metric's end."""
    _, events = _replay("nan_divergence", tmp_path, [440, 452, 460, 467, 478], (100, 120))
    changed = [e for e in events if e.kind == "finding-changed"]
    assert not [e for e in changed if e.change == "ended"], [
        (e.code, e.finding.metric if e.finding else None) for e in changed
    ]
    nan = [e for e in events if e.kind == "finding-opened" and e.code == "NAN001"]
    assert len(nan) == 21  # the judging did see the sparse series
    assert [(e.kind, e.code) for e in events if e.kind.startswith("incident")] == [
        ("incident-opened", "NAN001")  # an error: not held
    ]


def test_the_hold_keeps_a_flapping_throughput_warning_quiet(tmp_path: Path) -> None:
    """shock_then_slow judged every 10 lines through steps 400-450: without a hold the
    TPUT001 of step 370 opens and closes (analyze has no such finding); with the default
    hold it is never said, and the real drop at 800 opens once and stays open."""
    cuts = [305, *range(400, 460, 10), 840, 960, 1020]
    _, raw = _replay("shock_then_slow", tmp_path / "raw", cuts, (0, 0))
    said = [(e.kind, e.code) for e in raw if e.kind.startswith("incident")]
    assert said.count(("incident-opened", "TPUT001")) >= 2, said  # the flap, unheld

    live, held = _replay("shock_then_slow", tmp_path / "held", cuts, (100, 120))
    said = [(e.kind, e.code, e.step) for e in held if e.kind.startswith("incident")]
    assert [s[:2] for s in said] == [
        ("incident-opened", "GRAD001"),  # an error when first shown: at once
        ("incident-opened", "TPUT001"),  # the drop at 800, once
    ], said
    assert not [s for s in said if s[0] == "incident-closed"], said
    [inc] = [
        o for o in live.incidents.open.values() if o.last and o.last.incident.code == "TPUT001"
    ]
    assert inc.onset == 800


def test_a_held_incident_opens_at_the_last_judging(tmp_path: Path) -> None:
    """A warning first shown at the watch's last judging is not held back: the watch
    ends with what analyze says."""
    _, events = _replay("slow_loader", tmp_path, [320, 918], (100, 120))
    opened = {e.code for e in events if e.kind == "incident-opened"}
    assert "TPUT001" in opened or "DATA004" in opened, opened


def test_the_live_view_lists_each_runs_open_incidents(tmp_path: Path) -> None:
    from io import StringIO

    from rich.console import Console

    from trainlens.watch.loop import WatchState
    from trainlens.watch.sinks.view import LiveView, age_text

    live, _ = _replay("nan_divergence", tmp_path, [478], (100, 120))
    [oi] = live.incidents.open.values()
    import time

    oi.opened_at = time.time() - 185.4  # first shown 3 min 5 s ago
    view = LiveView(Console(file=StringIO()))
    try:
        view.update(WatchState(runs=[live]))
    finally:
        view.live.stop()
    console = Console(record=True, width=160, file=StringIO(), color_system=None)
    console.print(view.render())  # the snapshot: one frame, as rich draws it
    text = console.export_text()
    [line] = [s for s in text.splitlines() if "NAN001" in s]
    assert line.split()[:2] == ["ERROR", "NAN001"], line
    assert "train/loss became NaN at step 450 (+20 related findings)" in line
    assert line.rstrip().endswith("3m05s"), line
    assert text.index("trainlens watch") < text.index("NAN001")
    assert [age_text(s) for s in (0, 59, 61, 3600 + 120)] == ["0s", "59s", "1m01s", "1h02m"]


def test_prometheus_counts_incidents_from_zero(tmp_path: Path) -> None:
    from prometheus_client import generate_latest

    from trainlens.watch.events import WatchEvent
    from trainlens.watch.loop import WatchState
    from trainlens.watch.sinks.prometheus import PrometheusSink

    live, events = _replay("nan_divergence", tmp_path, [478], (100, 120))
    sink = PrometheusSink("127.0.0.1:0")
    try:
        sink.emit(WatchEvent("run-appeared", live.name, live.source, 0.0, None, ""))
        before = generate_latest(sink.registry).decode()
        for e in events:
            sink.emit(e)
        sink.update(WatchState(runs=[live]))
        after = generate_latest(sink.registry).decode()
    finally:
        sink.close()
    name = live.name
    assert f'trainlens_incidents_total{{code="NAN001",run="{name}"}} 0.0' in before
    assert f'trainlens_incidents_total{{code="NAN001",run="{name}"}} 1.0' in after
    assert f'trainlens_incidents_total{{code="TPUT001",run="{name}"}} 0.0' in after
    assert f'trainlens_incidents_open{{run="{name}",severity="error"}} 1.0' in after
    assert f'trainlens_incidents_open{{run="{name}",severity="warning"}} 0.0' in after


def test_the_watch_loop_execs_once_with_the_onset_while_the_nan_run_is_written(
    tmp_path: Path,
) -> None:
    """Through the watch loop itself, the file growing in four writes: --exec runs once,
    with the incident's onset, however many judgings saw the NaN spread."""
    import threading
    import time

    from trainlens.watch.loop import watch
    from trainlens.watch.settings import WatchSettings
    from trainlens.watch.sinks import Fanout
    from trainlens.watch.sinks.notify import ExecSink

    src = fixture_path("nan_divergence")
    lines = src.read_text().splitlines(keepends=True)
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(lines[:300]))
    out = tmp_path / "exec.txt"
    seen: list[Any] = []

    class Keep:
        def emit(self, e: Any) -> None:
            seen.append(e)

        def update(self, state: Any) -> None: ...

        def close(self) -> None: ...

    execs = ExecSink(f'echo "$TRAINLENS_EVENT $TRAINLENS_STEP $TRAINLENS_CODES" >> {out}')
    sink = Fanout([Keep(), execs])
    stop = threading.Event()
    settings = WatchSettings(poll=0.2)
    t = threading.Thread(
        target=watch,
        args=([path],),
        kwargs=dict(config=Config(), settings=settings, sink=sink, stop=stop),
    )
    t.start()
    try:
        for n in (455, 465, len(lines)):
            time.sleep(0.7)  # at least one tick (0.5 s) between writes
            with path.open("a") as fh:
                fh.write("".join(lines[len(path.read_text().splitlines()) : n]))
        time.sleep(0.7)
    finally:
        stop.set()
        t.join(timeout=60)
        sink.close()
    assert out.read_text().splitlines() == ["incident-opened 450 NAN001"]
    assert not [e for e in seen if e.kind == "finding-changed" and e.change == "ended"]
    kinds = [e.kind for e in seen]
    assert kinds[0] == "run-appeared" and kinds[-1] == "watch-ended"
