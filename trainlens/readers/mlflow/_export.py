"""mlflow-export-import run exports: a ``run.json`` (or a folder of them, an experiment
export named by its ``experiment.json``) in any of the shapes its versions wrote."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import polars as pl

from trainlens.core.errors import UnreadableInputError
from trainlens.core.run import DataIssue, Run, build_run
from trainlens.readers import _sniff
from trainlens.readers.base import ReadOptions
from trainlens.readers.mlflow._runs import (
    FORMAT,
    RunInfo,
    long_frame,
    no_metrics,
    read_head,
    run_metadata,
    select_runs,
    unique_names,
)

_is_export_head = _sniff.is_mlflow_export_head


def is_export_dir(path: Path) -> bool:
    if (path / "run.json").is_file():
        return _is_export_head(read_head(path / "run.json"))
    return (path / "experiment.json").is_file() and any(_export_files(path))


def _export_files(path: Path) -> Iterator[Path]:
    """run.json files of an export: the folder's own, else those of run folders below
    (an experiment export: <run_id>/run.json), at most three levels down."""
    if (path / "run.json").is_file():
        yield path / "run.json"
        return
    base_depth = len(path.parts)
    for root, dirs, files in os.walk(path):
        dirs.sort()
        if len(Path(root).parts) - base_depth >= 3:
            dirs[:] = []
        if "run.json" in files:
            yield Path(root) / "run.json"
            dirs[:] = []


def read_export(path: Path, opts: ReadOptions) -> list[Run]:
    files = [path] if path.is_file() else list(_export_files(path))
    if not files:
        raise UnreadableInputError(f"{path}: no run.json of an MLflow export found")
    infos: list[RunInfo] = []
    parsed: dict[str, tuple[dict[str, list[Any]] | None, list[DataIssue]]] = {}
    for f in files:
        info, metrics, issues = _parse_export(f)
        infos.append(info)
        parsed[info.run_id] = (metrics, issues)
    experiment = _export_experiment_name(path)
    for info in infos:
        if info.metadata.get("experiment") is None:
            info.metadata["experiment"] = experiment
    selected = select_runs(infos, opts, path)
    names = unique_names(selected)
    out: list[Run] = []
    for r in selected:
        metrics, issues = parsed[r.run_id]
        long, more = _export_long(metrics or {}, r.source)
        if long.height == 0:
            continue
        out.append(
            build_run(
                long,
                name=names[r.run_id],
                source=r.source,
                fmt=FORMAT,
                aliases=opts.aliases,
                metadata=r.metadata,
                issues=[*issues, *more],
            )
        )
    if not out:
        raise no_metrics(path, selected)
    return out


def _export_experiment_name(path: Path) -> str | None:
    """The experiment's name from an experiment export's experiment.json."""
    exp_json = path / "experiment.json" if path.is_dir() else path.parent.parent / "experiment.json"
    try:
        doc = json.loads(exp_json.read_bytes())
        body = doc.get("mlflow", doc)
        exp = body.get("experiment", body)
        name = exp.get("name")
    except (OSError, ValueError, AttributeError):
        return None
    return str(name) if name is not None else None


def _as_kv(obj: Any) -> dict[str, str]:
    """params/tags as a dict, or as a list of {key, value} (the REST API's shape)."""
    if isinstance(obj, dict):
        return {str(k): "" if v is None else str(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return {
            str(x.get("key")): "" if x.get("value") is None else str(x.get("value"))
            for x in obj
            if isinstance(x, dict) and "key" in x
        }
    return {}


def _parse_export(
    path: Path,
) -> tuple[RunInfo, dict[str, list[Any]] | None, list[DataIssue]]:
    try:
        doc = json.loads(path.read_bytes())  # NaN / Infinity as Python's json writes them
    except (OSError, ValueError) as exc:
        raise UnreadableInputError(f"{path}: not readable JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise UnreadableInputError(f"{path}: not an MLflow run export (not a JSON object)")
    body: dict[str, Any] = doc["mlflow"] if isinstance(doc.get("mlflow"), dict) else doc
    info: dict[str, Any] = body["info"] if isinstance(body.get("info"), dict) else {}
    data: dict[str, Any] = body["data"] if isinstance(body.get("data"), dict) else body
    if "metrics" not in data or not info:
        raise UnreadableInputError(
            f"{path}: not an mlflow-export-import run export (expected an object with "
            "'info' and 'metrics', optionally under 'mlflow' or 'data')"
        )
    run_id = str(info.get("run_id") or info.get("run_uuid") or path.parent.name)
    tags = dict(sorted(_as_kv(data.get("tags")).items()))
    params = dict(sorted(_as_kv(data.get("params")).items()))
    name = info.get("run_name") or tags.get("mlflow.runName") or None
    issues: list[DataIssue] = []
    metrics, shape_issue = _export_metrics(data.get("metrics"), str(path))
    if shape_issue is not None:
        issues.append(shape_issue)
    run = RunInfo(
        run_id=run_id,
        name=str(name) if name else run_id,
        source=str(path),
        metadata=run_metadata(
            store="export",
            run_id=run_id,
            run_name=str(name) if name else None,
            experiment_id=info.get("experiment_id"),
            experiment=None,
            info=info,
            params=params,
            tags=tags,
        ),
        deleted=info.get("lifecycle_stage") == "deleted",
    )
    return run, metrics, issues


def _export_metrics(obj: Any, source: str) -> tuple[dict[str, list[Any]] | None, DataIssue | None]:
    """{name: [records]} from the shapes exports use: {name: [{value, timestamp, step}]},
    a list of {key, value, timestamp, step}, or (old exports) {name: latest value}."""
    if isinstance(obj, list):
        grouped: dict[str, list[Any]] = {}
        for rec in obj:
            key = rec.get("key") if isinstance(rec, dict) else None
            grouped.setdefault(str(key), []).append(rec)
        return grouped, None
    if not isinstance(obj, dict):
        return None, DataIssue(
            kind="bad-record",
            source=source,
            location="metrics",
            message="'metrics' is neither an object nor a list; no metrics read",
        )
    latest_only = [k for k, v in obj.items() if not isinstance(v, list)]
    out = {
        str(k): (v if isinstance(v, list) else [{"value": v, "step": 0}]) for k, v in obj.items()
    }
    issue = None
    if latest_only:
        issue = DataIssue(
            kind="no-history",
            source=source,
            location="metrics",
            message=(
                f"{len(latest_only)} metric(s) hold only their last value (an export without "
                "metric history); each is read as one point at step 0"
            ),
            count=len(latest_only),
            severity="info",
            details={"metrics": latest_only[:100]},
        )
    return out, issue


def _export_long(
    metrics: Mapping[str, list[Any]], source: str
) -> tuple[pl.DataFrame, list[DataIssue]]:
    names: list[str] = []
    counts: list[int] = []
    steps: list[int] = []
    values: list[float] = []
    stamps: list[float] = []
    issues: list[DataIssue] = []
    for key, records in metrics.items():
        n0 = len(steps)
        bad: list[int] = []
        for i, rec in enumerate(records):
            try:
                v = _number(rec.get("value"))
                s = int(rec.get("step") or 0)
                t = rec.get("timestamp")
                ts = math.nan if t is None else float(int(t))
            except (AttributeError, TypeError, ValueError, OverflowError):
                bad.append(i)
                continue
            steps.append(s)
            values.append(v)
            stamps.append(ts)
        if bad:
            issues.append(
                DataIssue(
                    kind="bad-record",
                    source=source,
                    location=f"metric {key!r}, record {bad[0] + 1}",
                    message=(
                        f"{len(bad)} record(s) of metric {key!r} have no numeric value/step "
                        "and were skipped"
                    ),
                    count=len(bad),
                    details={"records": [b + 1 for b in bad[:100]]},
                )
            )
        if len(steps) > n0:
            names.append(key)
            counts.append(len(steps) - n0)
    ts_ms = pl.Series(stamps, dtype=pl.Float64()).fill_nan(None)
    long = long_frame(
        names,
        counts,
        pl.Series(steps, dtype=pl.Int64()),
        pl.Series(values, dtype=pl.Float64()),
        ts_ms,
    )
    return long, issues


def _number(v: Any) -> float:
    if isinstance(v, bool) or v is None:
        raise TypeError
    return float(v)  # also "NaN", "Infinity" written as strings
