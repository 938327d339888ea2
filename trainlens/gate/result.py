"""What the gate returns: plain dataclasses that cross process boundaries and render.

A worker turns one run into a :class:`RunReport` (no Run object, no polars frame: a
summary dict, findings and check results); the main process collects them into a
:class:`GateResult`, whose :meth:`~GateResult.exit_code` is the gate's verdict.
"""

from __future__ import annotations

import math
from typing import Any

from trainlens.core.dataclass import dataclass, field
from trainlens.core.findings import Finding, Severity
from trainlens.core.incidents import Incident

PASS, FAIL, SKIPPED = "pass", "fail", "skipped"
UNREADABLE = "unreadable"


@dataclass
class CheckResult:
    """One check of one run: a detector that ran, or an outcome / baseline limit."""

    name: str  # "detector:grad_spikes", "check:max_final_val_loss", "baseline:throughput"
    kind: str  # detector | outcome | baseline | reference
    status: str = PASS  # pass | fail | skipped
    detail: str = ""  # why it was skipped, or what was measured

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "status": self.status, "detail": self.detail}


@dataclass
class GateFinding:
    """A finding as the gate judged it: which check raised it, whether it fails the gate."""

    finding: Finding
    check: str
    acknowledged: bool = False
    reason: str | None = None  # the acknowledgement's reason
    fails: bool = False  # unacknowledged and at or above the fail level
    incident: str | None = None  # the id of its incident in the run

    def line(self) -> str:
        f = self.finding
        where = f.where
        return (
            f"{f.severity.value.upper()} {f.code} {f.name}"
            + (f" ({where})" if where else "")
            + f": {f.message}"
        )

    def to_dict(self, run: str) -> dict[str, Any]:
        return {
            "run": run,
            **self.finding.to_dict(),
            "check": self.check,
            "acknowledged": self.acknowledged,
            "acknowledgement_reason": self.reason,
            "fails_gate": self.fails,
            "incident": self.incident,
        }


@dataclass
class GateIncident:
    """An incident as the gate judged it: its members are indices into the run report's
    ``findings``. It fails when any member fails; it is acknowledged when every member is
    (by the incident's headline code, or each by its own code). Its severity, for the CI
    outputs, is that of its worst unacknowledged member (its own worst when all are)."""

    incident: Incident
    members: list[GateFinding]
    acknowledged: bool = False
    reason: str | None = None
    fails: bool = False

    @property
    def id(self) -> str:
        return self.incident.id

    @property
    def severity(self) -> Severity:
        open_ = [g.finding.severity for g in self.members if not g.acknowledged]
        return max(open_, key=lambda s: s.rank) if open_ else self.incident.severity

    @property
    def head(self) -> GateFinding:
        return self.members[0]

    def title(self) -> str:
        """``NAN001 non-finite-value (steps 450–469)``."""
        inc = self.incident
        return f"{inc.code} {inc.name}" + (f" ({inc.where})" if inc.where else "")

    def related(self) -> str:
        """``21 findings: NAN001 ×21`` (empty for a finding alone)."""
        if len(self.members) < 2:
            return ""
        counts: dict[str, int] = {}
        for g in self.members:
            counts[g.finding.code] = counts.get(g.finding.code, 0) + 1
        codes = ", ".join(f"{c} ×{n}" if n > 1 else c for c, n in counts.items())
        return f"{len(self.members)} findings: {codes}"

    def line(self) -> str:
        """``ERROR NAN001@450 steps 450–469  train/loss became NaN … (21 findings: …)``."""
        text = f"{self.severity.value.upper()} {self.id} {self.incident.headline(related=False)}"
        related = self.related()
        return text + (f" [{related}]" if related else "")

    def to_dict(self, run: str, index: dict[int, int]) -> dict[str, Any]:
        """``index``: a member's id() -> its position in the gate's top-level findings."""
        return {
            "run": run,
            **self.incident.to_dict(),
            "severity": self.severity.value,
            "members": [index[id(g)] for g in self.members],
            "acknowledged": self.acknowledged,
            "acknowledgement_reason": self.reason,
            "fails_gate": self.fails,
        }


@dataclass
class RunReport:
    """The gate's verdict on one run (or on one unreadable input)."""

    name: str
    source: str
    format: str | None
    verdict: str  # pass | fail | unreadable
    error: str | None = None
    summary: dict[str, Any] = field(default_factory=dict)
    outcomes: dict[str, Any] = field(default_factory=dict)
    findings: list[GateFinding] = field(default_factory=list)
    incidents: list[GateIncident] = field(default_factory=list)
    checks: list[CheckResult] = field(default_factory=list)
    data_quality: list[dict[str, Any]] = field(default_factory=list)
    acks_used: list[int] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def failing(self) -> list[GateFinding]:
        return [g for g in self.findings if g.fails]

    @property
    def failing_incidents(self) -> list[GateIncident]:
        return [i for i in self.incidents if i.fails]

    @property
    def acknowledged_incidents(self) -> list[GateIncident]:
        return [i for i in self.incidents if i.acknowledged]

    def worst_incident(self) -> GateIncident | None:
        """The worst incident not acknowledged (failing first, earliest among equals)."""
        open_ = [i for i in self.incidents if not i.acknowledged]
        if not open_:
            return None
        return min(
            open_,
            key=lambda i: (
                not i.fails,
                -i.severity.rank,
                i.incident.onset if i.incident.onset is not None else -math.inf,
            ),
        )

    def incident_counts(self) -> dict[str, int]:
        """Incidents by severity (not acknowledged), and how many are acknowledged."""
        out = {s.value: 0 for s in Severity}
        for i in self.incidents:
            if not i.acknowledged:
                out[i.severity.value] += 1
        out["acknowledged"] = len(self.acknowledged_incidents)
        return out

    @property
    def acknowledged(self) -> list[GateFinding]:
        return [g for g in self.findings if g.acknowledged]

    def worst(self) -> GateFinding | None:
        """The worst unacknowledged finding (earliest among equals)."""
        open_ = [g for g in self.findings if not g.acknowledged]
        if not open_:
            return None
        return min(
            open_,
            key=lambda g: (
                not g.fails,
                -g.finding.severity.rank,
                g.finding.step_start if g.finding.step_start is not None else math.inf,
            ),
        )

    def worst_text(self, width: int | None = None) -> str:
        """``NAN001 non-finite-value (steps 450–469)``: the worst unacknowledged incident
        (its headline code and its span), else the worst finding (a report built by hand)."""
        if self.verdict == UNREADABLE:
            text = self.error or "unreadable"
        elif self.incidents:
            inc = self.worst_incident()
            if inc is None:
                return "—"
            text = inc.title()
        else:
            g = self.worst()
            if g is None:
                return "—"
            where = g.finding.where
            text = f"{g.finding.code} {g.finding.name}" + (f" ({where})" if where else "")
        if width is not None and len(text) > width:
            text = text[: width - 1] + "…"
        return text

    def counts(self) -> dict[str, int]:
        out = {s.value: 0 for s in Severity}
        for g in self.findings:
            if not g.acknowledged:
                out[g.finding.severity.value] += 1
        out["acknowledged"] = len(self.acknowledged)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "run": self.name,
            "source": self.source,
            "format": self.format,
            "verdict": self.verdict,
            "error": self.error,
            "counts": self.counts(),
            "incident_counts": self.incident_counts(),
            "summary": self.summary,
            "outcomes": self.outcomes,
            "checks": [c.to_dict() for c in self.checks],
            "data_quality": self.data_quality,
            "seconds": round(self.seconds, 4),
        }


@dataclass
class GateResult:
    """Every run's report, in discovery order, and what the gate was asked."""

    reports: list[RunReport]
    fail_on: str = "error"
    allow_unreadable: bool = False
    baseline: str | None = None
    reference: str | None = None  # the golden curves' source (runs or a golden file)
    unused_acknowledgements: list[dict[str, Any]] = field(default_factory=list)
    #: entries found under the paths that are no file or folder (a FIFO, a socket, a
    #: device): never opened, listed so that nothing disappears silently
    skipped: list[dict[str, str]] = field(default_factory=list)

    @property
    def failed(self) -> list[RunReport]:
        return [r for r in self.reports if r.verdict == FAIL]

    @property
    def unreadable(self) -> list[RunReport]:
        return [r for r in self.reports if r.verdict == UNREADABLE]

    @property
    def passed(self) -> list[RunReport]:
        return [r for r in self.reports if r.verdict == PASS]

    @property
    def verdict(self) -> str:
        if self.failed or (self.unreadable and not self.allow_unreadable):
            return FAIL
        return PASS

    def exit_code(self, *, exit_zero: bool = False) -> int:
        """0 pass; 1 a run failed; 2 an input was unreadable (unless allowed)."""
        if exit_zero:
            return 0
        if self.unreadable and not self.allow_unreadable:
            return 2
        return 1 if self.failed else 0

    def headline(self) -> str:
        n = len(self.reports)
        parts = [f"{len(self.passed)} passed", f"{len(self.failed)} failed"]
        if self.unreadable:
            parts.append(f"{len(self.unreadable)} unreadable")
        return f"{n} run{'s' if n != 1 else ''}: {', '.join(parts)} (fail on {self.fail_on})"

    def _incidents(self) -> list[dict[str, Any]]:
        index = {id(g): k for k, g in enumerate(g for r in self.reports for g in r.findings)}
        return [i.to_dict(r.name, index) for r in self.reports for i in r.incidents]

    def to_dict(self) -> dict[str, Any]:
        return {
            # 2: `incidents` (members index the top-level `findings`), each finding's
            # `incident`, each run's `incident_counts`
            "version": 2,
            "verdict": self.verdict,
            "fail_on": self.fail_on,
            "baseline": self.baseline,
            "reference": self.reference,
            "counts": {
                "runs": len(self.reports),
                "passed": len(self.passed),
                "failed": len(self.failed),
                "unreadable": len(self.unreadable),
            },
            "runs": [r.to_dict() for r in self.reports],
            "incidents": self._incidents(),
            "findings": [g.to_dict(r.name) for r in self.reports for g in r.findings],
            "unused_acknowledgements": self.unused_acknowledgements,
            "skipped": self.skipped,
        }
