"""Hugging Face Trainer's trainer_state.json (``log_history``).

Train entries (loss, learning_rate, grad_norm, epoch) and eval entries (eval_loss,
eval_*) become metrics at their ``step``; the final summary entry (train_runtime,
train_loss as an average over the run, total_flos, ...) is kept as metrics named
``final/<key>`` so it cannot be mistaken for the per-step series. A directory is read
from its trainer_state.json, or from the latest ``checkpoint-N/trainer_state.json``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import polars as pl

from trainlens.core.errors import UnreadableInputError
from trainlens.core.run import DataIssue, Run, build_run
from trainlens.readers.base import ReadOptions, run_name_for

FORMAT = "hf-trainer"

_FINAL_KEYS = {"train_runtime", "total_flos", "train_steps_per_second"}
_META_KEYS = (
    "global_step",
    "max_steps",
    "num_train_epochs",
    "logging_steps",
    "eval_steps",
    "save_steps",
    "train_batch_size",
    "best_metric",
    "best_model_checkpoint",
    "total_flos",
)
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


def _state_file(path: Path) -> Path | None:
    if path.is_file():
        return path
    direct = path / "trainer_state.json"
    if direct.is_file():
        return direct
    checkpoints = []
    for child in path.iterdir():
        m = _CHECKPOINT.match(child.name)
        if m and (child / "trainer_state.json").is_file():
            checkpoints.append((int(m.group(1)), child / "trainer_state.json"))
    return max(checkpoints)[1] if checkpoints else None


def sniff(path: Path, head: bytes) -> bool:
    if path.is_dir():
        return _state_file(path) is not None
    return head.lstrip().startswith(b"{") and b'"log_history"' in head


def read(path: Path, opts: ReadOptions) -> list[Run]:
    state_path = _state_file(path)
    if state_path is None:
        raise UnreadableInputError(f"{path}: no trainer_state.json found")
    source = str(state_path)
    try:
        state = json.loads(state_path.read_bytes())
    except ValueError as exc:
        raise UnreadableInputError(f"{state_path}: not valid JSON ({exc})") from None
    history = state.get("log_history") if isinstance(state, dict) else None
    if not isinstance(history, list):
        raise UnreadableInputError(f"{state_path}: no log_history list in this trainer state")

    steps: list[int] = []
    metrics: list[str] = []
    values: list[float] = []
    issues: list[DataIssue] = []
    skipped = 0
    for entry in history:
        if not isinstance(entry, dict) or "step" not in entry:
            skipped += 1
            continue
        step = int(entry["step"])
        final = bool(_FINAL_KEYS & entry.keys())
        for key, value in entry.items():
            if key == "step":
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            steps.append(step)
            metrics.append(f"final/{key}" if final else key)
            values.append(float(value))
    if skipped:
        issues.append(
            DataIssue(
                kind="bad-entry",
                source=source,
                message=f"{skipped} log_history entries without a step were skipped",
                count=skipped,
            )
        )
    if not values:
        raise UnreadableInputError(f"{state_path}: log_history holds no metrics")
    long = pl.DataFrame(
        {"step": steps, "metric": metrics, "value": values},
        schema={"step": pl.Int64, "metric": pl.String, "value": pl.Float64},
    )
    meta: dict[str, Any] = {k: state[k] for k in _META_KEYS if k in state}
    name = run_name_for(path if path.is_dir() else state_path)
    if _CHECKPOINT.match(name):
        name = state_path.parent.parent.resolve().name
    run = build_run(
        long,
        name=name,
        source=source,
        fmt=FORMAT,
        aliases=opts.aliases,
        metadata=meta,
        issues=issues,
    )
    return [run]
