"""Hugging Face Trainer's trainer_state.json (``log_history``).

Train entries (loss, learning_rate, grad_norm, epoch) and eval entries (eval_loss,
eval_*) become metrics at their ``step``; the final summary entry (train_runtime,
train_loss as an average over the run, total_flos, ...) is kept as metrics named
``final/<key>`` so it cannot be mistaken for the per-step series. A directory is read
from its trainer_state.json, or from the latest ``checkpoint-N/trainer_state.json``.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import polars as pl

from trainlens.core import steps
from trainlens.core.errors import UnreadableInputError
from trainlens.core.run import DataIssue, Run, build_run
from trainlens.readers._nesting import MAX_DEPTH, lines_with_many_opens, too_deep_containers
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


def _load(state_path: Path) -> tuple[Any, list[DataIssue]]:
    """The parsed state; a part nested deeper than MAX_DEPTH (a RecursionError in
    ``json``) is blanked to ``{}`` first, with a note, and the rest is read."""
    data = state_path.read_bytes()
    issues: list[DataIssue] = []
    if lines_with_many_opens(data):
        # at depth 3: an entry of log_history (the state object, the list, the entry)
        spans = too_deep_containers(data, at_depth=3)
        if spans:
            blanked = bytearray(data)
            for start, end in spans:
                blanked[start:end] = b"{}" + b" " * (end - start - 2)
            first_line = data.count(b"\n", 0, spans[0][0]) + 1
            issues.append(
                DataIssue(
                    kind="too-deep",
                    source=str(state_path),
                    location=f"line {first_line}",
                    message=(
                        f"{len(spans)} entr{'y' if len(spans) == 1 else 'ies'} nest deeper "
                        f"than {MAX_DEPTH} levels and {'was' if len(spans) == 1 else 'were'} "
                        f"skipped (first at line {first_line})"
                    ),
                    count=len(spans),
                )
            )
            data = bytes(blanked)
    try:
        return json.loads(data), issues
    except (ValueError, RecursionError) as exc:
        raise UnreadableInputError(f"{state_path}: not valid JSON ({exc})") from None


def _whole_step(raw: object) -> int | None:
    """A log_history step as an int: None when it is none (missing, not a number, NaN, a
    fraction — never rounded —, negative: HF's global_step counts from 0 —, or beyond
    Int64); see :mod:`trainlens.core.steps`."""
    if isinstance(raw, bool) or not isinstance(raw, (int, float)):
        return None
    step = steps.step_of(raw, negative=False)
    return step if isinstance(step, int) else None


def _as_float(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return float(value)
    except OverflowError:  # an integer beyond a float's range (10**400)
        return math.inf if value > 0 else -math.inf


def _entries(
    history: list[Any], source: str
) -> tuple[list[int], list[str], list[float], list[DataIssue]]:
    """(steps, metric names, values) of every entry with a usable step, and a note for
    the entries without one: how many values were left out, from which entries."""
    steps: list[int] = []
    metrics: list[str] = []
    values: list[float] = []
    bad_entries: list[int] = []
    bad_values = 0
    for index, entry in enumerate(history):
        if not isinstance(entry, dict):
            bad_entries.append(index)
            continue
        step = _whole_step(entry.get("step"))
        lost = 0
        final = bool(_FINAL_KEYS & entry.keys())
        for key, raw in entry.items():
            value = _as_float(raw) if key != "step" else None
            if value is None:
                continue
            if step is None:
                lost += 1
                continue
            steps.append(step)
            metrics.append(f"final/{key}" if final else key)
            values.append(value)
        bad_values += lost
        if step is None and (lost or "step" in entry):
            bad_entries.append(index)  # (an empty entry, e.g. one blanked by _load, lost nothing)
    issues: list[DataIssue] = []
    if bad_entries:
        shown = ", ".join(map(str, bad_entries[:5])) + ("…" if len(bad_entries) > 5 else "")
        issues.append(
            DataIssue(
                kind="bad-step",
                source=source,
                location=f"log_history[{bad_entries[0]}]",
                message=(
                    f"{len(bad_entries)} log_history entries without a usable step (missing, "
                    "not a number, or not a whole number within 64 bits) were skipped, "
                    f"{bad_values} value(s) with them (entries {shown})"
                ),
                count=bad_values,  # (the values left out, as the other readers count)
                details={"entries": bad_entries[:100], "values": bad_values},
            )
        )
    return steps, metrics, values, issues


# what an online RL fine-tune with sampled completions logs (TRL's GRPO, RLOO, Online DPO …:
# `reward`, `reward_std`, `completions/mean_length`): its `loss` is the policy objective
RL_OBJECTIVE = "rl/loss"


def _rl_objective(metrics: list[str], source: str, issues: list[DataIssue]) -> list[str]:
    """The metric names, ``loss`` renamed to ``rl/loss`` when the log is an online RL
    fine-tune's. Its loss is the clipped surrogate plus β·KL, about 0 at the start and
    drifting up with the KL as the policy moves: not a training loss meant to fall, so
    the loss detectors do not judge it (a GRPO log read as a training loss got an error
    "spiked at step 2 … never returned near 0" and "has not decreased")."""
    names = set(metrics)
    if "loss" not in names or not (
        "reward" in names or any(m.startswith("completions/") for m in names)
    ):
        return metrics
    issues.append(
        DataIssue(
            kind="rl-objective",
            source=source,
            message=(
                "an online RL fine-tune (it logs `reward` or `completions/…`, as TRL's GRPO "
                "trainer does): its loss is the policy objective, which does not fall as "
                f"the policy learns; kept as {RL_OBJECTIVE} and not judged as a training "
                "loss (the reward is the curve to watch)"
            ),
            severity="info",
        )
    )
    return [RL_OBJECTIVE if m == "loss" else m for m in metrics]


def sniff(path: Path, head: bytes) -> bool:
    if path.is_dir():
        return _state_file(path) is not None
    return head.lstrip().startswith(b"{") and b'"log_history"' in head


def read(path: Path, opts: ReadOptions) -> list[Run]:
    state_path = _state_file(path)
    if state_path is None:
        raise UnreadableInputError(f"{path}: no trainer_state.json found")
    source = str(state_path)
    state, issues = _load(state_path)
    history = state.get("log_history") if isinstance(state, dict) else None
    if not isinstance(history, list):
        raise UnreadableInputError(f"{state_path}: no log_history list in this trainer state")
    steps, metrics, values, more = _entries(history, source)
    issues.extend(more)
    metrics = _rl_objective(metrics, source, issues)
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
