"""Findings, restarts and checkpoints drawn where they happened.

Every finding gets a shaded step span on the panel of its metric (an outline around
its row on a heatmap), a label with its code in a row along the top, a ring at its
peak, and for lead-lag findings a marker at the lead step on the grad-norm panel and
at the lag step on the loss panel, with an arrow lead → lag. Restarts are vertical
lines. Artists of a finding carry the gid ``finding-<run>-<index>``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from trainlens.core.findings import Finding
from trainlens.core.incidents import Incident
from trainlens.report.canvas import Canvas
from trainlens.report.labels import Note, place_figure
from trainlens.report.model import DrawnFinding, IncidentLabel, run_incidents
from trainlens.report.theme import RESTART_COLOR, SEVERITY_COLORS, fmt_step, mpl_text

# where a finding whose metric has no panel of its own is drawn
FALLBACK_METRICS = {"wall_time": ("tokens_per_sec", "samples_per_sec", "step_time")}
# evidence keys naming the step where a finding peaks, in order of preference
PEAK_KEYS = ("peak_step", "spike_step", "first_step", "min_step")


# ---- restarts ------------------------------------------------------------------------------


def draw_restarts(c: Canvas) -> None:
    """A line at every restart on each axes of its run, labelled on the dashboard."""
    dashboard = {p.key for p in c.panels if p.section == "dashboard"}
    for run, a in enumerate(c.analyses):
        axes = {id(ax): ax for (r, _), ax in c.axes_of.items() if r == run}
        for issue in a.run.data_quality:
            if issue.kind != "restart":
                continue
            to_step = issue.details.get("to_step")
            from_step = issue.details.get("from_step")
            if to_step is None:
                continue
            for ax in axes.values():
                line = ax.axvline(
                    to_step, color=RESTART_COLOR, lw=1.0, ls="-.", zorder=5, label="restart"
                )
                line.set_gid(f"restart-{run}-{to_step}")
                if c.panel_of_axes.get(id(ax)) in dashboard:
                    _restart_label(ax, to_step, from_step)


def _restart_label(ax: Axes, to_step: Any, from_step: Any) -> None:
    ax.annotate(
        f"restart (from {fmt_step(from_step)})" if from_step is not None else "restart",
        xy=(to_step, 0.04),
        xycoords=ax.get_xaxis_transform(),
        xytext=(2, 0),
        textcoords="offset points",
        ha="left",
        va="bottom",
        rotation=90,
        fontsize=7,
        color=RESTART_COLOR,
        zorder=8,
    )


# ---- checkpoints ---------------------------------------------------------------------------

CKPT_OK, CKPT_BROKEN = "#2e7d32", "#c62828"


def draw_checkpoints(c: Canvas) -> None:
    """A mark on the step axis of each dashboard panel at every checkpoint the run's
    analysis found (``Context.checkpoints``): green when intact, red when broken."""
    from trainlens.checkpoints.requirements import axis_marks

    dashboard = {p.key for p in c.panels if p.section == "dashboard"}
    for run, a in enumerate(c.analyses):
        inv = a.context.checkpoints
        if inv is None:
            continue
        marks = axis_marks(inv)
        axes = {
            id(ax): ax
            for (r, _), ax in c.axes_of.items()
            if r == run and c.panel_of_axes.get(id(ax)) in dashboard
        }
        for ax in axes.values():
            labelled: set[bool] = set()
            for m in marks:
                ok = bool(m["intact"])
                label = None
                if ok not in labelled:
                    label = "checkpoint" if ok else "broken checkpoint"
                    labelled.add(ok)
                (pt,) = ax.plot(
                    [m["step"]],
                    [0.0],
                    marker="^",
                    ms=6,
                    ls="none",
                    color=CKPT_OK if ok else CKPT_BROKEN,
                    transform=ax.get_xaxis_transform(),
                    clip_on=False,
                    zorder=7,
                    label=label,
                )
                pt.set_gid(f"checkpoint-{run}-{m['step']}-{'ok' if ok else 'broken'}")


# ---- where a finding goes ------------------------------------------------------------------


def _leader(color: str) -> dict[str, Any]:
    """A thin line from a label in the top rows down to the ring it names."""
    return {"arrowstyle": "-", "color": color, "lw": 0.7, "alpha": 0.6, "shrinkA": 0, "shrinkB": 5}


def _int(value: Any) -> int | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return int(out) if math.isfinite(out) else None


def _peak_step(ev: dict[str, Any], x0: float, x1: float, lead: int | None) -> float:
    for key in PEAK_KEYS:
        v = _int(ev.get(key))
        if v is not None and x0 <= v <= x1:
            return float(v)
    if lead is not None:
        return float(lead)
    return x0


def home_axes(c: Canvas, run: int, f: Finding) -> Axes | None:
    """The axes of the finding's metric, else a stand-in, else the loss, else any."""
    candidates: list[str] = []
    if f.metric:
        candidates.append(f.metric)
        candidates.extend(FALLBACK_METRICS.get(f.metric, ()))
    candidates += ["train/loss", "val/loss"]
    for m in candidates:
        ax = c.axes_of.get((run, m))
        if ax is not None:
            return ax
    for (r, _), ax in c.axes_of.items():
        if r == run:
            return ax
    return None


def metric_on(c: Canvas, run: int, ax: Axes, preferred: str | None) -> str | None:
    if preferred and c.axes_of.get((run, preferred)) is ax:
        return preferred
    for (r, m), other in c.axes_of.items():
        if r == run and other is ax:
            return m
    return None


def keep_extremes(c: Canvas, ax: Axes, run: int, metric: str, x0: float, x1: float) -> None:
    """A finding's steps are drawn in full: the y limits keep the highest and lowest
    value of its metric inside its span (a loss that rose back to 0.99 stays on the
    axis even when a start at 3.8 is cut)."""
    line = c.lines.get((run, metric))
    if line is None:
        return
    a, b = np.searchsorted(line.steps, [x0, x1 + 1])
    v = line.values[a:b]
    v = v[np.isfinite(v) & (v > 0)] if line.log else v[np.isfinite(v)]
    if v.size:
        c.keep(ax, float(v.min()))
        c.keep(ax, float(v.max()))


# ---- drawing findings ----------------------------------------------------------------------

MEMBER_ALPHA = 0.05  # a member's span, under its incident's headline (0.14 / 0.08)


def draw_findings(c: Canvas) -> tuple[list[DrawnFinding], list[tuple[int, int]]]:
    """Every finding's span and ring; one label per incident on each axes it reaches
    (its headline's code, "+N" for the members beyond it), so a NaN that reached 21
    series is one tag per panel, not 21 (issue 24)."""
    drawn: list[DrawnFinding] = []
    undrawn: list[tuple[int, int]] = []
    for run, a in enumerate(c.analyses):
        for k, inc in enumerate(run_incidents(a)):
            groups: dict[int, list[DrawnFinding]] = {}
            covered: dict[int, list[tuple[float, float]]] = {}
            for pos, i in enumerate(inc.members):
                f = a.findings[i]
                ax = home_axes(c, run, f)
                if ax is None:
                    undrawn.append((run, i))
                    continue
                d = DrawnFinding(run, i, f, c.panel_of_axes[id(ax)], ax)
                draw_finding(c, d, headline=pos == 0, covered=covered.setdefault(id(ax), []))
                groups.setdefault(id(ax), []).append(d)
                drawn.append(d)
            for members in groups.values():
                incident_label(c, run, k, inc, members)
    drawn.sort(key=lambda d: (d.run_index, d.index))
    return drawn, undrawn


def incident_label(c: Canvas, run: int, k: int, inc: Incident, members: list[DrawnFinding]) -> None:
    """The one label of an incident on one axes: at the headline's ring when the headline
    is drawn here, else at the start of the earliest member's span."""
    lead = members[0]  # the headline when it is here: members keep the incident's order
    code = mpl_text(inc.code) + (f" #{run + 1}" if c.multi else "")
    text = code + (f" +{len(inc.members) - 1}" if len(inc.members) > 1 else "")
    color = SEVERITY_COLORS.get(inc.severity.value, SEVERITY_COLORS["info"])
    quiet = inc.severity.value == "info"
    note = Note(lead.axes, c.xlo, text, color, lead.anchor, bold=not quiet, code=code)
    note.rank = _rank_of(inc.severity.value)
    note.incident = (run, k, inc.id)
    f = lead.finding
    if f.step_start is None and f.step_end is None:
        note.text = f"{text} (whole run)"
    else:
        firsts = [d.finding.step_start for d in members] + [d.finding.step_end for d in members]
        starts = [float(s) for s in firsts if s is not None]
        x0 = min(starts) if starts else c.xlo
        note.x = min(max(visible_span(c, x0, x0)[0], c.xlo), c.xhi)
        ring = lead.ring
        if ring is not None:
            note.x, note.anchor = ring[0], ring
            note.arrow = _leader(color)
    c.note(note)
    note.members.extend(members)


def draw_finding(
    c: Canvas,
    d: DrawnFinding,
    *,
    headline: bool = True,
    covered: list[tuple[float, float]] | None = None,
) -> None:
    """A finding's span and ring (its label is its incident's). A member under the
    headline is shaded lightly, and not at all where a member of its incident already
    shades its steps on this axes: six eval sets that overfit from one epoch on are one
    light band, not six stacked to red."""
    f, ax, run = d.finding, d.axes, d.run_index
    color = SEVERITY_COLORS.get(f.severity.value, SEVERITY_COLORS["info"])
    metric = metric_on(c, run, ax, f.metric)
    code = mpl_text(f.code) + (f" #{run + 1}" if c.multi else "")
    ev = f.evidence
    lead, lag = _int(ev.get("lead_step")), _int(ev.get("lag_step"))
    if f.step_start is None and f.step_end is None:
        return
    x0 = float(f.step_start if f.step_start is not None else f.step_end)  # type: ignore[arg-type]
    x1 = float(f.step_end if f.step_end is not None else x0)
    row = c.heat_rows.get((run, metric)) if metric else None
    inside = covered is not None and any(a <= x0 and x1 <= b for a, b in covered)
    if headline or row is not None or not inside:
        alpha = None if headline else MEMBER_ALPHA
        d.artists.append(draw_span(c, d, color, metric, x0, x1, alpha=alpha))
        if covered is not None and row is None:
            covered.append((x0, x1))
    if metric:
        keep_extremes(c, ax, run, metric, x0, x1)
    point_like = (x1 - x0) <= 0.02 * c.xspan or any(k in ev for k in PEAK_KEYS)
    at = _peak_step(ev, x0, x1, lead)
    y = c.y_at(run, metric, at) if metric else None
    if point_like and y is not None:
        _ring(c, d, color, at, y)
    if lead is not None and lag is not None and headline:
        draw_lead_lag(c, d, code, color, lead, lag)


def _rank_of(severity: str) -> int:
    return {"error": 2, "warning": 1}.get(severity, 0)


def _ring(c: Canvas, d: DrawnFinding, color: str, at: float, y: float) -> None:
    """A ring at the finding's peak; its incident's label sits in a row along the top,
    with a leader line down to the headline's ring."""
    quiet = d.finding.severity.value == "info"
    (ring,) = d.axes.plot(
        [at],
        [y],
        ls="none",
        marker="o",
        ms=8 if quiet else 10,
        mfc="none",
        mec=color,
        mew=1.0 if quiet else 1.6,
        zorder=8,
    )
    ring.set_gid(d.anchor)
    d.artists.append(ring)
    c.keep(d.axes, y)
    d.ring = (at, y)


def visible_span(c: Canvas, x0: float, x1: float) -> tuple[float, float]:
    """A one-step finding still gets a span a few pixels wide."""
    lo, hi = min(x0, x1), max(x0, x1)
    min_width = 0.004 * c.xspan
    if hi - lo < min_width:
        mid = (lo + hi) / 2
        lo, hi = mid - min_width / 2, mid + min_width / 2
    return lo, hi


def draw_span(
    c: Canvas,
    d: DrawnFinding,
    color: str,
    metric: str | None,
    x0: float,
    x1: float,
    *,
    alpha: float | None = None,
) -> Artist:
    """The finding's steps: a shaded span, or an outline around a heatmap row."""
    ax, quiet = d.axes, d.finding.severity.value == "info"
    lo, hi = visible_span(c, x0, x1)
    row = c.heat_rows.get((d.run_index, metric)) if metric else None
    if row is not None:
        span: Artist = Rectangle(
            (lo, row - 0.5), hi - lo, 1.0, facecolor="none", edgecolor=color, lw=1.6, zorder=4
        )
        ax.add_patch(span)  # type: ignore[arg-type]
    else:
        shade = alpha if alpha is not None else 0.08 if quiet else 0.14
        span = ax.axvspan(lo, hi, color=color, alpha=shade, lw=0, zorder=0.5)
    span.set_gid(d.anchor)
    return span


def draw_lead_lag(c: Canvas, d: DrawnFinding, code: str, color: str, lead: int, lag: int) -> None:
    """The lead marker on the grad-norm panel, the lag marker on the loss panel, a
    dashed line at the lead step on both, and an arrow lead → lag on the loss panel."""
    run, gid = d.run_index, d.anchor
    grad_ax = c.axes_of.get((run, "grad_norm"))
    loss_metric = "train/loss" if (run, "train/loss") in c.axes_of else "val/loss"
    loss_ax = c.axes_of.get((run, loss_metric))
    for ax in (grad_ax, loss_ax):
        if ax is None:
            continue
        vline = ax.axvline(lead, color=color, lw=1.0, ls="--", alpha=0.9, zorder=5)
        vline.set_gid(gid)
        if ax is d.axes:
            d.artists.append(vline)
    if grad_ax is not None and grad_ax is not d.axes:
        _lead_marker(c, d, grad_ax, code, color, lead)
        d.also.append((c.panel_of_axes[id(grad_ax)], grad_ax))
    if loss_ax is not None:
        draw_lag(c, d, loss_ax, loss_metric, code, color, lead, lag)


def _lead_marker(
    c: Canvas, d: DrawnFinding, grad_ax: Axes, code: str, color: str, lead: int
) -> None:
    """A ring at the lead step on the grad-norm panel, labelled "<code> lead"."""
    y = c.y_at(d.run_index, "grad_norm", lead)
    if y is None:
        return
    (mk,) = grad_ax.plot([lead], [y], ls="none", marker="o", ms=10, mfc="none", mec=color, mew=1.6)
    mk.set_gid(d.anchor)
    mk.set_zorder(8)
    c.keep(grad_ax, y)
    c.note(
        Note(
            grad_ax,
            float(lead),
            f"{code} lead",
            color,
            d.anchor,
            anchor=(lead, y),
            arrow=_leader(color),
        )
    )


def draw_lag(
    c: Canvas,
    d: DrawnFinding,
    loss_ax: Axes,
    loss_metric: str,
    code: str,
    color: str,
    lead: int,
    lag_step: int,
) -> None:
    """A diamond at the lag step on the loss panel, and an arrow to it from a label at
    the lead step ("GRAD001 lag +3")."""
    y = c.y_at(d.run_index, loss_metric, lag_step)
    edge = y is None
    xy = (float(lag_step), 0.92 if y is None else y)
    where = loss_ax.get_xaxis_transform() if edge else loss_ax.transData
    (mk,) = loss_ax.plot(
        [xy[0]],
        [xy[1]],
        ls="none",
        marker="D",
        ms=7,
        mfc="none",
        mec=color,
        mew=1.6,
        zorder=8,
        transform=where,
    )
    mk.set_gid(d.anchor)
    if y is not None:
        c.keep(loss_ax, y)
    lag = lag_step - lead
    arrow = {"arrowstyle": "->", "color": color, "lw": 1.2, "shrinkA": 2, "shrinkB": 4}
    text = c.note(
        Note(
            loss_ax,
            float(lead),
            f"{code} lag +{lag}",
            color,
            d.anchor,
            right=lag > 0,
            anchor=xy,
            anchor_transform=where,
            arrow=arrow,
        )
    )
    if loss_ax is not d.axes:
        d.also.append((c.panel_of_axes[id(loss_ax)], loss_ax))
    else:
        d.artists += [mk, text]


def place_labels(c: Canvas) -> None:
    """Place every label once each figure's layout is settled; a finding's label is
    its own or, when merged with its neighbours', the one they share."""
    by_fig: dict[int, tuple[Figure, list[Note]]] = {}
    for n in c.notes:
        fig = n.ax.get_figure(root=True)
        assert isinstance(fig, Figure)
        by_fig.setdefault(id(fig), (fig, []))[1].append(n)
    for fig, notes in by_fig.values():
        for n in place_figure(fig, notes):
            for d in n.members:
                d.label = n.artist
                d.artists.append(n.artist)
            if n.incident is not None and n.artist is not None:
                run, k, inc_id = n.incident
                c.incident_labels.append(
                    IncidentLabel(run, k, inc_id, c.panel_of_axes[id(n.ax)], n.ax, n.artist)
                )
