"""``--prometheus HOST:PORT``: the watched runs as Prometheus metrics on ``/metrics``.

Served by prometheus_client from its own registry (not the process-global one: a library
user's metrics stay theirs). The values are read from the watch's state when Prometheus
scrapes, so ``trainlens_seconds_since_last_record`` is current at every scrape:

- ``trainlens_metric{run, metric}``: the last value of each canonical metric (NaN stays
  NaN: ``trainlens_metric != trainlens_metric`` finds it; ±Inf stays ±Inf); of the
  per-tensor series (``grad_norm/<tensor>``, ``update_ratio/<tensor>``) only the ``tensors``
  most telling per family (:func:`exported_values`), and
  ``trainlens_tensor_series_omitted{run}`` says how many were left out;
- ``trainlens_last_step{run}``, ``trainlens_steps_per_second{run}``,
  ``trainlens_seconds_since_last_record{run}``, ``trainlens_run_stalled{run}`` (0/1),
  ``trainlens_last_record_timestamp_seconds{run}`` (unix time the newest record was read:
  ``time() - ...`` in a rule, and it survives a restarted watch's first scrapes);
  ``trainlens_run_stalled`` is 0 for a run that ended, whatever its last record's age;
- ``trainlens_run_state{run, state}``: 1 for the run's state now, 0 for the others
  (running, finished, crashed, stalled: docs/watch.md, "Run states");
- ``trainlens_findings_total{run, code, severity}``: findings opened (a counter);
- ``trainlens_incidents_open{run, severity}``: incidents open now (announced ones: one
  held back, docs/watch.md, is not yet);
- ``trainlens_incidents_total{run, code}``: incidents opened, by headline code at opening;
- ``trainlens_open_findings{run, severity}``: findings open now;
- ``trainlens_early_warnings_total{run}``, ``trainlens_events_total``;
- ``trainlens_build_info{version}``: 1.

Every counter is created at 0 when a run is first seen, as prometheus_client advises for
label values known in advance: ``increase()`` over a series that appears at 1 is 0, so the
first finding, incident or early warning of a run would never alert. The codes are every
code a detector, the gate or the checkpoint audit can emit (:func:`finding_codes`), each
with the three severities (a detector picks a code's severity from the data, and config
can change it): a bounded set, the same for every run.

docs/prometheus/trainlens-alerts.yml holds alert rules on these and
docs/grafana/trainlens-dashboard.json a dashboard; docs/watch.md shows how to run both.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from trainlens.core.names import tensor_family
from trainlens.core.runstate import STATES
from trainlens.core.sanitize import terminal
from trainlens.watch.events import WatchEvent
from trainlens.watch.settings import parse_host_port

PREFIX = "trainlens"
SEVERITIES = ("info", "warning", "error")


class _Collector:
    """Builds the metric families from the latest state at each scrape."""

    def __init__(self, sink: PrometheusSink) -> None:
        self.sink = sink

    def describe(self) -> list[Any]:
        return []  # unchecked collector: the families vary with the runs

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, InfoMetricFamily

        from trainlens import __version__

        sink = self.sink
        with sink.lock:
            runs = list(sink.runs)
            opened = dict(sink.opened)
            incidents = dict(sink.incidents)
            early = dict(sink.early)
            events = sink.events
        yield from _run_gauges(runs, sink.tensors, sink.clock())
        inc_total = CounterMetricFamily(
            f"{PREFIX}_incidents", "Incidents opened, by headline code", labels=["run", "code"]
        )
        for (run, code), n in sorted(incidents.items()):
            inc_total.add_metric([terminal(run), terminal(code)], n)
        findings = CounterMetricFamily(
            f"{PREFIX}_findings", "Findings opened", labels=["run", "code", "severity"]
        )
        for (run, code, sev), n in sorted(opened.items()):
            findings.add_metric([terminal(run), code, sev], n)
        warnings = CounterMetricFamily(
            f"{PREFIX}_early_warnings", "Early warnings announced", labels=["run"]
        )
        for run, n in sorted(early.items()):
            warnings.add_metric([terminal(run)], n)
        total = CounterMetricFamily(f"{PREFIX}_events", "Events announced")
        total.add_metric([], events)
        build = InfoMetricFamily(
            f"{PREFIX}_build", "The trainlens serving these metrics", value={"version": __version__}
        )
        yield from (inc_total, findings, warnings, total, build)


def _run_gauges(runs: list[Any], tensors: int, now: float) -> Iterator[Any]:
    """The per-run gauges, read from each run's state at ``now`` (unix time)."""
    from prometheus_client.core import GaugeMetricFamily

    def gauge(name: str, doc: str, labels: tuple[str, ...] = ("run",)) -> Any:
        return GaugeMetricFamily(f"{PREFIX}_{name}", doc, labels=list(labels))

    metric = gauge("metric", "Last logged value of a canonical metric", ("run", "metric"))
    omitted = gauge(
        "tensor_series_omitted", "Per-tensor series of the run not exported (the bound)"
    )
    last_step = gauge("last_step", "Last logged step")
    sps = gauge("steps_per_second", "Steps per second the run is making")
    since = gauge("seconds_since_last_record", "Seconds since a new record of the run was read")
    last_record = gauge(
        "last_record_timestamp_seconds", "Unix time the newest record of the run was read"
    )
    stalled = gauge("run_stalled", "1 while the run counts as stalled")
    run_state = gauge(
        "run_state",
        "1 for the run's state now: running, finished, crashed or stalled",
        ("run", "state"),
    )
    open_ = gauge("open_findings", "Findings open now", ("run", "severity"))
    inc_open = gauge("incidents_open", "Incidents open now", ("run", "severity"))
    # label values come from the input; prometheus_client escapes what the exposition
    # format needs (backslash, quote, newline), and ``terminal`` keeps the rest
    # printable for the dashboards and alert messages that show them
    for live in runs:
        name = terminal(live.name)
        findings = live.open_findings()
        named = {f.metric for f in findings if f.metric}
        values, left_out = exported_values(list(live.last_values.items()), tensors, named)
        for m, v in values:
            metric.add_metric([name, terminal(m)], v)
        omitted.add_metric([name], left_out)
        if live.last_step is not None:
            last_step.add_metric([name], live.last_step)
        rate = live.steps_per_sec()
        if rate is not None:
            sps.add_metric([name], rate)
        if live.last_arrival is not None:
            since.add_metric([name], live.seconds_since_record(now))
            last_record.add_metric([name], live.last_arrival)
        state = live.state
        stalled.add_metric([name], 1.0 if state == "stalled" else 0.0)
        for st in STATES:
            run_state.add_metric([name, st], 1.0 if state == st else 0.0)
        counts = {s: 0 for s in SEVERITIES}
        by_sev = dict(counts)
        for f in findings:
            counts[f.severity.value] += 1
        for o in list(live.incidents.open.values()):
            by_sev[o.severity.value] += 1
        for sev in SEVERITIES:
            open_.add_metric([name, sev], counts[sev])
            inc_open.add_metric([name, sev], by_sev[sev])
    yield from (
        metric,
        omitted,
        last_step,
        sps,
        since,
        last_record,
        stalled,
        run_state,
        inc_open,
        open_,
    )


def exported_values(
    values: Iterable[tuple[str, float | None]], tensors: int, named: set[str]
) -> tuple[list[tuple[str, float]], int]:
    """The last values ``trainlens_metric`` exports, and how many per-tensor series it
    leaves out: every metric but the per-tensor ones, and of each per-tensor family the
    ``tensors`` most telling — those an open finding names (a dead tensor's near-zero norm
    is the one to see), then non-finite ones, then the largest (the tensor a gradient
    explosion starts in), ties by name. A Prometheus series per tensor of a large model
    (hundreds per run, each kept for the retention period) is what a scrape should not
    cost; ``trainlens analyze`` and the report have them all."""
    keep: list[tuple[str, float]] = []
    families: dict[str, list[tuple[str, float]]] = {}
    for m, v in values:
        x = math.nan if v is None else float(v)
        family = tensor_family(m)
        if family is None:
            keep.append((m, x))
        else:
            families.setdefault(family, []).append((m, x))
    left_out = 0
    for items in families.values():
        items.sort(key=lambda item: _rank(item, named))
        keep.extend(items[:tensors])
        left_out += max(0, len(items) - tensors)
    return keep, left_out


def _rank(item: tuple[str, float], named: set[str]) -> tuple[bool, bool, float, str]:
    m, x = item
    finite = math.isfinite(x)
    return (m not in named, finite, -x if finite else 0.0, m)


def finding_codes() -> list[str]:
    """Every code a finding (so an incident's headline) can have: the detectors', the gate
    checks' and the checkpoint audit's."""
    from trainlens.checkpoints.findings import CODES as CKPT_CODES
    from trainlens.core.codes import GATE_CODES
    from trainlens.detectors import available, load

    codes = set(GATE_CODES) | set(CKPT_CODES)
    for name in available():
        codes.update(load(name).CODES)
    return sorted(codes)


class PrometheusSink:
    """Serves ``/metrics`` on ``address`` (HOST:PORT) while the watch runs. ``tensors``:
    per-tensor series exported per family and run (:func:`exported_values`); ``clock``:
    the unix time a scrape is taken at (a test replays a run at simulated times)."""

    def __init__(
        self, address: str, *, tensors: int = 8, clock: Callable[[], float] = time.time
    ) -> None:
        from prometheus_client import CollectorRegistry, start_http_server

        from trainlens.core.errors import UsageError

        host, port = parse_host_port(address)
        self.lock = threading.Lock()
        self.runs: list[Any] = []
        self.opened: dict[tuple[str, str, str], int] = {}
        self.early: dict[str, int] = {}
        self.incidents: dict[tuple[str, str], int] = {}
        self.codes = finding_codes()
        self.events = 0
        self.tensors = tensors
        self.clock = clock
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
            if event.kind == "run-appeared":
                self._seen(event.run)
            elif event.kind == "finding-opened" and event.finding is not None:
                self._seen(event.run)
                key = (event.run, event.finding.code, event.finding.severity.value)
                self.opened[key] = self.opened.get(key, 0) + 1
            elif event.kind == "early-warning":
                self._seen(event.run)
                self.early[event.run] = self.early.get(event.run, 0) + 1
            elif event.kind == "incident-opened" and event.code:
                self._seen(event.run)
                key2 = (event.run, event.code)
                self.incidents[key2] = self.incidents.get(key2, 0) + 1

    def _seen(self, run: str) -> None:
        """Every counter of a run first seen at 0 (the lock is held)."""
        if run in self.early:
            return
        self.early[run] = 0
        for code in self.codes:
            self.incidents.setdefault((run, code), 0)
            for sev in SEVERITIES:
                self.opened.setdefault((run, code, sev), 0)

    def update(self, state: Any) -> None:
        with self.lock:
            self.runs = list(getattr(state, "runs", []))
            for live in self.runs:
                self._seen(live.name)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
