"""The dashboard: one wide panel per signal — loss (with perplexity and the best
validation step), gradient norm, learning rate against its declared schedule,
throughput and MFU, update/weight ratio, entropy, memory."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from matplotlib import ticker
from matplotlib.axes import Axes

from trainlens.core.schedules import declared_lr
from trainlens.report.canvas import MAIN_BUCKETS, Canvas
from trainlens.report.limits import spans_decades
from trainlens.report.lines import plot
from trainlens.report.model import Panel, summary_mfu
from trainlens.report.theme import (
    DECLARED_COLOR,
    LINESTYLES,
    UNITS,
    fmt_step,
    mpl_text,
    natural_key,
)

MAIN_HEIGHT_IN = 3.7
MEMORY_METRICS = ("mem/allocated", "mem/reserved", "mem/rss")
GIB = float(2**30)


def main_panel(c: Canvas, key: str, title: str) -> tuple[Panel, Axes]:
    fig = c.new_figure(MAIN_HEIGHT_IN, title)
    ax = fig.add_subplot()
    panel = c.add_panel(key, title, "dashboard", fig)
    c.x_axis(ax)
    return panel, ax


def line_panel(
    c: Canvas,
    key: str,
    title: str,
    metrics: Sequence[str],
    *,
    log: bool = False,
    scale: float = 1.0,
    ylabel: str | None = None,
) -> tuple[Panel, Axes] | None:
    """A panel of these metrics on one axes (one line style per metric when several runs
    share it); a log axis when asked for and something can be drawn on one."""
    if not c.has_any(*metrics):
        return None
    panel, ax = main_panel(c, key, title)
    log = log and c.any_positive(metrics)
    for run in range(len(c.analyses)):
        for j, m in enumerate(metrics):
            linestyle = LINESTYLES[j % len(LINESTYLES)] if c.multi else "-"
            plot(c, panel, ax, run, m, scale=scale, log=log, linestyle=linestyle)
    if log:
        ax.set_yscale("log")
    ax.set_ylabel(ylabel or UNITS.get(metrics[0], ""))
    return panel, ax


def loss_panel(c: Canvas) -> None:
    metrics = ["train/loss", "val/loss"]
    metrics += sorted({m for m in c.all_metrics() if m.startswith("val/loss/")}, key=natural_key)
    made = line_panel(c, "loss", "Loss", metrics)
    if made is None:
        return
    _, ax = made
    perplexity_axis(c, ax)
    best_val_stars(c, ax)


def best_val_stars(c: Canvas, ax: Axes) -> None:
    """A star at each run's best validation loss (from the summary)."""
    for run, a in enumerate(c.analyses):
        val = a.summary.get("val_loss") or {}
        best, step = val.get("best"), val.get("best_step")
        if best is None or step is None or (run, "val/loss") not in c.axes_of:
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
            label="best val (per run)" if c.multi else f"best val {best:.4g} @ {fmt_step(step)}",
        )
        star.set_gid(f"best-val-{run}")
        c.keep(ax, float(best))


def _to_ppl(x: Any) -> Any:
    with np.errstate(over="ignore", invalid="ignore"):
        return np.exp(np.clip(x, -50, 50))


def _to_loss(x: Any) -> Any:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(np.clip(x, 1e-300, None))


class _PerplexityLocator(ticker.LogLocator):
    """Log-spaced perplexity ticks; none while the secondary axis has no limits of its own
    yet. Walking a figure's artists before it is drawn (the report's text guard) asks the
    locator for ticks over the axis' default (0, 1), where LogLocator raises "Data cannot
    be log-scaled" — every LM run's report ended in that internal error."""

    def tick_values(self, vmin: float, vmax: float) -> Any:
        if not (vmin > 0 and vmax > 0):
            return np.array([])
        return super().tick_values(vmin, vmax)


def perplexity_axis(c: Canvas, ax: Axes) -> None:
    """Perplexity = exp(loss) on a right-hand axis, where the summary gives one (the one
    rule for a per-token LM loss: :func:`trainlens.summary.perplexity_basis`)."""
    if not all((a.summary.get("perplexity") or {}).get("shown") for a in c.analyses):
        return
    vals = [line.values for key, line in c.lines.items() if c.axes_of.get(key) is ax]
    finite = np.concatenate([v[np.isfinite(v)] for v in vals]) if vals else np.empty(0)
    if finite.size == 0 or finite.min() <= 0 or finite.max() > 20:
        return
    sec = ax.secondary_yaxis("right", functions=(_to_ppl, _to_loss))
    sec.yaxis.set_major_locator(_PerplexityLocator(base=10, subs=(1.0, 2.0, 5.0)))
    sec.yaxis.set_minor_locator(ticker.NullLocator())
    sec.yaxis.set_major_formatter(ticker.FuncFormatter(lambda x, _: f"{x:g}"))
    sec.set_ylabel("perplexity = exp(loss)", color="#666666")
    sec.tick_params(colors="#666666", labelsize=8)
    sec.spines["right"].set_visible(True)
    sec.spines["right"].set_color("#bbbbbb")


def lr_panel(c: Canvas) -> None:
    lrs = [ser["lr"].values for ser in c.series if "lr" in ser]
    title = "Learning rate: realized vs declared"
    made = line_panel(c, "lr", title, ["lr"], log=spans_decades(lrs))
    if made is None:
        return
    panel, ax = made
    for run, a in enumerate(c.analyses):
        schedule = a.context.schedule
        if not schedule or (run, "lr") not in c.axes_of:
            continue
        curve = declared_curve(c, schedule, run)
        if isinstance(curve, str):
            panel.notes.append(curve)
            continue
        xs, ys = curve
        shape = str(schedule.get("shape", "declared"))
        (decl,) = ax.plot(
            xs,
            ys,
            color=DECLARED_COLOR if not c.multi else c.color(run, "lr"),
            lw=1.1,
            ls=(0, (4, 3)),
            alpha=0.85,
            zorder=4,
            label="declared schedule" if c.multi else f"declared ({mpl_text(shape)})",
        )
        decl.set_gid(f"declared-lr-{run}")


def declared_curve(
    c: Canvas, schedule: dict[str, Any], run: int
) -> tuple[np.ndarray, np.ndarray] | str:
    """The declared LR over the logged steps, or why it is not drawn."""
    steps = c.series[run]["lr"].steps
    if steps.size == 0:
        return "the declared schedule is not drawn: lr has no values"
    lo, hi = int(steps.min()), int(steps.max())
    grid = np.unique(np.linspace(lo, hi, 2 * MAIN_BUCKETS).round().astype(np.int64))
    try:
        ys = np.asarray(declared_lr(schedule, grid), dtype=np.float64)
    except (ValueError, KeyError, TypeError) as exc:
        return f"the declared schedule is not drawn: {exc}"
    return grid, ys


def throughput_panel(c: Canvas) -> None:
    """Tokens (else samples) per second, and MFU on a right-hand axis from 0: the
    logged series, else the summary's figure as a dashed level."""
    left = "tokens_per_sec" if c.has_any("tokens_per_sec") else "samples_per_sec"
    mfu_known = [summary_mfu(a.summary) for a in c.analyses]
    if not c.has_any(left, "mfu"):
        return
    title = "Throughput" + (" and MFU" if c.has_any("mfu") or any(mfu_known) else "")
    panel, ax = main_panel(c, "throughput", title)
    for run in range(len(c.analyses)):
        plot(c, panel, ax, run, left)
    ax.set_ylabel(UNITS[left])
    if c.has_any("mfu") or any(m is not None for m in mfu_known):
        _mfu_axis(c, panel, ax, mfu_known)


def _mfu_axis(c: Canvas, panel: Panel, ax: Axes, mfu_known: list[float | None]) -> None:
    twin = ax.twinx()
    twin.grid(False)
    twin.spines["right"].set_visible(True)
    for run in range(len(c.analyses)):
        plot(c, panel, twin, run, "mfu", scale=100.0, linestyle="--")
        m = mfu_known[run]
        if m is not None and (run, "mfu") not in c.axes_of:
            twin.axhline(
                m * 100,
                color=c.color(run, "mfu"),
                lw=1.0,
                ls=(0, (4, 3)),
                label=f"MFU {m:.1%} (summary)",
            )
    twin.set_ylabel(UNITS["mfu"])
    twin.set_ylim(bottom=0)
    c.panel_of_axes[id(twin)] = panel.key


def memory_panel(c: Canvas) -> None:
    ylabel = "GiB (2³⁰ bytes)"
    line_panel(c, "memory", "Memory", list(MEMORY_METRICS), scale=1.0 / GIB, ylabel=ylabel)


def dashboard(c: Canvas) -> None:
    """Every dashboard panel the runs have metrics for, in the report's order."""
    loss_panel(c)
    line_panel(c, "grad_norm", "Gradient norm (pre-clip)", ["grad_norm"], log=True)
    lr_panel(c)
    throughput_panel(c)
    line_panel(c, "update_ratio", "Update / weight ratio", ["update_ratio"], log=True)
    line_panel(c, "entropy", "Output entropy", ["entropy"])
    memory_panel(c)
