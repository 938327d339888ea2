"""Core model: the Run, canonical names, findings, errors, config. Imports no other layer."""

from trainlens.core.errors import ConfigError, TrainlensError, UnreadableInputError, UsageError
from trainlens.core.findings import Finding, Severity
from trainlens.core.names import AliasTable
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
