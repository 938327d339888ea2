"""What ``trainlens watch`` announces: one :class:`WatchEvent` per thing that happened.

``--json`` prints one object per event (:meth:`WatchEvent.to_dict`); the terminal view,
the notifiers, ``--exec`` and Prometheus all take the same events.
"""

from __future__ import annotations

from typing import Any, Protocol

from trainlens.core.dataclass import dataclass, field
from trainlens.core.findings import Finding

#: The kinds of event, in the order a run usually produces them.
KINDS = (
    "run-appeared",  # a source began to be followed
    "early-warning",  # a leading signal (grad-norm tail spike) with no loss response yet
    "finding-opened",  # a finding appeared
    "finding-changed",  # its severity rose or fell, or it ended / recovered
    "finding-closed",  # a finding the run no longer shows (e.g. the loss came back)
    "incident-opened",  # findings of one root cause appeared (docs/incidents.md)
    "incident-changed",  # its severity rose
    "incident-closed",  # the run no longer shows any of it
    "run-stalled",  # no new record for longer than the run's usual step time x k
    "run-resumed",  # records came again after a stall or an end, or the file was replaced
    "run-finished",  # the writer left a normal end (docs/watch.md, "Run states"): no stall
    "run-crashed",  # the writer left a crash (an exception, a traceback, a failed exit)
    "read-issue",  # a data-quality note on newly read bytes (a corrupt record, ...)
    "notify-failed",  # a notifier or --exec command failed (the watch goes on)
    "watch-ended",  # the watch stopped (Ctrl-C, --exit-on, --until-idle)
)


@dataclass
class WatchEvent:
    """One announcement about one run."""

    kind: str
    run: str
    source: str
    time: float  # unix time of the announcement
    step: int | None  # the run's last logged step when announced
    message: str  # one sentence a person can act on
    finding: Finding | None = None
    severity: str | None = None  # info | warning | error, where it has one
    change: str | None = None  # finding-changed: severity-up, severity-down, ended, recovered
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "event": self.kind,
            "run": self.run,
            "source": self.source,
            "time": self.time,
            "step": self.step,
            "severity": self.severity,
            "change": self.change,
            "message": self.message,
            "finding": self.finding.to_dict() if self.finding is not None else None,
            "details": self.details,
        }

    @property
    def code(self) -> str | None:
        return self.finding.code if self.finding is not None else self.details.get("code")

    def line(self) -> str:
        """The event as one plain line (the non-TTY output)."""
        sev = f" {self.severity.upper()}" if self.severity else ""
        code = f" {self.code}" if self.code else ""
        step = f" @{self.step}" if self.step is not None else ""
        return f"[{self.kind}]{sev}{code} {self.run}{step}: {self.message}"


class Sink(Protocol):
    """Where events go. ``emit`` must not raise: a sink reports its own failures (a failing
    notifier must never stop the watch)."""

    def emit(self, event: WatchEvent) -> None: ...

    def update(self, state: Any) -> None: ...

    def close(self) -> None: ...
