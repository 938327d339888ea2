"""The shipped Prometheus rules and Grafana dashboard, proven on what a watch exports.

Each fixture run is written a piece at a time and watched (tests/_promtool.py: the watch's
own follower, LiveRun and Prometheus sink, on a simulated clock); every scrape becomes
promtool's input series, and ``promtool test rules`` checks that each rule fires on the
condition its summary names — at the scrape that first read it, not the one before — and
that none fires on a healthy run that finished. The times come from the fixtures'
ground truth (fixtures/labels.json) and from what the recording shows the watch announced;
no series value is written by hand. promtool ships in Debian's ``prometheus`` package;
without it these tests skip.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests._promtool import (
    DASHBOARD,
    RULES,
    Recording,
    at,
    expected,
    promtool_test,
    record,
    rule,
)
from tests.conftest import LABELS_PATH, fixture_path
from trainlens.watch.settings import WatchSettings

PROMTOOL = shutil.which("promtool")
need_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool not installed (apt-get install prometheus)"
)
TAIL = 900.0  # the watch goes on 15 min after the job's last record
PER_MIN = 4  # scrapes a minute (every 15 s)
ALERTS = (
    "TrainlensNaNLoss",
    "TrainlensGradExplosion",
    "TrainlensLowThroughput",
    "TrainlensRunStalled",
    "TrainlensErrorIncident",
    "TrainlensWarningIncident",
    "TrainlensRunCrashed",  # fired on a crashed run in tests/test_run_state.py
)


def _truth(run: str, code: str) -> int:
    labels = json.loads(LABELS_PATH.read_text())["runs"][run]["events"]
    return int(next(e for e in labels if e["code"] == code)["step"])


def _ok(done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]


def _fires(rec: Recording, alert: str, index: int, value: float | None = None) -> dict[str, Any]:
    return {
        "eval_time": at(rec, index),
        "alertname": alert,
        "exp_alerts": [expected(alert, rec.run, value)],
    }


def _silent(rec: Recording, alert: str, index: int) -> dict[str, Any]:
    return {"eval_time": at(rec, index), "alertname": alert, "exp_alerts": []}


def _monitor_run(root: Path, name: str, *, layers: int, steps: int, inf_from: int | None) -> Path:
    """A run written by trainlens' own Monitor: a small MLP trained for ``steps`` steps on
    a fixed regression; from ``inf_from`` on, the loss it logs is the loss cast to fp16
    after a x1e30 scale (a half-precision loss past 65504): Inf."""
    import torch

    from trainlens.monitor import Monitor

    torch.manual_seed(0)
    blocks: list[torch.nn.Module] = [torch.nn.Linear(8, 8)]
    for _ in range(layers - 1):
        blocks += [torch.nn.Tanh(), torch.nn.Linear(8, 8)]
    model = torch.nn.Sequential(*blocks, torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.02)
    x = torch.randn(256, 8)
    y = x.sum(1, keepdim=True)
    out = root / name
    with Monitor(model, opt, out=out) as mon:
        for step in range(1, steps + 1):
            idx = torch.randint(0, 256, (32,))
            loss = torch.nn.functional.mse_loss(model(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            scale = 1e30 if inf_from is not None and step >= inf_from else 1.0
            mon.step(loss=(loss.detach() * scale).half())
    return out / "metrics.jsonl"


# ---- the recordings (one per module) -------------------------------------------------------


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Each scenario recorded once, when a test first asks for it."""
    root = tmp_path_factory.mktemp("watch")
    cache: dict[str, Recording] = {}

    def get(name: str) -> Recording:
        if name not in cache:
            work = root / name
            if name == "inf_loss":
                src = _monitor_run(root / "src", name, layers=2, steps=60, inf_from=40)
                cache[name] = record(src, work, steps=20, tail=TAIL)
            elif name == "monitor_finished":  # the Monitor closed at the end of training
                src = _monitor_run(root / "src", name, layers=2, steps=200, inf_from=None)
                cache[name] = record(src, work, steps=20, tail=2100.0)
            elif name == "short":  # two pieces: every family has its samples
                src = fixture_path("nan_divergence")
                cache[name] = record(src, work, steps=50, stop_step=100)
            elif name == "stopped":  # a job that died at step 300: no record after it
                src = fixture_path("healthy_cosine")
                cache[name] = record(src, work, steps=50, stop_step=300, tail=1900.0)
            else:
                # each run up to what its tests look at (judging is what a recording costs:
                # ~0.2 s of CPU a piece); the healthy run whole, 100 steps a piece
                stop = {"lr_shock_recover": 500, "throughput_drop": 650}.get(name)
                healthy = name == "healthy_constant"
                cache[name] = record(
                    fixture_path(name),
                    work,
                    steps=100 if healthy else 50,
                    stop_step=stop,
                    tail=2100.0 if healthy else TAIL,
                )
        return cache[name]

    return get


@need_promtool
def test_the_shipped_rules_pass_promtool_check() -> None:
    done = subprocess.run(
        [str(PROMTOOL), "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60
    )
    _ok(done)
    assert f"SUCCESS: {len(ALERTS)} rules found" in done.stdout
    names = {r["alert"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]}
    assert names == set(ALERTS)  # each one has its test below


@pytest.mark.slow
@need_promtool
def test_nan_loss_and_error_incident_fire_at_the_nan(recorded: Any, tmp_path: Path) -> None:
    rec = recorded("nan_divergence")
    assert rec.text_agrees  # the collector's samples are what /metrics serves
    i = rec.index_of_step(_truth("nan_divergence", "NAN001"))
    errors = rec.series("trainlens_incidents_open", severity="error")
    assert errors[i - 1] == 0 and errors[i] == 1  # not held: open at the judging that saw it
    # at the end, 15 min after the last record, the NAN001 counter has not moved for 10 min:
    # only the loss's own last value (NaN) can fire the rule there
    end = len(rec.scrapes) - 1
    nan_incidents = rec.series("trainlens_incidents_total", code="NAN001")
    assert nan_incidents[end - 10 * PER_MIN - 1] == nan_incidents[end] == 1
    loss = rec.series("trainlens_metric", metric="train/loss")[end]
    assert loss is not None and math.isnan(loss)
    _ok(
        promtool_test(
            tmp_path,
            rec,
            [
                _silent(rec, "TrainlensNaNLoss", i - 1),
                # both clauses hold here (NaN value, NAN001 opened): still one alert
                _fires(rec, "TrainlensNaNLoss", i),
                _fires(rec, "TrainlensNaNLoss", end),
                _silent(rec, "TrainlensErrorIncident", i - 1),
                _fires(rec, "TrainlensErrorIncident", i, value=1),
            ],
        )
    )


@pytest.mark.slow
@need_promtool
def test_nan_loss_fires_for_an_inf_loss(recorded: Any, tmp_path: Path) -> None:
    """The summary says "NaN or Inf": a loss of +Inf (a run written by trainlens' Monitor,
    its fp16 loss overflowing from step 40) fires it through the loss's value alone."""
    rec = recorded("inf_loss")
    i = rec.index_of_step(40)
    end = len(rec.scrapes) - 1
    loss = rec.series("trainlens_metric", metric="train/loss")
    assert loss[i] == math.inf and loss[end] == math.inf and loss[i - 1] is not None
    assert math.isfinite(loss[i - 1])
    nan_incidents = rec.series("trainlens_incidents_total", code="NAN001")
    assert nan_incidents[end - 10 * PER_MIN - 1] == nan_incidents[end]  # not this clause
    _ok(
        promtool_test(
            tmp_path,
            rec,
            [
                _silent(rec, "TrainlensNaNLoss", i - 1),
                _fires(rec, "TrainlensNaNLoss", i),
                _fires(rec, "TrainlensNaNLoss", end),
            ],
        )
    )


@pytest.mark.slow
@need_promtool
def test_grad_explosion_fires_on_the_early_warning_then_on_the_incident(
    recorded: Any, tmp_path: Path
) -> None:
    """lr_shock_recover: the grad norm spikes at step 400, the loss at 401. Written 50
    steps at a time, the piece ending at 400 raises the early warning (GRAD001 itself
    needs the loss that answered); the GRAD001 incident opens after the hold."""
    rec = recorded("lr_shock_recover")
    w = rec.index_of_step(_truth("lr_shock_recover", "GRAD001"))
    assert rec.first_rise("trainlens_early_warnings_total") == w
    inc = rec.first_rise("trainlens_incidents_total", code="GRAD001")
    assert w < inc <= w + 3  # the hold: 100 steps
    # 5 min and a scrape after the warning its window is past: only the incident fires it
    late = w + 5 * PER_MIN + 2
    early = rec.series("trainlens_early_warnings_total")
    assert early[late - 5 * PER_MIN - 1] == early[late] and late < inc + 10 * PER_MIN
    opened = rec.series("trainlens_incidents_open", severity="warning")
    assert opened[inc - 1] == 0 and opened[inc] is not None and opened[inc] >= 1
    _ok(
        promtool_test(
            tmp_path,
            rec,
            [
                _silent(rec, "TrainlensGradExplosion", w - 1),
                _fires(rec, "TrainlensGradExplosion", w),
                _fires(rec, "TrainlensGradExplosion", late),
                _silent(rec, "TrainlensWarningIncident", inc - 1),
                _fires(rec, "TrainlensWarningIncident", inc, value=opened[inc]),
            ],
        )
    )


@pytest.mark.slow
@need_promtool
def test_the_old_counters_would_not_have_fired(recorded: Any, tmp_path: Path) -> None:
    """The control: the same recording with every counter series first appearing at its
    first non-zero value (the sink before this fix) does not fire GradExplosion at the
    early warning — increase() over a series that appears at 1 is 0."""
    rec = recorded("lr_shock_recover")
    w = rec.index_of_step(_truth("lr_shock_recover", "GRAD001"))
    test = [_silent(rec, "TrainlensGradExplosion", w)]
    _ok(promtool_test(tmp_path, rec, test, strip_zeros=True))


@pytest.mark.slow
@need_promtool
def test_low_throughput_fires_ten_minutes_into_the_drop(recorded: Any, tmp_path: Path) -> None:
    rec = recorded("throughput_drop")
    drop = rec.index_of_step(_truth("throughput_drop", "TPUT001"))
    inc = rec.first_rise("trainlens_incidents_total", code="TPUT001")
    assert drop <= inc <= drop + 4  # the hold: 100 steps past the drop's onset
    for_ = rule("TrainlensLowThroughput")["for"]
    assert for_ == "10m"
    _ok(
        promtool_test(
            tmp_path,
            rec,
            [
                _silent(rec, "TrainlensLowThroughput", drop - 1),
                _silent(rec, "TrainlensLowThroughput", inc + 10 * PER_MIN - 1),  # pending
                _fires(rec, "TrainlensLowThroughput", inc + 10 * PER_MIN),
            ],
        )
    )


@pytest.mark.slow
@need_promtool
def test_run_stalled_fires_when_the_records_stop(recorded: Any, tmp_path: Path) -> None:
    """A job that died at step 300: stalled once its usual gap between records x
    stall_factor has passed, and still one alert when 30 min have passed too (both clauses
    hold: one alert, not two)."""
    rec = recorded("stopped")
    last = rec.index_of_step(300)
    stalled = rec.series("trainlens_run_stalled")
    first = stalled.index(1.0)
    # stalled after the usual gap between records (one piece: 15 s) x stall_factor (10)
    after = max(WatchSettings().min_stall_seconds, WatchSettings().stall_factor * rec.interval)
    assert after <= (first - last) * rec.interval <= after + rec.interval
    both = last + 1800 // int(rec.interval) + 2
    assert both < len(rec.scrapes) and stalled[both] == 1
    tests = [_silent(rec, "TrainlensRunStalled", j) for j in range(0, first)]
    tests += [_fires(rec, "TrainlensRunStalled", j) for j in (first, first + PER_MIN, both)]
    _ok(promtool_test(tmp_path, rec, tests))


@pytest.mark.slow
@need_promtool
def test_no_rule_fires_on_a_healthy_run_that_finished(recorded: Any, tmp_path: Path) -> None:
    """healthy_constant watched from its first record to 35 min after its last: every
    minute, no alert (the stall rule after the run's end is the next test)."""
    rec = recorded("healthy_constant")
    assert rec.steps[-1] == 800
    last = rec.index_of_step(800)
    tests = [
        _silent(rec, alert, j)
        for alert in ALERTS
        for j in range(0, len(rec.scrapes), PER_MIN)
        if alert != "TrainlensRunStalled" or j <= last
    ]
    tests.append(_silent(rec, "TrainlensRunStalled", last))
    _ok(promtool_test(tmp_path, rec, tests))


@pytest.mark.slow
@need_promtool
def test_run_stalled_stays_silent_after_a_normal_end(recorded: Any, tmp_path: Path) -> None:
    """A run trainlens' Monitor wrote and closed when training ended, watched 35 min past
    its last record (the fixture runs were written before the Monitor marked an end)."""
    rec = recorded("monitor_finished")
    last = rec.index_of_step(200)
    tests = [_silent(rec, "TrainlensRunStalled", j) for j in range(last, len(rec.scrapes), PER_MIN)]
    _ok(promtool_test(tmp_path, rec, tests))


# ---- the Grafana dashboard --------------------------------------------------------------------

_KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring"}
_KEYWORDS |= {"group_left", "group_right", "Inf", "NaN", "inf", "nan"}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: its identifiers once strings, label
    matchers, ranges and grouping clauses are taken out, less functions (followed by a
    parenthesis) and keywords."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set()
    for m in re.finditer(r"(?<![\w.])[A-Za-z_:][\w:]*", text):
        if m.group() not in _KEYWORDS and not text[m.end() :].lstrip().startswith("("):
            names.add(m.group())
    return names


def _panels() -> dict[str, list[str]]:
    board = json.loads(DASHBOARD.read_text())
    return {p["title"]: [t["expr"] for t in p.get("targets", [])] for p in board["panels"]}


def _as_query(expr: str) -> str:
    return expr.replace("$run", ".*")  # the dashboard's run variable, all runs


def test_metric_names_are_read_from_promql() -> None:
    got = metric_names('sum by (run, code) (increase(a_total{run=~"$run"}[5m])) > 0 or b_x')
    assert got == {"a_total", "b_x"}
    assert metric_names('rate(x[1m]) * on (run) group_left (code) y{m="a b"}') == {"x", "y"}


def test_the_dashboard_and_rules_query_only_exported_series(recorded: Any) -> None:
    from trainlens.watch.sinks.prometheus import PrometheusSink

    rec = recorded("short")
    assert rec.text_agrees
    exported = rec.names()
    # every family the collector builds has samples in the recording
    sink = PrometheusSink("127.0.0.1:0")
    try:
        families = {f.name for f in sink.registry.collect()}
    finally:
        sink.close()
    counters = {"trainlens_findings", "trainlens_incidents", "trainlens_early_warnings"}
    counters |= {"trainlens_events"}
    from_families = {n + "_total" if n in counters else n for n in families}
    from_families = {n + "_info" if n == "trainlens_build" else n for n in from_families}
    assert from_families <= exported, from_families - exported
    panels = _panels()
    assert len(panels) >= 12
    for title, exprs in panels.items():
        assert exprs, title
        for e in exprs:
            used = metric_names(e)
            assert used and used <= exported, (title, e, used - exported)
    for r in (r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]):
        used = metric_names(r["expr"])
        assert used and used <= exported, (r["alert"], used - exported)


@need_promtool
def test_the_dashboard_queries_parse(tmp_path: Path) -> None:
    """Every panel query, as a recording rule, through ``promtool check rules``."""
    exprs = [e for es in _panels().values() for e in es]
    rules = [{"record": f"grafana:panel{i}", "expr": _as_query(e)} for i, e in enumerate(exprs)]
    path = tmp_path / "panels.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "grafana", "rules": rules}]}))
    done = subprocess.run(
        [str(PROMTOOL), "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    _ok(done)
    assert f"SUCCESS: {len(exprs)} rules found" in done.stdout


def _sees(expr: str, rec: Recording, index: int, seen: bool) -> dict[str, Any]:
    """The panel ``expr`` shows a non-zero point at scrape ``index`` (or shows none)."""
    query = f"count(({_as_query(expr)}) > 0) > bool 0"
    samples = [{"labels": "{}", "value": 1}] if seen else []
    return {"expr": query, "eval_time": at(rec, index), "exp_samples": samples}


@pytest.mark.slow
@need_promtool
def test_the_findings_and_early_warning_panels_see_the_first_one(
    recorded: Any, tmp_path: Path
) -> None:
    panels = _panels()
    [findings] = next(v for k, v in panels.items() if k.startswith("Findings opened"))
    [early] = next(v for k, v in panels.items() if k.startswith("Early warnings"))
    nan = recorded("nan_divergence")
    first = nan.first_rise_of("trainlens_findings_total")
    assert first <= nan.index_of_step(_truth("nan_divergence", "NAN001"))
    _ok(
        promtool_test(
            tmp_path,
            nan,
            [],
            [_sees(findings, nan, first - 1, False), _sees(findings, nan, first, True)],
        )
    )
    # the control: series that first appear at 1 show nothing at the first finding
    _ok(promtool_test(tmp_path, nan, [], [_sees(findings, nan, first, False)], strip_zeros=True))
    shock = recorded("lr_shock_recover")
    w = shock.first_rise("trainlens_early_warnings_total")
    _ok(
        promtool_test(
            tmp_path, shock, [], [_sees(early, shock, w - 1, False), _sees(early, shock, w, True)]
        )
    )
