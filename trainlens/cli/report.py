"""``trainlens report``: annotated plots of one or several runs, as HTML, Markdown, PNG, SVG."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from trainlens.cli.analyze import (
    AliasOpt,
    ConfigOpt,
    FormatOpt,
    PathsArg,
    RegexOpt,
    RunOpt,
    _parse_aliases,
    parse_schedule,
)
from trainlens.cli.app import app
from trainlens.core.errors import ConfigError, UsageError

REPORT_KEYS = {"smoothing": "α of a debiased EMA drawn over the raw values (0 < α ≤ 1)"}


def _smoothing(flag: float | None, table: dict[str, Any], origin: str) -> float | None:
    """--smooth, else [tool.trainlens.report] smoothing, else raw only."""
    for key in table:
        if key not in REPORT_KEYS:
            raise ConfigError(
                f"{origin}: unknown key {key!r} in [tool.trainlens.report]; "
                f"known: {', '.join(REPORT_KEYS)}"
            )
    if flag is not None:
        value, where = flag, "--smooth"
    elif table.get("smoothing") is not None:
        raw = table["smoothing"]
        if isinstance(raw, bool) or not isinstance(raw, (int, float)):
            raise ConfigError(f"{origin}: report.smoothing must be a number in (0, 1]")
        value, where = float(raw), f"{origin}: report.smoothing"
    else:
        return None
    if not 0 < value <= 1:
        raise UsageError(
            f"{where} must be in (0, 1] (the weight of the newest value in the "
            f"EMA; 0.05 ≈ TensorBoard's 0.95 slider), not {value:g}"
        )
    return value


@app.command()
def report(
    paths: PathsArg,
    output: Annotated[
        Path,
        typer.Option(
            "--output",
            "-o",
            help="Directory to write report.html, report.md and one PNG and SVG per panel into.",
            show_default=False,
        ),
    ],
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
) -> int:
    """Write an HTML/Markdown report with annotated plots; several runs are overlaid."""
    from trainlens.api import analyze as analyze_paths
    from trainlens.core.config import load_config
    from trainlens.report import write_report

    cfg = load_config(config)
    alpha = _smoothing(smooth, cfg.report, str(cfg.path) if cfg.path else "config")
    if schedule:
        cfg.schedule = parse_schedule(schedule)
    cfg.aliases = {**cfg.aliases, **_parse_aliases(alias)}
    analyses = analyze_paths(paths, config=cfg, format=format, runs=run, regex=regex)
    written = write_report(analyses, output, smoothing=alpha)
    n = sum(len(a.findings) for a in analyses)
    typer.echo(f"report: {written} ({len(analyses)} run(s), {n} finding(s))")
    return 0
