"""What a W&B run folder says beside its transaction log (private to the W&B run reader):
``files/wandb-summary.json`` and ``files/wandb-metadata.json`` (the run's machine).
Split out of :mod:`trainlens.readers.wandb_run` (kept under the module size limit)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def summary_of(source: Path) -> dict[str, Any] | None:
    folder = source if source.is_dir() else source.parent
    path = folder / "files" / "wandb-summary.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def run_metadata(source: Path) -> dict[str, Any]:
    """``files/wandb-metadata.json`` (the SDK's record of the run's machine), or {}."""
    folder = source if source.is_dir() else source.parent
    try:
        data = json.loads((folder / "files" / "wandb-metadata.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


def machine_of(meta: dict[str, Any]) -> dict[str, Any]:
    """The GPU model and count W&B recorded for the run's machine (``gpu``, ``gpu_count``):
    the TDP estimate's hardware when the config names none. The count is that machine's
    GPUs, not a multi-node job's world size."""
    out: dict[str, Any] = {}
    gpu, count = meta.get("gpu"), meta.get("gpu_count")
    if isinstance(gpu, str) and gpu.strip():
        out["gpu"] = gpu.strip()
    if isinstance(count, int) and not isinstance(count, bool) and count > 0:
        out["n_gpus"] = count
    return out
