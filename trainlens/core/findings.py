"""Findings: what a detector says about a run (contract in DESIGN.md)."""

from __future__ import annotations

import math
from enum import StrEnum
from typing import Any

from trainlens.core.dataclass import dataclass, field


class Severity(StrEnum):
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"

    @property
    def rank(self) -> int:
        return {"info": 0, "warning": 1, "error": 2}[self.value]

    @classmethod
    def parse(cls, value: str | Severity) -> Severity:
        if isinstance(value, Severity):
            return value
        try:
            return cls(value.strip().lower())
        except ValueError:
            from trainlens.core.errors import ConfigError

            raise ConfigError(
                f"unknown severity {value!r}; use one of info, warning, error"
            ) from None

    def __str__(self) -> str:
        return self.value


#: what --fail-on / fail_on take: a severity, or none (nothing fails)
FAIL_LEVELS: tuple[str, ...] = ("none", "info", "warning", "error")


def fail_rank(level: str) -> int:
    """The lowest severity rank that fails ``analyze`` or the gate at ``level`` (``none``:
    nothing does); a level that is none of FAIL_LEVELS is a usage error."""
    level = level.strip().lower()
    if level not in FAIL_LEVELS:
        from trainlens.core.errors import UsageError

        raise UsageError(f"--fail-on must be one of {', '.join(FAIL_LEVELS)}, not {level!r}")
    return 99 if level == "none" else Severity(level).rank


def steps_text(start: int | None, end: int | None) -> str:
    """Where a finding is, as every rendering writes it: ``step 5``, ``steps 5–9``, or ``""``
    for a finding about the whole run (no step). The one spelling for the terminal, the
    report and the gate's outputs (they had three, one of which dropped a finding's step
    when only its end was known)."""
    if start is None:
        start = end
    if start is None:
        return ""
    if end is None or end == start:
        return f"step {start}"
    return f"steps {start}–{end}"


def _jsonable(value: Any) -> Any:
    """Evidence values as JSON can carry them (non-finite floats become strings)."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()  # numpy scalar
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return value


@dataclass(frozen=True)
class Finding:
    """One problem found in a run, with the numbers that justify it."""

    code: str
    name: str
    severity: Severity
    metric: str | None
    step_start: int | None
    step_end: int | None
    message: str
    evidence: dict[str, Any] = field(default_factory=dict)

    @property
    def where(self) -> str:
        """:func:`steps_text` of this finding's steps."""
        return steps_text(self.step_start, self.step_end)

    def to_dict(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "name": self.name,
            "severity": self.severity.value,
            "metric": self.metric,
            "step_start": self.step_start,
            "step_end": self.step_end,
            "message": self.message,
            "evidence": _jsonable(self.evidence),
        }

    def with_severity(self, severity: Severity) -> Finding:
        return Finding(
            self.code,
            self.name,
            severity,
            self.metric,
            self.step_start,
            self.step_end,
            self.message,
            self.evidence,
        )
