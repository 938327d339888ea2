"""Checkpoints in ``analyze``: the CKPT findings and the checkpoint to go back to.

:func:`analysis_checkpoints` runs after the detectors (:func:`trainlens.api.analyze_run`):
it finds the run's own checkpoints (by its layout or config,
:mod:`trainlens.checkpoints._owner`; or the folder ``--checkpoints`` /
``[tool.trainlens] checkpoints`` names; what lies near the run and is not its own is a
data-quality note naming the folder, never a finding), audits
their structure (no CRC pass over them all: ``trainlens checkpoints`` does that; analyze
must stay quick beside a folder of 50 GB checkpoints), checks the CRCs of each checkpoint
it is about to name (passing a corrupt one over for the next older), adds the CKPT
findings the config keeps, and names the newest intact checkpoint before each incident
that advises a restart.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from trainlens.core.findings import Finding, Severity

if TYPE_CHECKING:
    from trainlens.checkpoints._model import Inventory
    from trainlens.core.config import Config
    from trainlens.core.run import Run


def checkpoints_path(config: Config) -> str | None:
    """The folder the user named (``--checkpoints``, ``[tool.trainlens] checkpoints``),
    searched as ``trainlens checkpoints`` searches; None when none is named."""
    setting = config.checkpoints
    if isinstance(setting, str) and setting:
        return setting
    return None


def _inventory(run: Run, config: Config) -> tuple[Inventory | None, str | None]:
    """The run's inventory (None when nothing is found or readable) and a note naming
    checkpoints near the run that are not its own (:mod:`trainlens.checkpoints._owner`)."""
    from trainlens.core.errors import TrainlensError

    named = checkpoints_path(config)
    try:
        if named is not None:
            from trainlens.checkpoints import inventory

            return inventory(named, crc_budget=0), None
        if not os.path.exists(run.source):  # a Run made in memory names no place
            return None, None
        from trainlens.checkpoints._owner import own_checkpoints, stray_folders, stray_note

        places, found = own_checkpoints(run)
        note = stray_note(stray_folders(run, found), places.outside)
        if not found and not found.pointers:
            return None, note
        # (imported only now: the audit's modules are most of the package's start-up)
        from trainlens.checkpoints import audited

        return audited(places.root, found, crc_budget=0), note
    except (TrainlensError, OSError):
        return None, None


def _kept(code: str, config: Config) -> bool:
    """The config's select / ignore, by code or family, as for detector codes."""
    if any(code.startswith(p.upper()) for p in config.ignore):
        return False
    return not config.select or any(code.startswith(p.upper()) for p in config.select)


def analysis_checkpoints(
    run: Run, findings: list[Finding], config: Config
) -> tuple[list[Finding], Inventory | None]:
    """The findings with the CKPT ones added and restart advice attached, and the
    inventory (None when no checkpoint or pointer was found)."""
    if config.checkpoints is False:
        return findings, None
    inv, note = _inventory(run, config)
    if note is not None:
        from trainlens.core.run import DataIssue

        issue = DataIssue(
            kind="checkpoints-elsewhere", source=run.source, message=note, severity="info"
        )
        if issue not in run.data_quality:  # analyze and report may both analyze a run
            run.data_quality.append(issue)
    if inv is None or (not inv.checkpoints and not inv.pointers):
        return findings, None
    import polars as pl

    from trainlens.checkpoints import RunSteps
    from trainlens.checkpoints import findings as ckpt_findings
    from trainlens.checkpoints.advice import attach_restart_advice

    _verify_named(inv, findings)
    pts = run.standing().group_by("step").agg(pl.col("wall_time").min()).sort("step")
    steps = RunSteps(pts.get_column("step").to_list(), pts.get_column("wall_time").to_list())
    severity = {k.upper(): Severity.parse(v) for k, v in config.severity.items()}
    extra = []
    for f in ckpt_findings(inv, run=steps):
        if _kept(f.code, config):
            extra.append(f.with_severity(severity[f.code]) if f.code in severity else f)
    return attach_restart_advice([*findings, *extra], inv), inv


#: bytes of zip members CRC-checked in each checkpoint a finding names (analyze audits
#: the rest for structure only; the one it tells the user to go back to is checked whole)
VERIFY_BUDGET = 1 << 30


def _verify_named(inv: Inventory, findings: list[Finding]) -> None:
    """Check the CRCs of every checkpoint the restart advice would name, in place; one
    found corrupt is passed over for the next older, which is checked in turn."""
    from trainlens.checkpoints._audit import audit_file, audit_folder
    from trainlens.checkpoints.advice import _target

    verified: set[str] = set()
    for _ in range(len(inv.checkpoints)):
        named = {}
        for f in findings:
            wants, ckpt, _ = _target(f, inv)
            if wants and ckpt is not None and ckpt.path not in verified:
                named[ckpt.path] = ckpt
        if not named:
            return
        for path, ckpt in named.items():
            audit = audit_folder if os.path.isdir(path) else audit_file
            inv.checkpoints[inv.checkpoints.index(ckpt)] = audit(
                path, ckpt.kind, ckpt.step, VERIFY_BUDGET
            )
            verified.add(path)
