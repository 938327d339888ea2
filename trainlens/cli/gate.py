"""``trainlens gate``: judge archived runs for CI (exit 0 pass, 1 fail, 2 usage/unreadable)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from trainlens.cli._options import IgnoreOpt, SelectOpt
from trainlens.cli.app import app


class _Progress:
    """``gate [#######.......]  12/40 runs`` on stderr, redrawn in place."""

    def __init__(self) -> None:
        self.shown = False

    def __call__(self, done: int, total: int) -> None:
        width = 30
        filled = int(width * done / max(total, 1))
        bar = "#" * filled + "." * (width - filled)
        sys.stderr.write(f"\rgate [{bar}] {done}/{total} sources")
        sys.stderr.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()


def _progress_wanted() -> bool:
    return sys.stderr.isatty() and not os.environ.get("CI")


@app.command()
def gate(
    paths: Annotated[
        list[str],
        typer.Argument(
            help="Run files, directories of runs, or globs ('runs/**/metrics.jsonl').",
            show_default=False,
        ),
    ],
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            help="A trainlens.toml or pyproject.toml with [tool.trainlens.gate] (default: "
            "the nearest one from the working directory).",
            show_default=False,
        ),
    ] = None,
    fail_on: Annotated[
        str | None,
        typer.Option(
            "--fail-on",
            help="Fail a run with an unacknowledged finding at or above this severity: "
            "none, info, warning, error [default: error, or gate.fail_on]",
            show_default=False,
        ),
    ] = None,
    baseline: Annotated[
        Path | None,
        typer.Option(
            "--baseline",
            help="A reference run (any format), or a stored summary JSON from "
            "'trainlens analyze --json' / 'trainlens gate --format json': regressions "
            "against it fail the gate.",
            show_default=False,
        ),
    ] = None,
    output_format: Annotated[
        str,
        typer.Option(
            "--format",
            "-f",
            help="Output: text, json, junit, github (annotations; also writes a Markdown "
            "summary to $GITHUB_STEP_SUMMARY), markdown.",
        ),
    ] = "text",
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="Write the output to this file.", show_default=False),
    ] = None,
    jobs: Annotated[
        int | None,
        typer.Option(
            "--jobs",
            "-j",
            help="Worker processes [default: the number of CPUs]; 1 runs in this process.",
            show_default=False,
        ),
    ] = None,
    select: SelectOpt = None,
    ignore: IgnoreOpt = None,
    allow_unreadable: Annotated[
        bool,
        typer.Option(
            "--allow-unreadable",
            help="List unreadable inputs without exiting 2 for them.",
        ),
    ] = False,
    exit_zero: Annotated[
        bool,
        typer.Option("--exit-zero", help="Always exit 0 (report-only jobs); usage errors still 2."),
    ] = False,
) -> int:
    """Judge every run found for CI: exit 1 when a run fails, 2 when an input is unreadable."""
    from trainlens.core.config import load_config
    from trainlens.core.errors import UsageError
    from trainlens.core.findings import fail_rank
    from trainlens.core.sanitize import terminal
    from trainlens.formatters.gate import output_format as checked_format
    from trainlens.formatters.gate import render
    from trainlens.gate import gate as run_gate

    fmt = checked_format(output_format)  # a usage error before any run is read
    if fail_on is not None:
        fail_rank(fail_on)  # a usage error before any run is read
    if jobs is not None and jobs < 1:
        raise UsageError("--jobs must be at least 1")
    cfg = load_config(config)
    cfg.apply_flags(select, ignore)

    progress = _Progress() if _progress_wanted() else None
    try:
        result = run_gate(
            paths,
            config=cfg,
            baseline=baseline,
            fail_on=fail_on,
            jobs=jobs,
            allow_unreadable=allow_unreadable,
            on_done=progress,
        )
    finally:
        if progress is not None:
            progress.close()

    text = render(result, fmt)
    if output is not None:
        try:
            output.parent.mkdir(parents=True, exist_ok=True)
            output.write_text(text, "utf-8")
        except OSError as exc:
            raise UsageError(f"{output}: cannot write ({exc.strerror})") from None
        typer.echo(f"gate: {result.headline()} -> {output}", err=True)
    else:
        typer.echo(text, nl=False)
    summary_file = os.environ.get("GITHUB_STEP_SUMMARY")
    if fmt == "github" and summary_file:
        from trainlens.formatters.markdown import render_markdown

        try:
            with open(summary_file, "a", encoding="utf-8") as fh:
                fh.write(render_markdown(result))
        except OSError as exc:
            typer.echo(f"trainlens: cannot write $GITHUB_STEP_SUMMARY ({exc.strerror})", err=True)
    if not allow_unreadable:
        for r in result.unreadable:
            typer.echo(terminal(f"trainlens: error: {r.error}"), err=True)
    return result.exit_code(exit_zero=exit_zero)
