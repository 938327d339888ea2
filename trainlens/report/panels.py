"""The report's figures: one matplotlib Figure per panel, every finding drawn where it happened.

Figures are built with :class:`matplotlib.figure.Figure` directly (no pyplot, no global
state, no GUI backend), so building a report is safe in threads, notebooks and CI.

What is drawn, and how (docs/report.md):

- raw values, decimated per pixel bucket by :func:`~trainlens.report.decimate.decimate`
  (min and max kept, never sampled); optional debiased-EMA smoothing is drawn *over* the
  raw line and named in the legend;
- NaN / ±Inf values as red markers on the edge of the axes (never a silent gap: the line
  breaks there); values ≤ 0 on a log axis as grey markers on the bottom edge;
- restarts as vertical lines, with the superseded segment drawn faintly;
- every finding as a shaded step span on the panel of its metric, labelled with its code,
  a ring at its peak, and for lead-lag findings a marker on the grad-norm panel at the
  lead step and on the loss panel at the lag step, with an arrow lead → lag;
- the best validation step as a star.

Artists that belong to a finding carry the gid ``finding-<run>-<index>`` (it becomes the
element id in the SVG), so tests and users can find them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from trainlens.report.annotate import (
    draw_checkpoints,
    draw_findings,
    draw_restarts,
    place_labels,
)
from trainlens.report.canvas import Canvas
from trainlens.report.clipping import apply_limits
from trainlens.report.dashboard import dashboard
from trainlens.report.legends import legends, tidy_log_axes
from trainlens.report.model import DrawnFinding, Figures, Panel, run_series, summary_mfu
from trainlens.report.multiples import other_panels, tensor_panels
from trainlens.report.runs import runs_panel
from trainlens.report.theme import DPI, mpl_text, style

if TYPE_CHECKING:
    from trainlens.core.analysis import Analysis

# Who does what (each module is functions over one Canvas):
#   canvas     the shared state: series, figures, which axes shows which metric
#   dashboard  loss, grad norm, LR vs declared, throughput & MFU, update ratio, entropy, memory
#   multiples  per-tensor small multiples or heatmaps, and every other metric
#   lines      one series: decimation, gaps, NaN/Inf marks, superseded segments, EMA
#   annotate   restarts and findings: spans, rings, lead → lag, label placement
#   clipping   robust y limits and the marks for what they cut
#   legends    legends and log-axis tick labels
#   theme      style, colours, units, text helpers


def _build(c: Canvas) -> Figures:
    # the order is the report's: panels first (so findings find their axes), then
    # findings, then the limits (which must keep what findings marked), legends and
    # labels last (placed against the settled layout)
    dashboard(c)
    taken = {m for (_, m) in c.axes_of}
    taken |= tensor_panels(c)
    other_panels(c, taken)
    draw_restarts(c)
    draw_checkpoints(c)
    drawn, undrawn = draw_findings(c)
    apply_limits(c)
    runs_panel(c)
    tidy_log_axes(c)
    legends(c)
    place_labels(c)
    return Figures(c.panels, drawn, undrawn, c.incident_labels)


def build_figures(analyses: Sequence[Analysis], *, smoothing: float | None = None) -> Figures:
    """Every panel of the report as a Figure, with every finding drawn on it.

    ``smoothing``: the weight α of the newest value in a debiased EMA (0 < α ≤ 1; 0.05 is
    roughly TensorBoard's 0.95 slider), drawn over the raw line; None draws raw values only.
    """
    if smoothing is not None and not 0 < smoothing <= 1:
        raise ValueError(f"smoothing must be in (0, 1], not {smoothing}")
    with style():
        return _build(Canvas(analyses, smoothing))


__all__ = [
    "DPI",
    "DrawnFinding",
    "Figures",
    "Panel",
    "build_figures",
    "mpl_text",
    "run_series",
    "style",
    "summary_mfu",
]
