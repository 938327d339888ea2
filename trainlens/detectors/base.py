"""What every detector shares: the context it runs in and small helpers to build findings."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trainlens.core.findings import Finding, Severity
from trainlens.core.run import Run


@dataclass
class Context:
    """What a detector may know beyond the frame: the declared schedule and the model.

    ``schedule``: the declared LR schedule (keys: shape, warmup_steps, peak_lr, min_lr,
    total_steps, decay_steps, stable_steps, step_size, gamma), from config, a flag, or a
    run config archived beside the run; empty when none was declared.
    ``model``: n_params, gpu, n_gpus, dtype, device_memory_bytes, ... when known.
    ``step_offset``: what to add to the log's steps to reach the declared schedule's (a
    resumed run whose step count restarted while its scheduler went on); 0 unless the LR
    detector pinned one (LR008), which :func:`trainlens.detectors.run_detectors` sets
    before the other detectors run, so a declared warmup and the plan are compared with
    the real steps everywhere.
    """

    schedule: dict[str, Any] = field(default_factory=dict)
    model: dict[str, Any] = field(default_factory=dict)
    schedule_source: str | None = None
    step_offset: int = 0


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
