"""``trainlens watch``: judge runs while they train; announce findings as they appear."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from trainlens.cli._options import FormatOpt, IgnoreOpt, ReaderOpt, SelectOpt, reader_choice
from trainlens.cli.app import app


@app.command()
def watch(
    paths: Annotated[
        list[Path],
        typer.Argument(
            help="Run files or folders of runs to follow (runs that appear later are found).",
            show_default=False,
        ),
    ],
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            help="A trainlens.toml or pyproject.toml ([tool.trainlens.watch] and the rest; "
            "default: the nearest one from the working directory).",
            show_default=False,
        ),
    ] = None,
    reader: ReaderOpt = None,
    fmt: FormatOpt = None,
    json_out: Annotated[
        bool, typer.Option("--json", help="One JSON object per event on stdout.")
    ] = False,
    poll: Annotated[
        float | None,
        typer.Option(
            "--poll",
            help="Poll every SECONDS instead of waiting for file events (network "
            "filesystems) [default: file events, or watch.poll].",
            show_default=False,
        ),
    ] = None,
    notify: Annotated[
        list[str] | None,
        typer.Option(
            "--notify",
            help="Send each incident to this URL (apprise: slack://, discord://, msteams://, "
            "ntfys://, mailto://, json://host/path for a webhook); repeatable.",
            show_default=False,
        ),
    ] = None,
    rate_limit: Annotated[
        float | None,
        typer.Option(
            "--rate-limit",
            help="At most one notification per SECONDS per target [default: 60].",
            show_default=False,
        ),
    ] = None,
    exec_cmd: Annotated[
        str | None,
        typer.Option(
            "--exec",
            help="Run this command once per incident, again when its severity rises "
            "(TRAINLENS_* variables describe it), e.g. to checkpoint or stop the job.",
            show_default=False,
        ),
    ] = None,
    exit_on: Annotated[
        str | None,
        typer.Option(
            "--exit-on",
            help="End the watch with exit 1 at the first incident at or above: warning, error.",
            show_default=False,
        ),
    ] = None,
    prometheus: Annotated[
        str | None,
        typer.Option(
            "--prometheus",
            help="Serve Prometheus metrics on HOST:PORT (/metrics).",
            show_default=False,
        ),
    ] = None,
    prometheus_tensors: Annotated[
        int | None,
        typer.Option(
            "--prometheus-tensors",
            help="Export the K most telling per-tensor series of each family (grad_norm/, "
            "update_ratio/) per run; 0: none [default: 8].",
            show_default=False,
        ),
    ] = None,
    hold_steps: Annotated[
        float | None,
        typer.Option(
            "--hold-steps",
            help="A warning incident opens once shown for STEPS steps, and closes once not "
            "shown for as long; errors and NaN/Inf open at once [default: 100].",
            show_default=False,
        ),
    ] = None,
    hold_seconds: Annotated[
        float | None,
        typer.Option(
            "--hold-seconds",
            help="... or for SECONDS, whichever comes first [default: 120].",
            show_default=False,
        ),
    ] = None,
    once: Annotated[
        bool,
        typer.Option("--once", help="Read what is there, judge, announce, and end."),
    ] = False,
    until_idle: Annotated[
        float | None,
        typer.Option(
            "--until-idle",
            help="End when no run has grown for SECONDS (job scripts).",
            show_default=False,
        ),
    ] = None,
    select: SelectOpt = None,
    ignore: IgnoreOpt = None,
) -> int:
    """Follow runs while they are written and announce each finding once, when it appears
    (exit 0 when stopped with Ctrl-C; 1 when --exit-on was reached)."""
    from trainlens.core.config import load_config
    from trainlens.core.errors import UsageError
    from trainlens.core.names import AliasTable
    from trainlens.readers import FORMATS, ReadOptions
    from trainlens.watch.discovery import awaited
    from trainlens.watch.loop import watch as run_watch
    from trainlens.watch.settings import WatchSettings
    from trainlens.watch.sinks import build_sink

    reader, _ = reader_choice(reader, fmt)
    if reader is not None and reader not in FORMATS:
        raise UsageError(f"--reader must be one of {', '.join(FORMATS)}, not {reader!r}")
    awaited(paths, once=once)  # a watch started before its job waits for it: may it?
    if until_idle is not None and until_idle < 0:
        raise UsageError("--until-idle must be at least 0")
    cfg = load_config(config)
    cfg.apply_flags(select, ignore)
    origin = str(cfg.path) if cfg.path else "config"
    settings = WatchSettings.from_table(cfg.watch, origin=origin).with_flags(
        poll=poll,
        notify=notify or None,
        rate_limit=rate_limit,
        exec=exec_cmd,
        exit_on=exit_on,
        prometheus=prometheus,
        prometheus_tensors=prometheus_tensors,
        hold_steps=hold_steps,
        hold_seconds=hold_seconds,
    )
    sink = build_sink(settings, json=json_out, tty=sys.stdout.isatty())
    try:
        return run_watch(
            paths,
            config=cfg,
            settings=settings,
            sink=sink,
            format=reader,
            options=ReadOptions(aliases=AliasTable(cfg.aliases)),
            once=once,
            until_idle=until_idle,
            on_waiting=_say_waiting,
        )
    finally:
        sink.close()


def _say_waiting(path: Path) -> None:
    print(f"waiting for {path} to appear", file=sys.stderr, flush=True)
