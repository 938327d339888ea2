"""trainlens: read the metrics a training run logged and tell what went wrong, when, and
what moved first.

The public API (imported lazily so the command line starts fast)::

    import trainlens
    runs = trainlens.read("run.jsonl")            # list[Run], canonical polars frames
    [result] = trainlens.analyze("run.jsonl")     # summary + findings
    trainlens.convert(runs[0], "run.parquet")
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "read": "trainlens.api",
    "analyze": "trainlens.api",
    "analyze_run": "trainlens.api",
    "convert": "trainlens.api",
    "summarize": "trainlens.summary",
    "Analysis": "trainlens.api",
    "Run": "trainlens.core.run",
    "DataIssue": "trainlens.core.run",
    "Finding": "trainlens.core.findings",
    "Severity": "trainlens.core.findings",
    "Config": "trainlens.core.config",
    "load_config": "trainlens.core.config",
    "TrainlensError": "trainlens.core.errors",
    "UnreadableInputError": "trainlens.core.errors",
    "ConfigError": "trainlens.core.errors",
    "UsageError": "trainlens.core.errors",
}

__all__ = [
    "Analysis",
    "Config",
    "ConfigError",
    "DataIssue",
    "Finding",
    "Run",
    "Severity",
    "TrainlensError",
    "UnreadableInputError",
    "UsageError",
    "__version__",
    "analyze",
    "analyze_run",
    "convert",
    "load_config",
    "read",
    "summarize",
]

if TYPE_CHECKING:
    from trainlens.api import Analysis, analyze, analyze_run, convert, read
    from trainlens.core.config import Config, load_config
    from trainlens.core.errors import (
        ConfigError,
        TrainlensError,
        UnreadableInputError,
        UsageError,
    )
    from trainlens.core.findings import Finding, Severity
    from trainlens.core.run import DataIssue, Run
    from trainlens.summary import summarize


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'trainlens' has no attribute {name!r}")
    return getattr(import_module(module), name)
