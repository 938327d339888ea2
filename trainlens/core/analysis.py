"""What one analysis of one run is: the context the detectors ran in and the result.

These are plain data, below the API (:mod:`trainlens.api` builds them) and the detectors
(:mod:`trainlens.detectors` reads the context), so renderers (formatters, report) depend on
them and on nothing that computes.
"""

from __future__ import annotations

from typing import Any

from trainlens.core.dataclass import dataclass, field
from trainlens.core.findings import Finding, Severity
from trainlens.core.incidents import Incident, membership
from trainlens.core.run import DataIssue, Run
from trainlens.core.runstate import run_end


@dataclass
class Context:
    """What a detector may know beyond the frame: the declared schedule and the model.

    ``schedule``: the declared LR schedule (keys: shape, warmup_steps, peak_lr, min_lr,
    total_steps, decay_steps, stable_steps, step_size, gamma), from config, a flag, or a
    run config archived beside the run; empty when none was declared.
    ``model``: n_params, gpu, n_gpus, dtype, device_memory_bytes, ... when known;
    ``model_sources``: where each of them came from, in words (``--dtype``, ``the run
    config's `dtype: float32` (path)``), for figures that must say what they rest on.
    ``step_offset``: what to add to the log's steps to reach the declared schedule's (a
    resumed run whose step count restarted while its scheduler went on); 0 unless the LR
    detector pinned one (LR008), which :func:`trainlens.detectors.run_detectors` sets
    before the other detectors run, so a declared warmup and the plan are compared with
    the real steps everywhere.
    """

    schedule: dict[str, Any] = field(default_factory=dict)
    model: dict[str, Any] = field(default_factory=dict)
    model_sources: dict[str, str] = field(default_factory=dict)
    schedule_source: str | None = None
    step_offset: int = 0
    checkpoints: Any = None  # the run's checkpoint inventory (trainlens.checkpoints), if any


@dataclass
class Analysis:
    """One run, its summary, what the detectors found and the incidents they make up
    (:mod:`trainlens.incidents`; each finding in exactly one, named by its index)."""

    run: Run
    summary: dict[str, Any]
    findings: list[Finding]
    skipped: dict[str, str] = field(default_factory=dict)
    context: Context = field(default_factory=Context)
    incidents: list[Incident] = field(default_factory=list)

    @property
    def data_quality(self) -> list[DataIssue]:
        return self.run.data_quality

    def worst(self) -> Severity | None:
        return max((f.severity for f in self.findings), key=lambda s: s.rank, default=None)

    def to_dict(self) -> dict[str, Any]:
        home = membership(self.incidents)
        return {
            "run": self.run.name,
            "source": self.run.source,
            "format": self.run.format,
            "summary": self.summary,
            "incidents": [i.to_dict() for i in self.incidents],
            "findings": [
                {**f.to_dict(), "incident": home.get(k)} for k, f in enumerate(self.findings)
            ],
            "data_quality": [d.to_dict() for d in self.run.data_quality],
            "skipped_detectors": self.skipped,
            "schedule": self.context.schedule or None,
            "schedule_source": self.context.schedule_source,
            "end": end.to_dict() if (end := run_end(self.run.metadata)) is not None else None,
        }
