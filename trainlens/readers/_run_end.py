"""The end a writer left at the end of a file (:mod:`trainlens.core.runstate`), read from
the file's last bytes: cheap enough for a watch to look at each time the file changes.

- **JSONL**: the last line is trainlens' end record (``{"event": "end", ...}``), or an HF
  Trainer log entry with ``train_runtime`` (its last, written when training ends);
- **text logs**: the last end mark after the last training line: Megatron's
  ``[after training is done]`` or a launcher's ``exits successfully`` / ``return code = 0``
  (finished); a ``Traceback``, ``KeyboardInterrupt`` or a non-zero return code
  (crashed, with the last exception type printed). A training line after the mark
  (``iteration N/ M |``, ``step:N/M``) means the run went on: no end.
"""

from __future__ import annotations

import json
import mmap
import re
from dataclasses import replace
from pathlib import Path

import polars as pl

from trainlens.core.run import Run
from trainlens.core.runstate import (
    END_EVENT,
    END_KEYS,
    END_STATES,
    METADATA_KEY,
    RunEnd,
    from_record,
)

#: How much of a file's end is looked at (a crash's tracebacks from 16 ranks fill ~60 KB).
TAIL_BYTES = 256 << 10


def tail(path: Path, size: int = TAIL_BYTES) -> bytes:
    """The last ``size`` bytes of ``path`` (b"" when it cannot be read now)."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, 2)
            end = fh.tell()
            fh.seek(max(0, end - size))
            return fh.read(size)
    except OSError:
        return b""


# ---- JSONL ----------------------------------------------------------------------------------


def _last_object(data: bytes) -> object:
    # the last line that is not blank (as bytes.splitlines splits: at \n, \r, \r\n), found
    # from the end: splitting the 64 kB tail into lines cost ~0.6 M instructions a read
    body = data.rstrip()
    if body:
        s = body[max(body.rfind(b"\n"), body.rfind(b"\r")) + 1 :].strip()
        if not s.startswith(b"{") or s.count(b"{") > 64:
            return None  # no end record: those are one flat object (a deep line is no end)
        try:
            return json.loads(s)
        except (ValueError, RecursionError):
            return None  # a line still being written (or a broken one): no end yet
    return None


def jsonl_end(path: Path) -> RunEnd | None:
    """The end the last line of a JSONL file says, or None."""
    return jsonl_end_of(tail(path, 64 << 10))


def jsonl_end_of(data: bytes) -> RunEnd | None:
    obj = _last_object(data)
    end = from_record(obj)
    if end is not None:
        return end
    if isinstance(obj, dict) and isinstance(obj.get("train_runtime"), (int, float)):
        step = obj.get("step")
        return RunEnd(
            "finished",
            "HF Trainer's final log entry (train_runtime)",
            step=step if isinstance(step, int) else None,
        )
    return None


_END_LINE = re.compile(rb'^\s*\{.*"event"\s*:\s*"' + END_EVENT.encode() + rb'"')


def only_end_records(data: bytes) -> bool:
    """True when the complete lines of ``data`` are end records (and there is one): what a
    writer appends when it closes after its last flush holds no metric."""
    lines = [s for s in data.split(b"\n")[:-1] if s.strip()]
    return bool(lines) and all(
        _END_LINE.match(s) and from_record(_loads(s)) is not None for s in lines
    )


def _loads(s: bytes) -> object:
    try:
        return json.loads(s)
    except ValueError:
        return None


def drop_end_records(
    df: pl.DataFrame | None, lines: pl.Series
) -> tuple[pl.DataFrame | None, pl.Series]:
    """The rows of trainlens' end records (a resumed run's earlier ends, or a file read
    by the general path) left out, and their keys with them: they are no metrics, and how
    the run ended is read from the file's last line (:func:`jsonl_end`)."""
    if df is None or df.schema.get("event") != pl.String or df.schema.get("state") != pl.String:
        return df, lines
    is_end = (pl.col("event") == END_EVENT) & pl.col("state").is_in(END_STATES)
    # (a row that also holds a value of its own is a user's row, kept whatever it says)
    others = [c for c in df.columns if c not in END_KEYS and c not in ("step", "time")]
    if others:
        is_end = is_end & pl.all_horizontal(pl.col(c).is_null() for c in others)
    drop = df.select(is_end.fill_null(False)).to_series()
    if not drop.any():
        return df, lines
    keep = ~drop
    df, lines = df.filter(keep), lines.filter(keep)
    empty = [c for c in END_KEYS if c in df.columns and df.get_column(c).null_count() == df.height]
    return df.drop(empty), lines


def strip_end_lines(body: bytes) -> bytes:
    """``body`` (complete lines) without the end records that close it: one in the last
    line would send a large file down the general path (3.6x slower)."""
    end = len(body)
    while end:
        start = body.rfind(b"\n", 0, end - 1) + 1
        if not only_end_records(body[start:end]):
            break
        end = start
    return body[:end]


def before_closing_end(data: bytes | mmap.mmap, size: int) -> int:
    """Where the end record that is the last line of ``data[:size]`` begins (``size``
    when there is none)."""
    last = data.rfind(b"\n", 0, size - 1) + 1
    return last if only_end_records(data[last:size]) else size


def no_metrics(path: Path, end: RunEnd | None) -> str:
    """Why a JSONL file gave no metrics: a run that crashed before its first record says so."""
    if end is not None:
        return f"{path}: no metrics before its end record (the run {end.text()})"
    return f"{path}: no JSON objects with metrics found"


# ---- text logs ------------------------------------------------------------------------------

_FINISHED = re.compile(
    rb"\[after training is done\]|exits successfully|exits with return code = 0\b"
    rb"|Training of experiment is done"  # (YOLOX's Trainer.after_train)
)
_CRASHED = re.compile(
    rb"Traceback \(most recent call last\)|^\s*(?:\S+:\s*)?KeyboardInterrupt\s*$"
    rb"|exits with return code = -?[1-9]\d*|ChildFailedError|Segmentation fault",
    re.M,
)
#: a training line: Megatron's / NeoX's ``iteration N/ M |``, nanoGPT's ``step:N/M``,
#: DeepSpeed's ``steps: N loss:``
_TRAINING = re.compile(
    rb"\biteration\s+\d+\s*/\s*\d+\s*\||^\s*step:\d+/\d+|^\s*steps:\s*\d+\s+loss:", re.M
)
#: an exception's last line, ``RuntimeError: ...`` (a rank prefix ``[rank3]:`` or ``3:`` kept out)
_EXCEPTION = re.compile(
    rb"^\s*(?:\[rank\d+\]:\s*|\d+:\s*)?((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Interrupt))(?::|\s*$)",
    re.M,
)


def text_end(path: Path, training: re.Pattern[bytes] | None = None) -> RunEnd | None:
    """The end a text log's last bytes say, or None. ``training``: the lines the reader
    took training steps from (its shapes'), beside the ones known here."""
    return text_end_of(tail(path), training)


def text_end_of(data: bytes, training: re.Pattern[bytes] | None = None) -> RunEnd | None:
    # (a YOLOX log whose last launch finished after two crashed ones was "crashed": its
    # training lines were not known here, so a traceback before them looked the last word)
    last_train = max(
        (m.end() for p in (_TRAINING, training) if p is not None for m in p.finditer(data)),
        default=-1,
    )
    fin = max((m.start() for m in _FINISHED.finditer(data)), default=-1)
    crash = max((m.start() for m in _CRASHED.finditer(data)), default=-1)
    at = max(fin, crash)
    if at < 0 or at < last_train:
        return None  # no mark, or training went on after it
    if fin > crash:
        mark = _FINISHED.search(data, fin)
        what = mark.group(0).decode() if mark else "end of training"
        return RunEnd("finished", f"the log's `{what}` line")
    errors = [m.group(1).decode() for m in _EXCEPTION.finditer(data) if m.start() > last_train]
    return RunEnd(
        "crashed",
        "a traceback or failed exit after the log's last training line",
        error=errors[-1] if errors else None,
    )


def attach(run: Run, end: RunEnd | None) -> None:
    """Put ``end`` in the run's metadata, its step the run's last when the mark gives none."""
    if end is None:
        return
    if end.step is None and run.frame.height:
        # the standing values' last step: a relaunch from step 0 ends where it ended, not
        # where the superseded launch before it got to
        last = run.standing().get_column("step").max()
        if isinstance(last, int):
            end = replace(end, step=last)
    run.metadata[METADATA_KEY] = end.to_dict()
