"""The Python API, mirroring the command line: read, summarize, analyze, convert.

A notebook user gets the same numbers as ``trainlens analyze``::

    import trainlens
    runs = trainlens.read("run.jsonl")
    result = trainlens.analyze("run.jsonl")[0]
    result.findings, result.summary
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import polars as pl

from trainlens.core.analysis import Analysis, Context
from trainlens.core.errors import UsageError
from trainlens.core.names import AliasTable
from trainlens.core.run import DataIssue, Run
from trainlens.readers import ReadOptions, read_runs

if TYPE_CHECKING:  # config, detectors and run configs are imported where they are used:
    # reading a run needs none of them (nor tomllib), so `trainlens.read` starts faster
    from trainlens.core.config import Config
    from trainlens.detectors import DetectionResult


def read(
    paths: str | Path | Iterable[str | Path],
    *,
    format: str | None = None,
    runs: Sequence[str] | None = None,
    regex: str | None = None,
    aliases: dict[str, str] | None = None,
) -> list[Run]:
    """Read every run at the path(s) into canonical Runs."""
    opts = ReadOptions(aliases=AliasTable(aliases), runs=list(runs) if runs else None, regex=regex)
    return read_runs(paths, format=format, options=opts)


def build_context(run: Run, config: Config) -> Context:
    """Declared schedule and model: explicit config first, else a run config beside it.

    The user's schedule (``--schedule``, ``[tool.trainlens]``) is strict (ConfigError); a
    run's own config that cannot be read or understood is a data-quality note on the run
    and the run is judged without it (:mod:`trainlens.runconfig`)."""
    from trainlens.runconfig import (
        config_above,
        find_run_config,
        model_keys,
        normalize_schedule,
        run_schedule,
    )

    ctx = Context()
    notes: list[DataIssue] = []
    raw, origin = find_run_config(run, notes)
    if config.schedule:
        ctx.schedule = normalize_schedule(config.schedule, origin="schedule")
        ctx.schedule_source = str(config.path) if config.path else "flags"
    else:
        if raw:
            ctx.schedule = run_schedule(raw, origin or "run config", notes)
            ctx.schedule_source = origin if ctx.schedule else None
        if not ctx.schedule and run.source:
            # the config beside the run declares none (a W&B run's own config.yaml of
            # W&B's keys only): a Hydra output folder above it may
            above, where = config_above(run, origin, notes)
            if above:
                ctx.schedule = run_schedule(above, where or "run config", notes)
                ctx.schedule_source = where if ctx.schedule else None
                raw = raw or above
    # the machine the log's writer recorded (W&B's GPU model and count) comes last: the
    # run's config and the user's say what the run used
    machine = run.metadata.get("machine")
    machine = machine if isinstance(machine, dict) else {}
    declared = model_keys(raw) if raw else {}
    ctx.model = {**machine, **{k: v for k, (_w, v) in declared.items()}, **config.model}
    where = origin.removesuffix(" (params)") if origin else "the run config"
    file_origin = str(config.path) if config.path else "the config"
    ctx.model_sources = {
        **{k: "the machine the log recorded" for k in machine},
        **{k: f"the run config's `{w}: {v}` ({where})" for k, (w, v) in declared.items()},
        **{
            k: config.model_flags.get(k, f"[tool.trainlens.model] in {file_origin}")
            for k in config.model
        },
    }
    # once per run: analyze and report may both build the context of one run
    run.data_quality.extend(n for n in notes if n not in run.data_quality)
    return ctx


def summarize(run: Run, *, perplexity: bool | str = "auto") -> dict[str, Any]:
    """A JSON-ready summary of one run (:func:`trainlens.summary.summarize`)."""
    # imported here: the summary needs numpy, which reading a run does not
    from trainlens.summary import summarize as summary_of

    return summary_of(run, perplexity=perplexity)


def analyze_run(run: Run, config: Config | None = None) -> Analysis:
    from trainlens.core.config import Config
    from trainlens.detectors import run_detectors

    config = config or Config()
    ctx = build_context(run, config)
    summary = summarize(run, perplexity=config.perplexity)
    from trainlens.efficiency import add_efficiency, add_energy

    add_energy(run, ctx.model, summary)  # measured GPU power needs no model size
    if ctx.model:
        add_efficiency(run, ctx.model, summary, ctx.model_sources)
    result: DetectionResult = run_detectors(run, config, ctx)
    from trainlens.checkpoints.attach import analysis_checkpoints

    found, ctx.checkpoints = analysis_checkpoints(run, result.findings, config)
    from trainlens.incidents import incidents_of

    return Analysis(
        run=run,
        summary=summary,
        findings=found,
        skipped=result.skipped,
        context=ctx,
        incidents=incidents_of(run, found),
    )


def analyze(
    paths: str | Path | Iterable[str | Path] | Run | Sequence[Run],
    *,
    config: Config | str | Path | None = None,
    format: str | None = None,
    runs: Sequence[str] | None = None,
    regex: str | None = None,
) -> list[Analysis]:
    """Read and judge every run at the path(s) (or the given Runs)."""
    from trainlens.core.config import Config, load_config
    from trainlens.detectors import validate_config

    cfg = config if isinstance(config, Config) else load_config(config)
    validate_config(cfg)
    loaded: list[Run]
    if isinstance(paths, Run):
        loaded = [paths]
    elif isinstance(paths, Sequence) and paths and all(isinstance(p, Run) for p in paths):
        loaded = [p for p in paths if isinstance(p, Run)]
    else:
        sources = cast("str | Path | Iterable[str | Path]", paths)
        loaded = read(sources, format=format, runs=runs, regex=regex, aliases=cfg.aliases)
    return [analyze_run(run, cfg) for run in loaded]


def convert(runs: Run | Sequence[Run], out: str | Path, *, overwrite: bool = True) -> Path:
    """Write the canonical frame to .parquet, .jsonl/.ndjson or .csv (by extension).

    Several runs go into one file with a ``run`` column holding each run's name (what
    ``trainlens convert`` does with a folder or an MLflow store of several runs). A path
    the user gave that cannot be written (no such folder, an existing file without
    ``overwrite``, no permission) is a UsageError naming it, never an internal error."""
    out = Path(out)
    suffix = out.suffix.lower()
    if suffix not in (".parquet", ".jsonl", ".ndjson", ".csv"):
        raise UsageError(f"{out}: unknown output type; use .parquet, .jsonl or .csv")
    if not out.parent.is_dir():
        raise UsageError(f"{out}: the folder {out.parent} does not exist")
    if out.is_dir():
        raise UsageError(f"{out}: is a folder; name the output file")
    if out.exists() and not out.is_file():  # a FIFO would block the write for ever
        raise UsageError(f"{out}: is not a regular file; name the output file")
    if out.exists() and not overwrite:
        raise UsageError(f"{out}: exists; pass --force to overwrite it")
    frame = _merged_frame([runs] if isinstance(runs, Run) else runs)
    try:
        if suffix == ".parquet":
            frame.write_parquet(out)
        elif suffix == ".csv":
            frame.write_csv(out)
        else:
            out.write_text(_ndjson(frame), "utf-8")
    except OSError as exc:
        raise UsageError(f"{out}: cannot be written ({exc.strerror or exc})") from None
    return out


def _merged_frame(runs: Sequence[Run]) -> pl.DataFrame:
    """One run's canonical frame as it is; several runs' stacked, with a ``run`` column."""
    if not runs:
        raise UsageError("nothing to convert: no runs given")
    if len(runs) == 1:
        return runs[0].frame
    return pl.concat(
        [r.frame.with_columns(pl.lit(r.name).alias("run")) for r in runs], how="vertical"
    )


def _ndjson(frame: pl.DataFrame) -> str:
    """JSON lines in Python's convention (NaN, Infinity), which trainlens reads back;
    polars' own writer would turn non-finite values into null."""
    import json

    def number(col: str) -> pl.Expr:
        c = pl.col(col)
        return (
            pl.when(c.is_null())
            .then(pl.lit("null"))
            .when(c.is_nan())
            .then(pl.lit("NaN"))
            .when(c == float("inf"))
            .then(pl.lit("Infinity"))
            .when(c == float("-inf"))
            .then(pl.lit("-Infinity"))
            .otherwise(c.cast(pl.String))
        )

    names = frame.get_column("metric").unique().to_list()
    quoted = {n: json.dumps(n) for n in names}
    # several runs in one file: each line names its run, as the csv and parquet columns do
    run_field: list[pl.Expr] = []
    if "run" in frame.columns:
        runs = {n: json.dumps(n) for n in frame.get_column("run").unique().to_list()}
        run_field = [
            pl.lit(',"run":'),
            pl.col("run").replace_strict(runs, return_dtype=pl.String),
        ]
    lines = frame.select(
        pl.concat_str(
            pl.lit('{"step":'),
            pl.col("step").cast(pl.String),
            pl.lit(',"metric":'),
            pl.col("metric").replace_strict(quoted, return_dtype=pl.String),
            pl.lit(',"value":'),
            number("value"),
            pl.lit(',"wall_time":'),
            number("wall_time"),
            pl.lit(',"superseded":'),
            pl.col("superseded").cast(pl.String),
            *run_field,
            pl.lit("}"),
        ).alias("line")
    ).get_column("line")
    return "\n".join(lines.to_list()) + ("\n" if lines.len() else "")


__all__ = ["Analysis", "analyze", "analyze_run", "build_context", "convert", "read", "summarize"]
