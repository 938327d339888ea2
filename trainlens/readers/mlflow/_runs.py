"""What every MLflow store shares: a run's identity and metadata, which runs to
read, their display names, and the long frame built from per-metric columns."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from trainlens.core.dataclass import dataclass, field
from trainlens.core.errors import UnreadableInputError
from trainlens.core.run import DataIssue
from trainlens.core.runstate import METADATA_KEY, RunEnd
from trainlens.readers._wide import enum_runs
from trainlens.readers.base import ReadOptions

FORMAT = "mlflow"


_RUN_STATUS = {1: "RUNNING", 2: "SCHEDULED", 3: "FINISHED", 4: "FAILED", 5: "KILLED"}


def read_head(path: Path, n: int = 4096) -> bytes:
    with path.open("rb") as fh:
        return fh.read(n)


@dataclass
class RunInfo:
    """One MLflow run found in a store, before its metrics are read."""

    run_id: str
    name: str
    source: str
    metadata: dict[str, Any]
    deleted: bool = False
    # file store: the run's metric files (name, path, size)
    files: list[tuple[str, str, int]] = field(default_factory=list)
    # file store: a meta.yaml (the run's or its experiment's) that was refused
    issues: list[DataIssue] = field(default_factory=list)


def select_runs(runs: list[RunInfo], opts: ReadOptions, where: Path) -> list[RunInfo]:
    """The runs to read: all live ones, or those whose id or name ``opts.runs`` lists."""
    if not runs:
        raise UnreadableInputError(f"{where}: no MLflow runs found")
    if not opts.runs:
        live = [r for r in runs if not r.deleted]
        if not live:
            raise UnreadableInputError(
                f"{where}: every MLflow run here is deleted "
                f"({describe(runs)}); select one by id or name to read it anyway"
            )
        return live
    wanted = [str(w) for w in opts.runs]
    by_key: dict[str, list[RunInfo]] = {}
    shown = unique_names(runs)  # "name (short id)" as a previous read displayed it
    for r in runs:
        for key in dict.fromkeys((r.run_id, r.name, shown[r.run_id])):
            by_key.setdefault(key, []).append(r)
    unknown = [w for w in wanted if w not in by_key]
    if unknown:
        raise UnreadableInputError(
            f"{where}: no MLflow run with id or name {', '.join(map(repr, unknown))}; "
            f"available runs: {describe(runs)}"
        )
    chosen: dict[str, RunInfo] = {}
    for w in wanted:
        for r in by_key[w]:
            chosen.setdefault(r.run_id, r)
    return list(chosen.values())


def run_order(r: RunInfo) -> tuple[int, str, float, str]:
    """Experiment (numeric ids in numeric order), then start time, then run id."""
    exp = str(r.metadata.get("experiment_id") or "")
    return (len(exp), exp, r.metadata.get("start_time") or 0.0, r.run_id)


def describe(runs: Sequence[RunInfo], limit: int = 20) -> str:
    items = [
        (f"{r.name} ({r.run_id})" if r.name != r.run_id else r.run_id)
        + (" [deleted]" if r.deleted else "")
        for r in runs[:limit]
    ]
    more = f" and {len(runs) - limit} more" if len(runs) > limit else ""
    return ", ".join(items) + more


def unique_names(runs: Sequence[RunInfo]) -> dict[str, str]:
    """run id -> display name; the short id is added where names collide."""
    counts: dict[str, int] = {}
    for r in runs:
        counts[r.name] = counts.get(r.name, 0) + 1
    return {
        r.run_id: (f"{r.name} ({r.run_id[:8]})" if counts[r.name] > 1 else r.name) for r in runs
    }


def no_metrics(where: Path, runs: Sequence[RunInfo]) -> UnreadableInputError:
    return UnreadableInputError(f"{where}: no metrics logged in the MLflow run(s) {describe(runs)}")


def _seconds(ms: Any) -> float | None:
    try:
        return None if ms is None or ms == "" else int(ms) / 1000.0
    except (TypeError, ValueError):
        return None


def _status(value: Any) -> str | None:
    if value is None:
        return None
    try:
        return _RUN_STATUS.get(int(value), str(value))
    except (TypeError, ValueError):
        return str(value)


def run_metadata(
    *,
    store: str,
    run_id: str,
    run_name: str | None,
    experiment_id: Any,
    experiment: str | None,
    info: Mapping[str, Any],
    params: dict[str, str],
    tags: dict[str, str],
) -> dict[str, Any]:
    status = _status(info.get("status"))
    out = {
        "store": store,
        "run_id": run_id,
        "run_name": run_name,
        "experiment_id": None if experiment_id is None else str(experiment_id),
        "experiment": experiment,
        "status": status,
        "lifecycle_stage": info.get("lifecycle_stage"),
        "start_time": _seconds(info.get("start_time")),
        "end_time": _seconds(info.get("end_time")),
        "user_id": info.get("user_id"),
        "artifact_uri": info.get("artifact_uri"),
        "params": params,
        "tags": tags,
    }
    # MLflow's run status: set by end_run() (FINISHED; FAILED when the `with` block raised,
    # KILLED by `mlflow.end_run("KILLED")` or the UI); RUNNING for a run never closed
    if status in _ENDS:
        end = RunEnd(
            _ENDS[status],
            f"MLflow run status {status}",
            time=_seconds(info.get("end_time")),
            error=None if status == "FINISHED" else status,
        )
        out[METADATA_KEY] = end.to_dict()
    return out


_ENDS = {"FINISHED": "finished", "FAILED": "crashed", "KILLED": "crashed"}


def long_frame(
    names: Sequence[str],
    counts: Sequence[int],
    step: pl.Series,
    value: pl.Series,
    timestamp_ms: pl.Series,
) -> pl.DataFrame:
    """The long frame of one run from per-metric row counts and concatenated columns
    (``metric`` an Enum made of one constant run per metric: no string per row)."""
    if len(set(names)) == len(names):
        metric = enum_runs(list(names), list(counts))
    else:  # a name twice (not expected from MLflow): one string per row
        import numpy as np

        idx = np.repeat(np.arange(len(names), dtype=np.uint32), np.asarray(counts, np.int64))
        metric = pl.Series("metric", list(names), dtype=pl.String()).gather(idx)
    return pl.DataFrame(
        [
            step.alias("step"),
            metric.alias("metric"),
            value.alias("value"),
            (timestamp_ms.cast(pl.Float64) / 1000.0).alias("wall_time"),
            # MLflow keeps no order across metrics but the time each value was logged:
            # a restart is told (and pooled over metrics) in that order
            timestamp_ms.alias("_order"),
        ]
    )
