"""Legends and axis tick labels, settled once every panel is drawn.

One run: each line names its metric. Several runs: one entry per run (its colour), per
metric (its line style, where a panel has several) and for raw vs smoothed lines.
"""

from __future__ import annotations

from matplotlib import ticker
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.lines import Line2D

from trainlens.report.canvas import MANY_RUNS, Canvas
from trainlens.report.model import Panel
from trainlens.report.theme import mpl_text, short


def legend_keys(c: Canvas, panel: Panel) -> dict[str, Artist]:
    """Several runs: one entry per run (its colour), per metric (its line style, when
    the panel has several) and for raw vs smoothed lines."""
    items: dict[str, Artist] = {}
    if not c.multi:
        return items
    runs = sorted({r for (r, _) in panel.axes})
    if len(c.analyses) > MANY_RUNS and panel.section != "dashboard":
        return items  # a heatmap or small multiple per run is titled with it
    if len(c.analyses) > MANY_RUNS:
        # 64 entries covered the plot, and 10 colours repeat: the runs are named on the
        # panel of one axes per run, and in the table of finals
        items[f"{len(runs)} runs, one colour each"] = Line2D([], [], color="#999999", lw=2.0)
        runs = []
    for run in runs:
        name = f"{c.run_name(run, 32)} (#{run + 1})"
        items[name] = Line2D([], [], color=c.color(run, ""), lw=2.0)
    styles = c.styles.get(panel.key, {})
    if panel.section == "dashboard" and len(styles) > 1:
        for metric, ls in styles.items():
            items[mpl_text(short(metric))] = Line2D([], [], color="#666666", ls=ls, lw=1.3)
    if panel.key in c.smoothed:
        items["raw (faint)"] = Line2D([], [], color="#666666", lw=1.0, alpha=0.4)
        items[f"EMA α={c.smoothing:g}"] = Line2D([], [], color="#666666", lw=1.8)
    return items


def _entries(c: Canvas, panel: Panel, axes: list[Axes]) -> dict[str, Artist]:
    """The panel's legend entries: the run keys, then each labelled artist once."""
    items = legend_keys(c, panel)
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            is_series = str(h.get_gid() or "").startswith("series-")
            if panel.section != "dashboard" and is_series and not c.multi:
                continue  # small multiples: the title names the metric
            items.setdefault(lab, h)
    return items


def legends(c: Canvas) -> None:
    """A dashboard panel's legend sits above its axes, right-aligned, in as many columns
    as its entries' length allows; a multiples panel's on the figure, top right."""
    for panel in c.panels:
        if panel.section == "runs":
            continue  # each axes is titled with its run
        axes = [ax for ax in panel.figure.axes if ax.get_visible()]
        items = _entries(c, panel, axes)
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


def tidy_log_axes(c: Canvas) -> None:
    """Label minor ticks of a log axis only when it spans about a decade or less."""
    for panel in c.panels:
        for ax in panel.figure.axes:
            if ax.get_yscale() != "log":
                continue
            lo, hi = ax.get_ylim()
            if lo > 0 and hi / lo > 10**1.2:
                ax.yaxis.set_minor_formatter(ticker.NullFormatter())
            else:
                ax.yaxis.set_minor_formatter(ticker.FuncFormatter(lambda y, _: f"{y:.3g}"))
                ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda y, _: f"{y:.3g}"))
