"""The file store (``mlruns/``): which folders are runs and experiments, each run's
meta.yaml, params and tags, and its metric files (parsed by :mod:`._metricfiles`)."""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from trainlens.core.errors import UnreadableInputError
from trainlens.core.paths import link_leads_out
from trainlens.core.run import DataIssue, Run, build_run
from trainlens.core.yamlio import RefusedFile, read_yaml
from trainlens.readers._outside import outside_note
from trainlens.readers.base import ReadOptions
from trainlens.readers.mlflow._metricfiles import parse_metric_files
from trainlens.readers.mlflow._runs import (
    FORMAT,
    RunInfo,
    long_frame,
    no_metrics,
    read_head,
    run_metadata,
    run_order,
    select_runs,
    unique_names,
)

# folders inside mlruns/ (and inside an experiment) that are not experiments (runs)
_NOT_EXPERIMENTS = {".trash", "models"}


_NOT_RUNS = {"tags", "datasets", "traces", "models"}


_METRIC_LINE = re.compile(rb"^\s*-?\d+ \S+( -?\d+)?( \S+ \S+)?\s*$")


def _meta_head_says(path: Path, *keys: bytes) -> bool:
    meta = path / "meta.yaml"
    if meta.is_symlink() and link_leads_out(path, meta) is not None:
        return False  # MLflow writes no links: one leading out is not read
    if not meta.is_file():
        return False
    head = read_head(meta)
    return any(re.search(rb"(?m)^" + k + rb":", head) for k in keys)


def is_run_dir(path: Path) -> bool:
    if _meta_head_says(path, b"run_id", b"run_uuid"):
        return True
    metrics = path / "metrics"
    if not metrics.is_dir():
        return False
    # no meta.yaml (a copied run folder): the metric files must look like MLflow's
    for root, _dirs, files in os.walk(metrics):
        if files:
            first = Path(root) / sorted(files)[0]
            if first.is_symlink() and link_leads_out(metrics, first) is not None:
                return False
            line = read_head(first, 256).split(b"\n", 1)[0]
            return _METRIC_LINE.match(line) is not None
    return False


def _is_experiment_dir(path: Path) -> bool:
    return _meta_head_says(path, b"artifact_location", b"name") and not _meta_head_says(
        path, b"run_id", b"run_uuid"
    )


def looks_like_file_store(path: Path) -> bool:
    if is_run_dir(path) or _is_experiment_dir(path):
        return True
    if path.name == "metrics" and is_run_dir(path.parent):
        return True
    for child in itertools.islice(_subdirs(path), 200):
        if child.name not in _NOT_EXPERIMENTS and _is_experiment_dir(child):
            return True
    return False


def _subdirs(path: Path, outside: list[DataIssue] | None = None) -> Iterator[Path]:
    """The folders in ``path``; a symlink leading out of it is not followed (MLflow
    writes none), and said so in ``outside`` when given."""
    try:
        entries = sorted(os.scandir(path), key=lambda e: e.name)
    except OSError:
        return
    for e in entries:
        if e.is_symlink():
            why = link_leads_out(path, e.path)
            if why is not None:
                if outside is not None:
                    outside.append(_outside_note(e.path, why))
                continue
        if e.is_dir():
            yield Path(e.path)


def _outside_note(path: str, why: str) -> DataIssue:
    return outside_note(path, why, "a store's runs are read inside the folder named")


def read_file_store(path: Path, opts: ReadOptions) -> list[Run]:
    runs = select_runs(_discover(path), opts, path)
    for r in runs:
        r.files = _metric_files(Path(r.source), r.issues)
    with_metrics = [r for r in runs if r.files]
    if not with_metrics:
        raise no_metrics(path, runs)
    files = [f for r in with_metrics for f in r.files]
    table, counts, issues_by_file = parse_metric_files([(p, size) for _n, p, size in files])
    names = unique_names(with_metrics)
    out: list[Run] = []
    file_pos = row_pos = 0
    for r in with_metrics:
        mine = counts[file_pos : file_pos + len(r.files)]
        file_pos += len(r.files)
        issues = [*r.issues, *(i for _n, p, _s in r.files for i in issues_by_file.get(p, []))]
        rows = table.slice(row_pos, sum(mine))
        row_pos += rows.height
        if rows.height == 0 and not issues:
            continue
        long = long_frame(
            [n for n, _p, _s in r.files],
            mine,
            rows.get_column("step"),
            rows.get_column("value"),
            rows.get_column("timestamp"),
        )
        out.append(
            build_run(
                long,
                name=names[r.run_id],
                source=r.source,
                fmt=FORMAT,
                aliases=opts.aliases,
                metadata=r.metadata,
                issues=issues,
                blocks=mine,
            )
        )
    if not out:
        raise no_metrics(path, with_metrics)
    return out


def _discover(path: Path) -> list[RunInfo]:
    """Every run under ``path``: a run folder, an experiment folder or the mlruns root."""
    if is_run_dir(path):
        parent = path.parent
        exp_issues: list[DataIssue] = []
        exp = _read_meta(parent, exp_issues) if _is_experiment_dir(parent) else {}
        return [_run_from_dir(path, exp, exp_issues)]
    outside: list[DataIssue] = []
    if _is_experiment_dir(path):
        exp_dirs = [path]
    else:
        exp_dirs = [
            d
            for d in _subdirs(path, outside)
            if d.name not in _NOT_EXPERIMENTS and _is_experiment_dir(d)
        ]
        if not exp_dirs:
            raise UnreadableInputError(
                f"{path}: not an MLflow store (no experiment folders with a meta.yaml, and "
                "no run folder with metrics/)"
            )
    runs: list[RunInfo] = []
    for exp_dir in exp_dirs:
        exp_issues = list(outside)  # a folder refused is said on every run read
        exp = _read_meta(exp_dir, exp_issues)
        for d in list(_subdirs(exp_dir, exp_issues)):  # every refusal noted before a run
            if d.name not in _NOT_RUNS and is_run_dir(d):
                runs.append(_run_from_dir(d, exp, exp_issues))
    runs.sort(key=run_order)
    return runs


def _run_from_dir(
    run_dir: Path, exp: Mapping[str, Any], exp_issues: Sequence[DataIssue] = ()
) -> RunInfo:
    issues = list(exp_issues)
    meta = _read_meta(run_dir, issues)
    run_id = str(meta.get("run_id") or meta.get("run_uuid") or run_dir.name)
    tags = _read_kv_dir(run_dir / "tags", issues)
    params = _read_kv_dir(run_dir / "params", issues)
    name = meta.get("run_name") or tags.get("mlflow.runName") or None
    exp_id = meta.get("experiment_id", exp.get("experiment_id"))
    return RunInfo(
        run_id=run_id,
        name=str(name) if name else run_id,
        source=str(run_dir),
        metadata=run_metadata(
            store="file",
            run_id=run_id,
            run_name=str(name) if name else None,
            experiment_id=exp_id,
            experiment=None if exp.get("name") is None else str(exp.get("name")),
            info=meta,
            params=params,
            tags=tags,
        ),
        deleted=meta.get("lifecycle_stage") == "deleted",
        issues=issues,
    )


def _read_kv_dir(folder: Path, issues: list[DataIssue]) -> dict[str, str]:
    """params/ or tags/: one file per key (a '/' in the key is a sub-folder)."""
    out: dict[str, str] = {}
    if not folder.is_dir() or folder.is_symlink():
        return out
    for root, _dirs, files in os.walk(folder):
        for name in files:
            full = os.path.join(root, name)
            if os.path.islink(full) and (why := link_leads_out(folder, full)) is not None:
                issues.append(_outside_note(full, why))
                continue
            key = os.path.relpath(full, folder).replace(os.sep, "/")
            with open(full, "rb") as fh:
                out[key] = fh.read().decode("utf-8", errors="replace")
    return dict(sorted(out.items()))


def _metric_files(run_dir: Path, issues: list[DataIssue]) -> list[tuple[str, str, int]]:
    """(metric name, path, size) of every metric file of a run, sorted by name; a link
    leading out of the run's folder is not read, and said so in ``issues``."""
    folder = run_dir / "metrics"
    out: list[tuple[str, str, int]] = []
    if not folder.is_dir():
        return out
    stack = [str(folder)]
    base = len(str(folder)) + 1
    while stack:
        with os.scandir(stack.pop()) as it:
            for e in it:
                if e.is_symlink() and (why := link_leads_out(run_dir, e.path)) is not None:
                    issues.append(_outside_note(e.path, why))
                elif e.is_dir(follow_symlinks=False):  # a linked folder could loop
                    stack.append(e.path)
                elif e.is_file():
                    out.append((e.path[base:].replace(os.sep, "/"), e.path, e.stat().st_size))
    out.sort()
    return out


def _read_meta(folder: Path, issues: list[DataIssue] | None = None) -> dict[str, Any]:
    """A run's or experiment's meta.yaml as a dict ({} when absent or refused: the run is
    still read from its metric files, and a refusal is noted in ``issues``)."""
    path = folder / "meta.yaml"
    if path.is_symlink() and (why := link_leads_out(folder, path)) is not None:
        if issues is not None:
            issues.append(_outside_note(str(path), why))
        return {}
    if not path.is_file():
        return {}
    try:
        got = read_yaml(path)
    except RefusedFile as exc:
        if issues is not None:
            issues.append(
                DataIssue(
                    kind="bad-metadata",
                    source=str(path),
                    message=f"{exc.reason}; the run is read without its name and status",
                )
            )
        return {}
    return got if isinstance(got, dict) else {}
