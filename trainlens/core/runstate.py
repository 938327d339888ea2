"""How a run ended, from what its writer left: finished, crashed, or not known.

A run's **state** is one of :data:`STATES`: ``running`` (records are coming), ``finished``
(its writer left a normal end), ``crashed`` (its writer left a crash: an exception, a
traceback, a non-zero exit code) or ``stalled`` (no end was left and no record came for
longer than the watch's stall time: hung, or killed without a word — SIGKILL, OOM-killer).
The last two of those need a clock and a watch; a file alone tells only its **end**
(:class:`RunEnd`), which readers put in ``Run.metadata["run_end"]`` when they find one:

- trainlens' own monitor and callbacks: the end record (:func:`end_record`), one JSON line
  ``{"event": "end", "state": "finished", "step": N, "time": T}`` (``"crashed"`` with
  ``"error": "<exception type>"`` on an exception) — docs/monitor.md;
- HF Trainer: its final ``log_history`` entry, the one with ``train_runtime``;
- Megatron-style text logs: ``[after training is done]``, or a traceback,
  ``KeyboardInterrupt`` or a launcher's non-zero return code after the last training line;
- W&B: the run's exit record (exit code 0: finished, else crashed).

The record's shape lives here, once: the monitor writes it, the readers read it.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from trainlens.core.dataclass import dataclass

#: Every state a watched run can be in.
STATES = ("running", "finished", "crashed", "stalled")
#: The states a writer's end leaves.
END_STATES = ("finished", "crashed")
#: Where a reader puts the end it found.
METADATA_KEY = "run_end"
#: The end record's ``event`` value.
END_EVENT = "end"
#: The end record's keys (besides ``step`` and ``time``); no reader turns them into metrics.
END_KEYS = ("event", "state", "error", "message", "stopped")
_RECORD_KEYS = frozenset((*END_KEYS, "step", "time"))
#: How long a crash message is kept in the end record.
MESSAGE_CHARS = 300


@dataclass(frozen=True)
class RunEnd:
    """How a run ended, and how that was decided (``by``: the writer's mark)."""

    state: str  # finished | crashed
    by: str  # the mark it was read from, e.g. "trainlens end record"
    step: int | None = None  # the last step when it ended, where the mark says
    time: float | None = None  # unix time of the end, where the mark says
    error: str | None = None  # crashed: the exception's type (or exit code), when known
    where: str | None = None  # file and line of the mark, where known

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Any) -> RunEnd | None:
        if not isinstance(d, dict) or d.get("state") not in END_STATES:
            return None
        keys = cls.__dataclass_fields__
        return cls(**{k: v for k, v in d.items() if k in keys})

    def text(self) -> str:
        """One line: ``crashed (RuntimeError) at step 250 — traceback at the end of the log``."""
        what = self.state
        if self.error:
            what += f" ({self.error})"
        if self.step is not None:
            what += f" at step {self.step}"
        return f"{what} — {self.by}"


def run_end(metadata: dict[str, Any]) -> RunEnd | None:
    """The end a reader found for a run (its ``metadata``), or None: not known."""
    return RunEnd.from_dict(metadata.get(METADATA_KEY))


def end_record(
    step: int,
    time: float,
    error: BaseException | None = None,
    stopped: str | None = None,
) -> dict[str, Any]:
    """The record a trainlens writer appends when a run ends: ``finished``, or ``crashed``
    with the exception's type (``error``). ``stopped``: why trainlens stopped the run
    (``stop_on``), a normal end."""
    rec: dict[str, Any] = {"event": END_EVENT, "state": "finished", "step": step, "time": time}
    if error is not None:
        rec["state"] = "crashed"
        rec["error"] = type(error).__name__
        message = str(error).strip().splitlines()
        if message:
            rec["message"] = message[0][:MESSAGE_CHARS]
    if stopped:
        rec["stopped"] = stopped
    return rec


def from_record(
    obj: Any, by: str = "trainlens end record", where: str | None = None
) -> RunEnd | None:
    """The end an end record says (None: ``obj`` is no end record; one with a key of its
    own, a value a user logged, is not one: it is read as the user's row)."""
    if not isinstance(obj, dict) or obj.get("event") != END_EVENT:
        return None
    if not set(obj) <= _RECORD_KEYS:
        return None
    state = obj.get("state")
    if state not in END_STATES:
        return None
    step = obj.get("step")
    t = obj.get("time")
    error = obj.get("error")
    return RunEnd(
        state=state,
        by=by,
        step=step if isinstance(step, int) and not isinstance(step, bool) else None,
        time=float(t) if isinstance(t, (int, float)) and not isinstance(t, bool) else None,
        error=str(error)[:MESSAGE_CHARS] if error is not None else None,
        where=where,
    )
