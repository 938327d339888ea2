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

Nothing flaps: an incident must be shown by every judging for a hold (:class:`Hold`:
steps or seconds, whichever comes first) before it opens, and be absent for as long before
it closes; one that a judging stops showing while held is dropped unsaid. Errors and
non-finite values are not held.

The notifiers and ``--exec`` answer these (not the finding events), so a NaN that reaches
21 series pages once, with the incident's onset as its step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trainlens.core.dataclass import dataclass, field
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
    """An incident being tracked: the id it is (or will be) announced with, its severity
    then, the findings it last held, and since when it is shown (or no longer shown)."""

    id: str
    severity: Severity
    members: list[Finding]
    onset: int | None
    opened_at: float  # unix time it was first shown (its age in the live view)
    last: GateIncident | None = None
    seen_step: int | None = None  # the run's last step when it was first shown
    missing: tuple[float, int | None] | None = None  # (time, step) first not shown again


@dataclass
class Change:
    kind: str  # incident-opened | incident-changed | incident-closed
    incident: OpenIncident
    change: str | None = None  # severity-up for incident-changed
    was: Severity | None = None


@dataclass
class Hold:
    """How long an incident must be shown before it opens, and not shown before it closes:
    ``steps`` steps of the run or ``seconds`` seconds, whichever comes first (either 0:
    no hold). An error, or a non-finite value, opens at once: a NaN does not heal and an
    error is the run being lost; waiting to confirm it only burns compute."""

    steps: float = 0.0
    seconds: float = 0.0

    def over(self, since: float, since_step: int | None, now: float, step: int | None) -> bool:
        if self.steps <= 0 or self.seconds <= 0:
            return True
        if step is not None and since_step is not None and step - since_step >= self.steps:
            return True
        return now - since >= self.seconds


#: Codes that open an incident at once, whatever its severity (a configured severity
#: override can make a NaN a warning; it still never heals).
AT_ONCE = frozenset({"NAN001"})


def _at_once(gi: GateIncident) -> bool:
    return gi.severity is Severity.ERROR or any(g.finding.code in AT_ONCE for g in gi.members)


@dataclass
class IncidentTracker:
    hold: Hold = field(default_factory=Hold)
    open: dict[str, OpenIncident] = field(default_factory=dict)  # announced
    pending: dict[str, OpenIncident] = field(default_factory=dict)  # shown, held back

    def update(
        self,
        incidents: list[GateIncident],
        now: float,
        step: int | None = None,
        *,
        final: bool = False,
    ) -> list[Change]:
        """The changes this judging makes: ``incidents`` the judging's, ``step`` the run's
        last logged step then, ``final`` the last judging of the watch (nothing is held:
        what it shows is what ``analyze`` says)."""
        out: list[Change] = []
        still: dict[str, OpenIncident] = {}
        held: dict[str, OpenIncident] = {}
        taken: set[str] = set()
        for gi in incidents:
            members = [g.finding for g in gi.members]
            old = self._continues(self.open, members, taken)
            if old is not None:
                taken.add(old.id)
                oi = self._carried(old, gi, members)
                if gi.severity.rank > old.severity.rank:
                    out.append(Change("incident-changed", oi, "severity-up", old.severity))
                still[oi.id] = oi
                continue
            seen = self._continues(self.pending, members, taken)
            if seen is not None:
                taken.add(seen.id)
                oi = self._carried(seen, gi, members)
                oi.severity = gi.severity  # not announced yet: it opens as it is now
            else:
                oi = OpenIncident(
                    gi.id, gi.severity, members, gi.incident.onset, now, gi, seen_step=step
                )
                while oi.id in still or oi.id in self.open or oi.id in held:
                    oi.id += "'"  # an id is never reused at once
            if final or _at_once(gi) or self.hold.over(oi.opened_at, oi.seen_step, now, step):
                out.append(Change("incident-opened", oi))
                still[oi.id] = oi
            else:
                held[oi.id] = oi
        for k, o in self.open.items():
            if k in taken:
                continue
            if o.missing is None:
                o.missing = (now, step)
            if final or self.hold.over(o.missing[0], o.missing[1], now, step):
                out.append(Change("incident-closed", o))
            else:
                still[k] = o  # not shown this time: closes only if it stays away
        # a held incident that a judging no longer shows was a flap: it is dropped unsaid
        self.open, self.pending = still, held
        return out

    @property
    def unsettled(self) -> bool:
        """Held back or about to close: the watch's last judging settles them."""
        return bool(self.pending) or any(o.missing is not None for o in self.open.values())

    @staticmethod
    def _carried(old: OpenIncident, gi: GateIncident, members: list[Finding]) -> OpenIncident:
        oi = OpenIncident(
            old.id,
            max(old.severity, gi.severity, key=_rank),
            members,
            old.onset,
            old.opened_at,
            gi,
            seen_step=old.seen_step,
        )
        if oi.onset is None or (gi.incident.onset is not None and gi.incident.onset < oi.onset):
            oi.onset = gi.incident.onset
        return oi

    @staticmethod
    def _continues(
        where: dict[str, OpenIncident], members: list[Finding], taken: set[str]
    ) -> OpenIncident | None:
        for oi in where.values():
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
