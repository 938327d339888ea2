"""A watched run's incidents over time: one alarm per incident (issue 24).

Each judging groups the run's findings into incidents (the gate's own grouping,
:mod:`trainlens.incidents`). :class:`IncidentTracker` carries them from one judging to the
next: an incident that shares a member with one already open (the same code on the same
series, starting at the same step or overlapping it) *is* that one — it keeps its id and
the time it opened, even when a worse member joins and heads it (an LR001 at 400 joined by
the GRAD001 it caused is still one incident). It announces

- ``incident-opened`` once, when an incident first shows;
- ``incident-changed`` (``severity-up``) only when its severity rises — not when a member
  is added or one of its series is between two logged points;
- ``incident-closed`` when a judging no longer shows any of it.

The notifiers and ``--exec`` answer these (not the finding events), so a NaN that reaches
21 series pages once, with the incident's onset as its step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trainlens.core.findings import Finding, Severity

if TYPE_CHECKING:
    from trainlens.gate.result import GateIncident

INCIDENT_EVENTS = ("incident-opened", "incident-changed", "incident-closed")


def _span(f: Finding) -> tuple[int, int] | None:
    start = f.step_start if f.step_start is not None else f.step_end
    if start is None:
        return None
    end = f.step_end if f.step_end is not None else start
    return start, end


def _same_finding(a: Finding, b: Finding) -> bool:
    if (a.code, a.metric) != (b.code, b.metric):
        return False
    sa, sb = _span(a), _span(b)
    if sa is None or sb is None:
        return sa is None and sb is None
    return sa[0] == sb[0] or (sa[0] <= sb[1] and sb[0] <= sa[1])


@dataclass
class OpenIncident:
    """An incident that is open: the id it was announced with, its severity then, and the
    findings it last held."""

    id: str
    severity: Severity
    members: list[Finding]
    onset: int | None
    opened_at: float
    last: GateIncident | None = None


@dataclass
class Change:
    kind: str  # incident-opened | incident-changed | incident-closed
    incident: OpenIncident
    change: str | None = None  # severity-up for incident-changed
    was: Severity | None = None


@dataclass
class IncidentTracker:
    open: dict[str, OpenIncident] = field(default_factory=dict)

    def update(self, incidents: list[GateIncident], now: float) -> list[Change]:
        out: list[Change] = []
        still: dict[str, OpenIncident] = {}
        taken: set[str] = set()
        for gi in incidents:
            members = [g.finding for g in gi.members]
            old = self._continues(members, taken)
            if old is None:
                oi = OpenIncident(gi.id, gi.severity, members, gi.incident.onset, now, gi)
                while oi.id in still or oi.id in self.open:  # an id is never reused at once
                    oi.id += "'"
                out.append(Change("incident-opened", oi))
            else:
                taken.add(old.id)
                oi = OpenIncident(
                    old.id,
                    max(old.severity, gi.severity, key=_rank),
                    members,
                    old.onset,
                    old.opened_at,
                    gi,
                )
                if oi.onset is None or (
                    gi.incident.onset is not None and gi.incident.onset < oi.onset
                ):
                    oi.onset = gi.incident.onset
                if gi.severity.rank > old.severity.rank:
                    out.append(Change("incident-changed", oi, "severity-up", old.severity))
            still[oi.id] = oi
        out.extend(Change("incident-closed", o) for k, o in self.open.items() if k not in taken)
        self.open = still
        return out

    def _continues(self, members: list[Finding], taken: set[str]) -> OpenIncident | None:
        for oi in self.open.values():
            if oi.id in taken:
                continue
            if any(_same_finding(m, o) for m in members for o in oi.members):
                return oi
        return None

    def details(self, oi: OpenIncident) -> dict[str, Any]:
        """What an incident event carries: the incident (its id the announced one, its
        onset the earliest seen), and its member codes."""
        inc = oi.last.incident.to_dict() if oi.last is not None else {}
        inc.update(id=oi.id, onset=oi.onset, severity=oi.severity.value)
        codes = sorted({m.code for m in oi.members})
        return {
            "code": inc.get("code"),
            "incident": inc,
            "codes": codes,
            "acknowledged": bool(oi.last.acknowledged) if oi.last is not None else False,
        }


def _rank(s: Severity) -> int:
    return s.rank
