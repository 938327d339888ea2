"""Options and option parsers the run commands share (analyze, convert, report, gate)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from trainlens.core.errors import UsageError

PathsArg = Annotated[
    list[Path],
    typer.Argument(
        help="Run files or directories (JSONL, CSV, TensorBoard, MLflow, ...).", show_default=False
    ),
]
# spelled out, not read from readers.FORMATS: that would import polars for --help (a test
# keeps the two lists the same)
READERS_HELP = (
    "Force a reader: jsonl, csv, parquet, tensorboard, mlflow, hf-trainer, keras-history, "
    "text, wandb-run, dvclive, framework-json."
)
ReaderOpt = Annotated[
    str | None,
    typer.Option("--reader", help=READERS_HELP, show_default=False),
]
# ``--format`` / ``-f`` named the input reader in analyze, report, convert and watch but the
# output in gate: one flag, two meanings. ``--reader`` is the input now; ``--format`` here
# is kept, hidden, as a deprecated spelling of it (and in analyze, text/json choose the
# output, as in gate).
FormatOpt = Annotated[
    str | None,
    typer.Option("--format", "-f", help=READERS_HELP, show_default=False, hidden=True),
]


def reader_choice(
    reader: str | None, legacy: str | None, outputs: tuple[str, ...] = ()
) -> tuple[str | None, str | None]:
    """``(reader, output)`` from ``--reader`` and the deprecated ``--format``: an output
    name (``outputs``) chooses the output; a reader name is the reader, with a note that
    the spelling is deprecated; anything else is exit 2 naming both meanings."""
    if legacy is None:
        return reader, None
    if legacy in outputs:
        return reader, legacy
    from trainlens.readers import FORMATS

    if legacy in FORMATS:
        if reader is not None and reader != legacy:
            raise UsageError(f"--reader {reader} and --format {legacy} disagree; give --reader")
        typer.echo(
            f"trainlens: note: --format {legacy} for the reader is deprecated; use "
            f"--reader {legacy}",
            err=True,
        )
        return legacy, None
    wanted = f"the output is one of {', '.join(outputs)}; " if outputs else ""
    raise UsageError(
        f"unknown format {legacy!r}: {wanted}the input reader is --reader ({', '.join(FORMATS)})"
    )


RunOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--run", help="MLflow run id or name to read (repeatable; default all).", show_default=False
    ),
]
RegexOpt = Annotated[
    str | None,
    typer.Option(
        "--regex",
        help="Text logs: a regex with a named group 'step' and one named group per metric.",
        show_default=False,
    ),
]
ConfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--config",
        help="A trainlens.toml or pyproject.toml (default: the nearest "
        "one from the working directory).",
        show_default=False,
    ),
]
AliasOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--alias",
        help="Map a logged name to a canonical one, e.g. 'my_loss=train/loss' (repeatable).",
        show_default=False,
    ),
]

SelectOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--select",
        help="Only these codes, families or detectors (repeatable).",
        show_default=False,
    ),
]
IgnoreOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--ignore",
        help="Skip these codes, families or detectors (repeatable).",
        show_default=False,
    ),
]


def parse_schedule(spec: str) -> dict[str, Any]:
    """``cosine:warmup_steps=100,peak_lr=3e-4,min_lr=3e-5,total_steps=10000``."""
    shape, _, rest = spec.partition(":")
    out: dict[str, Any] = {"shape": shape.strip()}
    for part in filter(None, (p.strip() for p in rest.split(","))):
        key, eq, value = part.partition("=")
        if not eq:
            raise UsageError(f"--schedule: expected key=value, got {part!r}")
        out[key.strip()] = value.strip()
    return out


def parse_aliases(items: list[str] | None) -> dict[str, str]:
    out = {}
    for item in items or []:
        raw, eq, canonical = item.partition("=")
        if not eq or not raw.strip() or not canonical.strip():
            raise UsageError(f"--alias: expected 'logged=canonical', got {item!r}")
        out[raw.strip()] = canonical.strip()
    return out
