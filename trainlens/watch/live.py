"""A run being watched: its state, its judging, and what to announce.

:class:`LiveRun` takes the chunks a follower reads and keeps:

- the **fast lane**, run on every chunk, costing in proportion to the chunk: the last value
  of each metric, steps/s, time since the last record, and early warnings
  (:mod:`trainlens.watch.early`);
- the **judge**: the gate's own path (:func:`trainlens.gate.runner.gate_run`, the detectors
  ``analyze`` runs plus the configured gate checks) over the run as ``trainlens.read``
  gives the source at that moment (read again: the values are not kept between judgings,
  so memory does not grow with the run; restarts are marked as in ``analyze``). Judging
  costs in proportion to the run, so it is duty-cycled: it runs when data arrived and at most once
  per ``max(min_interval, cost / budget)`` seconds — with the default 3 % budget a run whose
  judging takes 30 ms is judged every second, one that takes 1 s every 33 s — except when
  the fast lane saw what should not wait (a non-finite value, an early warning): then it is
  judged at the next tick, so a NaN is announced within a tick of being written however
  long the run;
- the **lifecycle** of findings: each is announced once when it opens, again only when it
  changes (severity up or down, ended: the problem stopped before the end of the data), and
  when a later judging no longer shows it (closed); and of the incidents they make up
  (:mod:`trainlens.watch.incidents`): opened, severity up, closed — what pages a person.
"""

from __future__ import annotations

import math
import time
from collections import Counter, deque
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from trainlens.core.dataclass import dataclass, field
from trainlens.core.findings import Finding, Severity
from trainlens.core.run import FRAME_SCHEMA, Run
from trainlens.core.runstate import RunEnd
from trainlens.watch.early import EarlyWarnings
from trainlens.watch.events import WatchEvent
from trainlens.watch.incidents import Change, IncidentTracker

if TYPE_CHECKING:
    from trainlens.gate.runner import GateJob
    from trainlens.watch.follow import Chunk, Follower


@dataclass
class JudgeTiming:
    """When to judge: at most once per ``max(min_interval, last_cost / budget)`` seconds."""

    budget: float = 0.03  # share of one core the judging may take on average
    min_interval: float = 1.0
    max_interval: float = 60.0
    last_cost: float = 0.0
    last_at: float = -math.inf

    def due(self, now: float) -> bool:
        return now - self.last_at >= self.interval

    @property
    def interval(self) -> float:
        return min(self.max_interval, max(self.min_interval, self.last_cost / self.budget))


def _key(f: Finding) -> tuple[str, str | None]:
    return (f.code, f.metric)


@dataclass
class Tracked:
    """An open finding and whether it reached the end of the data when last judged."""

    finding: Finding
    ongoing: bool


@dataclass
class LiveRun:
    """One followed run: its frame so far, its state, and its open findings."""

    follower: Follower
    job: GateJob
    timing: JudgeTiming = field(default_factory=JudgeTiming)
    stall_factor: float = 10.0
    min_stall_seconds: float = 30.0

    last_values: dict[str, float] = field(default_factory=dict)
    last_step: int | None = None
    last_arrival: float | None = None  # unix time the last new record was read
    arrivals: deque[tuple[float, int]] = field(default_factory=lambda: deque(maxlen=64))
    gaps: deque[float] = field(default_factory=lambda: deque(maxlen=64))
    open: dict[tuple[str, str | None], list[Tracked]] = field(default_factory=dict)
    counts: Counter[tuple[str, str]] = field(default_factory=Counter)
    stalled: bool = False
    end: RunEnd | None = None  # how the run ended, as its writer's last mark says
    dirty: bool = False  # new data since the last judging
    urgent: bool = False
    _told_error: str | None = None  # judge at the next tick, whatever the duty cycle says
    judged: int = 0
    early: EarlyWarnings = field(default_factory=EarlyWarnings)
    incidents: IncidentTracker = field(default_factory=IncidentTracker)
    metric_steps: dict[str, int] = field(default_factory=dict)  # at the last judging

    @property
    def name(self) -> str:
        return self.follower.name

    @property
    def source(self) -> str:
        return self.follower.source

    def event(self, kind: str, message: str, **kw: Any) -> WatchEvent:
        return WatchEvent(kind, self.name, self.source, time.time(), self.last_step, message, **kw)

    # ---- the fast lane: every chunk ------------------------------------------------------

    def add(self, chunk: Chunk, now: float | None = None) -> list[WatchEvent]:
        """Take one poll's rows; return the events they make at once (early warnings,
        read issues, a replaced file, a run that resumed after a stall)."""
        now = time.time() if now is None else now
        out: list[WatchEvent] = []
        if chunk.replaced and self.last_step is not None:
            out.append(
                self.event(
                    "run-resumed",
                    "the file was replaced or truncated (a resumed job?): following it "
                    "from its start; the earlier values stay, the new ones stand",
                )
            )
        for issue in chunk.issues:
            out.append(self.event("read-issue", str(issue), severity=issue.severity))
        frame = chunk.frame
        if frame.height == 0:
            return out
        self.dirty = True
        if self.stalled:
            self.stalled = False
            out.append(self.event("run-resumed", "new records again after the stall"))
        if self.last_arrival is not None:
            self.gaps.append(now - self.last_arrival)
        self.last_arrival = now
        last = frame.group_by("metric").agg(pl.col("value").last(), pl.col("step").max())
        for metric, value, _ in last.iter_rows():
            self.last_values[str(metric)] = value
        top = int(frame["step"].to_numpy().max())
        self.last_step = top if self.last_step is None else max(self.last_step, top)
        self.arrivals.append((now, self.last_step))
        early = self._early_warnings(frame)
        out.extend(early)
        # what cannot wait for the duty cycle: a non-finite value, a leading grad-norm spike
        if early or not frame["value"].is_finite().all():
            self.urgent = True
        return out

    def steps_per_sec(self) -> float | None:
        if len(self.arrivals) < 2:
            return None
        (t0, s0), (t1, s1) = self.arrivals[0], self.arrivals[-1]
        return (s1 - s0) / (t1 - t0) if t1 > t0 else None

    def seconds_since_record(self, now: float | None = None) -> float | None:
        if self.last_arrival is None:
            return None
        return (time.time() if now is None else now) - self.last_arrival

    def _early_warnings(self, frame: pl.DataFrame) -> list[WatchEvent]:
        out = []
        for w in self.early.feed(frame):
            sp = w.spike
            if w.earlier:
                history = (
                    f"{w.followed} of the {w.earlier} earlier such spikes in this run were "
                    f"followed by a loss spike within {self.early.params.lag_window} steps"
                )
            else:
                history = "the first such spike in this run"
            out.append(
                self.event(
                    "early-warning",
                    f"grad norm left its tail at step {sp.step} ({sp.value:.3g}, "
                    f"{sp.value / sp.median:.3g}x its recent median {sp.median:.3g}) and the "
                    f"loss has not answered yet: a loss spike often follows; {history}",
                    severity="warning",
                    details={
                        "code": "GRAD-EARLY",
                        "metric": "grad_norm",
                        "lead_step": sp.step,
                        "value": sp.value,
                        "median": sp.median,
                        "robust_z": sp.z,
                        "earlier_spikes": w.earlier,
                        "followed_by_loss_spike": w.followed,
                    },
                )
            )
        return out

    # ---- the run's state: running, finished, crashed, stalled ----------------------------

    @property
    def state(self) -> str:
        """``finished`` / ``crashed`` when the writer left its end, else ``stalled`` once
        no record came for the stall time, else ``running``."""
        if self.end is not None:
            return self.end.state
        return "stalled" if self.stalled else "running"

    def check_end(self) -> list[WatchEvent]:
        """Look for the writer's end (only a source that changed is looked at again);
        an end is announced once, and an end that went away (records after it: a resumed
        job) once as a resume."""
        end = self.follower.run_end()
        if end == self.end:
            return []
        was, self.end = self.end, end
        if end is None:
            told = was.text() if was is not None else "ended"
            return [self.event("run-resumed", f"new records after the run {told} (resumed?)")]
        self.stalled = False
        self.urgent = True  # what came last is judged at once: the run will not go on
        details = {"state": end.state, "by": end.by, "end_step": end.step, "error": end.error}
        if end.state == "finished":
            return [
                self.event(
                    "run-finished",
                    f"the run {end.text()}",
                    severity="info",
                    details=details,
                )
            ]
        return [
            self.event(
                "run-crashed",
                f"the run {end.text()}: its last records are what it wrote before",
                severity="error",
                details=details,
            )
        ]

    # ---- stalls ------------------------------------------------------------------------

    def stall_after(self) -> float:
        """Seconds without a new record after which the run counts as stalled: its usual
        gap between records × ``stall_factor``, at least ``min_stall_seconds``."""
        usual = float(np.median(np.array(self.gaps))) if self.gaps else 0.0
        return max(self.min_stall_seconds, self.stall_factor * usual)

    def check_stall(self, now: float | None = None) -> list[WatchEvent]:
        """A stall: no record for the stall time and no end (a run that ended is done,
        not hung)."""
        since = self.seconds_since_record(now)
        if self.end is not None or self.stalled or since is None or since < self.stall_after():
            return []
        self.stalled = True
        return [
            self.event(
                "run-stalled",
                f"no new record for {since:.0f} s (its records usually come every "
                f"{(np.median(np.array(self.gaps)) if self.gaps else 0):.2g} s): is the job "
                "hung, crashed or waiting on I/O?",
                severity="warning",
                details={"code": "WATCH-STALL", "seconds_since_record": since},
            )
        ]

    # ---- the judge ---------------------------------------------------------------------

    def run(self) -> Run:
        """The run so far, as ``trainlens.read`` gives the source now: judging reads the
        source again (the follower's ``read_whole``) rather than keeping every value read,
        so between judgings a watched run holds only its fast-lane state and the watch's
        memory does not grow with the run (an hour at 100 steps/s x 20 metrics is 7.2M
        values, ~200 MB as a frame; bench/watch.py --soak measures it). Reading costs in
        proportion to the run, as judging does; the duty cycle pays for both."""
        whole = self.follower.read_whole()
        if whole is None:
            whole = Run(self.name, self.source, self.follower.format, empty_frame())
        whole.name = self.name
        return whole

    def read_error(self) -> list[WatchEvent]:
        """What the reader said when the source gave nothing, once per distinct sentence
        (an empty file says so once; a Git LFS pointer is named, not judged)."""
        error = getattr(self.follower, "error", None)
        if error is None or error == self._told_error:
            return []
        self._told_error = error
        return [self.event("read-issue", error, severity="info")]

    def judge(
        self,
        now: float | None = None,
        *,
        force: bool = False,
        final: bool = False,
        wall: float | None = None,
    ) -> list[WatchEvent]:
        """Re-judge when due (or ``force``); return the lifecycle events. ``final``: the
        watch's last judging (incidents are not held). ``now`` is monotonic time (the duty
        cycle), ``wall`` unix time (the hold, an incident's age)."""
        from trainlens.gate.runner import gate_run

        now = time.monotonic() if now is None else now
        wall = time.time() if wall is None else wall
        if not (force or (self.dirty and (self.urgent or self.timing.due(now)))):
            return []
        self.urgent = False
        t0 = time.perf_counter()
        run = self.run()
        if run.frame.height == 0:  # nothing readable yet: nothing to judge
            self.dirty = False
            return []
        report = gate_run(run, self.name, self.job)
        self.timing.last_cost = time.perf_counter() - t0
        self.timing.last_at = now
        self.dirty = False
        self.judged += 1
        last = run.frame.group_by("metric").agg(pl.col("step").max())
        self.metric_steps = {str(m): int(s) for m, s in last.iter_rows()}
        top = max(self.metric_steps.values())
        events = self._lifecycle([g.finding for g in report.findings])
        changes = self.incidents.update(report.incidents, wall, top, final=final)
        return events + [self._incident_event(c) for c in changes]

    def _incident_event(self, c: Change) -> WatchEvent:
        oi = c.incident
        details = self.incidents.details(oi)
        if c.was is not None:
            details["was"] = c.was.value
        gi = oi.last
        if c.kind == "incident-closed" or gi is None:
            message = f"no longer shows in the run so far: {oi.members[0].message}"
        else:
            message = gi.incident.headline()
        return self.event(
            c.kind,
            message,
            finding=oi.members[0],
            severity=oi.severity.value,
            change=c.change,
            details=details,
        )

    def _lifecycle(self, findings: list[Finding]) -> list[WatchEvent]:
        now_open: dict[tuple[str, str | None], list[Tracked]] = {}
        for f in findings:
            # against the metric's own last logged step: a metric logged every 10 or 50
            # steps is not "ended" between its points (the run's last step is rarely one)
            last = self.metric_steps.get(f.metric or "", self.last_step)
            ongoing = f.step_end is None or last is None or f.step_end >= last
            now_open.setdefault(_key(f), []).append(Tracked(f, ongoing))
        out: list[WatchEvent] = []
        for key, new in now_open.items():
            old = list(self.open.get(key, []))
            for t in new:
                match = _match(t.finding, old)
                if match is None:
                    self.counts[(t.finding.code, t.finding.severity.value)] += 1
                    out.append(self._finding_event("finding-opened", t.finding))
                    continue
                old.remove(match)
                change = _change(match, t)
                if change:
                    out.append(
                        self._finding_event(
                            "finding-changed", t.finding, change, {"was": match.finding.to_dict()}
                        )
                    )
            out.extend(self._closed(t.finding) for t in old)
        for key, old in self.open.items():
            if key not in now_open:
                out.extend(self._closed(t.finding) for t in old)
        self.open = now_open
        return out

    def _finding_event(
        self,
        kind: str,
        f: Finding,
        change: str | None = None,
        details: dict[str, Any] | None = None,
    ) -> WatchEvent:
        return self.event(
            kind,
            f.message,
            finding=f,
            severity=f.severity.value,
            change=change,
            details=details or {},
        )

    def _closed(self, f: Finding) -> WatchEvent:
        return self._finding_event(
            "finding-closed", f, details={"why": "no longer shows in the run so far"}
        )

    def open_findings(self) -> list[Finding]:
        return [t.finding for ts in self.open.values() for t in ts]

    def worst_open(self) -> Severity | None:
        sev = [f.severity for f in self.open_findings()]
        return max(sev, key=lambda s: s.rank, default=None)


def _change(old: Tracked, new: Tracked) -> str | None:
    """How a finding that goes on changed: severity up or down, or ended (it reached the
    end of the data at the last judging, and now stops before it: the problem stopped)."""
    if new.finding.severity.rank > old.finding.severity.rank:
        return "severity-up"
    if new.finding.severity.rank < old.finding.severity.rank:
        return "severity-down"
    if old.ongoing and not new.ongoing:
        return "ended"
    return None


def _match(f: Finding, old: list[Tracked]) -> Tracked | None:
    """The earlier finding ``f`` continues: same code and metric (the caller's key), and it
    starts where it started, or its steps overlap (a finding's end moves as the run goes on)."""
    for o in old:
        if o.finding.step_start == f.step_start:
            return o
    for o in old:
        a0, a1 = _span(o.finding)
        b0, b1 = _span(f)
        if a0 is None or b0 is None or (a0 <= b1 and b0 <= a1):
            return o
    return None


def _span(f: Finding) -> tuple[int | None, int]:
    start = f.step_start if f.step_start is not None else f.step_end
    end = f.step_end if f.step_end is not None else start
    return start, end if end is not None else -1


def empty_frame() -> pl.DataFrame:
    """A canonical frame with no rows (a source with nothing readable yet)."""
    return pl.DataFrame(schema=FRAME_SCHEMA)
