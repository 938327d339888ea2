"""Restarts: the step went backwards — a resume from a checkpoint.

What it flags
    DATA001 ``restart``: each point where a metric's step went back (read from the
    readers' data-quality records), with the step reached, the step resumed from, and
    how many logged values the resumed segment superseded.

Why it matters
    A resume redoes the steps between the checkpoint and the crash: compute is lost,
    and the logged curves hold two versions of those steps. trainlens keeps both (the
    later one stands, the earlier is drawn faintly in the report); a run that restarts
    often has an infrastructure problem worth knowing about, and a gate may require
    none.

Default thresholds
    Every restart is reported; severity warning (work was redone). A restart that
    superseded nothing (the step went back only for a metric logged out of order) is
    info.

    A step that goes back to the log's first step right after reaching the run's declared
    last step (`step:N/M`, `iteration N/ M`) is another run appended to the file, not a
    resume (modded-nanogpt's records keep each seed's run in one file): info, said so.

Known false positives
    Files concatenated out of order (e.g. event files sorted by a name that does not
    follow time) look like restarts; logs that reset the step counter per epoch look
    like a restart every epoch (log a global step instead).

Example
    ``WARNING  DATA001  steps 600–700  the run restarted: it reached step 700, then
    resumed from step 600 (101 logged steps redone, 1,313 values superseded).``
"""

from __future__ import annotations

from trainlens.core.dataclass import dataclass
from trainlens.core.findings import Finding
from trainlens.core.run import Run
from trainlens.detectors.base import Context, finding

CODES = {"DATA001": "restart"}


@dataclass(frozen=True)
class Params:
    #: severity when the restart redid logged work
    severity: str = "warning"


def detect(run: Run, params: Params, ctx: Context) -> list[Finding]:
    out = []
    for issue in run.data_quality:
        if issue.kind != "restart":
            continue
        frm = int(issue.details["from_step"])
        to = int(issue.details["to_step"])
        sup = int(issue.details.get("superseded", 0))
        sev = params.severity if sup else "info"
        text = (
            f"the run restarted: it reached step {frm}, then resumed from step {to} "
            f"({frm - to + 1} steps redone, {sup:,} logged values superseded)."
        )
        if _another_run(run, frm, to):
            # no resume goes back to the start after the run finished: the file holds
            # the next run of the job (modded-nanogpt's records keep each seed's run in
            # one file)
            sev = "info"
            text = (
                f"the file holds another run: one reached the declared last step {frm}, "
                f"then a run began again at step {to}; the later one stands ({sup:,} "
                "logged values of the earlier one are kept as superseded)."
            )
        out.append(
            finding(
                "DATA001",
                CODES["DATA001"],
                sev,
                text,
                step_start=to,
                step_end=frm,
                from_step=frm,
                to_step=to,
                superseded=sup,
                where=issue.location,
            )
        )
    return out


def _another_run(run: Run, frm: int, to: int) -> bool:
    """The step went back to the log's first step right after reaching the run's declared
    last step (``step:N/M`` and Megatron's ``iteration N/ M`` declare M)."""
    total = run.metadata.get("max_steps")
    if not isinstance(total, int) or frm < total:
        return False
    steps = run.frame.get_column("step").to_numpy()
    return steps.size > 0 and to <= int(steps.min())
