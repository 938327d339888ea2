"""``trainlens gate --format github``: GitHub Actions workflow commands, one per finding.

    ::error file=runs/nan/metrics.jsonl,line=1,title=NAN001 non-finite-value::nan: ...

Severity picks the command (error, warning, notice); an acknowledged finding is a
notice. Escaping follows GitHub's workflow-command rules (as in @actions/core): in the
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
    from trainlens.gate.result import GateFinding, GateResult

LEVELS = {"error": "error", "warning": "warning", "info": "notice"}


# the rules live in core.sanitize with the other outputs'; these names stay importable
escape_data = github_data
escape_property = github_property


def command(level: str, message: str, *, file: str, title: str, line: int = 1) -> str:
    props = f"file={escape_property(file)},line={line},title={escape_property(title)}"
    return f"::{level} {props}::{escape_data(message)}"


def annotation(run: str, file: str, g: GateFinding) -> str:
    f = g.finding
    level = "notice" if g.acknowledged else LEVELS[f.severity.value]
    message = f"{run}: {f.message}"
    if g.acknowledged:
        message += f" (acknowledged: {g.reason})"
    return command(
        level, message, file=file, title=f"{f.code} {f.name}" + (f" ({f.where})" if f.where else "")
    )


def render_github(result: GateResult) -> str:
    # what fails the gate first: GitHub shows only the first annotations of a step
    entries: list[tuple[int, str]] = []
    for r in result.reports:
        if r.verdict == "unreadable":
            level = "warning" if result.allow_unreadable else "error"
            line = command(level, r.error or "unreadable", file=r.source, title="unreadable input")
            entries.append((1 if result.allow_unreadable else 0, line))
        for g in r.findings:
            rank = 0 if g.fails else (2 if g.acknowledged else 1)
            entries.append((rank, annotation(r.name, r.source, g)))
    lines = [line for _, line in sorted(entries, key=lambda e: e[0])]
    verdict = "passed" if result.verdict == "pass" else "failed"
    lines.append(terminal(f"trainlens gate {verdict}: {result.headline()}"))
    return "\n".join(lines) + "\n"
