"""Core model: the Run, canonical names, findings, errors, config. Imports no other layer."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trainlens.core.errors import ConfigError, TrainlensError, UnreadableInputError, UsageError
from trainlens.core.findings import Finding, Severity
from trainlens.core.names import AliasTable

if TYPE_CHECKING:
    from trainlens.core.run import DataIssue, Run, build_run

__all__ = [
    "AliasTable",
    "ConfigError",
    "DataIssue",
    "Finding",
    "Run",
    "Severity",
    "TrainlensError",
    "UnreadableInputError",
    "UsageError",
    "build_run",
]


def __getattr__(name: str) -> Any:
    # the Run model imports polars; load it on first use so `trainlens mfu` starts fast
    if name in ("DataIssue", "Run", "build_run"):
        from trainlens.core import run

        return getattr(run, name)
    raise AttributeError(f"module 'trainlens.core' has no attribute {name!r}")
