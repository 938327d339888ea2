"""One series on one axes, as the report draws every series: decimated per pixel column
(min and max kept), broken where steps were not logged, NaN / ±Inf and values off a log
scale marked on the edge, superseded segments faint, and the EMA over the raw line when
smoothing is asked for."""

from __future__ import annotations

import numpy as np
from matplotlib import transforms
from matplotlib.axes import Axes

from trainlens.core.dataclass import dataclass
from trainlens.core.stats import ema
from trainlens.report.canvas import MAIN_BUCKETS, Canvas, Line
from trainlens.report.decimate import decimate, first_per_bucket, nonfinite_marks, with_gaps
from trainlens.report.limits import gap_breaks, isolated, step_gaps
from trainlens.report.model import Panel, Series
from trainlens.report.theme import NONFINITE_COLOR, fmt_step, mpl_text, short

SMOOTH_MIN_POINTS = 50  # shorter series (e.g. val every N steps) are not smoothed
POINT_MARKERS_BELOW = 150  # sparse series get a dot per value


@dataclass
class _Pen:
    """How one series is drawn."""

    color: str
    linestyle: str
    label: str
    buckets: int


def _scaled(ser: Series, scale: float, log: bool, color: str, buckets: int) -> Line:
    v = ser.values * scale if scale != 1.0 else ser.values
    sup = [(ss, sv * scale if scale != 1.0 else sv) for ss, sv in ser.superseded]
    return Line(ser.steps, v, log, color, buckets, sup)


def plot(
    c: Canvas,
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
    ser = c.series[run].get(metric)
    if ser is None:
        return
    c.register(panel, run, metric, ax)
    color = c.color(run, metric)
    label = c.label(run, metric) if label is None else label
    c.styles.setdefault(panel.key, {})[metric] = linestyle
    if c.multi:
        # several runs: the legend names runs (colours) and metrics (line styles)
        label, generic = "_nolegend_", True
    line = c.lines[(run, metric)] = _scaled(ser, scale, log, color, buckets)
    s, v = line.steps, line.values
    finite = np.isfinite(v)
    drawable = finite & (v > 0) if log else finite
    marks = nonfinite_marks(s, v, buckets, lo=c.xlo, hi=c.xhi)
    off_scale = first_per_bucket(s[finite & ~drawable], buckets, lo=c.xlo, hi=c.xhi)
    gaps = step_breaks(c, s, buckets)
    note_gaps(c, panel, run, s, gaps)
    breaks = np.concatenate([*marks.values(), off_scale, gap_breaks(s, gaps)])
    _draw_raw(
        c,
        panel,
        ax,
        run,
        metric,
        line,
        drawable,
        breaks,
        gaps,
        _Pen(color, linestyle, label, buckets),
    )
    _draw_superseded(c, ax, run, metric, line)
    mark_nonfinite(ax, run, metric, marks, off_scale, generic=generic)


def _draw_raw(
    c: Canvas,
    panel: Panel,
    ax: Axes,
    run: int,
    metric: str,
    line: Line,
    drawable: np.ndarray,
    breaks: np.ndarray,
    gaps: np.ndarray,
    pen: _Pen,
) -> None:
    """The standing values (faint when an EMA goes over them), dots where sparse."""
    s, v = line.steps, line.values
    n = int(drawable.sum())
    ds, dv = decimate(s[drawable], v[drawable], pen.buckets, lo=c.xlo, hi=c.xhi)
    ds2, dv2 = with_gaps(ds, dv, np.unique(breaks))
    smooth = c.smoothing is not None and n >= SMOOTH_MIN_POINTS
    if smooth:
        c.smoothed.add(panel.key)
    sparse = n < POINT_MARKERS_BELOW
    if not sparse:
        mark_isolated(c, ax, run, metric, s, v, drawable, gaps)
    (raw,) = ax.plot(
        ds2,
        dv2,
        color=pen.color,
        lw=1.0 if not sparse else 1.1,
        ls=pen.linestyle,
        alpha=0.4 if smooth else 0.95,
        label=pen.label + (" (raw)" if smooth and not c.multi else ""),
        marker="o" if sparse else None,
        ms=2.8,
        zorder=2,
    )
    raw.set_gid(f"series-{run}-{metric}")
    if smooth:
        plot_ema(c, ax, s[drawable], v[drawable], gap_breaks(s, gaps), pen)


def _draw_superseded(c: Canvas, ax: Axes, run: int, metric: str, line: Line) -> None:
    """Segments a restart replaced: faint and dotted, under the standing line."""
    for i, (ss, sv) in enumerate(line.superseded):
        ok = np.isfinite(sv) & (sv > 0) if line.log else np.isfinite(sv)
        xs, ys = decimate(ss[ok], sv[ok], line.buckets, lo=c.xlo, hi=c.xhi)
        (faint,) = ax.plot(
            xs,
            ys,
            color=line.color,
            lw=0.9,
            ls=":",
            alpha=0.45,
            zorder=1,
            label="superseded (before restart)" if i == 0 else "_nolegend_",
        )
        faint.set_gid(f"superseded-{run}-{metric}")


def plot_ema(
    c: Canvas, ax: Axes, s: np.ndarray, v: np.ndarray, breaks: np.ndarray, pen: _Pen
) -> None:
    """The debiased EMA over the raw line, broken where the steps have gaps."""
    assert c.smoothing is not None
    es, ev = decimate(s, ema(v, c.smoothing), pen.buckets, lo=c.xlo, hi=c.xhi)
    es, ev = with_gaps(es, ev, breaks)
    ax.plot(
        es,
        ev,
        color=pen.color,
        lw=1.8,
        ls=pen.linestyle,
        zorder=3,
        label="_nolegend_" if c.multi else f"{pen.label} · EMA α={c.smoothing:g}",
    )


def step_breaks(c: Canvas, steps: np.ndarray, buckets: int) -> np.ndarray:
    """Where the steps jump far beyond their usual interval (an excerpt, a resumed
    log): the line breaks there rather than drawing a straight line over steps that
    were never logged. Gaps narrower than a bucket (a pixel column) are not drawn."""
    return step_gaps(steps, min_gap=c.xspan / buckets)


def note_gaps(c: Canvas, panel: Panel, run: int, steps: np.ndarray, gaps: np.ndarray) -> None:
    """Name the unlogged stretches a reader would otherwise take for missing lines."""
    if gaps.size == 0:
        return
    spans = [f"{fmt_step(steps[i] + 1)}–{fmt_step(steps[i + 1] - 1)}" for i in gaps[:6]]
    more = f" and {gaps.size - 6} more" if gaps.size > 6 else ""
    run_name = f" in {c.analyses[run].run.name}" if c.multi else ""
    c.caption(
        panel.key,
        f"no steps logged{run_name} at {', '.join(spans)}{more}: the lines break there",
    )


def mark_isolated(
    c: Canvas,
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
            color=c.color(run, metric),
            zorder=2,
        )
        dots.set_gid(f"isolated-{run}-{metric}")


# kind -> (y on the axes, marker, legend name)
_NONFINITE = {"nan": (0.0, "x", "NaN"), "+inf": (1.0, "^", "+Inf"), "-inf": (0.0, "v", "−Inf")}


def mark_nonfinite(
    ax: Axes,
    run: int,
    metric: str,
    marks: dict[str, np.ndarray],
    off_scale: np.ndarray,
    *,
    generic: bool = False,
) -> None:
    """NaN / ±Inf on the edge in red (never a silent gap), values ≤ 0 of a log axis in
    grey on the bottom edge."""
    where = "" if generic else f" in {mpl_text(short(metric))}"
    edge = transforms.blended_transform_factory(ax.transData, ax.transAxes)
    for kind, steps in marks.items():
        y, marker, name = _NONFINITE[kind]
        gid = f"nonfinite-{run}-{metric}-{kind}"
        _edge_marks(ax, edge, steps, y, marker, NONFINITE_COLOR, f"{name}{where}", gid)
    if off_scale.size:
        label = f"≤ 0 (off the log scale){where}"
        _edge_marks(ax, edge, off_scale, 0.0, "|", "#777777", label, f"offscale-{run}-{metric}")


def _edge_marks(
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
