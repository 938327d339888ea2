"""``trainlens gate --format markdown``: the verdict as a Markdown table (also written to
``$GITHUB_STEP_SUMMARY`` under ``--format github``).

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
        "| run | verdict | worst finding | errors | warnings | acknowledged |",
        "|---|---|---|---:|---:|---:|",
    ]
    for r in result.reports:
        c = r.counts()
        lines.append(
            f"| {_code(r.name)} | {ICONS.get(r.verdict, r.verdict)} | {_cell(r.worst_text(80))} "
            f"| {c['error']} | {c['warning']} | {c['acknowledged']} |"
        )
    failing = [r for r in result.reports if r.failing or r.verdict == "unreadable"]
    if failing:
        lines += ["", "### What failed", ""]
        for r in failing:
            if r.verdict == "unreadable":
                lines.append(f"- {_code(r.name)}: unreadable: {_cell(r.error or '')}")
                continue
            lines.append(f"- {_code(r.name)} ({_code(r.source)})")
            for g in r.failing:
                f = g.finding
                where = f.where
                lines.append(
                    f"  - **{f.code}** {f.name}"
                    + (f" ({where})" if where else "")
                    + f": {_cell(f.message)}"
                )
    acked = [(r, g) for r in result.reports for g in r.acknowledged]
    if acked:
        lines += ["", "### Acknowledged", ""]
        for r, g in acked:
            where = g.finding.where
            lines.append(
                f"- {_code(r.name)} **{g.finding.code}**"
                + (f" ({where})" if where else "")
                + f": {_cell(g.reason or '')}"
            )
    if result.skipped:
        lines += ["", "### Skipped (not a file or folder trainlens can read)", ""]
        lines.extend(f"- {_code(s['path'])}: {_cell(s['kind'])}" for s in result.skipped)
    return "\n".join(lines) + "\n"
