"""``trainlens gate --format markdown``: the verdict as a Markdown table (also written to
``$GITHUB_STEP_SUMMARY`` under ``--format github``): a row per run, then a row per
incident that fails (and per acknowledged one)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trainlens.gate.result import GateResult

ICONS = {"pass": "✅ pass", "fail": "❌ fail", "unreadable": "⚠️ unreadable"}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


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
            f"| `{_cell(r.name)}` | {ICONS.get(r.verdict, r.verdict)} | {_cell(r.worst_text(80))} "
            f"| {c['error']} | {c['warning']} | {c['acknowledged']} |"
        )
    unreadable = [r for r in result.reports if r.verdict == "unreadable"]
    failing = [(r, i) for r in result.reports for i in r.failing_incidents]
    if failing or unreadable:
        lines += ["", "### What failed", ""]
        for r in unreadable:
            lines.append(f"- `{_cell(r.name)}`: unreadable: {_cell(r.error or '')}")
    if failing:
        if unreadable:
            lines.append("")
        lines += [
            "| run | severity | incident | steps | what | findings |",
            "|---|---|---|---|---|---|",
        ]
        for r, i in failing:
            inc = i.incident
            what = f"**{inc.code}** {inc.name}: {i.head.finding.message}"
            lines.append(
                f"| `{_cell(r.name)}` | {i.severity.value} | `{_cell(i.id)}` | {inc.where} "
                f"| {_cell(what)} | {_cell(i.related() or '1 finding')} |"
            )
    acked = [(r, i) for r in result.reports for i in r.acknowledged_incidents]
    if acked:
        lines += ["", "### Acknowledged", ""]
        for r, i in acked:
            where = i.incident.where
            lines.append(
                f"- `{_cell(r.name)}` **{i.incident.code}** `{_cell(i.id)}`"
                + (f" ({where})" if where else "")
                + f": {_cell(i.reason or '')}"
            )
    return "\n".join(lines) + "\n"
