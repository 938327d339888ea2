"""What the gate can require of a run's checkpoints, and the report's marks for them.

Library functions the gate and the report call (the report draws ``axis_marks``; the gate's
requirements are not wired in yet: see docs/checkpoints.md); they compute, the gate and
the report only show.
"""

from __future__ import annotations

from typing import Any

from trainlens.checkpoints._model import Inventory
from trainlens.checkpoints.findings import Params, clock, save_interval
from trainlens.core.dataclass import dataclass


@dataclass(frozen=True)
class Verdict:
    ok: bool
    message: str
    checkpoint: str | None = None  # the path it rests on


def ends_intact(inv: Inventory, last_step: int | None, params: Params | None = None) -> Verdict:
    """The run ends with an intact checkpoint: the newest checkpoint is intact and lies in
    the run's last ``recent_frac`` (without the run's last step: the newest is intact)."""
    p = params or Params()
    stepped = [c for c in inv.checkpoints if c.step is not None]
    if not stepped:
        return Verdict(False, f"no checkpoint with a step under {inv.root}")
    newest = max(stepped, key=lambda c: (c.step or 0, c.wall_time or 0.0))
    if not newest.intact:
        return Verdict(
            False, f"the newest checkpoint {newest.name} is {newest.status}", newest.path
        )
    if last_step and (newest.step or 0) < (1 - p.recent_frac) * last_step:
        return Verdict(
            False,
            f"the newest checkpoint {newest.name} is at step {newest.step}, before the last "
            f"{p.recent_frac:.0%} of the run (last step {last_step})",
            newest.path,
        )
    return Verdict(True, f"{newest.name} (step {newest.step}) is intact", newest.path)


def best_val_kept(inv: Inventory, best_step: int, tolerance: int | None = None) -> Verdict:
    """An intact checkpoint within ``tolerance`` steps of the best validation step (default:
    the save interval, the most common step difference between saves; 0 when unknown)."""
    ok = sorted(
        (c for c in inv.checkpoints if c.intact and c.step is not None), key=lambda c: c.step or 0
    )
    if tolerance is None:
        tolerance = save_interval([c.step or 0 for c in ok], 1) or 0
    near = [c for c in ok if abs((c.step or 0) - best_step) <= tolerance]
    if not near:
        return Verdict(
            False, f"no intact checkpoint within {tolerance} steps of the best step {best_step}"
        )
    c = min(near, key=lambda c: (abs((c.step or 0) - best_step), c.step or 0))
    return Verdict(True, f"{c.name} (step {c.step}, saved {clock(c.wall_time)}) is intact", c.path)


def axis_marks(inv: Inventory) -> list[dict[str, Any]]:
    """One mark per checkpoint with a step, for the report's step axis: step, name, intact,
    integrity (the report colours intact and broken apart)."""
    return [
        {"step": c.step, "name": c.name, "intact": c.intact, "integrity": c.status}
        for c in inv.checkpoints
        if c.step is not None
    ]
