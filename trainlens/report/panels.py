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

import math
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import matplotlib
import numpy as np
import polars as pl
from matplotlib import ticker, transforms
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import LinearSegmentedColormap
from matplotlib.figure import Figure
from matplotlib.layout_engine import ConstrainedLayoutEngine
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle
from matplotlib.text import Annotation, Text

from trainlens.core.findings import Finding
from trainlens.core.stats import ema
from trainlens.report.decimate import (
    bucket_ids,
    decimate,
    first_per_bucket,
    nonfinite_marks,
    with_gaps,
)
from trainlens.report.labels import Note, place_figure
from trainlens.report.limits import (
    gap_breaks,
    isolated,
    robust_ylim,
    spans_decades,
    step_gaps,
)

if TYPE_CHECKING:
    from trainlens.api import Analysis

# ---- layout ------------------------------------------------------------------------------

DPI = 100
WIDTH_IN = 11.5  # 1150 px: readable on a laptop without scaling
MAIN_HEIGHT_IN = 3.7
MAIN_BUCKETS = 1000  # ≥ the axes' width in pixels: every pixel column keeps its min/max
SMALL_COLS = 3
SMALL_ROW_IN = 2.3
SMALL_BUCKETS = 360
OTHER_PER_FIGURE = 24
MAX_TENSOR_MULTIPLES = 12  # more tensors than this: a heatmap
HEATMAP_BUCKETS = 500
SMOOTH_MIN_POINTS = 50  # shorter series (e.g. val every N steps) are not smoothed
POINT_MARKERS_BELOW = 150  # sparse series get a dot per value

STYLE: dict[str, Any] = {
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.titleweight": "bold",
    "axes.labelsize": 9,
    "axes.labelcolor": "#333333",
    "axes.edgecolor": "#999999",
    "axes.linewidth": 0.8,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "axes.axisbelow": True,
    "grid.color": "#e6e6e6",
    "grid.linewidth": 0.7,
    "xtick.color": "#555555",
    "ytick.color": "#555555",
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "legend.fontsize": 8,
    "legend.frameon": False,
    "figure.facecolor": "white",
    "savefig.facecolor": "white",
    "svg.fonttype": "none",  # text stays text: smaller, searchable SVGs
    "svg.hashsalt": "trainlens",  # stable ids: the same run gives the same SVG
    "path.simplify": True,
    "agg.path.chunksize": 20000,
}

# one colour per metric, the same on every panel (red is kept for errors and NaN)
PALETTE = (
    "#4C72B0",
    "#DD8452",
    "#55A868",
    "#8172B3",
    "#937860",
    "#DA8BC3",
    "#64B5CD",
    "#CCB974",
    "#8C8C8C",
    "#2F6B7A",
    "#A05D56",
    "#6B8E23",
)
METRIC_COLORS = {
    "train/loss": "#4C72B0",
    "val/loss": "#DD8452",
    "grad_norm": "#8172B3",
    "lr": "#55A868",
    "tokens_per_sec": "#2F6B7A",
    "samples_per_sec": "#2F6B7A",
    "mfu": "#937860",
    "update_ratio": "#DA8BC3",
    "entropy": "#6B8E23",
    "mem/allocated": "#4C72B0",
    "mem/reserved": "#8C8C8C",
    "mem/rss": "#937860",
}
# several runs: one colour per run, one line style per metric
RUN_COLORS = (
    "#4C72B0",
    "#DD8452",
    "#55A868",
    "#8172B3",
    "#937860",
    "#DA8BC3",
    "#64B5CD",
    "#8C8C8C",
    "#CCB974",
    "#2F6B7A",
)
LINESTYLES = ("-", "--", ":", "-.")
SEVERITY_COLORS = {"error": "#C0392B", "warning": "#D68910", "info": "#5B7A99"}
NONFINITE_COLOR = "#C0392B"
DECLARED_COLOR = "#333333"
RESTART_COLOR = "#555555"

UNITS = {
    "train/loss": "loss (nats)",
    "val/loss": "loss (nats)",
    "grad_norm": "‖g‖₂ before clipping",
    "lr": "learning rate",
    "tokens_per_sec": "tokens / s",
    "samples_per_sec": "samples / s",
    "mfu": "MFU (%)",
    "update_ratio": "‖Δw‖ / ‖w‖",
    "entropy": "entropy (nats)",
    "step_time": "seconds",
    "step_time_avg": "seconds",
    "train_time": "seconds",
    "dataloader_wait": "seconds",
    "padding_frac": "fraction",
    "epoch": "epoch",
    "loss_scale": "scale",
    "tflops_per_gpu": "TFLOP/s",
    "val/accuracy": "accuracy",
    "val/perplexity": "perplexity",
    "train/perplexity": "perplexity",
    "weight_norm": "‖w‖",
    "tokens": "tokens",
}
MEMORY_METRICS = ("mem/allocated", "mem/reserved", "mem/rss")
GIB = float(2**30)
TENSOR_FAMILIES = {
    "grad_norm": ("tensors_grad_norm", "Per-tensor gradient norms", "‖g‖₂"),
    "update_ratio": ("tensors_update_ratio", "Per-tensor update/weight ratios", "‖Δw‖ / ‖w‖"),
}
# schedules: every value is planned, the extremes are the point; MFU's axis starts at 0
UNCLIPPED = frozenset({"lr", "mfu"})
# where a finding whose metric has no panel of its own is drawn
FALLBACK_METRICS = {"wall_time": ("tokens_per_sec", "samples_per_sec", "step_time")}
# evidence keys naming the step where a finding peaks, in order of preference
PEAK_KEYS = ("peak_step", "spike_step", "first_step", "min_step")


# ---- results -----------------------------------------------------------------------------


@dataclass
class Panel:
    """One figure of the report."""

    key: str  # file stem and HTML anchor (panel-<key>); built from fixed names only
    title: str
    section: str  # dashboard | tensors | other
    figure: Figure
    axes: dict[tuple[int, str], Axes] = field(default_factory=dict)  # (run, metric) -> Axes
    notes: list[str] = field(default_factory=list)

    @property
    def metrics(self) -> list[str]:
        return sorted({m for _, m in self.axes})

    def size_px(self) -> tuple[int, int]:
        w, h = self.figure.get_size_inches()
        return round(w * DPI), round(h * DPI)


@dataclass
class DrawnFinding:
    """Where one finding was drawn: its home panel and axes, and the artists made for it."""

    run_index: int
    index: int  # position in the run's findings
    finding: Finding
    panel: str
    axes: Axes
    artists: list[Artist] = field(default_factory=list)
    also: list[tuple[str, Axes]] = field(default_factory=list)  # e.g. GRAD001 on the loss panel
    # the label naming it: its own ("LOSS001"), or one it shares with findings at
    # nearby steps when the rows along the top ran out ("LOSS001 ×3", "LOSS003 +2")
    label: Text | None = None

    @property
    def anchor(self) -> str:
        return f"finding-{self.run_index}-{self.index}"


@dataclass
class Figures:
    panels: list[Panel]
    findings: list[DrawnFinding]
    undrawn: list[tuple[int, int]]  # (run, finding) with no panel to draw on

    def panel(self, key: str) -> Panel:
        for p in self.panels:
            if p.key == key:
                return p
        raise KeyError(key)

    def drawn(self, run_index: int, index: int) -> DrawnFinding | None:
        for d in self.findings:
            if d.run_index == run_index and d.index == index:
                return d
        return None


# ---- data ----------------------------------------------------------------------------------


@dataclass
class Series:
    steps: np.ndarray  # standing values, sorted, last per step
    values: np.ndarray
    superseded: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)


def run_series(frame: pl.DataFrame) -> dict[str, Series]:
    """Every metric's standing series and its superseded segments, in one pass."""
    out: dict[str, Series] = {}
    if frame.height == 0:
        return out
    cols = frame.select("metric", "step", "value", "superseded")
    for key, part in cols.partition_by("metric", as_dict=True, maintain_order=True).items():
        metric = str(key[0])
        steps = part.get_column("step").to_numpy().astype(np.int64, copy=False)
        values = part.get_column("value").to_numpy().astype(np.float64, copy=False)
        sup = part.get_column("superseded").to_numpy().astype(bool, copy=False)
        segments: list[tuple[np.ndarray, np.ndarray]] = []
        if sup.any():
            ss, sv = steps[sup], values[sup]
            cuts = np.flatnonzero(np.diff(ss) < 0) + 1  # file order: a new segment
            for a, b in zip(np.r_[0, cuts], np.r_[cuts, ss.size], strict=True):
                order = np.argsort(ss[a:b], kind="stable")
                segments.append((ss[a:b][order], sv[a:b][order]))
            steps, values = steps[~sup], values[~sup]
        if steps.size > 1 and not np.all(np.diff(steps) > 0):
            order = np.argsort(steps, kind="stable")
            steps, values = steps[order], values[order]
            last = np.r_[steps[1:] != steps[:-1], True]  # last logged value of a step stands
            steps, values = steps[last], values[last]
        out[metric] = Series(steps, values, segments)
    return out


def summary_mfu(summary: dict[str, Any]) -> float | None:
    """MFU (0..1) from the summary when a calculator put it there."""
    raw = summary.get("mfu")
    if isinstance(raw, dict):
        raw = next((raw[k] for k in ("mfu", "value", "mean") if raw.get(k) is not None), None)
    if isinstance(raw, (int, float)) and math.isfinite(raw) and 0 < raw < 2:
        return float(raw)
    return None


def mpl_text(text: str) -> str:
    """Literal text for matplotlib (a ``$`` would start mathtext)."""
    return text.replace("$", r"\$")


def _short(text: str, limit: int = 48) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _natural_key(name: str) -> list[Any]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def _fmt_step(step: float) -> str:
    return f"{int(step):,}"


@contextmanager
def style() -> Iterator[None]:
    rc: Any = STYLE  # typed rc keys in matplotlib's stubs; these are all valid
    with matplotlib.rc_context(rc):
        yield


# ---- the builder ----------------------------------------------------------------------------


@dataclass
class _Line:
    steps: np.ndarray
    values: np.ndarray  # scaled as drawn
    log: bool
    color: str = "#333333"
    buckets: int = MAIN_BUCKETS
    superseded: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)  # scaled


class _Builder:
    def __init__(self, analyses: Sequence[Analysis], smoothing: float | None) -> None:
        self.analyses = list(analyses)
        self.multi = len(self.analyses) > 1
        self.smoothing = smoothing
        self.series = [run_series(a.run.frame) for a in self.analyses]
        self.panels: list[Panel] = []
        self.axes_of: dict[tuple[int, str], Axes] = {}
        self.panel_of_axes: dict[int, str] = {}  # id(Axes) -> panel key
        self.lines: dict[tuple[int, str], _Line] = {}
        self.heat_rows: dict[tuple[int, str], int] = {}
        self.notes: list[Note] = []  # labels, placed once the layout is settled
        self.keep_y: dict[int, list[float]] = {}  # id(Axes) -> values its limits must show
        self.styles: dict[str, dict[str, str]] = {}  # panel -> metric -> line style
        self.smoothed: set[str] = set()  # panels with an EMA drawn
        self.legend_done: dict[tuple[int, str], bool] = {}
        self.colors: dict[str, str] = dict(METRIC_COLORS)
        steps = [s.steps for ser in self.series for s in ser.values() if s.steps.size]
        steps += [
            seg[0]
            for ser in self.series
            for s in ser.values()
            for seg in s.superseded
            if seg[0].size
        ]
        if steps:
            self.xlo = float(min(int(s.min()) for s in steps))
            self.xhi = float(max(int(s.max()) for s in steps))
        else:
            self.xlo, self.xhi = 0.0, 1.0
        if self.xhi <= self.xlo:
            self.xhi = self.xlo + 1.0
        self.xspan = self.xhi - self.xlo

    # -- colours and labels --------------------------------------------------------------
    def color(self, run: int, metric: str) -> str:
        if self.multi:
            return RUN_COLORS[run % len(RUN_COLORS)]
        if metric not in self.colors:
            used = len(self.colors) - len(METRIC_COLORS)
            self.colors[metric] = PALETTE[used % len(PALETTE)]
        return self.colors[metric]

    def label(self, run: int, metric: str) -> str:
        name = mpl_text(_short(metric))
        if self.multi:
            return f"{mpl_text(_short(self.analyses[run].run.name, 32))} · {name}"
        return name

    def run_metrics(self, run: int) -> list[str]:
        return list(self.series[run])

    def all_metrics(self) -> list[str]:
        seen: dict[str, None] = {}
        for ser in self.series:
            for m in ser:
                seen.setdefault(m, None)
        return list(seen)

    # -- figures ----------------------------------------------------------------------------
    def new_figure(self, height_in: float) -> Figure:
        engine = ConstrainedLayoutEngine(h_pad=0.06, w_pad=0.06)
        fig = Figure(figsize=(WIDTH_IN, height_in), dpi=DPI, layout=engine)
        FigureCanvasAgg(fig)  # a renderer to measure labels with (no GUI, no pyplot)
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
        pad = self.xspan * 0.01
        ax.set_xlim(self.xlo - pad, self.xhi + pad)
        if label:
            ax.set_xlabel("step")
        ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda x, _: _compact(x)))

    # -- one series ----------------------------------------------------------------------
    def plot(
        self,
        panel: Panel,
        ax: Axes,
        run: int,
        metric: str,
        *,
        scale: float = 1.0,
        log: bool = False,
        buckets: int = MAIN_BUCKETS,
        linestyle: str = "-",
        label: str | None = None,
        generic: bool = False,
    ) -> None:
        ser = self.series[run].get(metric)
        if ser is None:
            return
        self.register(panel, run, metric, ax)
        color = self.color(run, metric)
        label = self.label(run, metric) if label is None else label
        self.styles.setdefault(panel.key, {})[metric] = linestyle
        if self.multi:
            # several runs: the legend names runs (colours) and metrics (line styles)
            label, generic = "_nolegend_", True
        s = ser.steps
        v = ser.values * scale if scale != 1.0 else ser.values
        sup = [(ss, sv * scale if scale != 1.0 else sv) for ss, sv in ser.superseded]
        self.lines[(run, metric)] = _Line(s, v, log, color, buckets, sup)
        finite = np.isfinite(v)
        drawable = finite & (v > 0) if log else finite
        n = int(drawable.sum())
        marks = nonfinite_marks(s, v, buckets, lo=self.xlo, hi=self.xhi)
        off_scale = first_per_bucket(s[finite & ~drawable], buckets, lo=self.xlo, hi=self.xhi)
        step_gaps_ = self.step_breaks(s, buckets)
        self.note_gaps(panel, run, s, step_gaps_)
        breaks = np.concatenate([*marks.values(), off_scale, gap_breaks(s, step_gaps_)])
        ds, dv = decimate(s[drawable], v[drawable], buckets, lo=self.xlo, hi=self.xhi)
        ds2, dv2 = with_gaps(ds, dv, np.unique(breaks))
        smooth = self.smoothing is not None and n >= SMOOTH_MIN_POINTS
        if smooth:
            self.smoothed.add(panel.key)
        sparse = n < POINT_MARKERS_BELOW
        if not sparse:
            self.mark_isolated(ax, run, metric, s, v, drawable, step_gaps_)
        (line,) = ax.plot(
            ds2,
            dv2,
            color=color,
            lw=1.0 if not sparse else 1.1,
            ls=linestyle,
            alpha=0.4 if smooth else 0.95,
            label=label + (" (raw)" if smooth and not self.multi else ""),
            marker="o" if sparse else None,
            ms=2.8,
            zorder=2,
        )
        line.set_gid(f"series-{run}-{metric}")
        if smooth:
            breaks = gap_breaks(s, step_gaps_)
            self.plot_ema(ax, s[drawable], v[drawable], breaks, buckets, color, linestyle, label)
        for i, (ss, sv) in enumerate(ser.superseded):
            sv = sv * scale if scale != 1.0 else sv
            ok = np.isfinite(sv) & (sv > 0) if log else np.isfinite(sv)
            xs, ys = decimate(ss[ok], sv[ok], buckets, lo=self.xlo, hi=self.xhi)
            (faint,) = ax.plot(
                xs,
                ys,
                color=color,
                lw=0.9,
                ls=":",
                alpha=0.45,
                zorder=1,
                label="superseded (before restart)" if i == 0 else "_nolegend_",
            )
            faint.set_gid(f"superseded-{run}-{metric}")
        self.mark_nonfinite(ax, run, metric, marks, off_scale, generic=generic)

    def plot_ema(
        self,
        ax: Axes,
        s: np.ndarray,
        v: np.ndarray,
        breaks: np.ndarray,
        buckets: int,
        color: str,
        linestyle: str,
        label: str,
    ) -> None:
        """The debiased EMA over the raw line, broken where the steps have gaps."""
        assert self.smoothing is not None
        es, ev = decimate(s, ema(v, self.smoothing), buckets, lo=self.xlo, hi=self.xhi)
        es, ev = with_gaps(es, ev, breaks)
        ax.plot(
            es,
            ev,
            color=color,
            lw=1.8,
            ls=linestyle,
            zorder=3,
            label="_nolegend_" if self.multi else f"{label} · EMA α={self.smoothing:g}",
        )

    def step_breaks(self, steps: np.ndarray, buckets: int) -> np.ndarray:
        """Where the steps jump far beyond their usual interval (an excerpt, a resumed
        log): the line breaks there rather than drawing a straight line over steps that
        were never logged. Gaps narrower than a bucket (a pixel column) are not drawn."""
        return step_gaps(steps, min_gap=self.xspan / buckets)

    def mark_isolated(
        self,
        ax: Axes,
        run: int,
        metric: str,
        s: np.ndarray,
        v: np.ndarray,
        drawable: np.ndarray,
        gaps: np.ndarray,
    ) -> None:
        """A point with a gap on both sides would be a line of length zero: a dot."""
        alone = isolated(s.size, gaps)
        alone = alone[drawable[alone]]
        if alone.size:
            (dots,) = ax.plot(
                s[alone],
                v[alone],
                ls="none",
                marker="o",
                ms=2.8,
                color=self.color(run, metric),
                zorder=2,
            )
            dots.set_gid(f"isolated-{run}-{metric}")

    def mark_nonfinite(
        self,
        ax: Axes,
        run: int,
        metric: str,
        marks: dict[str, np.ndarray],
        off_scale: np.ndarray,
        *,
        generic: bool = False,
    ) -> None:
        where = "" if generic else f" in {mpl_text(_short(metric))}"
        edge = transforms.blended_transform_factory(ax.transData, ax.transAxes)
        spec = {
            "nan": (0.0, "x", NONFINITE_COLOR, "NaN"),
            "+inf": (1.0, "^", NONFINITE_COLOR, "+Inf"),
            "-inf": (0.0, "v", NONFINITE_COLOR, "−Inf"),
        }
        for kind, steps in marks.items():
            y, marker, color, name = spec[kind]
            self._edge_marks(
                ax,
                edge,
                steps,
                y,
                marker,
                color,
                f"{name}{where}",
                f"nonfinite-{run}-{metric}-{kind}",
            )
        if off_scale.size:
            self._edge_marks(
                ax,
                edge,
                off_scale,
                0.0,
                "|",
                "#777777",
                f"≤ 0 (off the log scale){where}",
                f"offscale-{run}-{metric}",
            )

    def _edge_marks(
        self,
        ax: Axes,
        edge: transforms.Transform,
        steps: np.ndarray,
        y: float,
        marker: str,
        color: str,
        label: str,
        gid: str,
    ) -> None:
        (art,) = ax.plot(
            steps,
            np.full(steps.size, y),
            ls="none",
            marker=marker,
            ms=6,
            mew=1.4,
            color=color,
            transform=edge,
            clip_on=False,
            zorder=6,
            label=label,
        )
        art.set_gid(gid)

    # -- panels ------------------------------------------------------------------------------
    def main_panel(self, key: str, title: str, metrics: Sequence[str]) -> tuple[Panel, Axes]:
        fig = self.new_figure(MAIN_HEIGHT_IN)
        ax = fig.add_subplot()
        fig.suptitle(title, x=0.01, ha="left", fontsize=11, fontweight="bold", color="#222222")
        panel = self.add_panel(key, title, "dashboard", fig)
        self.x_axis(ax)
        return panel, ax

    def has_any(self, *metrics: str) -> bool:
        return any(m in ser for ser in self.series for m in metrics)

    def line_panel(
        self,
        key: str,
        title: str,
        metrics: Sequence[str],
        *,
        log: bool = False,
        scale: float = 1.0,
        ylabel: str | None = None,
    ) -> tuple[Panel, Axes] | None:
        if not self.has_any(*metrics):
            return None
        panel, ax = self.main_panel(key, title, metrics)
        log = log and self.any_positive(metrics)
        for run in range(len(self.analyses)):
            for j, m in enumerate(metrics):
                self.plot(
                    panel,
                    ax,
                    run,
                    m,
                    scale=scale,
                    log=log,
                    linestyle=LINESTYLES[j % len(LINESTYLES)] if self.multi else "-",
                )
        if log:
            ax.set_yscale("log")
        ax.set_ylabel(ylabel or UNITS.get(metrics[0], ""))
        return panel, ax

    def any_positive(self, metrics: Sequence[str]) -> bool:
        """A log axis only when something on it can be drawn on one."""
        return any(
            bool(np.any(np.isfinite(ser[m].values) & (ser[m].values > 0)))
            for ser in self.series
            for m in metrics
            if m in ser
        )

    def loss_panel(self) -> None:
        metrics = ["train/loss", "val/loss"]
        metrics += sorted(
            {m for m in self.all_metrics() if m.startswith("val/loss/")}, key=_natural_key
        )
        made = self.line_panel("loss", "Loss", metrics)
        if made is None:
            return
        _, ax = made
        self.perplexity_axis(ax)
        for run, a in enumerate(self.analyses):
            val = a.summary.get("val_loss") or {}
            best, step = val.get("best"), val.get("best_step")
            if best is None or step is None or (run, "val/loss") not in self.axes_of:
                continue
            (star,) = ax.plot(
                [step],
                [best],
                ls="none",
                marker="*",
                ms=13,
                mfc="#F4D03F",
                mec="#7D6608",
                mew=0.9,
                zorder=7,
                label="best val (per run)"
                if self.multi
                else f"best val {best:.4g} @ {_fmt_step(step)}",
            )
            star.set_gid(f"best-val-{run}")
            self.keep(ax, float(best))

    def perplexity_axis(self, ax: Axes) -> None:
        """Perplexity = exp(loss) on a right-hand axis, where the summary gives one (the one
        rule for a per-token LM loss: :func:`trainlens.summary.perplexity_basis`)."""
        if not all((a.summary.get("perplexity") or {}).get("shown") for a in self.analyses):
            return
        vals = [line.values for key, line in self.lines.items() if self.axes_of.get(key) is ax]
        finite = np.concatenate([v[np.isfinite(v)] for v in vals]) if vals else np.empty(0)
        if finite.size == 0 or finite.min() <= 0 or finite.max() > 20:
            return

        def to_ppl(x: Any) -> Any:
            with np.errstate(over="ignore", invalid="ignore"):
                return np.exp(np.clip(x, -50, 50))

        def to_loss(x: Any) -> Any:
            with np.errstate(divide="ignore", invalid="ignore"):
                return np.log(np.clip(x, 1e-300, None))

        sec = ax.secondary_yaxis("right", functions=(to_ppl, to_loss))
        sec.yaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        sec.yaxis.set_minor_locator(ticker.NullLocator())
        sec.yaxis.set_major_formatter(ticker.FuncFormatter(lambda x, _: f"{x:g}"))
        sec.set_ylabel("perplexity = exp(loss)", color="#666666")
        sec.tick_params(colors="#666666", labelsize=8)
        sec.spines["right"].set_visible(True)
        sec.spines["right"].set_color("#bbbbbb")

    def lr_panel(self) -> None:
        lrs = [ser["lr"].values for ser in self.series if "lr" in ser]
        made = self.line_panel(
            "lr", "Learning rate: realized vs declared", ["lr"], log=spans_decades(lrs)
        )
        if made is None:
            return
        panel, ax = made
        for run, a in enumerate(self.analyses):
            schedule = a.context.schedule
            if not schedule or (run, "lr") not in self.axes_of:
                continue
            curve = self.declared_curve(schedule, run)
            if isinstance(curve, str):
                panel.notes.append(curve)
                continue
            xs, ys = curve
            shape = str(schedule.get("shape", "declared"))
            name = "declared schedule" if self.multi else f"declared ({mpl_text(shape)})"
            (decl,) = ax.plot(
                xs,
                ys,
                color=DECLARED_COLOR if not self.multi else self.color(run, "lr"),
                lw=1.1,
                ls=(0, (4, 3)),
                alpha=0.85,
                zorder=4,
                label=name,
            )
            decl.set_gid(f"declared-lr-{run}")

    def declared_curve(
        self, schedule: dict[str, Any], run: int
    ) -> tuple[np.ndarray, np.ndarray] | str:
        declared: Callable[[dict[str, Any], np.ndarray], np.ndarray]
        try:
            from trainlens.core.schedules import declared_lr as declared
        except ImportError:  # pragma: no cover - the schedule helper is part of the package
            return "the declared schedule is not drawn: this installation cannot compute it"
        steps = self.series[run]["lr"].steps
        if steps.size == 0:
            return "the declared schedule is not drawn: lr has no values"
        lo, hi = int(steps.min()), int(steps.max())
        grid = np.unique(np.linspace(lo, hi, 2 * MAIN_BUCKETS).round().astype(np.int64))
        try:
            ys = np.asarray(declared(schedule, grid), dtype=np.float64)
        except (ValueError, KeyError, TypeError) as exc:
            return f"the declared schedule is not drawn: {exc}"
        return grid, ys

    def throughput_panel(self) -> None:
        left = "tokens_per_sec" if self.has_any("tokens_per_sec") else "samples_per_sec"
        mfu_known = [summary_mfu(a.summary) for a in self.analyses]
        if not self.has_any(left, "mfu"):
            return
        title = "Throughput" + (" and MFU" if self.has_any("mfu") or any(mfu_known) else "")
        panel, ax = self.main_panel("throughput", title, [left, "mfu"])
        for run in range(len(self.analyses)):
            self.plot(panel, ax, run, left)
        ax.set_ylabel(UNITS[left])
        if self.has_any("mfu") or any(m is not None for m in mfu_known):
            twin = ax.twinx()
            twin.grid(False)
            twin.spines["right"].set_visible(True)
            for run in range(len(self.analyses)):
                self.plot(panel, twin, run, "mfu", scale=100.0, linestyle="--")
                m = mfu_known[run]
                if m is not None and (run, "mfu") not in self.axes_of:
                    twin.axhline(
                        m * 100,
                        color=self.color(run, "mfu"),
                        lw=1.0,
                        ls=(0, (4, 3)),
                        label=f"MFU {m:.1%} (summary)",
                    )
            twin.set_ylabel(UNITS["mfu"])
            twin.set_ylim(bottom=0)
            self.panel_of_axes[id(twin)] = panel.key

    def memory_panel(self) -> None:
        self.line_panel(
            "memory", "Memory", list(MEMORY_METRICS), scale=1.0 / GIB, ylabel="GiB (2³⁰ bytes)"
        )

    # -- small multiples and heatmaps --------------------------------------------------
    def small_multiples(
        self,
        key: str,
        title: str,
        section: str,
        metrics: Sequence[str],
        *,
        log: bool = False,
        ylabel: str | None = None,
    ) -> Panel:
        cols = min(SMALL_COLS, len(metrics))  # one or two metrics get the full width
        rows = math.ceil(len(metrics) / cols)
        fig = self.new_figure(0.5 + rows * SMALL_ROW_IN)
        fig.suptitle(title, x=0.01, ha="left", fontsize=11, fontweight="bold", color="#222222")
        panel = self.add_panel(key, title, section, fig)
        grid = fig.subplots(rows, cols, squeeze=False, sharex=True)
        for i, ax in enumerate(grid.flat):
            if i >= len(metrics):
                ax.set_visible(False)
                continue
            m = metrics[i]
            use_log = log and self.any_positive([m])
            for run in range(len(self.analyses)):
                self.plot(
                    panel,
                    ax,
                    run,
                    m,
                    log=use_log,
                    buckets=SMALL_BUCKETS * SMALL_COLS // cols,
                    generic=True,
                    label=mpl_text(_short(self.analyses[run].run.name, 28))
                    if self.multi
                    else mpl_text(_short(m)),
                )
            if use_log:
                ax.set_yscale("log")
            ax.set_title(mpl_text(_short(m, 60)), loc="left", fontsize=8.5)
            unit = ylabel if ylabel is not None else UNITS.get(m, "")
            if unit:
                ax.set_ylabel(unit, fontsize=8)
            self.x_axis(ax, label=i >= len(metrics) - cols)
            ax.tick_params(labelbottom=True)
        return panel

    def heatmap(self, family: str, metrics: Sequence[str]) -> None:
        key, title, unit = TENSOR_FAMILIES[family]
        n = len(metrics)
        per_run_in = min(10.0, max(2.4, 0.13 * n + 0.9))
        runs = [r for r in range(len(self.analyses)) if any(m in self.series[r] for m in metrics)]
        fig = self.new_figure(0.5 + per_run_in * len(runs))
        fig.suptitle(
            f"{title} (log10, max per step bucket; black = exactly 0)",
            x=0.01,
            ha="left",
            fontsize=11,
            fontweight="bold",
            color="#222222",
        )
        panel = self.add_panel(key, title, "tensors", fig)
        axes = fig.subplots(len(runs), 1, squeeze=False, sharex=True)[:, 0]
        row_of = {m: i for i, m in enumerate(metrics)}
        cmap = LinearSegmentedColormap.from_list(
            "quiet", ["#F7FBFF", "#9ECAE1", "#4292C6", "#08519C", "#08306B"]
        ).with_extremes(under="#111111", bad="#FAFAFA")
        for ax, run in zip(axes, runs, strict=True):
            grid, bad, zero = self._heat_grid(run, metrics, row_of)
            finite = grid[np.isfinite(grid)]
            vmin = float(finite.min()) if finite.size else 0.0
            vmax = float(finite.max()) if finite.size else 1.0
            if vmax <= vmin:
                vmax = vmin + 1.0
            shown = np.where(zero & ~np.isfinite(grid), vmin - 1.0, grid)
            img = ax.imshow(
                np.ma.masked_invalid(shown),
                aspect="auto",
                interpolation="nearest",
                cmap=cmap,
                vmin=vmin,
                vmax=vmax,
                extent=(self.xlo, self.xhi, n - 0.5, -0.5),
            )
            cb = fig.colorbar(img, ax=ax, pad=0.01, fraction=0.04)
            cb.set_label(f"log10 {unit}", fontsize=8)
            rows, cols = np.nonzero(bad)
            if rows.size:
                width = self.xspan / HEATMAP_BUCKETS
                ax.plot(
                    self.xlo + (cols + 0.5) * width,
                    rows,
                    ls="none",
                    marker="x",
                    ms=4,
                    color=NONFINITE_COLOR,
                    label="NaN / Inf",
                )
            step = max(1, math.ceil(n / 40))
            ax.set_yticks(range(0, n, step))
            ax.set_yticklabels(
                [mpl_text(_short(metrics[i].split("/", 1)[1], 36)) for i in range(0, n, step)],
                fontsize=7,
            )
            ax.grid(False)
            if self.multi:
                ax.set_title(mpl_text(self.analyses[run].run.name), loc="left", fontsize=9)
            self.x_axis(ax, label=ax is axes[-1])
            for m in metrics:
                if m in self.series[run]:
                    self.register(panel, run, m, ax)
                    self.heat_rows[(run, m)] = row_of[m]

    def _heat_grid(
        self, run: int, metrics: Sequence[str], row_of: dict[str, int]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(rows × buckets) of log10 max, any non-finite, and all-zero, vectorized."""
        b = HEATMAP_BUCKETS
        frame = (
            self.analyses[run]
            .run.standing()
            .filter(pl.col("metric").is_in(list(metrics)))
            .select("metric", "step", "value")
        )
        ids = bucket_ids(frame.get_column("step").to_numpy(), b, self.xlo, self.xhi)
        agg = (
            frame.with_columns(
                pl.col("metric").replace_strict(row_of, return_dtype=pl.Int64).alias("row"),
                pl.Series("bucket", ids),
            )
            .group_by("row", "bucket")
            .agg(
                pl.col("value")
                .filter(pl.col("value").is_finite() & (pl.col("value") > 0))
                .log10()
                .max()
                .alias("top"),
                (~pl.col("value").is_finite()).any().alias("bad"),
                (pl.col("value") == 0).any().alias("zero"),
            )
        )
        grid = np.full((len(metrics), b), np.nan)
        bad = np.zeros((len(metrics), b), dtype=bool)
        zero = np.zeros((len(metrics), b), dtype=bool)
        r = agg.get_column("row").to_numpy()
        c = agg.get_column("bucket").to_numpy()
        grid[r, c] = agg.get_column("top").fill_null(np.nan).to_numpy()
        bad[r, c] = agg.get_column("bad").to_numpy()
        zero[r, c] = agg.get_column("zero").to_numpy()
        return grid, bad, zero

    def tensor_panels(self) -> set[str]:
        used: set[str] = set()
        for family, (key, title, unit) in TENSOR_FAMILIES.items():
            metrics = sorted(
                {m for m in self.all_metrics() if m.startswith(family + "/")}, key=_natural_key
            )
            if not metrics:
                continue
            used.update(metrics)
            if len(metrics) > MAX_TENSOR_MULTIPLES:
                self.heatmap(family, metrics)
            else:
                self.small_multiples(key, title, "tensors", metrics, log=True, ylabel=unit)
        return used

    def other_panels(self, taken: set[str]) -> None:
        rest = sorted((m for m in self.all_metrics() if m not in taken), key=_natural_key)
        for i in range(0, len(rest), OTHER_PER_FIGURE):
            chunk = rest[i : i + OTHER_PER_FIGURE]
            part = i // OTHER_PER_FIGURE + 1
            key = "other" if part == 1 else f"other_{part}"
            title = "Other metrics" + (f" ({part})" if len(rest) > OTHER_PER_FIGURE else "")
            self.small_multiples(key, title, "other", chunk)

    # -- annotations ---------------------------------------------------------------------------
    def draw_restarts(self) -> None:
        for run, a in enumerate(self.analyses):
            axes = {id(ax): ax for (r, _), ax in self.axes_of.items() if r == run}
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
                    if self.panel_of_axes.get(id(ax)) in {
                        p.key for p in self.panels if p.section == "dashboard"
                    }:
                        ax.annotate(
                            f"restart (from {_fmt_step(from_step)})"
                            if from_step is not None
                            else "restart",
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

    def note(self, note: Note, d: DrawnFinding | None = None) -> Annotation:
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

    def keep_extremes(self, ax: Axes, run: int, metric: str, x0: float, x1: float) -> None:
        """A finding's steps are drawn in full: the y limits keep the highest and lowest
        value of its metric inside its span (a loss that rose back to 0.99 stays on the
        axis even when a start at 3.8 is cut)."""
        line = self.lines.get((run, metric))
        if line is None:
            return
        a, b = np.searchsorted(line.steps, [x0, x1 + 1])
        v = line.values[a:b]
        v = v[np.isfinite(v) & (v > 0)] if line.log else v[np.isfinite(v)]
        if v.size:
            self.keep(ax, float(v.min()))
            self.keep(ax, float(v.max()))

    def home_axes(self, run: int, f: Finding) -> Axes | None:
        candidates: list[str] = []
        if f.metric:
            candidates.append(f.metric)
            candidates.extend(FALLBACK_METRICS.get(f.metric, ()))
        candidates += ["train/loss", "val/loss"]
        for m in candidates:
            ax = self.axes_of.get((run, m))
            if ax is not None:
                return ax
        for (r, _), ax in self.axes_of.items():
            if r == run:
                return ax
        return None

    def y_at(self, run: int, metric: str, step: float) -> float | None:
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

    def draw_findings(self) -> tuple[list[DrawnFinding], list[tuple[int, int]]]:
        drawn: list[DrawnFinding] = []
        undrawn: list[tuple[int, int]] = []
        for run, a in enumerate(self.analyses):
            for i, f in enumerate(a.findings):
                ax = self.home_axes(run, f)
                if ax is None:
                    undrawn.append((run, i))
                    continue
                d = DrawnFinding(run, i, f, self.panel_of_axes[id(ax)], ax)
                self.draw_finding(d)
                drawn.append(d)
        return drawn, undrawn

    def metric_on(self, run: int, ax: Axes, preferred: str | None) -> str | None:
        if preferred and self.axes_of.get((run, preferred)) is ax:
            return preferred
        for (r, m), other in self.axes_of.items():
            if r == run and other is ax:
                return m
        return None

    def draw_finding(self, d: DrawnFinding) -> None:
        f, ax, run = d.finding, d.axes, d.run_index
        color = SEVERITY_COLORS.get(f.severity.value, SEVERITY_COLORS["info"])
        metric = self.metric_on(run, ax, f.metric)
        # several runs: the run's tag (#1, #2, … as in the legend) keeps labels short
        code = mpl_text(f.code) + (f" #{run + 1}" if self.multi else "")
        quiet = f.severity.value == "info"
        label = Note(ax, self.xlo, code, color, d.anchor, bold=not quiet, code=code, rank=_rank(f))
        ev = f.evidence
        lead, lag = _int(ev.get("lead_step")), _int(ev.get("lag_step"))
        if f.step_start is None and f.step_end is None:
            label.text = f"{code} (whole run)"
            self.note(label, d)
            return
        x0 = float(f.step_start if f.step_start is not None else f.step_end)  # type: ignore[arg-type]
        x1 = float(f.step_end if f.step_end is not None else x0)
        d.artists.append(self.draw_span(d, color, metric, x0, x1))
        if metric:
            self.keep_extremes(ax, run, metric, x0, x1)
        label.x = min(max(self._visible_span(x0, x1)[0], self.xlo), self.xhi)
        point_like = (x1 - x0) <= 0.02 * self.xspan or any(k in ev for k in PEAK_KEYS)
        at = _peak_step(ev, x0, x1, lead)
        y = self.y_at(run, metric, at) if metric else None
        if point_like and y is not None:
            (ring,) = ax.plot(
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
            self.keep(ax, y)
            # the label sits in a row along the top, with a leader line down to the ring
            label.x, label.anchor = at, (at, y)
            label.arrow = _leader(color)
        self.note(label, d)
        if lead is not None and lag is not None:
            self.draw_lead_lag(d, code, color, lead, lag)

    def draw_span(
        self, d: DrawnFinding, color: str, metric: str | None, x0: float, x1: float
    ) -> Artist:
        """The finding's steps: a shaded span, or an outline around a heatmap row."""
        ax, quiet = d.axes, d.finding.severity.value == "info"
        lo, hi = self._visible_span(x0, x1)
        row = self.heat_rows.get((d.run_index, metric)) if metric else None
        if row is not None:
            span: Artist = Rectangle(
                (lo, row - 0.5), hi - lo, 1.0, facecolor="none", edgecolor=color, lw=1.6, zorder=4
            )
            ax.add_patch(span)  # type: ignore[arg-type]
        else:
            span = ax.axvspan(lo, hi, color=color, alpha=0.08 if quiet else 0.14, lw=0, zorder=0.5)
        span.set_gid(d.anchor)
        return span

    def draw_lead_lag(
        self, d: DrawnFinding, code: str, color: str, lead: int, lag_step: int
    ) -> None:
        """The lead marker on the grad-norm panel, the lag marker on the loss panel, a
        dashed line at the lead step on both, and an arrow lead → lag on the loss panel."""
        run, gid = d.run_index, d.anchor
        grad_ax = self.axes_of.get((run, "grad_norm"))
        loss_metric = "train/loss" if (run, "train/loss") in self.axes_of else "val/loss"
        loss_ax = self.axes_of.get((run, loss_metric))
        for ax in (grad_ax, loss_ax):
            if ax is None:
                continue
            vline = ax.axvline(lead, color=color, lw=1.0, ls="--", alpha=0.9, zorder=5)
            vline.set_gid(gid)
            if ax is d.axes:
                d.artists.append(vline)
        if grad_ax is not None and grad_ax is not d.axes:
            y = self.y_at(run, "grad_norm", lead)
            if y is not None:
                (mk,) = grad_ax.plot(
                    [lead], [y], ls="none", marker="o", ms=10, mfc="none", mec=color, mew=1.6
                )
                mk.set_gid(gid)
                mk.set_zorder(8)
                self.keep(grad_ax, y)
                self.note(
                    Note(
                        grad_ax,
                        float(lead),
                        f"{code} lead",
                        color,
                        gid,
                        anchor=(lead, y),
                        arrow=_leader(color),
                    )
                )
            d.also.append((self.panel_of_axes[id(grad_ax)], grad_ax))
        if loss_ax is not None:
            self.draw_lag(d, loss_ax, loss_metric, code, color, lead, lag_step)

    def draw_lag(
        self,
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
        y = self.y_at(d.run_index, loss_metric, lag_step)
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
            self.keep(loss_ax, y)
        lag = lag_step - lead
        text = self.note(
            Note(
                loss_ax,
                float(lead),
                f"{code} lag +{lag}",
                color,
                d.anchor,
                right=lag > 0,
                anchor=xy,
                anchor_transform=where,
                arrow={
                    "arrowstyle": "->",
                    "color": color,
                    "lw": 1.2,
                    "shrinkA": 2,
                    "shrinkB": 4,
                },
            )
        )
        if loss_ax is not d.axes:
            d.also.append((self.panel_of_axes[id(loss_ax)], loss_ax))
        else:
            d.artists += [mk, text]

    def _visible_span(self, x0: float, x1: float) -> tuple[float, float]:
        """A one-step finding still gets a span a few pixels wide."""
        lo, hi = min(x0, x1), max(x0, x1)
        min_width = 0.004 * self.xspan
        if hi - lo < min_width:
            mid = (lo + hi) / 2
            lo, hi = mid - min_width / 2, mid + min_width / 2
        return lo, hi

    # -- legends -----------------------------------------------------------------------------
    def legend_entries(self, ax: Axes) -> int:
        return len([h for h in ax.get_legend_handles_labels()[1] if not h.startswith("_")])

    def legend_keys(self, panel: Panel) -> dict[str, Artist]:
        """Several runs: one entry per run (its colour), per metric (its line style, when
        the panel has several) and for raw vs smoothed lines."""
        items: dict[str, Artist] = {}
        if not self.multi:
            return items
        for run in sorted({r for (r, _) in panel.axes}):
            name = f"{mpl_text(_short(self.analyses[run].run.name, 32))} (#{run + 1})"
            items[name] = Line2D([], [], color=self.color(run, ""), lw=2.0)
        styles = self.styles.get(panel.key, {})
        if panel.section == "dashboard" and len(styles) > 1:
            for metric, ls in styles.items():
                items[mpl_text(_short(metric))] = Line2D([], [], color="#666666", ls=ls, lw=1.3)
        if panel.key in self.smoothed:
            items["raw (faint)"] = Line2D([], [], color="#666666", lw=1.0, alpha=0.4)
            items[f"EMA α={self.smoothing:g}"] = Line2D([], [], color="#666666", lw=1.8)
        return items

    def legends(self) -> None:
        for panel in self.panels:
            axes = [ax for ax in panel.figure.axes if ax.get_visible()]
            items = self.legend_keys(panel)
            for ax in axes:
                for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
                    is_series = str(h.get_gid() or "").startswith("series-")
                    if panel.section != "dashboard" and is_series and not self.multi:
                        continue  # small multiples: the title names the metric
                    items.setdefault(lab, h)
            if not items:
                continue
            if panel.section == "dashboard":
                width = sum(len(k) for k in items) / max(len(items), 1)
                axes[0].legend(
                    list(items.values()),
                    list(items),
                    loc="lower right",
                    bbox_to_anchor=(1.0, 1.0),
                    ncol=max(1, min(len(items), 5 if width < 16 else 4 if width < 24 else 3)),
                    borderaxespad=0.3,
                    handlelength=2.2,
                    columnspacing=1.4,
                )
            else:
                panel.figure.legend(
                    list(items.values()),
                    list(items),
                    loc="outside upper right",
                    ncol=min(5, len(items)),
                    fontsize=8,
                )

    def tidy_log_axes(self) -> None:
        """Label minor ticks of a log axis only when it spans about a decade or less."""
        for panel in self.panels:
            for ax in panel.figure.axes:
                if ax.get_yscale() != "log":
                    continue
                lo, hi = ax.get_ylim()
                if lo > 0 and hi / lo > 10**1.2:
                    ax.yaxis.set_minor_formatter(ticker.NullFormatter())
                else:
                    ax.yaxis.set_minor_formatter(ticker.FuncFormatter(lambda y, _: f"{y:.3g}"))
                    ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda y, _: f"{y:.3g}"))

    # -- y limits ---------------------------------------------------------------------------
    def apply_limits(self) -> None:
        """Robust y limits on every axes with lines (:func:`~trainlens.report.limits.robust_ylim`),
        what falls outside marked on the edge. Rings, markers and the best-val star stay in."""
        groups: dict[int, tuple[Axes, list[tuple[int, str]]]] = {}
        for key in self.lines:
            ax = self.axes_of[key]
            groups.setdefault(id(ax), (ax, []))[1].append(key)
        for ax, keys in groups.values():
            if any(m in UNCLIPPED for _, m in keys):
                continue
            lines = [self.lines[k] for k in keys]
            arrays = [a for ln in lines for a in (ln.values, *(v for _, v in ln.superseded))]
            log = ax.get_yscale() == "log"
            lim = robust_ylim(arrays, log=log, keep=self.keep_y.get(id(ax), []))
            if lim is None:
                continue
            ax.set_ylim(*lim)
            for key in keys:
                self.mark_clipped(ax, key, lim, named=len(keys) > 1)

    def mark_clipped(
        self, ax: Axes, key: tuple[int, str], lim: tuple[float, float], *, named: bool
    ) -> None:
        """Hollow triangles on the edge at the steps whose values are beyond the axis
        (one per pixel column), and a label with how many and the most extreme."""
        run, metric = key
        line = self.lines[key]
        s = np.concatenate([line.steps, *(ss for ss, _ in line.superseded)])
        v = np.concatenate([line.values, *(sv for _, sv in line.superseded)])
        edge = transforms.blended_transform_factory(ax.transData, ax.transAxes)
        finite = np.isfinite(v) & (v > 0) if line.log else np.isfinite(v)
        who = mpl_text(_short(metric, 24)) + " " if named else ""
        if self.multi:
            who = f"#{run + 1} {who}"
        for side, mask, y, marker in (
            ("above", finite & (v > lim[1]), 1.0, "^"),
            ("below", finite & (v < lim[0]), 0.0, "v"),
        ):
            if not mask.any():
                continue
            steps = first_per_bucket(np.sort(s[mask]), line.buckets, lo=self.xlo, hi=self.xhi)
            gid = f"clipped-{run}-{metric}-{side}"
            (art,) = ax.plot(
                steps,
                np.full(steps.size, y),
                ls="none",
                marker=marker,
                ms=5,
                mfc="white",
                mec=line.color,
                mew=1.2,
                transform=edge,
                clip_on=False,
                zorder=6,
            )
            art.set_gid(gid)
            vals, at = v[mask], s[mask]
            i = int(np.argmax(vals) if side == "above" else np.argmin(vals))
            arrow, count = ("▲", int(mask.sum())) if side == "above" else ("▼", int(mask.sum()))
            extreme = f"{'max' if side == 'above' else 'min'} {vals[i]:.4g} @ {_fmt_step(at[i])}"
            text = f"{who}{arrow} {extreme}" + (f" ({count:,} {side})" if count > 1 else "")
            self.note(Note(ax, float(at[i]), text, line.color, gid, bold=False))
            cut = lim[1] if side == "above" else lim[0]
            run_name = f" of {self.analyses[run].run.name}" if self.multi else ""
            self.caption(
                self.panel_of_axes[id(ax)],
                f"y axis cut at {cut:.4g}: {count:,} {metric}{run_name} value(s) {side} it "
                f"({extreme}), marked {arrow} on the edge",
            )

    def caption(self, key: str, text: str) -> None:
        """A line under the panel (escaped by the HTML writer), once."""
        panel = next(p for p in self.panels if p.key == key)
        if text not in panel.notes:
            panel.notes.append(text)

    def note_gaps(self, panel: Panel, run: int, steps: np.ndarray, gaps: np.ndarray) -> None:
        """Name the unlogged stretches a reader would otherwise take for missing lines."""
        if gaps.size == 0:
            return
        spans = [f"{_fmt_step(steps[i] + 1)}–{_fmt_step(steps[i + 1] - 1)}" for i in gaps[:6]]
        more = f" and {gaps.size - 6} more" if gaps.size > 6 else ""
        run_name = f" in {self.analyses[run].run.name}" if self.multi else ""
        self.caption(
            panel.key,
            f"no steps logged{run_name} at {', '.join(spans)}{more}: the lines break there",
        )

    def place_labels(self) -> None:
        """Place every label once each figure's layout is settled; a finding's label is
        its own or, when merged with its neighbours', the one they share."""
        by_fig: dict[int, tuple[Figure, list[Note]]] = {}
        for n in self.notes:
            fig = n.ax.get_figure(root=True)
            assert isinstance(fig, Figure)
            by_fig.setdefault(id(fig), (fig, []))[1].append(n)
        for fig, notes in by_fig.values():
            for n in place_figure(fig, notes):
                for d in n.members:
                    d.label = n.artist
                    d.artists.append(n.artist)

    def build(self) -> Figures:
        self.loss_panel()
        self.line_panel("grad_norm", "Gradient norm (pre-clip)", ["grad_norm"], log=True)
        self.lr_panel()
        self.throughput_panel()
        self.line_panel("update_ratio", "Update / weight ratio", ["update_ratio"], log=True)
        self.line_panel("entropy", "Output entropy", ["entropy"])
        self.memory_panel()
        taken = {m for (_, m) in self.axes_of}
        taken |= self.tensor_panels()
        self.other_panels(taken)
        self.draw_restarts()
        drawn, undrawn = self.draw_findings()
        self.apply_limits()
        self.tidy_log_axes()
        self.legends()
        self.place_labels()
        return Figures(self.panels, drawn, undrawn)


def _leader(color: str) -> dict[str, Any]:
    """A thin line from a label in the top rows down to the ring it names."""
    return {"arrowstyle": "-", "color": color, "lw": 0.7, "alpha": 0.6, "shrinkA": 0, "shrinkB": 5}


def _rank(f: Finding) -> int:
    return {"error": 2, "warning": 1}.get(f.severity.value, 0)


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


def _compact(x: float) -> str:
    ax = abs(x)
    if ax >= 1e6:
        return f"{x / 1e6:g}M"
    if ax >= 1e4:
        return f"{x / 1e3:g}k"
    return f"{x:g}"


def build_figures(analyses: Sequence[Analysis], *, smoothing: float | None = None) -> Figures:
    """Every panel of the report as a Figure, with every finding drawn on it.

    ``smoothing``: the weight α of the newest value in a debiased EMA (0 < α ≤ 1; 0.05 is
    roughly TensorBoard's 0.95 slider), drawn over the raw line; None draws raw values only.
    """
    if smoothing is not None and not 0 < smoothing <= 1:
        raise ValueError(f"smoothing must be in (0, 1], not {smoothing}")
    with style():
        return _Builder(analyses, smoothing).build()


__all__ = [
    "DPI",
    "DrawnFinding",
    "Figures",
    "Panel",
    "build_figures",
    "run_series",
    "style",
    "summary_mfu",
]
