"""``--prometheus HOST:PORT``: the watched runs as Prometheus metrics on ``/metrics``.

Served by prometheus_client from its own registry (not the process-global one: a library
user's metrics stay theirs). The values are read from the watch's state when Prometheus
scrapes, so ``trainlens_seconds_since_last_record`` is current at every scrape:

- ``trainlens_metric{run, metric}``: the last value of each canonical metric (NaN stays
  NaN: ``trainlens_metric != trainlens_metric`` finds it);
- ``trainlens_last_step{run}``, ``trainlens_steps_per_second{run}``,
  ``trainlens_seconds_since_last_record{run}``, ``trainlens_run_stalled{run}`` (0/1: 0
  for a run that ended, whatever its last record's age);
- ``trainlens_run_state{run, state}``: 1 for the run's state now, 0 for the others
  (running, finished, crashed, stalled: docs/watch.md, "Run states");
- ``trainlens_findings_total{run, code, severity}``: findings opened (a counter);
- ``trainlens_incidents_open{run, severity}``: incidents open now (announced ones: one
  held back, docs/watch.md, is not yet);
- ``trainlens_incidents_total{run, code}``: incidents opened, by headline code at opening
  (a counter; every code is created at 0 when a run is first seen, as prometheus_client
  advises for known label values: ``increase()`` over a series that appears at 1 is 0,
  and the first incident of a run would never alert);
- ``trainlens_open_findings{run, severity}``: findings open now;
- ``trainlens_early_warnings_total{run}``, ``trainlens_events_total``.

docs/prometheus/trainlens-alerts.yml holds alert rules on these and
docs/grafana/trainlens-dashboard.json a dashboard; docs/watch.md shows how to run both.
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

from trainlens.core.runstate import STATES
from trainlens.core.sanitize import terminal
from trainlens.watch.events import WatchEvent
from trainlens.watch.settings import parse_host_port

PREFIX = "trainlens"


class _Collector:
    """Builds the metric families from the latest state at each scrape."""

    def __init__(self, sink: PrometheusSink) -> None:
        self.sink = sink

    def describe(self) -> list[Any]:
        return []  # unchecked collector: the families vary with the runs

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        with self.sink.lock:
            runs = list(self.sink.runs)
            opened = Counter(self.sink.opened)
            incidents = Counter(self.sink.incidents)
            early = Counter(self.sink.early)
            events = self.sink.events
        metric = GaugeMetricFamily(
            f"{PREFIX}_metric", "Last logged value of a canonical metric", labels=["run", "metric"]
        )
        last_step = GaugeMetricFamily(f"{PREFIX}_last_step", "Last logged step", labels=["run"])
        sps = GaugeMetricFamily(
            f"{PREFIX}_steps_per_second", "Steps per second the run is making", labels=["run"]
        )
        since = GaugeMetricFamily(
            f"{PREFIX}_seconds_since_last_record",
            "Seconds since a new record of the run was read",
            labels=["run"],
        )
        stalled = GaugeMetricFamily(
            f"{PREFIX}_run_stalled", "1 while the run counts as stalled", labels=["run"]
        )
        run_state = GaugeMetricFamily(
            f"{PREFIX}_run_state",
            "1 for the run's state now: running, finished, crashed or stalled",
            labels=["run", "state"],
        )
        open_ = GaugeMetricFamily(
            f"{PREFIX}_open_findings", "Findings open now", labels=["run", "severity"]
        )
        inc_open = GaugeMetricFamily(
            f"{PREFIX}_incidents_open", "Incidents open now", labels=["run", "severity"]
        )
        # label values come from the input; prometheus_client escapes what the exposition
        # format needs (backslash, quote, newline), and ``terminal`` keeps the rest
        # printable for the dashboards and alert messages that show them
        for live in runs:
            name = terminal(live.name)
            for m, v in list(live.last_values.items()):
                metric.add_metric([name, terminal(m)], float(v) if v is not None else math.nan)
            if live.last_step is not None:
                last_step.add_metric([name], live.last_step)
            rate = live.steps_per_sec()
            if rate is not None:
                sps.add_metric([name], rate)
            s = live.seconds_since_record()
            if s is not None:
                since.add_metric([name], s)
            now = live.state
            stalled.add_metric([name], 1.0 if now == "stalled" else 0.0)
            for st in STATES:
                run_state.add_metric([name, st], 1.0 if now == st else 0.0)
            counts = Counter(f.severity.value for f in live.open_findings())
            by_sev = Counter(o.severity.value for o in list(live.incidents.open.values()))
            for sev in ("info", "warning", "error"):
                open_.add_metric([name, sev], counts.get(sev, 0))
                inc_open.add_metric([name, sev], by_sev.get(sev, 0))
        findings = CounterMetricFamily(
            f"{PREFIX}_findings", "Findings opened", labels=["run", "code", "severity"]
        )
        for (run, code, sev), n in sorted(opened.items()):
            findings.add_metric([terminal(run), code, sev], n)
        inc_total = CounterMetricFamily(
            f"{PREFIX}_incidents", "Incidents opened, by headline code", labels=["run", "code"]
        )
        for (run, code), n in sorted(incidents.items()):
            inc_total.add_metric([terminal(run), terminal(code)], n)
        warnings = CounterMetricFamily(
            f"{PREFIX}_early_warnings", "Early warnings announced", labels=["run"]
        )
        for run, n in sorted(early.items()):
            warnings.add_metric([terminal(run)], n)
        total = CounterMetricFamily(f"{PREFIX}_events", "Events announced")
        total.add_metric([], events)
        yield from (metric, last_step, sps, since, stalled, run_state, inc_open, open_)
        yield from (inc_total, findings, warnings, total)


def finding_codes() -> list[str]:
    """Every code a finding (so an incident's headline) can have: the detectors' and the
    gate checks'."""
    from trainlens.core.codes import GATE_CODES
    from trainlens.detectors import available, load

    codes = set(GATE_CODES)
    for name in available():
        codes.update(load(name).CODES)
    return sorted(codes)


class PrometheusSink:
    """Serves ``/metrics`` on ``address`` (HOST:PORT) while the watch runs."""

    def __init__(self, address: str) -> None:
        from prometheus_client import CollectorRegistry, start_http_server

        from trainlens.core.errors import UsageError

        host, port = parse_host_port(address)
        self.lock = threading.Lock()
        self.runs: list[Any] = []
        self.opened: Counter[tuple[str, str, str]] = Counter()
        self.early: Counter[str] = Counter()
        self.incidents: Counter[tuple[str, str]] = Counter()
        self.codes = finding_codes()
        self.events = 0
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Collector(self))
        try:
            self.server, self.thread = start_http_server(port, addr=host, registry=self.registry)
        except OSError as exc:
            raise UsageError(f"--prometheus {address}: cannot listen ({exc.strerror})") from None
        self.port = self.server.server_port

    def emit(self, event: WatchEvent) -> None:
        with self.lock:
            self.events += 1
            if event.kind == "finding-opened" and event.finding is not None:
                f = event.finding
                self.opened[(event.run, f.code, f.severity.value)] += 1
            elif event.kind == "early-warning":
                self.early[event.run] += 1
            elif event.kind == "run-appeared":
                self._seen(event.run)
            elif event.kind == "incident-opened" and event.code:
                self._seen(event.run)
                self.incidents[(event.run, event.code)] += 1

    def _seen(self, run: str) -> None:
        """Every code's counter at 0 for a run first seen (the lock is held)."""
        for code in self.codes:
            self.incidents.setdefault((run, code), 0)

    def update(self, state: Any) -> None:
        with self.lock:
            self.runs = list(getattr(state, "runs", []))
            for live in self.runs:
                self._seen(live.name)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
