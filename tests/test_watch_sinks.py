"""trainlens watch's outputs: notifications (apprise to a local HTTP server), --exec,
Prometheus (scraped and parsed with prometheus_client's parser), the shipped alert rules
and Grafana dashboard."""

from __future__ import annotations

import http.server
import json
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import WebhookRecorder
from trainlens.cli import main
from trainlens.core.findings import Finding, Severity
from trainlens.watch.events import WatchEvent
from trainlens.watch.settings import WatchSettings
from trainlens.watch.sinks import Fanout, build_sink
from trainlens.watch.sinks.lines import LineSink
from trainlens.watch.sinks.notify import ExecSink, NotifySink, redacted

DOCS = Path(__file__).resolve().parents[1] / "docs"


@pytest.fixture
def hook() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A webhook receiver on 127.0.0.1: (its apprise URL, the bodies it received)."""
    received: list[dict[str, Any]] = []
    handler = type("Hook", (WebhookRecorder,), {"received": received})
    server = http.server.HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"json://127.0.0.1:{server.server_port}/hook", received
    finally:
        server.shutdown()
        server.server_close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _event(code: str = "NAN001", sev: str = "error", run: str = "r") -> WatchEvent:
    """An incident opening (what pages), its onset 5, read up to step 9."""
    f = Finding(code, "non-finite", Severity.parse(sev), "train/loss", 5, 9, f"{code} at 5")
    details = {"code": code, "incident": {"id": f"{code}@5", "onset": 5}, "codes": [code]}
    return WatchEvent(
        "incident-opened", run, "r.jsonl", time.time(), 9, f.message, f, sev, details=details
    )


def test_a_finding_is_one_message_and_the_overflow_one_digest(
    hook: tuple[str, list[dict[str, Any]]],
) -> None:
    url, received = hook
    sink = NotifySink([url], rate_limit=3600)
    sink.emit(_event("NAN001"))
    sink.emit(_event("GRAD001", "warning"))
    sink.emit(_event("LOSS001", "info"))  # under the notify level: not sent
    sink.emit(_event("LR001", "warning"))
    sink.close()
    assert len(received) == 2, received
    first, digest = received
    assert "NAN001" in first["title"] and first["message"].startswith("NAN001 at 5")
    assert first["type"] == "failure"  # apprise's name for an error
    assert "2 alerts" in digest["title"]
    assert "GRAD001" in digest["message"] and "LR001" in digest["message"]
    assert "LOSS001" not in digest["message"]
    assert sink.drain_failures() == []


def test_a_failing_notifier_is_reported_and_the_watch_goes_on() -> None:
    port = _free_port()  # nothing listens there
    out = StringIO()
    fan = Fanout([LineSink(out), NotifySink([f"json://127.0.0.1:{port}/x"], rate_limit=0)])
    fan.emit(_event())
    fan.close()
    text = out.getvalue()
    assert "[notify-failed]" in text and "json://127.0.0.1/…" in text
    assert "[incident-opened]" in text


def test_watch_once_notifies_the_nan_run(
    fixture_runs: Path, hook: tuple[str, list[dict[str, Any]]], capsys: pytest.CaptureFixture[str]
) -> None:
    url, received = hook
    code = main(
        ["watch", str(fixture_runs / "nan_divergence"), "--once", "--json", "--notify", url]
    )
    assert code == 0
    capsys.readouterr()
    from trainlens.api import analyze

    [a] = analyze(fixture_runs / "nan_divergence")
    alerts = [f for f in a.findings if f.severity.rank >= Severity.WARNING.rank]
    assert len(alerts) > 2 and len(a.incidents) == 1
    # one NaN reaching 21 series is one incident: one message (it was 1 + a digest of 20)
    assert len(received) == 1
    assert "NAN001" in received[0]["title"]


def test_notify_rejects_an_unknown_scheme() -> None:
    from trainlens.core.errors import UsageError

    with pytest.raises(UsageError, match="not a URL apprise knows"):
        NotifySink(["nosuchscheme://x"], rate_limit=1)


def test_redacted_keeps_tokens_out() -> None:
    assert redacted("slack://T000/B000/XXXXSECRET") == "slack://t000/…"
    assert "SECRET" not in redacted("json://host/path?token=SECRET")


def test_exec_runs_the_command_with_the_finding_in_its_environment(tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    sink = ExecSink(f'echo "$TRAINLENS_CODE $TRAINLENS_SEVERITY $TRAINLENS_STEP" >> {out}')
    sink.emit(_event("NAN001", "error"))
    sink.emit(_event("LOSS001", "info"))  # under the level
    sink.close()
    assert out.read_text().split("\n")[0] == "NAN001 error 5"  # the incident's onset
    failing = ExecSink("exit 3")
    failing.emit(_event())
    failing.close()
    assert failing.drain_failures() == ["--exec for NAN001 in r exited with 3"]


# ---- Prometheus ---------------------------------------------------------------------------


def _scrape(port: int) -> dict[str, list[Any]]:
    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


@pytest.mark.slow
def test_prometheus_serves_what_the_watch_sees(tmp_path: Path) -> None:
    run = tmp_path / "run.jsonl"
    run.write_text('{"step": -1, "loss": 2.0, "grad_norm": 1.0}\n')
    port = _free_port()
    watcher = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "trainlens",
            "watch",
            str(run),
            "--json",
            "--prometheus",
            f"127.0.0.1:{port}",
            "--until-idle",
            "4",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert watcher.stdout is not None
    assert json.loads(watcher.stdout.readline())["event"] == "run-appeared"
    with run.open("a") as fh:
        for s in range(200):
            loss = float("nan") if s >= 150 else 2.0 - s / 1000
            fh.write(json.dumps({"step": s, "loss": loss, "grad_norm": 1.0}) + "\n")
    deadline = time.time() + 30
    families: dict[str, list[Any]] = {}
    while time.time() < deadline:
        families = _scrape(port)
        found = families.get("trainlens_findings", [])
        last = families.get("trainlens_last_step", [])
        # judging reads the file as it is; the last values follow at the next poll
        if any(s.labels.get("code") == "NAN001" for s in found) and last[0].value == 199:
            break
        time.sleep(0.3)
    watcher.communicate(timeout=60)
    values = {s.labels["metric"]: s.value for s in families["trainlens_metric"]}
    assert values["grad_norm"] == 1.0 and values["train/loss"] != values["train/loss"]  # NaN
    [last] = families["trainlens_last_step"]
    assert last.value == 199 and last.labels == {"run": "run"}
    nan = [s for s in families["trainlens_findings"] if s.labels.get("code") == "NAN001"]
    assert nan and nan[0].name == "trainlens_findings_total" and nan[0].value == 1
    assert families["trainlens_seconds_since_last_record"][0].value >= 0
    opened = {s.labels["severity"]: s.value for s in families["trainlens_open_findings"]}
    assert opened["error"] >= 1


def test_a_port_in_use_is_a_usage_error() -> None:
    from trainlens.core.errors import UsageError
    from trainlens.watch.sinks.prometheus import PrometheusSink

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(UsageError, match="cannot listen"):
            PrometheusSink(f"127.0.0.1:{port}")


def _exported() -> set[str]:
    """The metric names the Prometheus sink exports (counters with their _total)."""
    from trainlens.watch.sinks import prometheus

    names = set(re.findall(r'f"\{PREFIX\}_(\w+)"', Path(prometheus.__file__).read_text()))
    counters = {"findings", "incidents", "early_warnings", "events"}
    return {f"trainlens_{n}" + ("_total" if n in counters else "") for n in names}


def test_shipped_alert_rules_use_exported_metrics() -> None:
    rules = yaml.safe_load((DOCS / "prometheus" / "trainlens-alerts.yml").read_text())
    alerts = [r for g in rules["groups"] for r in g["rules"]]
    names = {a["alert"] for a in alerts}
    assert {
        "TrainlensNaNLoss",
        "TrainlensGradExplosion",
        "TrainlensLowThroughput",
        "TrainlensRunStalled",
        "TrainlensErrorIncident",
    } <= names
    exported = _exported()
    for a in alerts:
        used = set(re.findall(r"\btrainlens_\w+", a["expr"]))
        assert used and used <= exported, (a["alert"], used - exported)
        assert a["annotations"]["summary"]


def test_shipped_alert_rules_pass_promtool() -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (apt-get install prometheus)")
    done = subprocess.run(
        [promtool, "check", "rules", str(DOCS / "prometheus" / "trainlens-alerts.yml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 7 rules found" in done.stdout


def test_alerts_and_dashboard_use_the_incident_metrics() -> None:
    text = (DOCS / "prometheus" / "trainlens-alerts.yml").read_text()
    board = (DOCS / "grafana" / "trainlens-dashboard.json").read_text()
    for name in ("trainlens_incidents_open", "trainlens_incidents_total"):
        assert name in text and name in board, name


def test_shipped_grafana_dashboard_uses_exported_metrics() -> None:
    board = json.loads((DOCS / "grafana" / "trainlens-dashboard.json").read_text())
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    assert len(exprs) >= 6
    exported = _exported()
    for e in exprs:
        used = set(re.findall(r"\btrainlens_\w+", e))
        assert used and used <= exported, (e, used - exported)


def test_build_sink_takes_what_the_settings_ask_for(hook: tuple[str, list[Any]]) -> None:
    url, _ = hook
    fan = build_sink(WatchSettings(notify=[url], exec="true"), json=True, tty=False)
    kinds = [type(s).__name__ for s in fan.sinks]
    fan.close()
    assert kinds == ["JsonSink", "NotifySink", "ExecSink"]


def test_live_view_shows_the_dashboard_and_the_events(fixture_runs: Path) -> None:
    from rich.console import Console

    from trainlens.readers import ReadOptions
    from trainlens.watch.follow import OffsetFollower
    from trainlens.watch.live import LiveRun
    from trainlens.watch.loop import WatchState
    from trainlens.watch.sinks.view import LiveView, sparkline

    assert sparkline([1.0, 2.0, 3.0, float("nan")]) == "▁▅█!"
    path = fixture_runs / "nan_divergence" / "metrics.jsonl"
    live = LiveRun(OffsetFollower(path, "jsonl", ReadOptions()), job=None)
    chunk = live.follower.poll()
    assert chunk is not None
    live.add(chunk)
    console = Console(record=True, width=120, file=StringIO(), force_terminal=False)
    view = LiveView(console=console)
    for _ in range(3):
        view.update(WatchState(runs=[live]))
    view.emit(_event(run=live.name))
    view.close()
    text = console.export_text()
    assert "nan_divergence" in text and "train/loss" in text and "grad_norm" in text
    assert "NAN001" in text and "steps/s" in text


def test_a_missing_watch_extra_is_a_usage_error_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without the watch extra, --notify / --prometheus say what to install (not a
    traceback), and a terminal gets plain lines instead of the rich view."""
    import trainlens.watch.sinks as sinks_mod
    from trainlens.core.errors import UsageError

    monkeypatch.setattr(sinks_mod, "_installed", lambda module: False)
    with pytest.raises(UsageError, match=r"--notify needs the apprise package.*\[watch\]"):
        build_sink(WatchSettings(notify=["json://h/p"]), json=False, tty=False)
    with pytest.raises(UsageError, match="--prometheus needs the prometheus_client"):
        build_sink(WatchSettings(prometheus="127.0.0.1:9"), json=False, tty=False)
    fan = build_sink(WatchSettings(), json=False, tty=True)
    assert [type(s).__name__ for s in fan.sinks] == ["LineSink"]
