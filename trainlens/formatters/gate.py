"""A gate result in any of its output formats: the human table (text) and JSON here;
``render`` picks any format, the CI ones (junit, github, markdown) from their modules
beside this one. The gate computes the result; rendering it lives here, with the
analysis renderers, so the gate package never imports a formatter."""

from __future__ import annotations

import json

from trainlens.core.sanitize import terminal, terminal_lines
from trainlens.formatters.json import json_safe
from trainlens.gate.result import FAIL, UNREADABLE, GateResult, RunReport

OUTPUT_FORMATS = ("text", "json", "junit", "github", "markdown")


def output_format(fmt: str) -> str:
    """``fmt`` as one of OUTPUT_FORMATS (any case); anything else is a usage error, said
    before any run is read."""
    name = fmt.strip().lower()
    if name not in OUTPUT_FORMATS:
        from trainlens.core.errors import UsageError

        raise UsageError(f"--format must be one of {', '.join(OUTPUT_FORMATS)}, not {fmt!r}")
    return name


def verdict_text(r: RunReport) -> str:
    return {FAIL: "FAIL", UNREADABLE: "UNREADABLE"}.get(r.verdict, "pass")


def render_text(result: GateResult) -> str:
    # the counts are of incidents: one root cause, one count (docs/incidents.md)
    rows = [("run", "verdict", "worst incident", "err", "warn", "info", "ack")]
    for r in result.reports:
        c = r.incident_counts()
        rows.append(
            (
                r.name,
                verdict_text(r),
                r.worst_text(60),
                str(c["error"]),
                str(c["warning"]),
                str(c["info"]),
                str(c["acknowledged"]),
            )
        )
    shown = [[terminal(cell) for cell in row] for row in rows]  # widths of what is shown
    widths = [max(len(row[i]) for row in shown) for i in range(3)]
    lines = []
    for row in shown:
        head = "  ".join(cell.ljust(w) for cell, w in zip(row[:3], widths, strict=False))
        tail = "".join(cell.rjust(5) for cell in row[3:])
        lines.append(f"{head} {tail}".rstrip())

    details: list[str] = []
    for r in result.reports:
        failing = r.failing_incidents
        if r.verdict == UNREADABLE:
            details.append(f"{r.name}: unreadable: {r.error}")
        elif failing:
            details.append(f"{r.name} ({r.source})")
            details.extend(f"  {i.line()}" for i in failing)
        notes = [
            c
            for c in r.checks
            if c.kind != "detector" and c.status == "skipped" and not c.detail.endswith("logged")
        ]
        details.extend(f"  note: {r.name}: {n.name} skipped: {n.detail}" for n in notes)
    acked = [(r, i) for r in result.reports for i in r.acknowledged_incidents]
    if acked:
        details.append("acknowledged (not failing the gate):")
        details.extend(f"  {r.name}: {i.id} {i.incident.where} — {i.reason}" for r, i in acked)
    for a in result.unused_acknowledgements:
        details.append(
            f"note: acknowledgement of {a['code']} for {', '.join(a['runs'])} matched no finding"
        )
    details.extend(f"skipped: {s['message']}" for s in result.skipped)
    # run names, sources and messages come from the input: one terminal line each
    out = terminal_lines(lines)
    if details:
        out += "\n\n" + terminal_lines(details)
    verdict = "PASS" if result.verdict == "pass" else "FAIL"
    return out + f"\n\ngate {verdict}: {result.headline()}\n"


def render_json(result: GateResult) -> str:
    return json.dumps(json_safe(result.to_dict()), indent=2, allow_nan=False) + "\n"


def render(result: GateResult, fmt: str) -> str:
    fmt = output_format(fmt)
    if fmt == "text":
        return render_text(result)
    if fmt == "json":
        return render_json(result)
    if fmt == "junit":
        from trainlens.formatters.junit import render_junit

        return render_junit(result)
    if fmt == "github":
        from trainlens.formatters.github import render_github

        return render_github(result)
    if fmt == "markdown":
        from trainlens.formatters.markdown import render_markdown

        return render_markdown(result)
    raise AssertionError(fmt)  # output_format admitted it: every format has a branch
