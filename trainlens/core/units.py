"""Units and meanings a log does not state, decided from names and values, and noted.

Canonical units (docs/metrics.md): seconds for times, bytes for memory, a fraction for
MFU. A name that says its unit (``step_time_ms``, ``max_reserved(gib)``) is scaled by
its alias; this module decides for the names that say nothing, once every reader has
built its frame, and every decision is an info note (``DataIssue`` kind ``units``):

| metric | logged as | decided by |
|---|---|---|
| memory (``mem/*``, ``gpu<i>/mem_used``) | bytes, MB or GB | a unit in the raw name (``_mb``, ``(GiB)``), else the median: ≥ 2**20 bytes; 256 … 2**20 MB; below 256 GB (no training process holds under 256 bytes or 1 MiB, none over 1 TiB per device) |
| ``step_time``, ``step_time_avg``, ``dataloader_wait`` | s or ms | ``ms`` in the raw name; else a step time over 1000 s is milliseconds (no logged step takes 17 minutes), and a wait beside it follows its unit when it would exceed the whole step otherwise |
| ``mfu`` | fraction or percent | values above 1 and at most 100 are percent |
| ``tokens_per_sec`` / ``samples_per_sec`` | whole job or per device | ``per_gpu``, ``per_device``, ``per_rank`` in the raw name, or torchtitan's ``tps`` (per device by its docs): said in a note (the device count is not in the log) |
| the train loss | a total, or only its parts | a total (``total_loss``, ``loss/total``) is the train loss (aliases); a run with only parts (``loss_cls``, ``loss_bbox``, …) and no total is said so, and no train loss is judged |

A wrong guess costs a misread unit, which is why each is named in a note: a reader that
knows its writer's unit (MMEngine's ``memory`` in MB) states it with an alias scale,
and a scaled alias is never second-guessed here.
"""  # noqa: E501  (tables: one row a line)

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

import polars as pl

from trainlens.core.frame import Blocks, DataIssue, block_lengths
from trainlens.core.names import AliasTable

MEMORY = re.compile(r"^(?:mem/(?:allocated|reserved|rss)|gpu\d+/mem_used)$")
TIMES = ("step_time", "step_time_avg")
_MEM_UNIT = re.compile(r"(?:^|[^a-z])(k|m|g)i?b(?:$|[^a-z])")
_MS = re.compile(r"(?:^|[^a-z])(?:ms|msec|millis|milliseconds)(?:$|[^a-z])")
_PER_DEVICE = re.compile(r"per[_ ]?(?:gpu|device|rank|chip)|/gpu$|^throughput\(tps\)$|^tps$")
_LOSS_PART = re.compile(r"^(?:train/)?(?:loss[_/][a-z0-9_.]+|[a-z0-9_.]+_loss)$")
_NOT_TRAIN = re.compile(r"^(?:val|valid|validation|eval|test|dev)[/_]")
_MB_FLOOR, _BYTES_FLOOR = 256.0, float(1 << 20)
_SCALE = {"k": float(1 << 10), "m": float(1 << 20), "g": float(1 << 30)}
_UNIT_NAME = {"k": "KiB", "m": "MiB", "g": "GiB"}


#: each metric's rows (first row, length) when the frame holds one block per metric
Spans = dict[str, tuple[int, int]]


def _values(frame: pl.DataFrame, metric: str, spans: Spans | None) -> pl.Series:
    """The metric's values in frame order: a slice of its block when the blocks are
    known (a filter over every row cost 80 ms a metric at 11M rows)."""
    if spans is not None:
        a, k = spans.get(metric, (0, 0))
        return frame.get_column("value").slice(a, k)
    return frame.filter(pl.col("metric") == metric).get_column("value")


def _median(frame: pl.DataFrame, metric: str, spans: Spans | None = None) -> float | None:
    v = _values(frame, metric, spans)
    v = v.filter(v.is_finite())
    v = v.filter(v > 0)
    return float(v.median()) if v.len() else None  # type: ignore[arg-type]


def _spans(frame: pl.DataFrame, blocks: Blocks | None) -> Spans | None:
    if blocks is None or blocks.frame is not frame or len(set(blocks.names)) < len(blocks.names):
        return None  # (a name in two blocks: the filter finds both)
    lengths = block_lengths(blocks.starts, frame.height)
    return {m: (a, k) for m, a, k in zip(blocks.names, blocks.starts, lengths, strict=True)}


def _note(source: str, message: str) -> DataIssue:
    return DataIssue(kind="units", source=source, message=message, severity="info")


def _scaled(frame: pl.DataFrame, metric: str, factor: float) -> pl.DataFrame:
    return frame.with_columns(
        pl.when(pl.col("metric") == metric)
        .then(pl.col("value") * factor)
        .otherwise(pl.col("value"))
        .alias("value")
    )


def infer(
    frame: pl.DataFrame,
    raw_names: Mapping[str, str],
    aliases: AliasTable,
    source: str,
    blocks: Blocks | None = None,
) -> tuple[pl.DataFrame, list[DataIssue]]:
    """The frame with undeclared units made canonical, and a note for each decision.
    ``raw_names``: canonical name -> as logged (:attr:`trainlens.core.run.Run.raw_names`);
    ``blocks``: where each metric's block starts, when the frame is one per metric (a
    scaled metric keeps its rows where they were, so they stay valid)."""
    metrics = set(raw_names)
    if not metrics:
        return frame, []
    notes: list[DataIssue] = []
    spans = _spans(frame, blocks)

    def undeclared(metric: str) -> str | None:
        raw = raw_names.get(metric)
        if raw is None:
            return None
        alias = aliases.lookup(raw)
        return raw if alias is None or alias.scale == 1.0 else None

    for metric in sorted(m for m in metrics if MEMORY.match(m)):
        raw = undeclared(metric)
        med = _median(frame, metric, spans) if raw is not None else None
        if raw is None or med is None:
            continue
        unit = _MEM_UNIT.search(raw.lower())
        if unit:
            key = unit.group(1)
            why = f"its name says {_UNIT_NAME[key]}"
        elif med >= _BYTES_FLOOR:
            continue
        elif med >= _MB_FLOOR:
            key, why = "m", f"its median, {med:.4g}, is too small for bytes and fits MB"
        else:
            key, why = "g", f"its median, {med:.4g}, is too small for bytes or MB and fits GB"
        frame = _scaled(frame, metric, _SCALE[key])
        notes.append(_note(source, f"`{raw}` read as {_UNIT_NAME[key]} ({why}), kept as bytes"))

    time_in_ms = False
    for metric in TIMES:
        raw = undeclared(metric)
        med = _median(frame, metric, spans) if raw is not None else None
        if raw is None or med is None:
            continue
        if _MS.search(raw.lower()):
            why = "its name says ms"
        elif med > 1000:
            why = f"its median, {med:.4g}, would be over 16 minutes a step in seconds"
        else:
            continue
        time_in_ms = time_in_ms or metric == "step_time"
        frame = _scaled(frame, metric, 1e-3)
        notes.append(_note(source, f"`{raw}` read as milliseconds ({why}), kept as seconds"))

    raw_wait = undeclared("dataloader_wait")
    wait = _median(frame, "dataloader_wait", spans) if raw_wait is not None else None
    if raw_wait is not None and wait is not None:
        # (the step time's median only when it decides: a median is a sort of its values)
        step = _median(frame, "step_time", spans) if time_in_ms else None
        if _MS.search(raw_wait.lower()):
            why = "its name says ms"
        elif time_in_ms and step is not None and wait > 10 * step and wait / 1000 < step:
            why = "the step time beside it is in ms, and in seconds the wait would exceed the step"
        else:
            why = ""
        if why:
            frame = _scaled(frame, "dataloader_wait", 1e-3)
            notes.append(
                _note(source, f"`{raw_wait}` read as milliseconds ({why}), kept as seconds")
            )

    raw_mfu = undeclared("mfu")
    if raw_mfu is not None:
        v = _values(frame, "mfu", spans)
        v = v.filter(v.is_finite())
        if v.len() and float(v.median()) > 1.0 and float(v.max()) <= 100.0:  # type: ignore[arg-type]
            frame = _scaled(frame, "mfu", 0.01)
            notes.append(
                _note(source, f"`{raw_mfu}` read as percent (values 1–100), kept as a fraction")
            )

    for metric in ("tokens_per_sec", "samples_per_sec"):
        raw = raw_names.get(metric)
        if raw is not None and _PER_DEVICE.search(raw.lower()):
            notes.append(
                _note(
                    source,
                    f"`{raw}` is throughput per device; the whole job's is that times the "
                    "number of devices, which the log does not give",
                )
            )

    if "train/loss" not in metrics:
        parts = loss_parts(raw_names.values())
        if len(parts) >= 2:
            shown = ", ".join(parts[:6]) + ("…" if len(parts) > 6 else "")
            notes.append(
                _note(
                    source,
                    f"the run logs {len(parts)} parts of its loss ({shown}) and no total: no "
                    "train loss is judged (name one with an alias to train/loss)",
                )
            )
    return frame, notes


def loss_parts(raw_names: Iterable[str]) -> list[str]:
    """The training loss parts among a run's logged names (``loss_cls``, ``loss/bbox``,
    YOLO's ``train/box_loss`` …; not validation ones), sorted. A total beside two or more
    of them is their (weighted) sum, not one cross-entropy."""
    return sorted(
        raw
        for raw in raw_names
        if _LOSS_PART.match(low := raw.lower())
        and not _NOT_TRAIN.match(low)
        and "scale" not in low  # (fp16's loss_scale is no part of the loss)
    )
