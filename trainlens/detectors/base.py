"""What every detector shares: the context it runs in and small helpers to build findings."""

from __future__ import annotations

from typing import Any

from trainlens.core.analysis import Context  # re-exported: the context detectors run in
from trainlens.core.findings import Finding, Severity
from trainlens.core.run import Run


class Skip(Exception):
    """Raised by a detector that cannot judge this run (the reason is shown to the user)."""


def finding(
    code: str,
    name: str,
    severity: Severity | str,
    message: str,
    *,
    metric: str | None = None,
    step_start: int | None = None,
    step_end: int | None = None,
    **evidence: Any,
) -> Finding:
    """A Finding with plain-Python evidence (numpy scalars converted)."""
    clean: dict[str, Any] = {}
    for k, v in evidence.items():
        clean[k] = v.item() if hasattr(v, "item") else v
    return Finding(
        code=code,
        name=name,
        severity=Severity.parse(severity),
        metric=metric,
        step_start=None if step_start is None else int(step_start),
        step_end=None if step_end is None else int(step_end),
        message=message,
        evidence=clean,
    )


def require(run: Run, *metrics: str) -> None:
    """Skip unless every metric is logged with at least a few finite values."""
    missing = [m for m in metrics if not run.has(m)]
    if missing:
        raise Skip(f"needs {', '.join(missing)}, not logged")


__all__ = ["Context", "Skip", "finding", "require"]
