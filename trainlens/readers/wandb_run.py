"""W&B run folders and transaction logs (``wandb/run-*/run-<id>.wandb``), without W&B.

Every W&B run, online or offline, leaves a complete local copy of what it logged: the
``run-<id>.wandb`` transaction log in ``wandb/run-<date>-<id>/`` (``offline-run-…`` when
offline). Its history records hold every ``wandb.log`` call at full resolution (the
public API's ``run.history()`` samples 500 points). Read here:

- **History**: each item is a metric at the record's ``_step`` (or, where the trainer
  logs its own step, ``trainer/global_step`` / ``train/global_step``, at that:
  :mod:`trainlens.readers._wandb_steps`); ``_timestamp`` is the wall time; ``_step``,
  ``_runtime`` and ``_timestamp`` are W&B's own and not metrics.
  A nested dict (``{"eval": {"loss": x}}``) is W&B's nested key, read as ``eval.loss``
  as W&B shows it; a key written with slashes (``train/loss``) keeps them. Values that are
  no number (media, tables, strings) are left out and counted in one note.
- **System metrics** (W&B's stats records: ``gpu.0.gpu``, ``gpu.0.powerWatts``,
  ``proc.memory.rssMB``, …) are metrics named ``system/<key>`` as W&B's charts show
  them, each at the last history step logged before its sample (they are sampled on a
  clock, not per step), with their own wall time.
- **Config** (the run record's config and later config records, ``{key: value}`` with
  nested values as JSON) goes to ``metadata["params"]``, where
  :mod:`trainlens.runconfig` finds the declared schedule and the model size; the run's
  name is its display name, ``metadata["wandb"]`` holds its id, project, entity, host
  and start time, ``metadata["summary"]`` the ``files/wandb-summary.json`` when there.
- **Layout**: one ``.wandb`` file, one run folder, or a folder of run folders (W&B's
  ``wandb/``): each run id one run. A resumed run (``resume=`` with the same id) writes
  a new folder: the folders of one id are read in the order of their date and
  concatenated, so a step going back is a restart (:func:`trainlens.core.run.build_run`).
  ``latest-run`` (a link to one of them) is not read twice.

Damage (a truncated file, a bad checksum) is a data-quality note naming the block and byte
offset; every sound record is kept (:mod:`trainlens.readers._wandb_log`).
"""

from __future__ import annotations

import json
import mmap
import os
import struct
from collections import Counter
from pathlib import Path
from typing import Any

import polars as pl

from trainlens.core import steps
from trainlens.core.dataclass import dataclass, field
from trainlens.core.errors import UnreadableInputError
from trainlens.core.frame import strictly_increasing
from trainlens.core.run import DataIssue, Run, build_run
from trainlens.core.runstate import METADATA_KEY, RunEnd
from trainlens.readers import _shrink
from trainlens.readers import _wandb_log as wl
from trainlens.readers._outside import links_out, outside_note
from trainlens.readers._wandb_compiled import Compiled, from_compiled
from trainlens.readers._wandb_meta import LOG_GLOB, groups, is_run_folder, machine_of, run_file
from trainlens.readers._wandb_steps import trainer_steps
from trainlens.readers.base import ReadOptions, readable_runs

try:
    from trainlens.readers import _wbscan
except ImportError:  # not compiled at install: the numpy lane reads every file
    _wbscan = None  # type: ignore[assignment]

FORMAT = "wandb-run"
# W&B names a folder started in the same second as another of the same id `…-<id>-1`
SYSTEM_PREFIX = "system/"
_INSIDE = "a run's files are read inside its folder"
MAX_THREADS = 4  # the compiled lane's, for one log
THREAD_BYTES = 16 << 20  # a smaller log is read in one thread
ROW_SCHEMA = {
    "rec": pl.Int64,
    "step": pl.Int64,
    "metric": pl.String,
    "value": pl.Float64,
    "wall_time": pl.Float64,
}

# Record field numbers (wandb/proto/wandb_internal.proto)
R_HISTORY, R_CONFIG, R_STATS, R_RUN, R_EXIT = 2, 5, 7, 17, 18
H_ITEM, H_STEP = 1, 2
I_KEY, I_NESTED, I_BOOL, I_INT, I_NUMBER, I_VALUE_JSON = 1, 2, 4, 5, 6, 16
S_TIMESTAMP, S_ITEM = 2, 3
C_UPDATE, C_REMOVE = 1, 2
RUN_FIELDS = {1: "run_id", 2: "entity", 3: "project", 6: "group", 7: "job_type", 13: "host"}
RUN_CONFIG, RUN_DISPLAY_NAME, RUN_START_TIME = 4, 8, 17


def sniff(path: Path, head: bytes) -> bool:
    """A ``.wandb`` transaction log (its magic), a run folder holding one, or a folder of
    run folders."""
    if path.is_dir():
        return is_run_folder(path)
    return wl.has_magic(head)


# ---- decoding ------------------------------------------------------------------------------


@dataclass
class _Log:
    """What one run's records hold, column by column."""

    steps: list[int] = field(default_factory=list)
    metrics: list[str] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    walls: list[float | None] = field(default_factory=list)
    stats: list[tuple[float, str, float]] = field(default_factory=list)  # (time, name, value)
    config: dict[str, Any] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    skipped: Counter[str] = field(default_factory=Counter)
    issues: list[DataIssue] = field(default_factory=list)
    last_step: int = -1
    bad_steps: list[tuple[int, int, str]] = field(default_factory=list)  # rec, values, why
    recs: list[int] = field(default_factory=list)  # the record each exact-path row came from
    rec: int = 0  # the record being decoded (its place in the run: file, byte offset)
    fast: list[pl.DataFrame] = field(default_factory=list)  # rec, step, metric, value, wall
    compiled: list[Compiled] = field(default_factory=list)  # one a file
    exit: tuple[int, int] | None = None  # the exit record's exit code, and its record


def _text(buf: bytes | memoryview, a: int, b: int) -> str:
    return wl.text(bytes(buf[a:b]))


def _item_key(buf: bytes | memoryview, fs: list[tuple[int, int, int, int]]) -> str:
    nested = [_text(buf, a, b) for n, w, a, b in fs if n == I_NESTED and w == 2]
    if nested:
        return ".".join(nested)
    return next((_text(buf, a, b) for n, w, a, b in fs if n == I_KEY and w == 2), "")


def _number(raw: str) -> float | None:
    """A JSON value as a number (W&B writes NaN, Infinity, -Infinity), else None."""
    try:
        return float(raw)
    except ValueError:
        pass
    try:
        v = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if isinstance(v, bool):
        return float(v)
    return float(v) if isinstance(v, (int, float)) else None


def _item_value(buf: bytes | memoryview, fs: list[tuple[int, int, int, int]]) -> float | None:
    for n, w, a, b in fs:
        if n == I_VALUE_JSON and w == 2:
            return _number(_text(buf, a, b))
        if n == I_NUMBER and w == 1:
            return float(struct.unpack_from("<d", buf, a)[0])
        if n in (I_INT, I_BOOL) and w == 0:
            return float(a - (1 << 64) if a >= 1 << 63 else a)
    return None


def _item_text(buf: bytes | memoryview, fs: list[tuple[int, int, int, int]]) -> object:
    """An item's value as written: value_json's text, else the number (for the step,
    which must not go through a float: 2**63-1 would become 2**63)."""
    for n, w, a, b in fs:
        if n == I_VALUE_JSON and w == 2:
            return _text(buf, a, b)
        if n in (I_INT, I_BOOL) and w == 0:
            return a - (1 << 64) if a >= 1 << 63 else a
    return _item_value(buf, fs)


def _history(log: _Log, buf: bytes | memoryview, a: int, b: int) -> None:
    row: dict[str, float] = {}
    raw_step: object = None
    step_num: int | None = None
    for n, w, x, y in wl.fields(buf, a, b):
        if n == H_ITEM and w == 2:
            fs = wl.fields(buf, x, y)
            key = _item_key(buf, fs)
            if key == "_step":
                raw_step = _item_text(buf, fs)
                continue
            value = _item_value(buf, fs)
            if value is None:
                log.skipped[key] += 1
            else:
                row[key] = value
        elif n == H_STEP and w == 2:
            step_num = next((v for f, ww, v, _ in wl.fields(buf, x, y) if f == 1 and ww == 0), 0)
    wall = row.pop("_timestamp", None)
    row.pop("_runtime", None)
    # W&B's `_step`, else the history record's step field, else the one after the last
    # (a record of another writer); one that is no step skips the record, counted
    given = raw_step if raw_step is not None else step_num
    step = log.last_step + 1 if given is None else steps.step_of(given, negative=False)
    if isinstance(step, str):
        if row:
            log.bad_steps.append((log.rec, len(row), step))
        return
    log.last_step = step
    for key, value in row.items():
        log.recs.append(log.rec)
        log.steps.append(step)
        log.metrics.append(key)
        log.values.append(value)
        log.walls.append(wall)


def _stats(log: _Log, buf: bytes | memoryview, a: int, b: int) -> None:
    when: float | None = None
    items: list[tuple[str, float]] = []
    for n, w, x, y in wl.fields(buf, a, b):
        if n == S_TIMESTAMP and w == 2:
            ts = {f: v for f, ww, v, _ in wl.fields(buf, x, y) if ww == 0}
            when = ts.get(1, 0) + ts.get(2, 0) / 1e9
        elif n == S_ITEM and w == 2:
            fs = wl.fields(buf, x, y)
            value = _item_value(buf, fs)
            if value is not None:
                items.append((_item_key(buf, fs), value))
    if when is not None:
        log.stats.extend((when, SYSTEM_PREFIX + k, v) for k, v in items)


def _config(log: _Log, buf: bytes | memoryview, a: int, b: int) -> None:
    for n, w, x, y in wl.fields(buf, a, b):
        if w != 2 or n not in (C_UPDATE, C_REMOVE):
            continue
        fs = wl.fields(buf, x, y)
        nested = [_text(buf, p, q) for f, ww, p, q in fs if f == I_NESTED and ww == 2]
        path = nested or [_item_key(buf, fs)]
        raw = next((_text(buf, p, q) for f, ww, p, q in fs if f == I_VALUE_JSON and ww == 2), "")
        node = log.config
        for part in path[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                child = node[part] = {}
            node = child
        if n == C_REMOVE:
            node.pop(path[-1], None)
            continue
        try:
            node[path[-1]] = json.loads(raw)
        except (ValueError, RecursionError):
            node[path[-1]] = raw


def _run(log: _Log, buf: bytes | memoryview, a: int, b: int) -> None:
    for n, w, x, y in wl.fields(buf, a, b):
        if n in RUN_FIELDS and w == 2:
            log.info.setdefault(RUN_FIELDS[n], _text(buf, x, y))
        elif n == RUN_DISPLAY_NAME and w == 2:
            log.info["name"] = _text(buf, x, y)
        elif n == RUN_CONFIG and w == 2:
            _config(log, buf, x, y)
        elif n == RUN_START_TIME and w == 2 and "start_time" not in log.info:
            ts = {f: v for f, ww, v, _ in wl.fields(buf, x, y) if ww == 0}
            log.info["start_time"] = ts.get(1, 0) + ts.get(2, 0) / 1e9


def _exit(log: _Log, buf: bytes | memoryview, a: int, b: int) -> None:
    """The exit record W&B writes when the run finishes (``RunExitRecord``: exit_code 1,
    runtime 2); a resumed run's later exit replaces an earlier one."""
    got = {n: v for n, w, v, _ in wl.fields(buf, a, b) if w == 0}
    code = got.get(1, 0)
    log.exit = (code - (1 << 64) if code >= 1 << 63 else code, log.rec)


_DECODERS = {
    R_HISTORY: _history,
    R_STATS: _stats,
    R_CONFIG: _config,
    R_RUN: _run,
    R_EXIT: _exit,
}


def _record(log: _Log, buf: bytes | memoryview, a: int, b: int) -> None:
    for n, w, x, y in wl.fields(buf, a, b):
        decode = _DECODERS.get(n)
        if decode is not None and w == 2:
            decode(log, buf, x, y)


def _read_log(log: _Log, path: Path, file_no: int, *, compiled: bool = True) -> int:
    """Decode every sound record of one ``.wandb`` file into ``log``; the records read.

    History records go through the compiled lane (``_wbscan``) when it is built and the
    file is sound, else through the numpy lane (:mod:`trainlens.readers._wandb_fast`,
    which also reports damage); the records either leaves (config, stats, run, history
    records of another layout) through the exact decoder, record by record."""
    with path.open("rb") as fh:
        if not wl.has_magic(fh.read(len(wl.MAGIC))):
            raise UnreadableInputError(f"{path}: not a W&B transaction log (no :W&B header)")
    base = file_no << 40  # record order across a resumed run's files
    scanned, before = _scan_compiled(path) if compiled and _wbscan else (None, 0)
    undecodable = 0
    if isinstance(scanned, tuple):
        exact, count = from_compiled(scanned, log.compiled, base)
    else:  # not built, or a damaged file: the numpy lane reads and reports it
        # (imported here: the compiled lane needs no numpy, whose import is ~0.1 s)
        from trainlens.readers import _wandb_fast as wf

        size = path.stat().st_size
        arr = wf.buffer_for(size)
        with path.open("rb") as fh:
            got = _shrink.fill(fh, memoryview(arr.data)[:size])
        log.issues.extend(_shrink.note_if_shrank(path, got, max(before, size)))
        records = wf.records(arr, got)
        _note_damage(log, path, records.damage)
        exact = wf.history_fast(arr, records, log.fast, base)
        count, undecodable = records.count, records.undecodable
    bad = undecodable
    for rec, data in sorted(exact, key=lambda x: x[0]):
        log.rec = base + rec
        try:
            _record(log, data, 0, len(data))
        except (ValueError, IndexError, struct.error):
            bad += 1
    _note_bad_steps(log, path, base)
    if bad:
        log.issues.append(
            DataIssue(
                kind="corrupt-record",
                source=str(path),
                message=f"{bad} records whose checksum holds could not be decoded",
                count=bad,
            )
        )
    return count


def _note_bad_steps(log: _Log, path: Path, base: int) -> None:
    """One note for this file's history records skipped for a ``_step`` that is no step."""
    mine = [(rec - base, n, why) for rec, n, why in log.bad_steps if rec >> 40 == base >> 40]
    if not mine:
        return
    mine.sort()
    log.issues.append(
        steps.bad_step_note(
            source=str(path),
            unit="record",
            where=[f"at byte {at}" for at, _, _ in mine[:100]],
            n_values=sum(n for _, n, _ in mine),
            n_records=len(mine),
            reasons=Counter(why for _, _, why in mine),
            key="_step",
        )
    )


def _scan_compiled(path: Path) -> tuple[tuple[Any, ...] | str | None, int]:
    """The compiled lane over the file mapped, not copied (a 1.1 GB log: reading it into
    memory cost more CPU than scanning it), under the guard of :mod:`._shrink` (else over
    a copy), and its size when the scan began; None when it was cut meanwhile."""
    if not _shrink.GUARDED:
        return _wbscan.scan(data := _shrink.read_copy(path).data, threads=_threads(len(data))), 0
    with _shrink.guard(path) as g, path.open("rb") as fh:
        if not os.fstat(fh.fileno()).st_size:
            return "an empty file", g.size
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            got = _wbscan.scan(mm, threads=_threads(len(mm)))
    return (None if g.cut else got), g.size


def _threads(size: int) -> int:
    """Ranges of the log read side by side: one per CPU this process may use (at most
    MAX_THREADS), each of at least THREAD_BYTES. Two on a 1.1 GB log (1M steps), on a
    shared 2-core machine: the scan's wall time 0.69 -> 0.52 s (min of 3) for ~0.04 s more
    CPU (the later range's rows are copied onto the first's)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # (not on every platform)
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, MAX_THREADS, size // THREAD_BYTES))


def _note_damage(log: _Log, path: Path, damage: list[wl.Damage]) -> None:
    for d in damage:
        log.issues.append(
            DataIssue(
                kind="corrupt-record",
                source=str(path),
                location=f"block {d.block}, byte {d.offset}",
                message=f"{d.why}: {d.records or 'no'} record(s) left out",
                count=d.records,
            )
        )


# ---- the run -------------------------------------------------------------------------------


def _frame(log: _Log) -> tuple[pl.DataFrame, list[int] | None]:
    """The run's long frame, and its block lengths when it is one block per metric (an
    Enum in block order: build_run then skips a pass over every row)."""
    exact = pl.DataFrame(
        {
            "rec": log.recs,
            "step": log.steps,
            "metric": log.metrics,
            "value": log.values,
            "wall_time": log.walls,
        },
        schema=ROW_SCHEMA,
    )
    if len(log.compiled) == 1 and not log.fast and exact.is_empty():
        return _from_compiled(log, log.compiled[0])
    fast = log.fast + [c.frame() for c in log.compiled]
    parts = [f.with_columns(pl.col("metric").cast(pl.String)) for f in fast]
    if len(parts) == 1 and exact.is_empty():
        history = fast[0].drop("rec")  # (one file, one lane: one block per metric)
        return _blocked(history, _stats_frame(log, history) if log.stats else None)
    else:
        # rows of one metric in the order they were logged, whichever lane read them
        history = (
            pl.concat([*parts, exact], how="vertical").sort("metric", "rec", maintain_order=True)
        ).drop("rec")
    if not log.stats:
        return history, None
    stats = _stats_frame(log, history)
    return pl.concat([history.with_columns(pl.col("metric").cast(pl.String)), stats]), None


def _from_compiled(log: _Log, c: Compiled) -> tuple[pl.DataFrame, list[int] | None]:
    """The frame of the compiled lane's blocks, with the system metrics as blocks of their
    own: one Enum over both, made once (12M rows: no concatenation or second gather)."""
    stats = None
    if log.stats:
        marks = pl.DataFrame([c.mark_step, c.mark_wall])
        stats = _stats_frame(log, marks).sort("metric", maintain_order=True)
        if set(stats.get_column("metric").unique().to_list()) & set(c.names):
            return _blocked(c.frame().drop("rec"), stats)  # (a key spelled like a system one)
    if stats is None:
        extra: list[tuple[str, int]] = []
        step, value, wall = c.step, c.value, c.wall
    else:
        per = stats.group_by("metric", maintain_order=True).len()
        extra = list(per.iter_rows())
        step = pl.concat([c.step, stats.get_column("step")], rechunk=False)
        value = pl.concat([c.value, stats.get_column("value")], rechunk=False)
        wall = pl.concat([c.wall, stats.get_column("wall_time")], rechunk=False)
    frame = pl.DataFrame(
        [step.alias("step"), c.metric(extra), value.alias("value"), wall.alias("wall_time")]
    )
    return frame, c.counts + [n for _, n in extra]


def _blocked(
    history: pl.DataFrame, stats: pl.DataFrame | None
) -> tuple[pl.DataFrame, list[int] | None]:
    """History in blocks (an Enum of its metrics, in order), system metrics after it."""
    metric = history.get_column("metric")
    names = [str(c) for c in metric.dtype.categories.to_list()]  # type: ignore[attr-defined]
    import numpy as np  # (the lanes that made this frame imported it already)

    counts = np.bincount(metric.to_physical().to_numpy(), minlength=len(names)).tolist()
    if 0 in counts:  # (a key met only in records the exact decoder read: no block)
        parts = [history.with_columns(metric.cast(pl.String))]
        return pl.concat(parts + ([] if stats is None else [stats])), None
    if stats is None or stats.is_empty():
        return history, counts
    stats = stats.sort("metric", maintain_order=True)
    extra = stats.get_column("metric").unique(maintain_order=True).to_list()
    if set(extra) & set(names):  # (a logged key spelled like a system metric)
        return pl.concat([history.with_columns(metric.cast(pl.String)), stats]), None
    every = names + extra
    enum = pl.Enum(every)
    stats_codes = stats.get_column("metric").replace_strict(
        extra, range(len(names), len(every)), return_dtype=pl.UInt32
    )
    codes = pl.concat([metric.to_physical().cast(pl.UInt32), stats_codes])
    frame = pl.concat([history.drop("metric"), stats.drop("metric")]).with_columns(
        pl.Series("metric", every, dtype=enum).gather(codes)
    )
    stats_counts = stats.group_by("metric", maintain_order=True).len().get_column("len")
    return frame.select("step", "metric", "value", "wall_time"), counts + stats_counts.to_list()


def _stats_frame(log: _Log, history: pl.DataFrame) -> pl.DataFrame:
    """System samples at the last history step logged at or before each (the first step
    before any was logged)."""
    stats = pl.DataFrame(
        log.stats,
        schema={"wall_time": pl.Float64, "metric": pl.String, "value": pl.Float64},
        orient="row",
    ).sort("wall_time")
    marks = _marks(history)
    if marks.is_empty():
        first = history.get_column("step").min() if history.height else 0
        return stats.with_columns(step=pl.lit(first, dtype=pl.Int64)).select(
            "step", "metric", "value", "wall_time"
        )
    joined = stats.join_asof(marks, on="wall_time", strategy="backward")
    first = marks.get_column("step").min()
    return joined.with_columns(pl.col("step").fill_null(first).cast(pl.Int64)).select(
        "step", "metric", "value", "wall_time"
    )


def _marks(history: pl.DataFrame) -> pl.DataFrame:
    """Each step's first wall time, ordered by wall time (ties: in order of logging).

    The compiled lane gives one row a history record, in file order: there, steps that
    strictly increase and wall times that never go back (a run that did not restart) are
    checked in two passes and used as they are, instead of grouping and sorting 1M rows
    (~0.15 s, a tenth of the whole read)."""
    marks = history.select("step", "wall_time").filter(pl.col("wall_time").is_not_null())
    if not strictly_increasing(marks.get_column("step")):
        marks = marks.group_by("step", maintain_order=True).agg(pl.col("wall_time").min())
    wall = marks.get_column("wall_time")
    if wall.len() > 1 and not bool((wall.slice(1) >= wall.slice(0, wall.len() - 1)).all()):
        return marks.sort("wall_time", maintain_order=True)
    return marks.with_columns(wall.set_sorted())


def _read_group(source: Path, files: list[Path], opts: ReadOptions) -> Run:
    log = _Log()
    records = 0
    for no, f in enumerate(files):
        records += _read_log(log, f, no)
    if log.skipped:
        n = sum(log.skipped.values())
        shown = ", ".join(f"{k}: {v}" for k, v in log.skipped.most_common(4))
        log.issues.append(
            DataIssue(
                kind="non-scalar",
                source=str(source),
                message=f"{n} logged values that are no number left out ({shown})",
                count=n,
                severity="info",
            )
        )
    frame, blocks = _frame(log)
    if frame.is_empty():
        raise UnreadableInputError(f"{source}: no metrics found in {records} W&B records")
    rekeyed = trainer_steps(frame, str(source))  # Lightning's and HF's W&B loggers
    if rekeyed is not None:
        frame, blocks = rekeyed[0], None
        log.issues.append(rekeyed[1])
    meta = run_file(source, "wandb-metadata.json", log.issues, _INSIDE) or {}
    if source.is_dir():  # the logs left out by logs_in, said once
        log.issues += [outside_note(p, why, _INSIDE) for p, why in links_out(source, LOG_GLOB)]
    display = meta.get("display_name")
    name = log.info.get("name") or (display if isinstance(display, str) else None)
    name = name or log.info.get("run_id")
    metadata: dict[str, Any] = {"wandb": dict(log.info), "files": [str(f) for f in files]}
    machine = machine_of(meta)
    if machine:
        metadata["machine"] = machine
    config = {k: v for k, v in log.config.items() if k != "_wandb"}
    if config:
        metadata["params"] = config
    summary = run_file(source, "wandb-summary.json", log.issues, _INSIDE)
    if summary is not None:
        metadata["summary"] = summary
    if log.exit is not None and log.exit[1] >> 40 == len(files) - 1:
        # (an exit in an earlier file of a resumed run: the run went on after it)
        code = log.exit[0]
        end = RunEnd(
            "finished" if code == 0 else "crashed",
            f"W&B's exit record (exit code {code})",
            error=None if code == 0 else f"exit code {code}",
        )
        metadata[METADATA_KEY] = end.to_dict()
    run = build_run(
        frame,
        name=str(name or source.resolve().name),
        source=str(source),
        fmt=FORMAT,
        aliases=opts.aliases,
        metadata=metadata,
        issues=log.issues,
        blocks=blocks,
    )
    if METADATA_KEY in metadata and run.frame.height:
        run.metadata[METADATA_KEY]["step"] = run.frame.get_column("step").max()
    # system metrics (sampled every 15 s, at the last step logged before each sample) share
    # a step by design on slow steps: no repeated step worth a note
    sampled = {c for c, raw in run.raw_names.items() if raw.startswith(SYSTEM_PREFIX)}
    run.data_quality = [
        i
        for i in run.data_quality
        if not (i.kind == "duplicate-step" and set(i.details.get("metrics", ())) <= sampled)
    ]
    return run


def read(path: Path, opts: ReadOptions) -> list[Run]:
    found = groups(path)
    if not found:
        raise UnreadableInputError(f"{path}: no W&B run (run-<id>.wandb) found")
    runs: list[Run] = []
    errors: list[UnreadableInputError] = []
    for source, files in found:
        try:
            runs.append(_read_group(source, files, opts))
        except UnreadableInputError as exc:
            if len(found) == 1:
                raise
            errors.append(exc)
    return readable_runs(path, runs, errors)
