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
from array import array
from pathlib import Path
from typing import Any

import polars as pl

from trainlens.core import steps
from trainlens.core.errors import UnreadableInputError
from trainlens.core.run import DataIssue, Run, build_run
from trainlens.core.runstate import METADATA_KEY, RunEnd
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


def _load(state_path: Path) -> tuple[Any, _Columns | None, list[DataIssue]]:
    """The parsed state, its log_history's values when they were read in pieces (then
    the state's log_history is empty; else None), and notes. A part nested deeper than
    MAX_DEPTH (a RecursionError in ``json``) is blanked to ``{}`` first, with a note, and
    the rest is read."""
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
    pieces = _in_pieces(data)
    if pieces is not None:
        return pieces[0], pieces[1], issues
    try:
        return json.loads(data), None, issues
    except (ValueError, RecursionError) as exc:
        raise UnreadableInputError(f"{state_path}: not valid JSON ({exc})") from None


# ---- log_history in pieces ------------------------------------------------------------------

# json.loads of a whole 127 MB state held 0.85 GB of dicts and floats at once; in pieces of
# this many bytes (~25k entries) the state is read in 0.3 GB with the bytes (bench/memory.py)
PIECE = 4 << 20
_HISTORY_KEY = b'"log_history"'
_OPEN = re.compile(rb'"log_history"[ \t\r\n]*:[ \t\r\n]*\[')
_SEPARATOR = re.compile(rb"[ \t\r\n]*,")
_SUFFIX_MAX = 1 << 20  # the keys after log_history (HF sorts them: a few hundred bytes)


def _in_pieces(data: bytes) -> tuple[dict[str, Any], _Columns] | None:
    """The state without its log_history, and the log_history's values, parsed a piece
    of entries at a time; None when that is not shown to be the same as one parse (then
    the whole text is parsed at once).

    The state with ``[]`` for its log_history must parse and hold that ``[]``, and the
    list's text, cut after a ``}`` every PIECE bytes, must parse piece by piece with a
    comma between pieces: a cut inside a string or a nested object leaves a piece that
    does not parse. So the pieces are the list's entries, in order."""
    if len(data) < 2 * PIECE or data.count(_HISTORY_KEY) != 1:
        return None
    opened = _OPEN.search(data)
    if opened is None:
        return None
    start = opened.end()  # after the '['
    end = _list_end(data, start)
    if end is None:
        return None
    try:
        state = json.loads(data[:start] + data[end - 1 :])
    except (ValueError, RecursionError):
        return None
    if not isinstance(state, dict) or state.get("log_history") != []:
        return None
    columns = _Columns()
    pos = start
    while True:
        cut = data.find(b"}", pos + PIECE, end - 1) if end - 1 - pos > PIECE else -1
        stop = cut + 1 if cut >= 0 else end - 1  # (end - 1: the list's ']')
        try:
            entries = json.loads(b"[" + data[pos:stop] + b"]")
        except (ValueError, RecursionError):
            return None
        columns.add(entries)
        if cut < 0:
            return state, columns
        sep = _SEPARATOR.match(data, stop)
        if sep is None:  # (the cut was after the last entry, or not after an entry)
            return (state, columns) if not data[stop : end - 1].strip() else None
        pos = sep.end()


def _list_end(data: bytes, start: int) -> int | None:
    """One past the ']' that closes the list opened before ``start``: the last ']' with
    only the state's other keys after it (a candidate the pieces then prove or refute)."""
    tail_from = max(start, len(data) - _SUFFIX_MAX)
    at = data.rfind(b"]", tail_from)
    for _ in range(64):  # (the keys after it hold few lists)
        if at < 0:
            return None
        try:
            json.loads(b'{"x": []' + data[at + 1 :])
            return at + 1
        except ValueError:
            at = data.rfind(b"]", tail_from, at)
    return None


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


class _Columns:
    """The long frame's columns, filled entry by entry: a step (int64), a metric code
    (uint32, names in order of first appearance) and a value (float64) per value, packed
    (a Python list of floats held 32 bytes a value, and a list of names 8 more)."""

    def __init__(self) -> None:
        self.steps = array("q")
        self.codes = array("I")
        self.values = array("d")
        self.names: dict[str, int] = {}
        self.bad_entries: list[int] = []
        self.bad_values = 0
        self.seen = 0  # entries so far
        self.end_step: int | None = None  # the step of the entry with train_runtime

    def add(self, history: list[Any]) -> None:
        names = self.names
        for entry in history:
            index = self.seen
            self.seen += 1
            if not isinstance(entry, dict):
                self.bad_entries.append(index)
                continue
            step = _whole_step(entry.get("step"))
            lost = 0
            final = bool(_FINAL_KEYS & entry.keys())
            if step is not None:
                # the Trainer logs train_runtime once, when training ends: an entry after
                # it is a run that went on (resumed)
                self.end_step = step if "train_runtime" in entry else None
            for key, raw in entry.items():
                value = _as_float(raw) if key != "step" else None
                if value is None:
                    continue
                if step is None:
                    lost += 1
                    continue
                name = f"final/{key}" if final else key
                code = names.get(name)
                if code is None:
                    code = names[name] = len(names)
                self.steps.append(step)
                self.codes.append(code)
                self.values.append(value)
            self.bad_values += lost
            if step is None and (lost or "step" in entry):
                self.bad_entries.append(
                    index
                )  # (an empty entry, e.g. blanked by _load, lost nothing)

    def issues(self, source: str) -> list[DataIssue]:
        """A note for the entries without a usable step: how many values were left out,
        from which entries."""
        bad_entries, bad_values = self.bad_entries, self.bad_values
        if not bad_entries:
            return []
        shown = ", ".join(map(str, bad_entries[:5])) + ("…" if len(bad_entries) > 5 else "")
        return [
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
        ]

    def frame(self, names: list[str]) -> pl.DataFrame:
        """(step, metric, value), ``names[code]`` each code's metric (names may repeat:
        a renamed metric joins one of the same name)."""
        import numpy as np

        order = list(dict.fromkeys(names))  # (first appearance, as the codes are)
        position = {n: i for i, n in enumerate(order)}
        codes = np.frombuffer(self.codes, dtype=np.uint32)
        if order != names:
            codes = np.asarray([position[n] for n in names], dtype=np.uint32)[codes]
        return pl.DataFrame(
            [
                pl.Series("step", np.frombuffer(self.steps, dtype=np.int64)),
                pl.Series("metric", order, dtype=pl.Enum(order)).gather(pl.Series(codes)),
                pl.Series("value", np.frombuffer(self.values, dtype=np.float64)),
            ]
        )


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
    state, columns, issues = _load(state_path)
    if columns is None:
        history = state.get("log_history") if isinstance(state, dict) else None
        if not isinstance(history, list):
            raise UnreadableInputError(f"{state_path}: no log_history list in this trainer state")
        columns = _Columns()
        columns.add(history)
        del history, state["log_history"]
    issues.extend(columns.issues(source))
    names = _rl_objective(list(columns.names), source, issues)
    if not columns.values:
        raise UnreadableInputError(f"{state_path}: log_history holds no metrics")
    long = columns.frame(names)
    end_step = columns.end_step
    del columns
    meta: dict[str, Any] = {k: state[k] for k in _META_KEYS if k in state}
    if end_step is not None:
        end = RunEnd("finished", "HF Trainer's final log entry (train_runtime)", step=end_step)
        meta[METADATA_KEY] = end.to_dict()
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
