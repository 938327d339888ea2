"""Incidents as a person reads them in a terminal: one entry per incident, worst first.

    ERROR    steps 450–469  train/loss became NaN at step 450
             first: lr ×40 at 400 → grad norm at 400 → loss at 401
             train/loss became NaN at step 450 (20 non-finite values, …); look at …
             reached train/loss, val/loss, entropy, grad_norm, … (21 findings: NAN001 ×21)

The headline line is cut to the width (a terminal line); the detail (the headline
finding's message) is wrapped to it; ``verbose`` lists every member with its evidence.
Without a width (output to a pipe or a file) nothing is cut or wrapped, so the lines stay
whole for grep.
"""

from __future__ import annotations

import textwrap
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from trainlens.core.sanitize import terminal

if TYPE_CHECKING:
    from trainlens.core.analysis import Analysis
    from trainlens.core.findings import Finding
    from trainlens.core.incidents import Incident

INDENT = " " * 11  # under the headline's text, past "  ERROR    "
MEMBER_INDENT = " " * 9
#: metrics named on the "reached" line before "… N more"
METRICS_SHOWN = 6


# Text from the input is made one safe line (core.sanitize.terminal) before it is cut or
# wrapped: cut first, an escape would push a line past the width; wrapped first, textwrap
# turns a newline, CR or vertical tab in a name into a space and the name is misquoted.


def _cut(text: str, width: int | None) -> str:
    text = terminal(text)
    if width is None or len(text) <= width:
        return text
    return text[: max(1, width - 1)] + "…"


def _wrap(text: str, width: int | None, indent: str = INDENT) -> list[str]:
    text = terminal(text)
    if width is None or width <= len(indent) + 20:
        return [indent + text]
    return textwrap.wrap(
        text, width, initial_indent=indent, subsequent_indent=indent, break_on_hyphens=False
    )


def reached_text(inc: Incident) -> str:
    """``train/loss, val/loss, entropy, grad_norm, grad_norm/* (17)``: the metrics an
    incident reached, three or more series under one prefix (per-tensor norms, eval sets)
    as one entry."""
    families: dict[str, list[str]] = {}
    for m in inc.metrics:
        prefix = m.rpartition("/")[0]
        if prefix:
            families.setdefault(prefix, []).append(m)
    entries: list[str] = []
    for m in inc.metrics:
        prefix = m.rpartition("/")[0]
        group = families.get(prefix) if prefix else None
        if group is not None and len(group) >= 3:
            if group[0] == m:
                entries.append(f"{prefix}/* ({len(group)})")
            continue
        entries.append(m)
    shown = entries[:METRICS_SHOWN]
    more = len(entries) - len(shown)
    return ", ".join(shown) + (f", … {more} more" if more else "")


def incident_lines(
    a: Analysis,
    *,
    verbose: bool = False,
    width: int | None = None,
    members: Callable[[Sequence[Finding]], list[str]] | None = None,
) -> list[str]:
    """Every incident of one analysis, worst first (their order in ``a.incidents``)."""
    lines: list[str] = []
    for inc in a.incidents:
        lines.extend(one_incident(a, inc, verbose=verbose, width=width, members=members))
    return lines


def one_incident(
    a: Analysis,
    inc: Incident,
    *,
    verbose: bool = False,
    width: int | None = None,
    members: Callable[[Sequence[Finding]], list[str]] | None = None,
) -> list[str]:
    head = a.findings[inc.members[0]]
    where = f"{inc.where}  " if inc.where else ""
    lines = [_cut(f"  {inc.severity.value.upper():<7}  {where}{inc.title}", width)]
    first = inc.first_text()
    if first:
        lines.extend(_wrap(first, width))
    lines.extend(_wrap(f"{head.code}  {head.message}", width))
    if len(inc.members) > 1:
        counts = Counter(a.findings[m].code for m in inc.members)
        codes = ", ".join(f"{c} ×{n}" if n > 1 else c for c, n in counts.items())
        reached = reached_text(inc)
        tail = f"{len(inc.members)} findings: {codes}"
        text = f"reached {reached} ({tail})" if reached else tail
        if not verbose:
            text += "; -v lists them"
        lines.extend(_wrap(text, width))
    if verbose and members is not None:
        # the members as `findings` were listed, under the incident's text
        for x in members([a.findings[m] for m in inc.members]):
            lead = MEMBER_INDENT + x[: len(x) - len(x.lstrip())]
            if width is None:
                lines.append(lead + x.lstrip())
            else:
                lines.extend(
                    textwrap.wrap(
                        terminal(x.lstrip()),
                        max(40, width),
                        initial_indent=lead,
                        subsequent_indent=INDENT + "    ",
                        break_on_hyphens=False,
                    )
                )
    return lines


def run_line(a: Analysis, name_width: int) -> str:
    """``name  steps 1 … 469  ERROR NAN001@450 train/loss became NaN (+1 more)``."""
    st = a.summary.get("steps") or {}
    steps = f"steps {st.get('first')} … {st.get('last')}" if st else "no steps"
    if not a.incidents:
        worst = "no incident"
    else:
        inc = a.incidents[0]
        worst = f"{inc.severity.value.upper():<7}  {inc.id}  {inc.title}"
        if len(a.incidents) > 1:
            worst += f"  (+{len(a.incidents) - 1} more)"
    return f"  {terminal(a.run.name):<{name_width}}  {steps:<18}  {worst}"


def runs_table(analyses: Sequence[Analysis], *, width: int | None = None) -> list[str]:
    """One compact line per run; the runs with incidents first, worst first."""
    name_width = min(40, max((len(terminal(a.run.name)) for a in analyses), default=3))
    ordered = sorted(
        analyses,
        key=lambda a: -(a.incidents[0].severity.rank if a.incidents else -1),
    )
    with_incidents = sum(1 for a in analyses if a.incidents)
    lines = [f"runs ({len(analyses)}; {with_incidents} with incidents)"]
    lines.extend(_cut(run_line(a, name_width), width) for a in ordered)
    return lines
