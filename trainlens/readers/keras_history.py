"""Keras' History saved as JSON: ``json.dump(model.fit(...).history, f)``.

One JSON object whose keys are metrics and whose values are the per-epoch lists
(``{"loss": [...], "accuracy": [...], "val_loss": [...], "val_accuracy": [...]}``): one
run, the list index is the epoch and the step (Keras' CSVLogger and TensorBoard callback
count epochs from 0 too). A key whose value is not a list of numbers is named in a note;
``null`` items are absent values.
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

FORMAT = "keras-history"
# a history is a few KB (one number per epoch and metric); beyond this it is not one
MAX_BYTES = 64 << 20
# `{"<key>": [<number or a closing bracket>` at the start of the file
_HEAD = re.compile(
    rb'^\s*\{\s*"[^"\\]{1,200}"\s*:\s*\[\s*(?:-?[0-9.]|NaN|-?Infinity|null|\])', re.ASCII
)


def sniff(path: Path, head: bytes) -> bool:
    return not path.is_dir() and _HEAD.match(head) is not None


def _numbers(values: list[Any]) -> list[float | None] | None:
    out: list[float | None] = []
    for v in values:
        if v is None:
            out.append(None)
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out.append(float(v))
        else:
            return None
    return out


def read(path: Path, opts: ReadOptions) -> list[Run]:
    source = str(path)
    if path.stat().st_size > MAX_BYTES:
        raise UnreadableInputError(f"{path}: too large for a Keras history ({MAX_BYTES} bytes)")
    try:
        data = json.loads(path.read_bytes())
    except (ValueError, RecursionError) as exc:
        why = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise UnreadableInputError(f"{path}: not a JSON object ({why})") from None
    if not isinstance(data, dict):
        raise UnreadableInputError(f"{path}: not a JSON object of per-epoch lists")
    steps: list[int] = []
    names: list[str] = []
    values: list[float] = []
    skipped: list[str] = []
    for key, raw in data.items():
        series = _numbers(raw) if isinstance(raw, list) else None
        if series is None:
            skipped.append(str(key))
            continue
        for epoch, v in enumerate(series):
            if v is not None:
                steps.append(epoch)
                names.append(str(key))
                values.append(v)
    if not values:
        raise UnreadableInputError(f"{path}: no per-epoch lists of numbers found")
    issues = [
        DataIssue(
            kind="no-step",
            source=source,
            message="a Keras history: the list index (the epoch, from 0) is the step",
            severity="info",
        )
    ]
    if skipped:
        issues.append(
            DataIssue(
                kind="non-metric-column",
                source=source,
                message=(
                    f"{len(skipped)} key(s) hold no list of numbers and are not metrics: "
                    + ", ".join(skipped[:8])
                    + ("…" if len(skipped) > 8 else "")
                ),
                count=len(skipped),
                severity="info",
            )
        )
    order = list(dict.fromkeys(names))
    long = pl.DataFrame(
        {
            "step": pl.Series(steps, dtype=pl.Int64),
            "metric": pl.Series(names, dtype=pl.Enum(order)),
            "value": pl.Series(values, dtype=pl.Float64),
            "wall_time": pl.Series([None] * len(values), dtype=pl.Float64),
        }
    )
    run = build_run(
        long,
        name=run_name_for(path),
        source=source,
        fmt=FORMAT,
        aliases=opts.aliases,
        issues=issues,
    )
    run.cursor[source] = path.stat().st_size
    return [run]
