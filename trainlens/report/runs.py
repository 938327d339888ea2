"""Many runs (a sweep, a seed study): one small axes per run, so 64 runs are 64 readable
curves rather than one panel of 64 overlaid lines in 10 repeating colours.

Above :data:`MANY_RUNS` runs the legends stop naming each run (64 entries covered the
plot: they now sit outside the axes and name only the metrics' line styles), the page's
summary becomes a table of finals (one row per run, see :mod:`trainlens.report.html`),
and this panel draws each run's loss on its own axes, titled with its name, on one y
scale (the overlay panel's), with its incidents' spans shaded. Every figure of the
report is at most :data:`~trainlens.report.canvas.MAX_FIGURE_IN` tall: rows of per-run
axes shrink to fit.
"""

from __future__ import annotations

import math

from trainlens.report.canvas import MANY_RUNS, Canvas, row_height
from trainlens.report.lines import plot
from trainlens.report.model import run_incidents
from trainlens.report.theme import SEVERITY_COLORS

RUN_COLS = 6
RUN_ROW_IN = 1.35
MIN_RUN_ROW_IN = 0.5
RUN_BUCKETS = 120  # ≥ the width of one of 6 axes in pixels


def runs_panel(c: Canvas) -> None:
    """Each run's train (else val) loss on an axes of its own, after the other panels
    (it must not become the home of a finding, nor of the shared y limits)."""
    if len(c.analyses) <= MANY_RUNS:
        return
    metric = "train/loss" if c.has_any("train/loss") else "val/loss"
    runs = [r for r in range(len(c.analyses)) if metric in c.series[r]]
    if not runs:
        return
    rows = math.ceil(len(runs) / RUN_COLS)
    height = row_height(rows, RUN_ROW_IN, MIN_RUN_ROW_IN)
    title = f"{metric} by run ({len(runs)} runs, one axes each, same y scale)"
    total = 0.5 + rows * height
    # a fixed grid, not the constrained layout (every axes has the same ticks), and tick
    # labels on the outer axes only: 64 axes' ticks were most of a 64-run report's time
    fig = c.new_figure(total, title, layout=False)
    fig.subplots_adjust(
        left=0.035, right=0.99, top=1 - 0.55 / total, bottom=0.3 / total, wspace=0.18, hspace=0.55
    )
    panel = c.add_panel("runs", title, "runs", fig)
    grid = fig.subplots(rows, RUN_COLS, squeeze=False, sharex=True, sharey=True)
    saved = dict(c.axes_of), dict(c.lines), dict(c.panel_of_axes)
    overlay = c.axes_of.get((runs[0], metric))
    for n, ax in enumerate(grid.flat):
        if n >= len(runs):
            ax.set_visible(False)
            continue
        run = runs[n]
        plot(c, panel, ax, run, metric, buckets=RUN_BUCKETS, generic=True, label="_nolegend_")
        for inc in run_incidents(c.analyses[run]):
            if inc.step_start is None:
                continue
            end = inc.step_end if inc.step_end is not None else inc.step_start
            color = SEVERITY_COLORS.get(inc.severity.value, SEVERITY_COLORS["info"])
            ax.axvspan(
                inc.step_start,
                max(end, inc.step_start + 0.004 * c.xspan),
                color=color,
                alpha=0.14,
                lw=0,
                zorder=0.5,
            )
        c.x_axis(ax, label=False)
        ax.set_title(f"{c.run_name(run, 26)} #{run + 1}", loc="left", fontsize=7.5)
        ax.tick_params(labelsize=6.5)
        ax.label_outer(remove_inner_ticks=False)
    # the dashboard keeps its homes and limits; these axes take the overlay's y scale
    c.axes_of, c.lines, c.panel_of_axes = saved
    if overlay is not None:
        grid.flat[0].set_ylim(*overlay.get_ylim())
