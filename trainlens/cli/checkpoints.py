"""``trainlens checkpoints``: list a run's checkpoints, audit them, report CKPT findings.

Exit codes, as ``analyze --fail-on`` reads them: 1 when a finding is at or above
``--fail-on``, whose default here is ``error`` (a broken checkpoint, a ``latest`` pointer
to nowhere, a pickle that would run code: the reasons to run this command), not
``none`` as in analyze; 2 for a path that is not there."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from trainlens.cli.app import app
from trainlens.core.findings import fail_rank

if TYPE_CHECKING:
    from trainlens.checkpoints import Inventory
    from trainlens.core.findings import Finding


@app.command()
def checkpoints(
    path: Annotated[
        Path,
        typer.Argument(
            help="A run (file or folder) whose checkpoints sit beside it, or a folder of "
            "checkpoints.",
            show_default=False,
        ),
    ],
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    run_log: Annotated[
        Path | None,
        typer.Option(
            "--run",
            help="The run's log (file or folder), when the checkpoints are kept elsewhere: "
            "its steps and wall times judge recency and save stalls.",
            show_default=False,
        ),
    ] = None,
    fail_on: Annotated[
        str,
        typer.Option(
            "--fail-on",
            help="Exit 1 when a finding is at or above this severity: none, info, warning, error.",
        ),
    ] = "error",
    crc_budget_gib: Annotated[
        float,
        typer.Option(
            "--crc-budget",
            help="GiB of zip members read per checkpoint to check their CRCs (the rest: "
            "structure only, with a note).",
        ),
    ] = 2.0,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Show each finding's evidence.")
    ] = False,
) -> int:
    """List each checkpoint (step, wall time, size, kind, integrity) without loading it."""
    from trainlens.checkpoints import audit
    from trainlens.core.errors import UsageError

    threshold = fail_rank(fail_on)
    if crc_budget_gib < 0:
        raise UsageError("--crc-budget must be 0 or more GiB")
    inv, found, run = audit(path, crc_budget=int(crc_budget_gib * 2**30), run_path=run_log)
    if json_out:
        import json

        doc = {**inv.to_dict(), "findings": [f.to_dict() for f in found]}
        doc["run_steps"] = None if run is None else len(run.steps)
        typer.echo(json.dumps(doc, indent=2, allow_nan=False))
    else:
        typer.echo(_text(inv, found, verbose=verbose), nl=False)
    worst = max((f.severity.rank for f in found), default=-1)
    return 1 if worst >= threshold else 0


def _text(inv: Inventory, found: list[Finding], *, verbose: bool) -> str:
    from trainlens.checkpoints.findings import bytes_text, clock
    from trainlens.core.sanitize import terminal_lines
    from trainlens.formatters.text import finding_lines

    lines = [f"checkpoints under {inv.root}: {len(inv.checkpoints)}"]
    if inv.checkpoints:
        lines.append(
            f"  {'step':>9}  {'saved':<16}  {'size':>9}  {'kind':<19}  {'integrity':<11}  "
            "optim  name"
        )
    for c in inv.checkpoints:
        step = "?" if c.step is None else str(c.step)
        optim = {True: "yes", False: "no", None: "-"}[c.optimizer]
        lines.append(
            f"  {step:>9}  {clock(c.wall_time):<16}  {bytes_text(c.size):>9}  {c.kind:<19}  "
            f"{c.status:<11}  {optim:<5}  {c.name}"
        )
        lines.extend(f"{'':13}{p.status}: {p.text()}" for p in c.problems)
        if verbose:
            lines.extend(f"{'':13}note: {n}" for n in c.notes)
    for ptr in inv.pointers:
        to = Path(ptr.resolved).name if ptr.resolved else "nothing (missing)"
        lines.append(f"  pointer {ptr.path} -> {ptr.target!r}: {to}")
    lines.extend(f"  note: {n}" for n in inv.notes)
    lines.append("")
    lines.append(f"findings ({len(found)})" if found else "findings    none")
    lines.extend(finding_lines(found, verbose=verbose))
    # checkpoint, member and pointer names come from the folder: one terminal line each
    return terminal_lines(lines) + "\n"
