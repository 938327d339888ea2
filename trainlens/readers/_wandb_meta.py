"""A W&B run folder around its transaction log (private to the W&B run reader): which
folders and ``.wandb`` logs make a run, and what ``files/wandb-summary.json`` and
``files/wandb-metadata.json`` (the run's machine) say.
Split out of :mod:`trainlens.readers.wandb_run` (kept under the module size limit)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from trainlens.core.paths import link_leads_out
from trainlens.core.run import DataIssue
from trainlens.readers._outside import outside_note

RUN_DIR = re.compile(r"^(?:offline-)?run-(?P<date>\d{8}_\d{6})-(?P<rest>.+)$")
COLLISION = re.compile(r"-(\d+)$")  # a second run folder of one second: run-...-<id>-1
LOG_GLOB = "*.wandb"


def run_file(
    source: Path, name: str, issues: list[DataIssue], inside: str
) -> dict[str, Any] | None:
    """The JSON object in the run folder's ``files/<name>`` (``wandb-summary.json``; the
    SDK's record of the machine, ``wandb-metadata.json``), or None. A link there leading
    out of the run folder (the SDK writes the file itself) is not read, and said so."""
    folder = source if source.is_dir() else source.parent
    path = folder / "files" / name
    why = link_leads_out(folder, path) if path.is_symlink() else None
    if why is not None:
        issues.append(outside_note(path, why, inside))
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


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


# ---- the run folders and their logs -----------------------------------------------------


def logs_in(folder: Path) -> list[Path]:
    """The ``.wandb`` logs in ``folder``; a link leading out of it is not one (the SDK
    writes no links there)."""
    try:
        logs = folder.glob(LOG_GLOB)
        out = (p for p in logs if not p.is_symlink() or link_leads_out(folder, p) is None)
        return sorted(p for p in out if p.is_file())  # (is_file follows a link: after)
    except OSError:
        return []


def run_dirs(folder: Path) -> list[Path]:
    """The run folders directly in ``folder`` (not ``latest-run``, a link to one)."""
    try:
        subs = [p for p in folder.iterdir() if RUN_DIR.match(p.name) and not p.is_symlink()]
    except OSError:
        return []
    return sorted((p for p in subs if p.is_dir() and logs_in(p)), key=_dir_order)


def is_run_folder(path: Path) -> bool:
    """A run folder holding a ``.wandb`` log, or a folder of run folders (the W&B reader's
    sniff of a folder; also asked before that reader is imported)."""
    return bool(logs_in(path) or run_dirs(path))


def _dir_order(p: Path) -> tuple[str, int, str]:
    m = RUN_DIR.match(p.name)
    if not m:
        return ("", 0, p.name)
    again = COLLISION.search(m.group("rest"))
    return (m.group("date"), int(again.group(1)) if again else 0, p.name)


def groups(path: Path) -> list[tuple[Path, list[Path]]]:
    """(source, log files in order) for each run at ``path``."""
    if path.is_file():
        return [(path, [path])]
    logs = logs_in(path)
    if logs:
        return [(path, logs)]
    by_id: dict[str, list[Path]] = {}
    for d in run_dirs(path):  # (the run id from the log's name: run-<id>.wandb)
        by_id.setdefault(logs_in(d)[0].stem, []).append(d)
    return [(dirs[-1], [f for d in dirs for f in logs_in(d)]) for dirs in by_id.values()]
