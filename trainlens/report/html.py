"""report.html: one self-contained page (plots embedded, no network, no JavaScript).

Every string that comes from the input — run names, paths, metric names, messages,
evidence — goes through :func:`esc` (``html.escape`` with quotes, after
:func:`trainlens.core.sanitize.terminal`), so a metric named ``<script>…`` is shown as
text and one holding a bidi override (U+202E) or an ESC shows it escaped, not reordered
or invisible. Only names this module makes up (panel keys, anchors)
are used unescaped, and they are built from fixed identifiers and integers.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from trainlens.core.sanitize import terminal
from trainlens.formatters.text import duration_text, number_text
from trainlens.report.model import run_incidents
from trainlens.report.panels import Figures, Panel, summary_mfu

if TYPE_CHECKING:
    from trainlens.core.analysis import Analysis
    from trainlens.core.incidents import Incident

SECTIONS = (
    ("dashboard", "Dashboard"),
    ("runs", "Runs"),
    ("tensors", "Per-tensor signals"),
    ("other", "Other metrics"),
    ("golden", "Against the references"),
)

CSS = """
:root { color-scheme: light; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue",
  Arial, sans-serif; color: #222; background: #fff; }
main { max-width: 1200px; margin: 0 auto; padding: 20px 24px 60px; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 18px; margin: 34px 0 10px; padding-bottom: 4px; border-bottom: 1px solid #e4e4e4; }
h3 { font-size: 15px; margin: 22px 0 6px; }
.sub { color: #666; margin: 0 0 10px; overflow-wrap: anywhere; }
nav { font-size: 13px; margin: 8px 0 0; }
nav a { margin-right: 12px; }
a { color: #2c5d8f; text-decoration: none; }
a:hover { text-decoration: underline; }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
th, td { text-align: left; vertical-align: top; padding: 5px 8px; border-bottom: 1px solid #eee; }
th { background: #f7f7f7; font-weight: 600; }
td.num { font-variant-numeric: tabular-nums; white-space: nowrap; }
table.summary th[scope=row] { width: 190px; background: #fafafa; font-weight: 500; color: #444; }
code, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace;
  font-size: 12px; }
.sev { display: inline-block; padding: 1px 7px; border-radius: 9px; font-size: 12px;
  font-weight: 600; color: #fff; }
.sev-error { background: #C0392B; }
.sev-warning { background: #D68910; }
.sev-info { background: #5B7A99; }
tr:target { background: #fff6d6; }
figure { margin: 18px 0 26px; }
figure:target { outline: 3px solid #f1c40f55; outline-offset: 4px; }
figure img { display: block; max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { font-size: 13px; color: #555; margin-top: 6px; }
figcaption .files { float: right; }
.note { color: #8a6d3b; }
.muted { color: #777; }
details summary { cursor: pointer; color: #2c5d8f; }
.evidence { margin: 4px 0 0; padding: 0; list-style: none; font-size: 12px; color: #444; }
ul.plain { padding-left: 18px; }
.none { color: #2e7d32; font-weight: 600; }
"""


def esc(value: Any) -> str:
    return html.escape(terminal(value), quote=True)


def _number(x: Any, digits: int = 4) -> str:
    return esc(number_text(x, digits))


def _ppl(loss: dict[str, Any]) -> str:
    """' (perplexity X)' where the summary gives one (a per-token LM loss), else ''."""
    x = loss.get("final_perplexity")
    return f" (perplexity {_number(x)})" if x is not None else ""


def run_label(a: Analysis, index: int, multi: bool) -> str:
    """The run's name, escaped, with its tag (#1, #2, …) when several runs share plots."""
    tag = f' <span class="muted">#{index + 1}</span>' if multi else ""
    return f"{esc(a.run.name)}{tag}"


def summary_rows(a: Analysis, index: int = 0, multi: bool = False) -> list[tuple[str, str]]:
    """(label, already-escaped HTML) rows of one run's summary."""
    s = a.summary
    rows: list[tuple[str, str]] = [
        ("run", f"<strong>{run_label(a, index, multi)}</strong>"),
        ("source", f'<span class="mono">{esc(a.run.source)}</span> ({esc(a.run.format)})'),
    ]
    st = s.get("steps") or {}
    if st.get("count"):
        rows.append(
            (
                "steps",
                f"{_number(st.get('first'))} … {_number(st.get('last'))} "
                f"({_number(st.get('count'))} steps, {_number(s.get('values'))} values)",
            )
        )
    rows.append(("metrics", f"{len(s.get('metrics') or {})}"))
    rows.append(("wall clock", esc(duration_text(s.get("wall_clock_seconds")))))
    if s.get("step_time"):
        t = s["step_time"]
        rows.append(
            ("step time", f"mean {_number(t.get('mean'))} s, p95 {_number(t.get('p95'))} s")
        )
    for key, unit in (("tokens_per_sec", "tokens/s"), ("samples_per_sec", "samples/s")):
        if s.get(key):
            rows.append(
                (
                    "throughput",
                    f"mean {_number(s[key].get('mean'))} {unit}, "
                    f"last {_number(s[key].get('last'))}",
                )
            )
    if s.get("train_loss"):
        t = s["train_loss"]
        rows.append(
            (
                "train loss",
                f"final {_number(t.get('final'))}{_ppl(t)}, min {_number(t.get('min'))} "
                f"at step {_number(t.get('min_step'))}",
            )
        )
    if s.get("val_loss"):
        v = s["val_loss"]
        rows.append(
            (
                "val loss",
                f"best {_number(v.get('best'))} at step {_number(v.get('best_step'))}"
                f", final {_number(v.get('final'))} at step "
                f"{_number(v.get('final_step'))}{_ppl(v)}",
            )
        )
    mfu = summary_mfu(s)
    if isinstance(s.get("mfu"), dict) and s["mfu"].get("text"):
        problem = s["mfu"].get("problem")
        rows.append(("MFU", esc(s["mfu"]["text"] + (f". {problem}" if problem else ""))))
    elif mfu is not None:
        rows.append(("MFU", f"{mfu:.1%}"))
    if isinstance(s.get("compute"), dict) and s["compute"].get("text"):
        rows.append(("compute", esc(s["compute"]["text"])))
    if isinstance(s.get("energy"), dict) and s["energy"].get("text"):
        rows.append(("energy", esc(s["energy"]["text"])))
    if a.context.schedule:
        sch = a.context.schedule
        desc = ", ".join(f"{esc(k)}={esc(v)}" for k, v in sch.items() if k != "shape")
        rows.append(
            (
                "declared schedule",
                f"{esc(sch.get('shape'))} ({desc}) — from "
                f"{esc(a.context.schedule_source or 'config')}",
            )
        )
    nf = s.get("non_finite") or {}
    if nf:
        rows.append(
            (
                "non-finite values",
                "; ".join(
                    f"{esc(m)}: {_number(d.get('count'))} from step {_number(d.get('first_step'))}"
                    for m, d in nf.items()
                ),
            )
        )
    restarts = s.get("restarts") or []
    if restarts:
        rows.append(
            (
                "restarts",
                "; ".join(
                    f"{_number(r.get('from_step'))} → {_number(r.get('to_step'))}" for r in restarts
                ),
            )
        )
    counts = {
        sev: sum(f.severity.value == sev for f in a.findings)
        for sev in ("error", "warning", "info")
    }
    rows.append(
        (
            "findings",
            ", ".join(f"{n} {sev}" for sev, n in counts.items() if n)
            or '<span class="none">none</span>',
        )
    )
    return rows


NONE = '<span class="none">none</span>'
SIDE_BY_SIDE_RUNS = 4  # more runs than this: a table of finals, one row per run


def _finals_table(analyses: Sequence[Analysis]) -> str:
    """One row per run: what a sweep is compared by. 64 summaries side by side ran off
    the page; a row per run stays 1150 px wide."""
    head = (
        "<tr><th>run</th><th>steps</th><th>final train loss</th><th>min train loss</th>"
        "<th>best val loss</th><th>final val loss</th><th>findings</th></tr>"
    )
    rows = [head]
    for r, a in enumerate(analyses):
        s = a.summary
        t, v, st = s.get("train_loss") or {}, s.get("val_loss") or {}, s.get("steps") or {}
        best = f"{_number(v.get('best'))} @ {_number(v.get('best_step'))}" if v else "—"
        counts = [
            f"{n} {sev}"
            for sev in ("error", "warning", "info")
            if (n := sum(f.severity.value == sev for f in a.findings))
        ]
        rows.append(
            f"<tr><td>{run_label(a, r, True)}</td>"
            f'<td class="num">{_number(st.get("last")) if st else "—"}</td>'
            f'<td class="num">{_number(t.get("final")) if t else "—"}</td>'
            f'<td class="num">{_number(t.get("min")) if t else "—"}</td>'
            f'<td class="num">{best}</td>'
            f'<td class="num">{_number(v.get("final")) if v else "—"}</td>'
            f"<td>{', '.join(counts) or NONE}</td></tr>"
        )
    return '<table class="finals">\n' + "\n".join(rows) + "\n</table>"


def _summary_table(analyses: Sequence[Analysis]) -> str:
    if len(analyses) > SIDE_BY_SIDE_RUNS:
        return _finals_table(analyses)
    multi = len(analyses) > 1
    per_run = [dict(summary_rows(a, i, multi)) for i, a in enumerate(analyses)]
    labels: list[str] = []
    for a in analyses:
        for label, _ in summary_rows(a):
            if label not in labels:
                labels.append(label)
    out = ['<table class="summary">']
    for label in labels:
        cells = "".join(f"<td>{rows.get(label, '—')}</td>" for rows in per_run)
        out.append(f'<tr><th scope="row">{esc(label)}</th>{cells}</tr>')
    out.append("</table>")
    return "\n".join(out)


def _evidence(ev: dict[str, Any]) -> str:
    if not ev:
        return ""
    items = "".join(
        f"<li><code>{esc(k)}</code> = {_number(v) if isinstance(v, (int, float)) else esc(v)}</li>"
        for k, v in ev.items()
    )
    return f'<details><summary>evidence</summary><ul class="evidence">{items}</ul></details>'


def _findings_table(analyses: Sequence[Analysis], figures: Figures) -> str:
    total = sum(len(a.findings) for a in analyses)
    if total == 0:
        return '<p class="none">No findings — nothing looks wrong.</p>'
    multi = len(analyses) > 1
    titles = {p.key: p.title for p in figures.panels}
    head = (
        "<tr>" + ("<th>run</th>" if multi else "") + "<th>code</th><th>severity</th>"
        "<th>where</th><th>message</th><th>drawn on</th></tr>"
    )
    rows = [head]
    for r, a in enumerate(analyses):
        for i, f in enumerate(a.findings):
            d = figures.drawn(r, i)
            anchor = f"finding-{r}-{i}"
            if d is not None:
                link = f'<a href="#panel-{d.panel}">{esc(titles[d.panel])}</a>'
                link += "".join(
                    f', <a href="#panel-{key}">{esc(titles[key])}</a>'
                    for key, _ in d.also
                    if key != d.panel
                )
                code = f'<a href="#panel-{d.panel}"><strong>{esc(f.code)}</strong></a>'
            else:
                link = '<span class="muted">no plot (metric not logged)</span>'
                code = f"<strong>{esc(f.code)}</strong>"
            sev = esc(f.severity.value)
            rows.append(
                f'<tr id="{anchor}">'
                + (f"<td>{run_label(a, r, multi)}</td>" if multi else "")
                + f'<td>{code}<br><span class="muted">{esc(f.name)}</span></td>'
                f'<td><span class="sev sev-{sev}">{sev}</span></td>'
                f'<td class="num">{esc(f.where or "whole run")}</td>'
                f"<td>{esc(f.message)}{_evidence(f.evidence)}</td><td>{link}</td></tr>"
            )
    return "<table>\n" + "\n".join(rows) + "\n</table>"


def _figure(panel: Panel, png: bytes, figures: Figures, analyses: Sequence[Analysis]) -> str:
    w, h = panel.size_px()
    data = base64.b64encode(png).decode("ascii")
    metrics = panel.metrics
    shown = ", ".join(esc(m) for m in metrics[:12])
    if len(metrics) > 12:
        shown += f", … ({len(metrics) - 12} more)"
    here = [
        d
        for d in figures.findings
        if d.panel == panel.key or any(k == panel.key for k, _ in d.also)
    ]
    links = ", ".join(
        f'<a href="#{d.anchor}">{esc(d.finding.code)}'
        + (f" ({esc(analyses[d.run_index].run.name)})" if len(analyses) > 1 else "")
        + "</a>"
        for d in here
    )
    notes = "".join(f'<br><span class="note">{esc(n)}</span>' for n in panel.notes)
    alt = f"{panel.title}: {', '.join(metrics[:12])}"
    return (
        f'<figure id="panel-{panel.key}">\n'
        f'<img src="data:image/png;base64,{data}" width="{w}" height="{h}" alt="{esc(alt)}">\n'
        f'<figcaption><span class="files"><a href="{panel.key}.svg">SVG</a> · '
        f'<a href="{panel.key}.png">PNG</a></span>'
        f"<strong>{esc(panel.title)}</strong> — {shown}"
        + (f"<br>findings drawn here: {links}" if links else "")
        + notes
        + "</figcaption>\n</figure>"
    )


def incident_rows(analyses: Sequence[Analysis]) -> list[tuple[int, Incident]]:
    """Every run's incidents, worst first across runs, then by onset."""
    rows = [(r, inc) for r, a in enumerate(analyses) for inc in run_incidents(a)]
    return sorted(
        rows,
        key=lambda ri: (
            -ri[1].severity.rank,
            ri[1].onset if ri[1].onset is not None else -1,
            ri[0],
        ),
    )


def incident_text(inc: Incident) -> str:
    """What happened and what moved first, without the steps (a column of their own)."""
    first = inc.first_text()
    return inc.title + (f" — {first}" if first else "")


def member_codes(codes: Sequence[str]) -> list[tuple[str, int, int]]:
    """(code, how many, position of the first) per code, in the members' order."""
    seen: dict[str, list[int]] = {}
    for pos, code in enumerate(codes):
        seen.setdefault(code, []).append(pos)
    return [(code, len(at), at[0]) for code, at in seen.items()]


def _incidents_table(analyses: Sequence[Analysis], figures: Figures) -> str:
    """One row per incident (one cause), worst first; its members link to the findings."""
    rows = incident_rows(analyses)
    if not rows:
        return '<p class="none">No incidents — nothing looks wrong.</p>'
    multi = len(analyses) > 1
    titles = {p.key: p.title for p in figures.panels}
    out = [
        "<table>",
        "<tr>" + ("<th>run</th>" if multi else "") + "<th>severity</th><th>incident</th>"
        "<th>where</th><th>findings</th><th>drawn on</th></tr>",
    ]
    for r, inc in rows:
        sev = esc(inc.severity.value)
        codes = [analyses[r].findings[i].code for i in inc.members]
        members = ", ".join(
            f'<a href="#finding-{r}-{inc.members[pos]}">{esc(code)}</a>'
            + (f" ×{n}" if n > 1 else "")
            for code, n, pos in member_codes(codes)
        )
        panels: dict[str, None] = {}
        for i in inc.members:
            d = figures.drawn(r, i)
            if d is not None:
                panels.setdefault(d.panel, None)
        drawn = ", ".join(f'<a href="#panel-{k}">{esc(titles[k])}</a>' for k in panels) or "—"
        out.append(
            '<tr class="incident">'
            + (f"<td>{run_label(analyses[r], r, multi)}</td>" if multi else "")
            + f'<td><span class="sev sev-{sev}">{sev}</span></td>'
            f"<td><strong>{esc(inc.code)}</strong> {esc(incident_text(inc))}</td>"
            f'<td class="num">{esc(inc.where or "whole run")}</td>'
            f"<td>{members}</td><td>{drawn}</td></tr>"
        )
    out.append("</table>")
    return "\n".join(out)


def _data_quality(analyses: Sequence[Analysis]) -> str:
    parts: list[str] = []
    multi = len(analyses) > 1
    for a in analyses:
        items = [
            f"<li>{esc(d)}" + (f" (×{d.count:,})" if d.count > 1 else "") + "</li>"
            for d in a.run.data_quality
        ]
        skipped = [f"<li>{esc(k)}: {esc(v)}</li>" for k, v in a.skipped.items()]
        if not items and not skipped:
            continue
        if multi:
            parts.append(f"<h3>{esc(a.run.name)}</h3>")
        if items:
            parts.append('<p>Data quality:</p><ul class="plain">' + "".join(items) + "</ul>")
        if skipped:
            parts.append('<p>Detectors skipped:</p><ul class="plain">' + "".join(skipped) + "</ul>")
    return "\n".join(parts) or '<p class="muted">Every value was read; no detector skipped.</p>'


def render_html(
    analyses: Sequence[Analysis],
    figures: Figures,
    pngs: dict[str, bytes],
    *,
    smoothing: float | None = None,
    version: str = "",
) -> str:
    names = ", ".join(a.run.name for a in analyses) or "no runs"
    sections = []
    nav = [
        '<a href="#incidents">Incidents</a>',
        '<a href="#summary">Summary</a>',
        '<a href="#findings">Findings</a>',
    ]
    for key, title in SECTIONS:
        panels = [p for p in figures.panels if p.section == key]
        if not panels:
            continue
        nav.append(f'<a href="#{key}">{esc(title)}</a>')
        body = "\n".join(_figure(p, pngs[p.key], figures, analyses) for p in panels)
        sections.append(f'<section id="{key}">\n<h2>{esc(title)}</h2>\n{body}\n</section>')
    nav.append('<a href="#data">Data</a>')
    how = (
        "Raw values at full resolution, drawn per pixel column as its first, minimum, "
        "maximum and last value (spikes are never sampled away). "
        + (
            f"Smoothed lines: debiased EMA with α = {smoothing:g}, drawn over the raw values. "
            if smoothing is not None
            else "No smoothing. "
        )
        + "Shaded spans and labels mark findings; red markers on an axis edge mark NaN/Inf "
        "values; dash-dot lines mark restarts, with the superseded values dotted; "
        "a star marks the best validation loss."
    )
    summary_title = (
        "Summary"
        if len(analyses) < 2
        else "Summary (runs side by side)"
        if len(analyses) <= SIDE_BY_SIDE_RUNS
        else f"Finals ({len(analyses)} runs, one row each)"
    )
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="trainlens {esc(version)}">
<title>trainlens report — {esc(names)}</title>
<style>{CSS}</style>
</head>
<body>
<main>
<header>
<h1>trainlens report</h1>
<p class="sub">{esc(names)}</p>
<nav>{" ".join(nav)}</nav>
</header>
<section id="incidents">
<h2>Incidents ({len(incident_rows(analyses))})</h2>
{_incidents_table(analyses, figures)}
</section>
<section id="summary">
<h2>{summary_title}</h2>
{_summary_table(analyses)}
</section>
<section id="findings">
<h2>Findings ({sum(len(a.findings) for a in analyses)})</h2>
{_findings_table(analyses, figures)}
</section>
{chr(10).join(sections)}
<section id="data">
<h2>Data</h2>
{_data_quality(analyses)}
<p class="muted">{esc(how)}</p>
</section>
</main>
</body>
</html>
"""


__all__ = ["esc", "incident_rows", "incident_text", "member_codes", "render_html", "summary_rows"]
