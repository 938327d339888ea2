"""``trainlens analyze`` and ``trainlens convert``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from trainlens.cli._options import (
    AliasOpt,
    ConfigOpt,
    FormatOpt,
    IgnoreOpt,
    PathsArg,
    ReaderOpt,
    RegexOpt,
    RunOpt,
    SelectOpt,
    parse_aliases,
    parse_schedule,
    reader_choice,
)
from trainlens.cli.app import app
from trainlens.core.errors import UsageError
from trainlens.core.findings import fail_rank

# FormatOpt and ReaderOpt stay importable from here (tests read their help text)
__all__ = ["FormatOpt", "ReaderOpt", "analyze", "convert"]


def _model_overrides(
    params: str | None, gpu: str | None, gpus: int | None, dtype: str | None = None
) -> dict[str, Any]:
    model: dict[str, Any] = {}
    if params is not None:
        from trainlens.calculators.units import parse_number

        model["n_params"] = parse_number(params, "--params")
    if gpu is not None:
        from trainlens.calculators.hardware import resolve_gpu

        # the one resolver `mfu --gpu` uses: a name the table does not know is the user's
        # mistake (exit 2 with did-you-mean), never an MFU silently left out
        resolve_gpu(gpu)
        model["gpu"] = gpu
    if gpus is not None:
        if gpus < 1:
            raise UsageError("--gpus must be at least 1")
        model["n_gpus"] = gpus
    if dtype is not None:
        from trainlens.calculators.hardware import DTYPES
        from trainlens.efficiency import dtype_of

        # framework spellings (bfloat16, bf16-mixed) as in a run config, checked here
        named = dtype_of({"dtype": dtype.strip()})
        if named not in DTYPES:
            raise UsageError(
                f"--dtype must be one of {', '.join(DTYPES)} (or bfloat16, float16, float32, "
                f"bf16-mixed, 16-mixed); got {dtype!r}"
            )
        model["dtype"] = named
    return model


#: the flag that sets each model key, so a figure can say where its input came from
MODEL_FLAGS = {"n_params": "--params", "gpu": "--gpu", "n_gpus": "--gpus", "dtype": "--dtype"}


@app.command()
def analyze(
    paths: PathsArg,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    reader: ReaderOpt = None,
    format: FormatOpt = None,
    run: RunOpt = None,
    regex: RegexOpt = None,
    config: ConfigOpt = None,
    schedule: Annotated[
        str | None,
        typer.Option(
            "--schedule",
            # the shapes spelled out (the schedule model imports numpy; --help stays
            # instant), kept equal to core.schedules.SHAPES by a test
            help="The declared LR schedule, e.g. 'cosine:warmup_steps="
            "100,peak_lr=3e-4,min_lr=3e-5,total_steps=10000' (shapes: constant, "
            "linear, cosine, inverse-sqrt, step, warmup-stable-decay).",
            show_default=False,
        ),
    ] = None,
    select: SelectOpt = None,
    ignore: IgnoreOpt = None,
    alias: AliasOpt = None,
    params: Annotated[
        str | None,
        typer.Option(
            "--params",
            help="Model parameters (non-embedding), for MFU and compute, e.g. 1.3e9.",
            show_default=False,
        ),
    ] = None,
    gpu: Annotated[
        str | None,
        typer.Option("--gpu", help="Device name for MFU, e.g. h100.", show_default=False),
    ] = None,
    gpus: Annotated[
        int | None, typer.Option("--gpus", help="Number of devices of the job.", show_default=False)
    ] = None,
    dtype: Annotated[
        str | None,
        typer.Option(
            "--dtype",
            help="Training precision for MFU's peak: bf16, fp16, fp8, tf32, fp32 "
            "[default: the run config's, else bf16].",
            show_default=False,
        ),
    ] = None,
    fail_on: Annotated[
        str | None,
        typer.Option(
            "--fail-on",
            help="Exit 1 when a finding "
            "is at or above this severity: none, info, warning, error "
            "[default: none]",
            show_default=False,
        ),
    ] = None,
    checkpoints: Annotated[
        Path | None,
        typer.Option(
            "--checkpoints",
            help="The run's checkpoint folder, audited to name the checkpoint to go back "
            "to [default: the run's own by its layout or run config, or checkpoints in "
            "the config; others nearby are a note].",
            show_default=False,
        ),
    ] = None,
    report: Annotated[
        Path | None,
        typer.Option(
            "--report",
            help="Also write an HTML/Markdown report with plots into this directory.",
            show_default=False,
        ),
    ] = None,
    verbose: Annotated[
        bool,
        typer.Option("--verbose", "-v", help="List each incident's findings and their evidence."),
    ] = False,
    color: Annotated[
        str | None,
        typer.Option(
            "--color",
            help="Colour by severity: auto (on a terminal, unless NO_COLOR is set), always, "
            "never [default: auto]",
            show_default=False,
        ),
    ] = None,
) -> int:
    """Summarize each run and list its incidents: what went wrong, when, what moved first."""
    from trainlens.api import analyze as analyze_paths
    from trainlens.core.config import load_config

    reader, output_format = reader_choice(reader, format, outputs=("text", "json"))
    json_out = json_out or output_format == "json"
    cfg = load_config(config)
    if schedule:
        cfg.schedule = parse_schedule(schedule)
    cfg.apply_flags(select, ignore)
    if checkpoints is not None:
        if not checkpoints.exists():
            from trainlens.core.errors import UsageError

            raise UsageError(f"--checkpoints {checkpoints}: no such file or folder")
        from trainlens.core.paths import require_file_or_folder

        require_file_or_folder(checkpoints)  # said here: the audit's errors become notes
        cfg.checkpoints = str(checkpoints)
    cfg.aliases = {**cfg.aliases, **parse_aliases(alias)}
    flagged = _model_overrides(params, gpu, gpus, dtype)
    cfg.model = {**cfg.model, **flagged}
    cfg.model_flags = {**cfg.model_flags, **{k: MODEL_FLAGS[k] for k in flagged}}
    threshold = fail_rank(fail_on or cfg.fail_on or "none")  # checked before the read
    from trainlens.formatters.color import color_choice

    color_mode = color_choice(color)  # checked before the read, too

    analyses = analyze_paths(paths, config=cfg, format=reader, runs=run, regex=regex)
    if json_out:
        from trainlens.formatters.json import render as render_json

        typer.echo(render_json(analyses), nl=False)
    else:
        import sys

        from trainlens.formatters.color import colorize, terminal_width, wants_color
        from trainlens.formatters.text import render as render_text

        text = render_text(analyses, verbose=verbose, width=terminal_width(sys.stdout))
        if wants_color(color_mode, sys.stdout):
            text = colorize(text)
        typer.echo(text, nl=False, color=True if color_mode != "never" else None)
    if report is not None:
        from trainlens.report import write_report
        from trainlens.report.options import report_smoothing

        origin = str(cfg.path) if cfg.path else "config"
        smoothing = report_smoothing(None, cfg.report, origin)
        written = write_report(analyses, report, smoothing=smoothing)
        if not json_out:
            typer.echo(f"report: {written}")
    worst = max((f.severity.rank for a in analyses for f in a.findings), default=-1)
    return 1 if worst >= threshold else 0


@app.command()
def convert(
    path: Annotated[
        Path, typer.Argument(help="A run in any format trainlens reads.", show_default=False)
    ],
    output: Annotated[
        Path,
        typer.Option(
            "--output",
            "-o",
            help="Output file: .parquet, .jsonl or .csv (the canonical long frame).",
            show_default=False,
        ),
    ],
    reader: ReaderOpt = None,
    format: FormatOpt = None,
    run: RunOpt = None,
    regex: RegexOpt = None,
    alias: AliasOpt = None,
    force: Annotated[
        bool, typer.Option("--force", help="Overwrite the output file if it exists.")
    ] = False,
) -> int:
    """Write a run's canonical frame (step, metric, value, wall_time, superseded)."""
    from trainlens.api import convert as convert_run
    from trainlens.api import read

    if not output.parent.is_dir():  # checked before the read: the user's path, not a bug
        raise UsageError(f"{output}: the folder {output.parent} does not exist")
    if output.exists() and not force:
        raise UsageError(f"{output}: exists; pass --force to overwrite it")
    reader, _ = reader_choice(reader, format)
    runs = read([path], format=reader, runs=run, regex=regex, aliases=parse_aliases(alias))
    convert_run(runs, output, overwrite=force)
    n = sum(r.frame.height for r in runs)
    typer.echo(f"wrote {n:,} values from {len(runs)} run(s) to {output}")
    return 0
