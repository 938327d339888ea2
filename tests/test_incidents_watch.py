"""Live: one alarm per incident. A watched NaN run pages once, at the incident's onset."""

from __future__ import annotations

import shutil
from pathlib import Path

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
