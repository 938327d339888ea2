"""``trainlens gate --format github``: GitHub Actions workflow commands, one per incident.

    ::error file=runs/nan/metrics.jsonl,line=1,title=NAN001 non-finite-value (steps 4…)::nan: …

The title is the incident's headline code, name and span; the message its headline
finding's, then the incident's id, first mover and members. Severity (the worst
unacknowledged member's) picks the command (error, warning, notice); an acknowledged
incident is a notice. Escaping follows GitHub's workflow-command rules (as in @actions/core): in the
message ``%``, CR and LF become ``%25``, ``%0D``, ``%0A``; in property values ``:`` and
``,`` also become ``%3A`` and ``%2C``; any other control character from the input (ESC,
NUL, bidi overrides…) is shown escaped (:func:`trainlens.core.sanitize.terminal`), as
the runner's log would otherwise act on it. The Markdown summary for ``$GITHUB_STEP_SUMMARY``
comes from :mod:`trainlens.formatters.markdown`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainlens.core.sanitize import github_data, github_property, terminal

if TYPE_CHECKING:
    from trainlens.gate.result import GateIncident, GateResult

LEVELS = {"error": "error", "warning": "warning", "info": "notice"}


# the rules live in core.sanitize with the other outputs'; these names stay importable
escape_data = github_data
escape_property = github_property


def command(level: str, message: str, *, file: str, title: str, line: int = 1) -> str:
    props = f"file={escape_property(file)},line={line},title={escape_property(title)}"
    return f"::{level} {props}::{escape_data(message)}"


def annotation(run: str, file: str, i: GateIncident) -> str:
    level = "notice" if i.acknowledged else LEVELS[i.severity.value]
    message = f"{run}: {i.head.finding.message}"
    extra = [f"incident {i.id}"]
    if i.incident.first_text():
        extra.append(i.incident.first_text())
    if i.related():
        extra.append(i.related())
    message += f" ({'; '.join(extra)})"
    if i.acknowledged:
        message += f" (acknowledged: {i.reason})"
    return command(level, message, file=file, title=i.title())


def render_github(result: GateResult) -> str:
    # what fails the gate first: GitHub shows only the first annotations of a step
    entries: list[tuple[int, str]] = []
    for r in result.reports:
        if r.verdict == "unreadable":
            level = "warning" if result.allow_unreadable else "error"
            line = command(level, r.error or "unreadable", file=r.source, title="unreadable input")
            entries.append((1 if result.allow_unreadable else 0, line))
        for i in r.incidents:
            rank = 0 if i.fails else (2 if i.acknowledged else 1)
            entries.append((rank, annotation(r.name, r.source, i)))
    lines = [line for _, line in sorted(entries, key=lambda e: e[0])]
    verdict = "passed" if result.verdict == "pass" else "failed"
    lines.append(terminal(f"trainlens gate {verdict}: {result.headline()}"))
    return "\n".join(lines) + "\n"
