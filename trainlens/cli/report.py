"""``trainlens report``: annotated plots of one or several runs, as HTML, Markdown, PNG, SVG."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from trainlens.cli._options import (
    AliasOpt,
    ConfigOpt,
    FormatOpt,
    PathsArg,
    ReaderOpt,
    RegexOpt,
    RunOpt,
    parse_aliases,
    parse_schedule,
    reader_choice,
)
from trainlens.cli.app import app


@app.command()
def report(
    paths: PathsArg,
    output: Annotated[
        Path,
        typer.Option(
            "--output",
            "-o",
            help="Directory to write report.html, report.md and one PNG and SVG per panel into.",
        ),
    ] = Path("trainlens-report"),
    reader: ReaderOpt = None,
    format: FormatOpt = None,
    run: RunOpt = None,
    regex: RegexOpt = None,
    config: ConfigOpt = None,
    schedule: Annotated[
        str | None,
        typer.Option(
            "--schedule",
            help="The declared LR schedule to draw against the "
            "realized LR, e.g. 'cosine:warmup_steps=100,peak_lr=3e-4,min_lr=3e-5,"
            "total_steps=10000'.",
            show_default=False,
        ),
    ] = None,
    smooth: Annotated[
        float | None,
        typer.Option(
            "--smooth",
            help="Also draw a debiased EMA with this weight α of the "
            "newest value (0 < α ≤ 1; 0.05 ≈ TensorBoard's 0.95), over the raw "
            "values [default: raw values only].",
            show_default=False,
        ),
    ] = None,
    alias: AliasOpt = None,
    reference: Annotated[
        list[Path] | None,
        typer.Option(
            "--reference",
            help="Golden curves (reference runs, or one golden file, as in 'gate "
            "--reference'): the first run's curves are drawn over their band, departures "
            "marked.",
            show_default=False,
        ),
    ] = None,
) -> int:
    """Write an HTML/Markdown report with annotated plots; several runs are overlaid."""
    from trainlens.api import analyze as analyze_paths
    from trainlens.core.config import load_config
    from trainlens.report import write_report
    from trainlens.report.options import report_smoothing

    reader, _ = reader_choice(reader, format)
    cfg = load_config(config)
    alpha = report_smoothing(smooth, cfg.report, str(cfg.path) if cfg.path else "config")
    if schedule:
        cfg.schedule = parse_schedule(schedule)
    cfg.aliases = {**cfg.aliases, **parse_aliases(alias)}
    analyses = analyze_paths(paths, config=cfg, format=reader, runs=run, regex=regex)
    drawn = []
    if reference and analyses:
        from trainlens.gate import parse_rules
        from trainlens.gate.reference import overlays
        from trainlens.gate.runner import load_reference

        golden = load_reference([str(p) for p in reference], cfg, parse_rules(cfg))
        drawn = overlays(golden, analyses[0].run)
    written = write_report(analyses, output, smoothing=alpha, overlays=drawn)
    n = sum(len(a.findings) for a in analyses)
    typer.echo(f"report: {written} ({len(analyses)} run(s), {n} finding(s))")
    return 0
