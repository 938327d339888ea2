"""``trainlens gate --format markdown``: the verdict as a Markdown table (also written to
``$GITHUB_STEP_SUMMARY`` under ``--format github``): a row per run, then a row per
incident that fails (and per acknowledged one).

Every string from the input goes through :func:`trainlens.core.sanitize.markdown`: GitHub
renders the summary, so an unescaped ``![x](url)`` in a metric name would be an image
fetched from anywhere, a ``<`` raw HTML. Run names are shown as ``<code>`` rather than a
backtick code span, in which no escape works and a backtick in the name would end it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainlens.core.sanitize import markdown

if TYPE_CHECKING:
    from trainlens.gate.result import GateResult

ICONS = {"pass": "✅ pass", "fail": "❌ fail", "unreadable": "⚠️ unreadable"}


def _cell(text: str) -> str:
    return markdown(text)


def _code(text: str) -> str:
    return f"<code>{markdown(text)}</code>"


def render_markdown(result: GateResult) -> str:
    icon = "✅" if result.verdict == "pass" else "❌"
    lines = [
        f"## {icon} trainlens gate: {result.headline()}",
        "",
        "| run | verdict | worst incident | errors | warnings | acknowledged |",
        "|---|---|---|---:|---:|---:|",
    ]
    for r in result.reports:
        c = r.incident_counts()
        lines.append(
            f"| {_code(r.name)} | {ICONS.get(r.verdict, r.verdict)} | {_cell(r.worst_text(80))} "
            f"| {c['error']} | {c['warning']} | {c['acknowledged']} |"
        )
    unreadable = [r for r in result.reports if r.verdict == "unreadable"]
    failing = [(r, i) for r in result.reports for i in r.failing_incidents]
    if failing or unreadable:
        lines += ["", "### What failed", ""]
        for r in unreadable:
            lines.append(f"- {_code(r.name)}: unreadable: {_cell(r.error or '')}")
    if failing:
        if unreadable:
            lines.append("")
        lines += [
            "| run | severity | incident | steps | what | findings |",
            "|---|---|---|---|---|---|",
        ]
        for r, i in failing:
            inc = i.incident
            what = f"**{inc.code}** {inc.name}: {_cell(i.head.finding.message)}"
            lines.append(
                f"| {_code(r.name)} | {i.severity.value} | {_code(i.id)} | {inc.where} "
                f"| {what} | {_cell(i.related() or '1 finding')} |"
            )
    acked = [(r, i) for r in result.reports for i in r.acknowledged_incidents]
    if acked:
        lines += ["", "### Acknowledged", ""]
        for r, i in acked:
            where = i.incident.where
            lines.append(
                f"- {_code(r.name)} **{i.incident.code}** {_code(i.id)}"
                + (f" ({where})" if where else "")
                + f": {_cell(i.reason or '')}"
            )
    if result.skipped:
        lines += ["", "### Skipped (not a file or folder trainlens can read)", ""]
        lines.extend(f"- {_code(s['path'])}: {_cell(s['kind'])}" for s in result.skipped)
    return "\n".join(lines) + "\n"
