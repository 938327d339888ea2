"""Data quality of a text log: every note textlog writes, and the values it leaves out.

Nothing read is lost silently: a value that is left out (an mfu placeholder, a step that
does not fit 64 bits, a line that cannot be placed) is counted in a note that says which
line and why. A log that logged no metric but ends in a Python exception (a run that
crashed before its first step) is reported with that exception quoted.
"""

from __future__ import annotations

import re

import polars as pl

from trainlens.core.dataclass import dataclass, field
from trainlens.core.run import DataIssue

# the last line of a Python traceback, after any launcher prefix (`[rank3]: `, `3: `)
_EXCEPTION = re.compile(
    r"^(?:\[[^\]\n]*\]:?[ \t]*)*(?:[0-9]+:[ \t]*)?"
    r"((?:[A-Za-z_][A-Za-z0-9_]*\.)*[A-Za-z_][A-Za-z0-9_]*(?:Error|Exception|Interrupt|Fault))"
    r"(?::[ \t]*(.*))?$"
)
# a line that may end a crash (a cheap screen before _EXCEPTION)
ERROR_HINT = r"(?:Error|Exception|Interrupt|Fault)"
# launchers' wrappers around a worker's error: the worker's own error says more
_WRAPPER_ERRORS = {"ChildFailedError", "CalledProcessError"}


class Notes:
    """The notes of one read of ``source``; line numbers count from the resume offset
    ``start`` (and say so when it is not 0)."""

    def __init__(self, source: str, start: int) -> None:
        self.source = source
        self.start = start
        self.issues: list[DataIssue] = []

    def line(self, n: int) -> str:
        return f"line {n}" if self.start == 0 else f"line {n} after byte {self.start}"

    def add(
        self,
        kind: str,
        message: str,
        *,
        line: int | None = None,
        count: int = 1,
        severity: str = "warning",
        **details: object,
    ) -> None:
        self.issues.append(
            DataIssue(
                kind=kind,
                source=self.source,
                location=None if line is None else self.line(line),
                message=message,
                count=count,
                severity=severity,
                details=dict(details),
            )
        )

    def ignored(self, count: int, message: str, line: int | None = None) -> None:
        """``count`` lines of a known shape left out, and why (an info note)."""
        self.add("ignored-lines", f"{count} {message}", line=line, count=count, severity="info")


@dataclass
class Dropped:
    """The values left out over every piece of a read: negative mfu placeholders and
    values on a line whose step does not fit 64 bits (with those lines, first 100)."""

    mfu: int = 0
    mfu_line: int | None = None
    huge: int = 0
    huge_lines: list[int] = field(default_factory=list)
    n_huge_lines: int = 0

    def note(self, notes: Notes) -> None:
        if self.mfu and self.mfu_line is not None:
            notes.add(
                "ignored-values",
                f"{self.mfu} negative mfu value(s) were left out: nanoGPT and llm.c "
                "print -100% until they have timed their first iterations",
                line=self.mfu_line,
                count=self.mfu,
                severity="info",
            )
        if self.huge:
            lines, n = self.huge_lines, self.n_huge_lines
            shown = ", ".join(notes.line(k) for k in lines[:5])
            notes.add(
                "bad-step",
                f"{self.huge} value(s) on {n} line(s) whose step does not fit in "
                f"64 bits were skipped ({shown}{'…' if n > 5 else ''})",
                line=lines[0],
                count=self.huge,
                lines=lines[:100],
            )


def drop_mfu_placeholder(long: pl.DataFrame, dropped: Dropped) -> pl.DataFrame:
    """An ``mfu`` below zero is a placeholder, not a measurement: nanoGPT and llm.c print
    ``-100%`` until they have timed their first iterations. Left out, counted."""
    placeholder = (pl.col("metric") == "mfu") & pl.col("raw").str.starts_with("-")
    out = long.filter(placeholder)
    if out.height == 0:
        return long
    first = int(out.get_column("lineno").min())  # type: ignore[arg-type]
    dropped.mfu += out.height
    dropped.mfu_line = first if dropped.mfu_line is None else min(dropped.mfu_line, first)
    return long.filter(~placeholder)


def drop_huge_steps(long: pl.DataFrame, dropped: Dropped) -> pl.DataFrame:
    """Values whose line's step does not fit 64 bits (a 20-digit ``s:N``) are left out,
    counted; the rest of the log is kept. (Pieces come in line order.)"""
    bad = long.filter(pl.col("step").is_null())
    if bad.height == 0:
        return long
    lines = bad.get_column("lineno").unique(maintain_order=True)
    dropped.huge += bad.height
    dropped.n_huge_lines += lines.len()
    room = 100 - len(dropped.huge_lines)
    if room > 0:
        dropped.huge_lines += [int(k) for k in lines.head(room).to_list()]
    return long.filter(pl.col("step").is_not_null())


def trainer_dicts(notes: Notes, n_dicts: int, *, used: bool) -> None:
    """Printed Trainer dicts carry no step: say how they were placed, or that they were
    left out because the file has lines with real steps."""
    if not used:
        notes.add(
            "ignored-lines",
            f"{n_dicts} printed metric dict line(s) carry no step and were left "
            "out: the file has lines with real steps",
            count=n_dicts,
            severity="info",
        )
        return
    notes.add(
        "inferred-step",
        f"steps inferred for {n_dicts} printed metric dict line(s): the k-th "
        "training dict ('loss') is step k, an evaluation dict (eval_*) takes "
        "the last training step, the final summary is named final/<key>",
        count=n_dicts,
        severity="info",
    )


def deepspeed(notes: Notes, counts: dict[str, int]) -> None:
    """How DeepSpeed's step-less lines (overflows, perplexity evaluations) were placed;
    pops ``deepspeed_overflow_unplaced`` from ``counts``."""
    unplaced = counts.pop("deepspeed_overflow_unplaced", 0)
    if unplaced:
        notes.ignored(
            unplaced,
            "DeepSpeed overflow line(s) were left out: the file logs no "
            "global step to place them at (DeepSpeed's steps_per_print prints one)",
        )
    if counts["deepspeed_overflow"]:
        notes.add(
            "inferred-step",
            f"{counts['deepspeed_overflow']} DeepSpeed OVERFLOW line(s) carry no step: "
            "each logging interval's count ('overflow steps') and the loss scale "
            "after it are placed at the interval's next logged step",
            count=counts["deepspeed_overflow"],
            severity="info",
        )
    if counts["deepspeed_eval"] and not (counts["deepspeed_steps"] or counts["deepspeed_timer"]):
        notes.add(
            "inferred-step",
            "the file logs no global step: each perplexity evaluation is placed at "
            "its epoch number",
            count=counts["deepspeed_eval"],
            severity="info",
        )


def crashed_message(path: object, crash: str) -> str:
    """The refusal of a log that logged no training step and ends in ``crash``."""
    return f"{path}: no training step was logged; the log ends in an error: {crash}"


def final_error(lines: pl.Series) -> str | None:
    """The error a log that logged no metric ends with: its last Python exception line
    (a launcher's wrapper only when nothing else), quoted, with how many lines repeat it."""
    found: list[tuple[str, str]] = []
    # (a Python loop only over the few lines naming an error, of a log with no metric)
    for line in lines.filter(lines.str.contains(ERROR_HINT)):
        m = _EXCEPTION.match(line.strip())
        if m:
            found.append((m.group(1), (m.group(2) or "").strip()))
    if not found:
        return None
    own = [f for f in found if f[0].rsplit(".", 1)[-1] not in _WRAPPER_ERRORS] or found
    kind, text = own[-1]
    quote = f"{kind}: {text}" if text else kind
    if len(quote) > 200:
        quote = quote[:199] + "…"
    same = sum(1 for k, _ in found if k == kind)
    return quote + (f" ({same} {kind} lines)" if same > 1 else "")
