"""The state every panel module draws into: the runs' series, the figures made so far,
which axes shows which (run, metric), and what is still to settle once everything is
drawn (labels to place, values the y limits must show, captions).

One :class:`Canvas` is made per :func:`~trainlens.report.panels.build_figures` call; the
panel, line, annotation, limit and legend modules are functions over it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from matplotlib import ticker
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.layout_engine import ConstrainedLayoutEngine
from matplotlib.text import Annotation

from trainlens.core.dataclass import dataclass, field
from trainlens.report.labels import Note
from trainlens.report.model import IncidentLabel, Panel, Series, run_series
from trainlens.report.theme import (
    DPI,
    METRIC_COLORS,
    PALETTE,
    RUN_COLORS,
    TITLE_COLOR,
    compact,
    mpl_text,
    short,
)

if TYPE_CHECKING:
    from trainlens.core.analysis import Analysis

WIDTH_IN = 11.5  # 1150 px: readable on a laptop without scaling
MAIN_BUCKETS = 1000  # ≥ the axes' width in pixels: every pixel column keeps its min/max
MANY_RUNS = 8  # above this, runs get small multiples and legends stop listing them
#: the tallest figure: 4000 px at 100 dpi. With every figure at most 1150 × 4000 px and
#: their number set by the metrics (7 dashboard panels, 2 tensor families, 24 other
#: metrics to a figure, this one), not by the runs, the page's size is bounded whatever
#: the number of runs
MAX_FIGURE_IN = 40.0


def row_height(rows: int, wanted: float, minimum: float) -> float:
    """Each row's height so that ``rows`` fit in :data:`MAX_FIGURE_IN` (with a title)."""
    return max(minimum, min(wanted, (MAX_FIGURE_IN - 0.5) / max(rows, 1)))


@dataclass
class Line:
    """A series as drawn on its axes (what the y limits and finding markers read)."""

    steps: np.ndarray
    values: np.ndarray  # scaled as drawn
    log: bool
    color: str = "#333333"
    buckets: int = MAIN_BUCKETS
    superseded: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)  # scaled


def _step_range(series: list[dict[str, Series]]) -> tuple[float, float]:
    """The x range shared by every panel: every standing and superseded step."""
    steps = [s.steps for ser in series for s in ser.values() if s.steps.size]
    steps += [seg[0] for ser in series for s in ser.values() for seg in s.superseded if seg[0].size]
    if steps:
        xlo = float(min(int(s.min()) for s in steps))
        xhi = float(max(int(s.max()) for s in steps))
    else:
        xlo, xhi = 0.0, 1.0
    if xhi <= xlo:
        xhi = xlo + 1.0
    return xlo, xhi


class Canvas:
    def __init__(self, analyses: Sequence[Analysis], smoothing: float | None) -> None:
        self.analyses = list(analyses)
        self.multi = len(self.analyses) > 1
        self.smoothing = smoothing
        self.series = [run_series(a.run.frame) for a in self.analyses]
        self.panels: list[Panel] = []
        self.axes_of: dict[tuple[int, str], Axes] = {}
        self.panel_of_axes: dict[int, str] = {}  # id(Axes) -> panel key
        self.lines: dict[tuple[int, str], Line] = {}
        self.heat_rows: dict[tuple[int, str], int] = {}
        self.notes: list[Note] = []  # labels, placed once the layout is settled
        self.incident_labels: list[IncidentLabel] = []  # as placed (merges removed)
        self.keep_y: dict[int, list[float]] = {}  # id(Axes) -> values its limits must show
        self.styles: dict[str, dict[str, str]] = {}  # panel -> metric -> line style
        self.smoothed: set[str] = set()  # panels with an EMA drawn
        self.colors: dict[str, str] = dict(METRIC_COLORS)
        self.xlo, self.xhi = _step_range(self.series)
        self.xspan = self.xhi - self.xlo
        # every value at one step (a sweep's finals): an axis of 5000–5001 drew a
        # step nobody logged; the axis is centred on the one step and ticks only it
        self.one_step = all(
            s.steps.size == 0 or (int(s.steps.min()) == int(s.steps.max()) == int(self.xlo))
            for ser in self.series
            for s in ser.values()
        )

    # -- colours and names --------------------------------------------------------------
    def color(self, run: int, metric: str) -> str:
        if self.multi:
            return RUN_COLORS[run % len(RUN_COLORS)]
        if metric not in self.colors:
            used = len(self.colors) - len(METRIC_COLORS)
            self.colors[metric] = PALETTE[used % len(PALETTE)]
        return self.colors[metric]

    def label(self, run: int, metric: str) -> str:
        name = mpl_text(short(metric))
        if self.multi:
            return f"{self.run_name(run, 32)} · {name}"
        return name

    def run_name(self, run: int, limit: int) -> str:
        return mpl_text(short(self.analyses[run].run.name, limit))

    # -- what the runs hold ---------------------------------------------------------------
    def all_metrics(self) -> list[str]:
        seen: dict[str, None] = {}
        for ser in self.series:
            for m in ser:
                seen.setdefault(m, None)
        return list(seen)

    def has_any(self, *metrics: str) -> bool:
        return any(m in ser for ser in self.series for m in metrics)

    def any_positive(self, metrics: Sequence[str]) -> bool:
        """A log axis only when something on it can be drawn on one."""
        return any(
            bool(np.any(np.isfinite(ser[m].values) & (ser[m].values > 0)))
            for ser in self.series
            for m in metrics
            if m in ser
        )

    def y_at(self, run: int, metric: str, step: float) -> float | None:
        """The drawn value at ``step`` (the last at or before it), or a heatmap's row."""
        line = self.lines.get((run, metric))
        if line is None or line.steps.size == 0:
            row = self.heat_rows.get((run, metric))
            return None if row is None else float(row)
        i = int(np.searchsorted(line.steps, step, side="right")) - 1
        i = min(max(i, 0), line.steps.size - 1)
        y = float(line.values[i])
        if not math.isfinite(y) or (line.log and y <= 0):
            return None
        return y

    # -- figures and axes -----------------------------------------------------------------
    def new_figure(self, height_in: float, title: str, *, layout: bool = True) -> Figure:
        engine = ConstrainedLayoutEngine(h_pad=0.06, w_pad=0.06) if layout else None
        fig = Figure(figsize=(WIDTH_IN, height_in), dpi=DPI, layout=engine)
        FigureCanvasAgg(fig)  # a renderer to measure labels with (no GUI, no pyplot)
        fig.suptitle(title, x=0.01, ha="left", fontsize=11, fontweight="bold", color=TITLE_COLOR)
        return fig

    def add_panel(self, key: str, title: str, section: str, fig: Figure) -> Panel:
        panel = Panel(key=key, title=title, section=section, figure=fig)
        self.panels.append(panel)
        return panel

    def register(self, panel: Panel, run: int, metric: str, ax: Axes) -> None:
        panel.axes[(run, metric)] = ax
        self.axes_of[(run, metric)] = ax
        self.panel_of_axes[id(ax)] = panel.key

    def x_axis(self, ax: Axes, *, label: bool = True) -> None:
        if self.one_step:
            ax.set_xlim(self.xlo - 0.5, self.xlo + 0.5)
            ax.set_xticks([self.xlo])
        else:
            pad = self.xspan * 0.01
            ax.set_xlim(self.xlo - pad, self.xhi + pad)
        if label:
            ax.set_xlabel("step")
        ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda x, _: compact(x)))

    # -- what settles after drawing ---------------------------------------------------------
    def note(self, note: Note, d: object | None = None) -> Annotation:
        """Queue a label (``d``: the finding it names); it is drawn now and placed in a
        row along the top once the layout is settled (:mod:`trainlens.report.labels`)."""
        art = note.draw()
        if d is not None:
            note.members.append(d)
        self.notes.append(note)
        return art

    def keep(self, ax: Axes, y: float) -> None:
        """A value the y limits of ``ax`` must show (a ring, a marker, a star)."""
        self.keep_y.setdefault(id(ax), []).append(y)

    def caption(self, key: str, text: str) -> None:
        """A line under the panel (escaped by the HTML writer), once."""
        panel = next(p for p in self.panels if p.key == key)
        if text not in panel.notes:
            panel.notes.append(text)
