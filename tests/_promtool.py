"""Recording a watch's Prometheus metrics, and testing alert rules on them with promtool.

:func:`record` writes a run into a file a piece at a time, as its job would (every
``steps`` steps: a monitor's flush), and watches it with the watch's own parts — the
follower the watch's discovery picks, a :class:`~trainlens.watch.live.LiveRun`, the
:class:`~trainlens.watch.sinks.prometheus.PrometheusSink` — ticking as the watch loop does
(poll, take the chunk, judge, check for a stall, announce, update). After each piece it
scrapes the sink's registry (its collector's samples; at the end the recording checks
they are what the exposition text ``/metrics`` serves says, parsed back by
prometheus_client's parser). The clock is simulated: piece ``i`` is read and scraped at
``i * interval`` seconds, the time promtool gives the ``i``-th sample of an input series,
so the rules' ``time()`` and windows see the run at the pace it was written. After the
last piece the watch goes on scraping for ``tail`` seconds (the job ended or died; the
watch still runs).

:func:`promtool_test` turns a recording into promtool's ``input_series`` (a series absent
from a scrape after it was present is ``stale``, as Prometheus marks it) and runs
``promtool test rules`` on the shipped rules.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
RULES = REPO / "docs" / "prometheus" / "trainlens-alerts.yml"
DASHBOARD = REPO / "docs" / "grafana" / "trainlens-dashboard.json"

Key = tuple[str, tuple[tuple[str, str], ...]]


@dataclass
class Recording:
    """The samples of every scrape (scrape ``i`` at ``i * interval`` seconds)."""

    run: str
    interval: float
    scrapes: list[dict[Key, float]] = field(default_factory=list)
    steps: list[int | None] = field(default_factory=list)  # last step read, per scrape
    events: list[list[Any]] = field(default_factory=list)  # announced, per scrape
    text_agrees: bool = False  # the last scrape read directly = the exposition, parsed

    def index_of_step(self, step: int) -> int:
        """The first scrape that had read ``step``."""
        return next(i for i, s in enumerate(self.steps) if s is not None and s >= step)

    def series(self, name: str, **labels: str) -> list[float | None]:
        """One series' value at each scrape (None where absent)."""
        want = tuple(sorted({"run": self.run, **labels}.items()))
        return [s.get((name, want)) for s in self.scrapes]

    def first_rise(self, name: str, **labels: str) -> int:
        """The first scrape where the counter is above its value at the first scrape."""
        values = self.series(name, **labels)
        start = values[0]
        assert start == 0, (name, labels, start)  # created at 0 with the run
        return next(i for i, v in enumerate(values) if v is not None and v > start)

    def first_rise_of(self, name: str) -> int:
        """The first scrape where any series of counter ``name`` rose above its start."""
        keys = {
            k for s in self.scrapes for k in s if k[0] == name and dict(k[1]).get("run") == self.run
        }
        rises = []
        for key in keys:
            values = [s.get(key) for s in self.scrapes]
            rises += [i for i, v in enumerate(values) if v is not None and v > (values[0] or 0)][:1]
        return min(rises)

    def names(self) -> set[str]:
        return {name for scrape in self.scrapes for name, _ in scrape}


def scrape(registry: Any) -> dict[Key, float]:
    """The samples ``/metrics`` serves now, read from the collector."""
    out: dict[Key, float] = {}
    for family in registry.collect():
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = float(s.value)
    return out


def scrape_text(registry: Any) -> dict[Key, float]:
    """The same, through the exposition text ``/metrics`` serves, parsed back by
    prometheus_client's parser (slower: once per recording, to check the two agree)."""
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[Key, float] = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode("utf-8")):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = float(s.value)
    return out


def _pieces(lines: list[str], steps: int, stop_step: int | None) -> list[str]:
    """The file's lines in pieces that each end with a step that is a multiple of ``steps``
    (a line without a step goes with the step before it)."""
    pieces: list[str] = []
    current: list[str] = []
    boundary = steps
    for line in lines:
        step = json.loads(line).get("step")
        if isinstance(step, int):
            if stop_step is not None and step > stop_step:
                break
            if step > boundary:
                pieces.append("".join(current))
                current = []
                boundary = (step + steps - 1) // steps * steps
        current.append(line)
    pieces.append("".join(current))
    return pieces


def record(
    source: Path,
    workdir: Path,
    *,
    steps: int = 20,
    interval: float = 15.0,
    tail: float = 0.0,
    stop_step: int | None = None,
    tensors: int = 8,
) -> Recording:
    """Watch ``source`` (a run folder's metrics.jsonl and its config) being written into
    ``workdir`` ``steps`` steps at a time, one piece and one scrape every ``interval``
    simulated seconds, then ``tail`` seconds of scrapes with nothing new; up to
    ``stop_step`` when given (a job that died there)."""
    from trainlens.core.config import Config
    from trainlens.core.findings import fail_rank
    from trainlens.gate.rules import parse_rules
    from trainlens.gate.runner import GateJob
    from trainlens.readers import ReadOptions
    from trainlens.watch.discovery import Discovery
    from trainlens.watch.incidents import Hold, IncidentTracker
    from trainlens.watch.live import JudgeTiming, LiveRun
    from trainlens.watch.loop import WatchState
    from trainlens.watch.settings import WatchSettings
    from trainlens.watch.sinks.prometheus import PrometheusSink

    folder = workdir / source.parent.name
    folder.mkdir(parents=True)
    config = source.parent / "metrics.config.json"
    if config.is_file():
        shutil.copy(config, folder / "metrics.config.json")
    path = folder / source.name
    pieces = _pieces(source.read_text().splitlines(keepends=True), steps, stop_step)
    path.write_text(pieces[0])

    settings = WatchSettings()
    cfg = Config()
    job = GateJob(cfg=cfg, rules=parse_rules(cfg), fail_rank=fail_rank("error"))
    now = [0.0]
    sink = PrometheusSink("127.0.0.1:0", tensors=tensors, clock=lambda: now[0])
    state = WatchState()
    rec = Recording(run=folder.name, interval=interval)
    try:
        [follower] = Discovery([folder], format=None, options=ReadOptions()).poll()
        live = LiveRun(
            follower,
            job,
            # the duty cycle weighs the judging's real CPU time against the simulated
            # clock; a full budget keeps a slow judging (a loaded machine) from moving
            # which simulated tick it lands on
            timing=JudgeTiming(budget=1.0),
            stall_factor=settings.stall_factor,
            min_stall_seconds=settings.min_stall_seconds,
            incidents=IncidentTracker(Hold(settings.hold_steps, settings.hold_seconds)),
        )
        state.runs.append(live)
        sink.emit(live.event("run-appeared", "following"))
        ticks = len(pieces) + int(tail / interval)
        # one tick as trainlens.watch.loop.watch ticks (keep the two in step when the loop
        # changes): poll, take the chunk, judge when due, check for a stall, announce, update
        for i in range(ticks):
            now[0] = i * interval
            if 0 < i < len(pieces):
                with path.open("a") as fh:
                    fh.write(pieces[i])
            events = []
            chunk = live.follower.poll()
            if chunk is not None:
                events += live.add(chunk, now=now[0])
            end_before = live.end
            events += live.check_end()
            settle = live.end is not None and live.end != end_before  # judged now, as the loop
            events += live.judge(now=now[0], wall=now[0], force=settle, final=settle)
            events += live.check_stall(now=now[0])
            for e in events:
                sink.emit(e)
            sink.update(state)
            rec.scrapes.append(scrape(sink.registry))
            rec.steps.append(live.last_step)
            rec.events.append(events)
        rec.text_agrees = _same(rec.scrapes[-1], scrape_text(sink.registry))
    finally:
        sink.close()
    return rec


def _same(a: dict[Key, float], b: dict[Key, float]) -> bool:
    """The same samples (NaN equal to NaN)."""
    return a.keys() == b.keys() and all(
        a[k] == b[k] or (math.isnan(a[k]) and math.isnan(b[k])) for k in a
    )


# ---- promtool ------------------------------------------------------------------------------


def _number(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Inf" if v > 0 else "-Inf"
    return repr(v)


def _selector(key: Key) -> str:
    name, labels = key
    inner = ",".join(
        f'{k}="{v.replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34))}"'
        for k, v in labels
    )
    return f"{name}{{{inner}}}"


def input_series(rec: Recording, *, strip_zeros: bool = False) -> list[dict[str, str]]:
    """promtool's input series, one per series the recording saw. ``strip_zeros``: as if
    each series had first appeared at its first non-zero value (the old counters), for a
    control that shows what starting at 0 changes."""
    keys = sorted({k for s in rec.scrapes for k in s})
    out = []
    for key in keys:
        values: list[str] = []
        seen = False
        for s in rec.scrapes:
            v = s.get(key)
            if v is not None and strip_zeros and not seen and v == 0:
                v = None
            if v is None:
                # gone from a scrape: Prometheus marks the series stale once
                values.append("stale" if values and values[-1] not in ("_", "stale") else "_")
                continue
            seen = True
            values.append(_number(v))
        if seen:
            out.append({"series": _selector(key), "values": " ".join(values)})
    return out


def rule(alert: str) -> dict[str, Any]:
    rules = yaml.safe_load(RULES.read_text())
    [found] = [r for g in rules["groups"] for r in g["rules"] if r.get("alert") == alert]
    return found


def render(template: str, labels: dict[str, str], value: float | None = None) -> str:
    """An annotation as Prometheus expands it, for the two variables the shipped rules use
    (``$labels.<name>``, ``$value``); anything else fails the test that asked."""
    import re

    out = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m.group(1)], template)
    if value is not None:
        # Go's %v of a float64: the shortest repr, exponent past 1e21 (the counts here)
        text = repr(value)
        out = out.replace("{{ $value }}", text[:-2] if text.endswith(".0") else text)
    assert "{{" not in out, out
    return out


def expected(alert: str, run: str, value: float | None = None) -> dict[str, Any]:
    """The alert ``alert`` fired for ``run``: its labels and its annotations expanded."""
    r = rule(alert)
    labels = {"run": run, **r.get("labels", {})}
    annotations = {k: render(v, labels, value) for k, v in r.get("annotations", {}).items()}
    return {"exp_labels": labels, "exp_annotations": annotations}


def promtool_test(
    tmp: Path,
    rec: Recording,
    alert_tests: list[dict[str, Any]] | None = None,
    expr_tests: list[dict[str, Any]] | None = None,
    *,
    strip_zeros: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run ``promtool test rules`` on the shipped rules with ``rec`` as the input series."""
    promtool = shutil.which("promtool")
    assert promtool is not None
    test = {
        "rule_files": [str(RULES)],
        "evaluation_interval": f"{int(rec.interval)}s",
        "tests": [
            {
                "interval": f"{int(rec.interval)}s",
                "input_series": input_series(rec, strip_zeros=strip_zeros),
                "alert_rule_test": alert_tests or [],
                "promql_expr_test": expr_tests or [],
            }
        ],
    }
    path = tmp / f"{rec.run}-{len(list(tmp.glob('*.test.yml')))}.test.yml"
    path.write_text(yaml.safe_dump(test, sort_keys=False))
    return subprocess.run(
        [promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=120
    )


def at(rec: Recording, index: int) -> str:
    """promtool's eval_time of scrape ``index``."""
    return f"{int(index * rec.interval)}s"
