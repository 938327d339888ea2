"""DVCLive's folder: one TSV per metric under ``plots/metrics/``, read as one run.

``dvclive.Live.log_metric("train/loss", v)`` appends ``step`` and the value (before 3.0
also ``timestamp``, in ms) to ``<dir>/plots/metrics/train/loss.tsv``: the metric is the
file's path below ``plots/metrics`` (the TSV's own column holds only the last part).
Pointed at the ``dvclive/`` folder, its ``plots/`` or ``plots/metrics/``, or a folder
holding ``dvclive/``, every TSV is read (each as the CSV reader reads a table, notes
naming the file and line) and the metrics make one run, named after the project folder
holding ``dvclive/``. ``params.yaml`` beside ``plots/`` is kept as metadata
(``dvclive.params``), not as the declared schedule (the step is DVCLive's, not the
optimizer's); ``metrics.json`` (the last values only) is left alone: the TSVs hold the
history.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from trainlens.core.errors import UnreadableInputError
from trainlens.core.names import Alias, AliasTable
from trainlens.core.paths import link_leads_out
from trainlens.core.run import DataIssue, Run, build_run
from trainlens.core.yamlio import RefusedFile, read_yaml
from trainlens.readers import _fwtables
from trainlens.readers._outside import outside_note
from trainlens.readers._wide import wide_to_long
from trainlens.readers.base import ReadOptions

FORMAT = "dvclive"
MAX_FILES = 10_000  # metrics of one run; more is not a DVCLive folder a person made


def metrics_dir(path: Path) -> Path | None:
    """The ``plots/metrics`` folder ``path`` is, or holds (directly or in ``dvclive/``)."""
    for cand in (path, path / "metrics", path / "plots" / "metrics"):
        if cand.name == "metrics" and cand.parent.name == "plots" and cand.is_dir():
            return cand
    inner = path / "dvclive" / "plots" / "metrics"
    return inner if inner.is_dir() else None


def sniff(path: Path, head: bytes) -> bool:
    if not path.is_dir():
        return False
    found = metrics_dir(path)
    return found is not None and any(True for _ in _tsv_files(found, limit=1))


def _tsv_files(folder: Path, limit: int = MAX_FILES) -> list[Path]:
    out = []
    for p in sorted(folder.rglob("*.tsv")):
        out.append(p)
        if len(out) >= limit:
            break
    return out


def read(path: Path, opts: ReadOptions) -> list[Run]:
    folder = metrics_dir(path)
    if folder is None:
        raise UnreadableInputError(f"{path}: no DVCLive plots/metrics folder found")
    from trainlens.readers import csv as csv_reader

    root = folder.parent.parent  # the dvclive/ folder
    longs: list[pl.DataFrame] = []
    issues: list[DataIssue] = []
    for file in _tsv_files(folder):
        why = link_leads_out(folder, file) if file.is_symlink() else None
        if why is not None:
            issues.append(outside_note(file, why, "a DVCLive run's files are read inside it"))
            continue
        try:
            df, _, notes = csv_reader._read_bytes(file, str(file))
        except (UnreadableInputError, OSError) as exc:
            issues.append(DataIssue(kind="unreadable-file", source=str(file), message=str(exc)))
            continue
        prep = _fwtables.prepare(df, file)
        if prep.framework != "dvclive":
            issues.append(
                DataIssue(
                    kind="unreadable-file",
                    source=str(file),
                    message="not a DVCLive metric file (no `step` and one value column)",
                )
            )
            continue
        lines = pl.Series("_line", range(2, 2 + prep.df.height), dtype=pl.Int64)
        long, more, _ = wide_to_long(prep.df, source=str(file), line_numbers=lines)
        longs.append(long.with_columns(pl.col("metric").cast(pl.String)))
        issues.extend([*notes, *more])
    if not longs or not any(lg.height for lg in longs):
        raise UnreadableInputError(f"{folder}: no DVCLive metric values found")
    long = pl.concat(longs, how="vertical")
    n = len(longs)
    aliases = _unsplit(long, str(folder), issues, opts.aliases)
    issues.insert(
        0,
        _fwtables._note(
            str(folder),
            f"read as a DVCLive folder: {n} metric file(s), each named by its path below "
            "plots/metrics",
        ),
    )
    run = build_run(
        long,
        # (the folder is `dvclive` by default: the project holding it names the run)
        name=(root.resolve().parent if root.name == "dvclive" else root.resolve()).name,
        source=str(root),
        fmt=FORMAT,
        aliases=aliases,
        metadata={"framework": "dvclive", **_params(root, issues)},
        issues=issues,
    )
    return [run]


SPLITS = ("train/", "eval/", "val/", "valid/", "test/")


def _unsplit(
    long: pl.DataFrame, source: str, issues: list[DataIssue], table: AliasTable
) -> AliasTable:
    """Where the run writes its splits as folders (``train/loss.tsv``, ``eval/loss.tsv``),
    a file beside them (``accuracy.tsv``) belongs to no split the folder names: it keeps
    its name rather than the default alias's ``train/accuracy`` (fastai's DVCLive callback
    writes its validation metrics there; a Keras-style bare name is the train one only where
    no split is written out)."""
    names = long.get_column("metric").unique().to_list()
    if not any(str(m).startswith(SPLITS) for m in names):
        return table
    bare = sorted(str(m) for m in names if "/" not in str(m))
    bare = [
        m for m in bare if (hit := table.lookup(m)) is not None and hit.canonical.startswith(SPLITS)
    ]
    if not bare:
        return table
    issues.append(
        _fwtables._note(
            source,
            f"{', '.join(bare)}: beside split folders but in none, kept as logged (no split "
            "is assumed; fastai's DVCLive callback writes its validation metrics there)",
        )
    )
    return _fwtables.with_aliases(table, {m: Alias(m) for m in bare})


def _params(root: Path, issues: list[DataIssue]) -> dict[str, object]:
    params = root / "params.yaml"
    if not params.is_file() or params.is_symlink():
        return {}
    try:
        data = read_yaml(params)
    except RefusedFile as exc:
        issues.append(DataIssue(kind="bad-config", source=str(params), message=exc.reason))
        return {}
    if not isinstance(data, dict) or not data:
        return {}
    # (not ``params``, where the run-config lookup takes the declared LR schedule from:
    # DVCLive's step counts next_step() calls — an epoch, a logging interval — not
    # optimizer steps; HF's DVCLiveCallback run declared max_steps 7500 over 14 steps
    # and drew LR001 "decays over ~150 steps, not the declared 7500")
    issues.append(
        _fwtables._note(
            str(params),
            "params.yaml is kept as the run's metadata (dvclive.params), not as its "
            "schedule: DVCLive's step counts next_step() calls, not optimizer steps",
        )
    )
    return {"dvclive": {"params": data}}
