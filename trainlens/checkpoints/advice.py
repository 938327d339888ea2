"""Name the checkpoint to go back to in the findings of the run's detectors.

A post-pass over findings (as ``detectors._causes.attach_causes`` is over loss events):
``analyze`` would call :func:`attach_restart_advice` after the detectors when it knows the
run's checkpoints (docs/checkpoints.md, "analyze integration"). Which findings advise
going back:

- every finding whose message says "restart from a checkpoint" (the detectors' one
  wording for it: LOSS003, LOSS001 / GRAD001 that never came back): the newest intact
  checkpoint saved *before* its onset (``step_start``, or the step of what moved first
  when its cause chain names an earlier one: :func:`onset_of`);
- NAN001 at error severity (the loss is gone: a restart is the only way on): the same;
- VAL001, VAL006: the intact checkpoint nearest its best validation step
  (``evidence.best_step``), the one to keep.

The finding gets ``evidence.restart_from`` (path, name, step, wall_time) and a clause in
its message; when no intact checkpoint fits, ``evidence.restart_from`` is null and the
message says so.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from trainlens.checkpoints._model import Checkpoint, Inventory
from trainlens.checkpoints.findings import clock, restart_from
from trainlens.core.findings import Finding, Severity

#: the detectors' wording of "go back" (one phrase: a test keeps it in their messages)
RESTART_PHRASE = "restart from a checkpoint"


def _nearest(inv: Inventory, step: int) -> Checkpoint | None:
    ok = [c for c in inv.checkpoints if c.intact and c.step is not None]
    return min(ok, key=lambda c: (abs((c.step or 0) - step), c.step or 0), default=None)


def _target(f: Finding, inv: Inventory) -> tuple[bool, Checkpoint | None, str]:
    """(whether the finding advises going back, the checkpoint, what it is relative to)."""
    if f.code in ("VAL001", "VAL006") and isinstance(f.evidence.get("best_step"), int):
        best = int(f.evidence["best_step"])
        return True, _nearest(inv, best), f"nearest the best validation step {best}"
    wants = RESTART_PHRASE in f.message or (f.code == "NAN001" and f.severity is Severity.ERROR)
    if not wants or f.step_start is None:
        return False, None, ""
    onset = onset_of(f)
    return True, restart_from(inv, onset), f"before step {onset}"


def onset_of(f: Finding) -> int:
    """Where the incident began: the finding's first step, or earlier when its cause chain
    names what moved first (an LR shock at 120 behind a NaN at 128: a checkpoint saved at
    125 already holds the shocked weights)."""
    start = int(f.step_start) if f.step_start is not None else 0
    for key in ("first_mover_step", "lead_step"):
        v = f.evidence.get(key)
        if isinstance(v, int) and not isinstance(v, bool) and v < start:
            start = v
    return start


def attach_restart_advice(findings: Sequence[Finding], inv: Inventory) -> list[Finding]:
    """``findings`` with the checkpoint to go back to named where one is advised."""
    out = []
    for f in findings:
        wants, ckpt, rel = _target(f, inv)
        if not wants:
            out.append(f)
            continue
        if ckpt is None:
            clause = f"no intact checkpoint {rel} was found"
            where = None
        else:
            clause = (
                f"go back to {ckpt.name} (step {ckpt.step}, saved {clock(ckpt.wall_time)}, "
                f"intact; the newest {rel})"
                if rel.startswith("before")
                else f"keep {ckpt.name} (step {ckpt.step}, saved {clock(ckpt.wall_time)}, "
                f"intact; {rel})"
            )
            where = {"path": ckpt.path, "name": ckpt.name, "step": ckpt.step}
            where["wall_time"] = ckpt.wall_time  # type: ignore[assignment]
        body = f.message.rstrip()
        end = "." if body.endswith(".") else ""
        message = f"{body.rstrip('.')}; {clause}{end}"
        evidence = {**f.evidence, "restart_from": where}
        out.append(dataclasses.replace(f, message=message, evidence=evidence))
    return out
