"""report.md: the summary, the findings and the panels as Markdown, for CI.

Meant for a GitHub step summary (``cat report.md >> "$GITHUB_STEP_SUMMARY"``) or a PR
comment. Images are referenced by relative path (``loss.png`` beside report.md); where
the Markdown is shown away from the files (a step summary), upload the directory as an
artifact or rewrite the links. Input strings are HTML-escaped (GitHub renders inline
HTML) and Markdown's table and emphasis characters are backslash-escaped.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from trainlens.core.sanitize import markdown
from trainlens.report.html import incident_rows, incident_text, member_codes, summary_rows
from trainlens.report.panels import Figures

if TYPE_CHECKING:
    from trainlens.core.analysis import Analysis

_TAG = re.compile(r"<[^>]+>")


def md(text: object) -> str:
    """Literal text in Markdown (and in a table cell): the Markdown rule of
    :mod:`trainlens.core.sanitize`, shared with ``gate --format markdown``."""
    return markdown(text)


def _cell_from_html(fragment: str) -> str:
    """A summary cell (escaped HTML from html.summary_rows) as plain Markdown text."""
    return md(html.unescape(_TAG.sub("", fragment)))


def _incidents(analyses: Sequence[Analysis]) -> list[str]:
    """One row per incident, worst first (the page's table, without its links)."""
    rows = incident_rows(analyses)
    lines = [f"## Incidents ({len(rows)})", ""]
    if not rows:
        return [*lines, "None — nothing looks wrong.", ""]
    multi = len(analyses) > 1
    lines.append(("| run " if multi else "") + "| severity | incident | where | findings |")
    lines.append("|---" * (5 if multi else 4) + "|")
    for r, inc in rows:
        a = analyses[r]
        codes = ", ".join(
            md(code) + (f" ×{n}" if n > 1 else "")
            for code, n, _ in member_codes([a.findings[i].code for i in inc.members])
        )
        lines.append(
            (f"| {md(a.run.name)} #{r + 1} " if multi else "")
            + f"| {md(inc.severity.value)} | **{md(inc.code)}** {md(incident_text(inc))} "
            f"| {md(inc.where or 'whole run')} | {codes} |"
        )
    return [*lines, ""]


def render_markdown(analyses: Sequence[Analysis], figures: Figures) -> str:
    lines = ["# trainlens report", "", *_incidents(analyses)]
    per_run = [dict(summary_rows(a)) for a in analyses]
    labels: list[str] = []
    for a in analyses:
        for label, _ in summary_rows(a):
            if label not in labels:
                labels.append(label)
    tags = [f" #{i + 1}" if len(analyses) > 1 else "" for i in range(len(analyses))]
    lines.append(
        "| | " + " | ".join(md(a.run.name) + t for a, t in zip(analyses, tags, strict=True)) + " |"
    )
    lines.append("|---" * (len(analyses) + 1) + "|")
    for label in labels:
        if label == "run":
            continue
        cells = " | ".join(_cell_from_html(rows.get(label, "—")) for rows in per_run)
        lines.append(f"| {md(label)} | {cells} |")
    lines.append("")

    total = sum(len(a.findings) for a in analyses)
    lines.append(f"## Findings ({total})")
    lines.append("")
    titles = {p.key: p.title for p in figures.panels}
    if total == 0:
        lines.append("None — nothing looks wrong.")
    else:
        multi = len(analyses) > 1
        lines.append(("| run " if multi else "") + "| code | severity | where | message | plot |")
        lines.append("|---" * (6 if multi else 5) + "|")
        for r, a in enumerate(analyses):
            for i, f in enumerate(a.findings):
                d = figures.drawn(r, i)
                plot = f"[{md(titles[d.panel])}]({d.panel}.png)" if d is not None else "—"
                lines.append(
                    (f"| {md(a.run.name)}{tags[r]} " if multi else "")
                    + f"| **{md(f.code)}** | {md(f.severity.value)} | "
                    f"{md(f.where or 'whole run')} | {md(f.message)} | {plot} |"
                )
    lines.append("")
    if figures.panels:
        lines.append("## Plots")
        lines.append("")
        for p in figures.panels:
            lines.append(f"### {md(p.title)}")
            lines.append("")
            lines.append(f"![{md(p.title)}]({p.key}.png)")
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"


__all__ = ["md", "render_markdown"]
