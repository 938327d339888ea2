"""``trainlens gate``: judge archived runs for CI (exit 0 pass, 1 fail, 2 usage/unreadable)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from trainlens.cli._options import IgnoreOpt, SelectOpt
from trainlens.cli.app import app

if TYPE_CHECKING:
    from trainlens.core.config import Config
    from trainlens.gate.golden import Golden


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
    reference: Annotated[
        list[Path] | None,
        typer.Option(
            "--reference",
            help="Golden curves: a reference run (any format; repeat it for several seeds of "
            "one config) or one golden file (trainlens' or Megatron-LM's golden values). Each "
            "run's loss, val loss, grad norm, LR, step time and memory curves are compared "
            "with them step by step (REF001).",
            show_default=False,
        ),
    ] = None,
    rtol: Annotated[
        list[str] | None,
        typer.Option(
            "--rtol",
            help="With one reference: relative tolerance, VALUE for every curve or "
            "METRIC=VALUE (repeatable) [default: per metric, docs/gate.md]",
            show_default=False,
        ),
    ] = None,
    atol: Annotated[
        list[str] | None,
        typer.Option(
            "--atol",
            help="Absolute tolerance, VALUE or METRIC=VALUE (repeatable) [default: 0]",
            show_default=False,
        ),
    ] = None,
    align: Annotated[
        str | None,
        typer.Option(
            "--align",
            help="Compare curves on 'step' (default) or 'tokens' (runs of different batch "
            "sizes; every run must log a cumulative tokens count).",
            show_default=False,
        ),
    ] = None,
    write_golden: Annotated[
        Path | None,
        typer.Option(
            "--write-golden",
            help="Store the references' bands in this golden file (small: CI keeps it "
            "instead of whole runs). Without --reference, the PATHS are the references and "
            "nothing is gated.",
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

    golden = None
    if reference or rtol or atol or align or write_golden is not None:
        golden = _golden(cfg, paths, reference, rtol, atol, write_golden, align)
        if golden is None:  # --write-golden from the PATHS: nothing to gate
            return 0

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
            golden=golden,
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


def _tolerances(values: list[str] | None, key: str) -> dict[str, float]:
    from trainlens.core.errors import UsageError

    out: dict[str, float] = {}
    for raw in values or []:
        metric, sep, num = raw.rpartition("=")
        try:
            x = float(num)
        except ValueError:
            raise UsageError(
                f"--{key} {raw!r}: expected VALUE or METRIC=VALUE, e.g. --{key} 0.05 or "
                f"--{key} train/loss=0.05"
            ) from None
        if not x >= 0:
            raise UsageError(f"--{key} {raw!r}: a tolerance is a number >= 0")
        out[metric if sep else "*"] = x
    return out


def _golden(
    cfg: Config,
    paths: list[str],
    reference: list[Path] | None,
    rtol: list[str] | None,
    atol: list[str] | None,
    write_golden: Path | None,
    align: str | None = None,
) -> Golden | None:
    """The golden curves the gate compares with (None: only a golden file was written)."""
    import dataclasses

    from trainlens.core.errors import UsageError
    from trainlens.gate import parse_rules
    from trainlens.gate.golden import write_golden as store
    from trainlens.gate.runner import load_reference

    rules = parse_rules(cfg)
    ref = rules.reference
    tuning = {m: dict(f) for m, f in ref.tuning}
    for key, table in (("rtol", _tolerances(rtol, "rtol")), ("atol", _tolerances(atol, "atol"))):
        for m, x in table.items():
            tuning.setdefault(m, {})[key] = x
    if align is not None and align not in ("step", "tokens"):
        raise UsageError(f"--align takes 'step' or 'tokens', not {align!r}")
    ref = dataclasses.replace(
        ref,
        tuning=tuple((m, tuple(sorted(f.items()))) for m, f in tuning.items()),
        align=align or ref.align,
    )
    rules = dataclasses.replace(rules, reference=ref)
    sources = [str(p) for p in reference or []] or list(ref.paths)
    only_write = not sources
    if only_write:
        if write_golden is None:
            raise UsageError("--rtol / --atol / --align need --reference (or gate.reference.paths)")
        sources = list(paths)
    golden = load_reference(sources, cfg, rules)
    if write_golden is not None:
        store(golden, write_golden)
        n = len(golden.references)
        typer.echo(
            f"gate: wrote {write_golden}: {len(golden.bands)} curves "
            f"({', '.join(golden.bands)}) from {n} reference{'s' if n != 1 else ''}",
            err=True,
        )
    return None if only_write else golden
