"""Incidents: the findings that share one root cause, as a person or a pager reads them.

The detectors each judge one signal and the cause step (:mod:`trainlens.detectors._causes`)
says what moved before a loss event; :mod:`trainlens.incidents` then groups the findings
into incidents (its rules, and when two findings are *not* merged, are in docs/incidents.md).
An incident is plain data, like a :class:`~trainlens.core.findings.Finding`: every finding
of an analysis belongs to exactly one incident, named by its ``members`` (indices into the
analysis' finding list), so nothing is dropped and the findings stay readable beneath it.
"""

from __future__ import annotations

import re
from typing import Any

from trainlens.core.dataclass import dataclass, field
from trainlens.core.findings import Severity, steps_text

#: how the chain's steps are named in a headline (the cause step's labels, kept short)
SHORT_LABEL = {
    "lr": "lr",
    "loss_scale": "loss scale",
    "grad_norm": "grad norm",
    "update_ratio": "update ratio",
    "train/loss": "loss",
}

_FACTOR = re.compile(r"×\s?[0-9][0-9.]*(?:e[+-]?[0-9]+)?")  # (×1e+05 too: it was "×1")


@dataclass(frozen=True)
class Incident:
    """One root cause in one run: its headline (the worst member), onset, first mover and
    chain, and its member findings.

    ``code``/``name``/``severity``: the headline finding's code and name, and the worst
    severity of any member. ``step_start``/``step_end``: the span of all members.
    ``onset``: the earliest member's start. ``first_mover`` (a metric) and
    ``first_mover_step``: what moved first (the cause chain's first mover, else the member
    that started strictly before the others), or None. ``chain``: ``[{"metric", "step",
    "what"}, …]`` in step order. ``members``: indices into the analysis' findings, the
    headline first. ``rules``: the grouping rules that joined its members (empty for a
    finding alone).
    """

    id: str
    code: str
    name: str
    severity: Severity
    title: str
    step_start: int | None
    step_end: int | None
    onset: int | None
    first_mover: str | None
    first_mover_step: int | None
    chain: tuple[dict[str, Any], ...]
    members: tuple[int, ...]
    codes: tuple[str, ...]
    metrics: tuple[str, ...]
    rules: tuple[str, ...] = field(default=())

    @property
    def where(self) -> str:
        return steps_text(self.step_start, self.step_end)

    def first_text(self) -> str:
        """``first: lr ×40 at 400 → grad norm ×48.7 at 400 → loss at 401``, or ``""``."""
        if self.first_mover is None or not self.chain:
            return ""
        parts = []
        for link in self.chain:
            metric = str(link.get("metric"))
            label = SHORT_LABEL.get(metric, metric)
            factor = _FACTOR.search(str(link.get("what", "")))
            parts.append(f"{label}{' ' + factor.group(0) if factor else ''} at {link.get('step')}")
        return "first: " + " → ".join(parts)

    def headline(self, *, related: bool = True) -> str:
        """What the incident is, in one line and without its severity (each output adds
        that its own way): ``steps 400–463  loss became NaN at step 400 — first: …``;
        ``related``: with how many other findings it holds."""
        text = f"{self.where}  {self.title}" if self.where else self.title
        first = self.first_text()
        if first:
            text += f" — {first}"
        others = len(self.members) - 1
        if others and related:
            text += f" (+{others} related finding{'s' if others > 1 else ''})"
        return text

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "code": self.code,
            "name": self.name,
            "severity": self.severity.value,
            "title": self.title,
            "headline": self.headline(),
            "step_start": self.step_start,
            "step_end": self.step_end,
            "onset": self.onset,
            "first_mover": self.first_mover,
            "first_mover_step": self.first_mover_step,
            "chain": [dict(c) for c in self.chain],
            "members": list(self.members),
            "codes": list(self.codes),
            "metrics": list(self.metrics),
            "rules": list(self.rules),
        }


def incident_order(incidents: list[Incident]) -> list[Incident]:
    """Worst first, then by onset (a run-wide incident, without a step, first among equals)."""
    return sorted(
        incidents,
        key=lambda i: (-i.severity.rank, i.onset if i.onset is not None else -1, i.id),
    )


def membership(incidents: list[Incident]) -> dict[int, str]:
    """Finding index -> the id of its incident."""
    return {m: inc.id for inc in incidents for m in inc.members}
