"""Panels of many metrics: small multiples (one axes per metric) for per-tensor signals
and every metric without a dashboard panel, and a heatmap (tensor × step, log10 of the
max per step bucket) when there are more tensors than small multiples can show."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import polars as pl
from matplotlib.axes import Axes
from matplotlib.colors import Colormap, LinearSegmentedColormap
from matplotlib.figure import Figure

from trainlens.report.canvas import Canvas, row_height
from trainlens.report.decimate import bucket_ids
from trainlens.report.lines import plot
from trainlens.report.model import Panel
from trainlens.report.theme import DPI, NONFINITE_COLOR, UNITS, mpl_text, natural_key, short

SMALL_COLS = 3
SMALL_ROW_IN = 2.3
SMALL_BUCKETS = 360
OTHER_PER_FIGURE = 24
MAX_TENSOR_MULTIPLES = 12  # more tensors than this: a heatmap
HEATMAP_BUCKETS = 500
TENSOR_FAMILIES = {
    "grad_norm": ("tensors_grad_norm", "Per-tensor gradient norms", "‖g‖₂"),
    "update_ratio": ("tensors_update_ratio", "Per-tensor update/weight ratios", "‖Δw‖ / ‖w‖"),
}


def small_multiples(
    c: Canvas,
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
    fig = c.new_figure(0.5 + rows * SMALL_ROW_IN, title)
    panel = c.add_panel(key, title, section, fig)
    grid = fig.subplots(rows, cols, squeeze=False, sharex=True)
    for i, ax in enumerate(grid.flat):
        if i >= len(metrics):
            ax.set_visible(False)
            continue
        _one_multiple(c, panel, ax, metrics[i], log=log, ylabel=ylabel, cols=cols)
        c.x_axis(ax, label=i >= len(metrics) - cols)
        ax.tick_params(labelbottom=True)
    return panel


def _one_multiple(
    c: Canvas, panel: Panel, ax: Axes, m: str, *, log: bool, ylabel: str | None, cols: int
) -> None:
    """One metric of every run on its own axes, titled with the metric's name."""
    use_log = log and c.any_positive([m])
    for run in range(len(c.analyses)):
        plot(
            c,
            panel,
            ax,
            run,
            m,
            log=use_log,
            buckets=SMALL_BUCKETS * SMALL_COLS // cols,
            generic=True,
            label=c.run_name(run, 28) if c.multi else mpl_text(short(m)),
        )
    if use_log:
        ax.set_yscale("log")
    ax.set_title(mpl_text(short(m, 60)), loc="left", fontsize=8.5)
    unit = ylabel if ylabel is not None else UNITS.get(m, "")
    if unit:
        ax.set_ylabel(unit, fontsize=8)


#: "no data" on a heatmap: a warm grey no value maps to. The scale starts near white
#: (#DEEBF7), so white had meant both "low" and "not logged" — a tensor logged every 10
#: steps drew as white barcode stripes
NO_DATA_COLOR = "#B8B0A8"
#: a cell with no value of its own holds the last logged value while the next comes
#: within this many times the row's median logging interval (the line plots' gap rule)
HOLD_INTERVALS = 5


def _heat_cmap() -> Colormap:
    return LinearSegmentedColormap.from_list(
        "quiet", ["#DEEBF7", "#9ECAE1", "#4292C6", "#08519C", "#08306B"]
    ).with_extremes(under="#111111", bad=NO_DATA_COLOR)


def hold_sparse(grid: np.ndarray, steps: list[np.ndarray], width: float) -> np.ndarray:
    """Fill a row's empty buckets between two logged ones from the left, when the two
    are within :data:`HOLD_INTERVALS` of the row's median logging interval (``steps``:
    each row's logged steps; ``width``: a bucket in steps). A series logged every 10
    steps on 2-step buckets is then a solid band, and a real gap stays "no data"."""
    out = grid.copy()
    cols = np.arange(grid.shape[1])
    for r, s in enumerate(steps):
        if s.size < 2:
            continue
        interval = float(np.median(np.diff(s)))
        has = ~np.isnan(grid[r])
        if interval <= width or not has.any():
            continue
        prev = np.maximum.accumulate(np.where(has, cols, -1))
        nxt = np.minimum.accumulate(np.where(has, cols, grid.shape[1])[::-1])[::-1]
        fill = ~has & (prev >= 0) & (nxt < grid.shape[1])
        fill &= (nxt - prev) * width <= HOLD_INTERVALS * interval
        out[r, fill] = grid[r, prev[fill]]
    return out


def heatmap(c: Canvas, family: str, metrics: Sequence[str]) -> None:
    """One heatmap per run holding any of these tensors, rows in natural order."""
    key, title, unit = TENSOR_FAMILIES[family]
    runs = [r for r in range(len(c.analyses)) if any(m in c.series[r] for m in metrics)]
    wanted = min(10.0, max(2.4, 0.13 * len(metrics) + 0.9))
    per_run_in = row_height(len(runs), wanted, 0.4)  # 64 runs: 0.62 in each
    heading = f"{title} (log10, max per step bucket; black = exactly 0, grey = not logged)"
    fig = c.new_figure(0.5 + per_run_in * len(runs), heading)
    panel = c.add_panel(key, title, "tensors", fig)
    axes = fig.subplots(len(runs), 1, squeeze=False, sharex=True)[:, 0]
    row_of = {m: i for i, m in enumerate(metrics)}
    cmap = _heat_cmap()
    for ax, run in zip(axes, runs, strict=True):
        _heat_axes(c, fig, ax, run, metrics, row_of, cmap, unit, per_run_in)
        c.x_axis(ax, label=ax is axes[-1])
        for m in metrics:
            if m in c.series[run]:
                c.register(panel, run, m, ax)
                c.heat_rows[(run, m)] = row_of[m]


def _heat_axes(
    c: Canvas,
    fig: Figure,
    ax: Axes,
    run: int,
    metrics: Sequence[str],
    row_of: dict[str, int],
    cmap: Colormap,
    unit: str,
    height_in: float,
) -> None:
    """One run's heatmap with its colour bar, NaN / Inf crosses and tensor names."""
    n = len(metrics)
    grid, bad, zero = heat_grid(c, run, metrics, row_of)
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
        extent=(c.xlo, c.xhi, n - 0.5, -0.5),
    )
    cb = fig.colorbar(img, ax=ax, pad=0.01, fraction=0.04)
    cb.set_label(f"log10 {unit}", fontsize=8)
    rows, cols = np.nonzero(bad)
    if rows.size:
        width = c.xspan / HEATMAP_BUCKETS
        ax.plot(
            c.xlo + (cols + 0.5) * width,
            rows,
            ls="none",
            marker="x",
            ms=4,
            color=NONFINITE_COLOR,
            label="NaN / Inf",
        )
    # as many names as fit at 7 pt (about 10 px a line) in the axes' height: 64 runs'
    # heatmaps of 0.62 in each wrote 14 names over each other
    step = max(1, math.ceil(n / min(40, max(1, int(height_in * 0.75 * DPI / 10)))))
    ax.set_yticks(range(0, n, step))
    ax.set_yticklabels(
        [mpl_text(short(metrics[i].split("/", 1)[1], 36)) for i in range(0, n, step)],
        fontsize=7,
    )
    ax.grid(False)
    if c.multi:
        ax.set_title(mpl_text(c.analyses[run].run.name), loc="left", fontsize=9)


def heat_grid(
    c: Canvas, run: int, metrics: Sequence[str], row_of: dict[str, int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rows × buckets) of log10 max, any non-finite, and all-zero, vectorized."""
    b = HEATMAP_BUCKETS
    frame = (
        c.analyses[run]
        .run.standing()
        .filter(pl.col("metric").is_in(list(metrics)))
        .select("metric", "step", "value")
    )
    ids = bucket_ids(frame.get_column("step").to_numpy(), b, c.xlo, c.xhi)
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
    col = agg.get_column("bucket").to_numpy()
    grid[r, col] = agg.get_column("top").fill_null(np.nan).to_numpy()
    bad[r, col] = agg.get_column("bad").to_numpy()
    zero[r, col] = agg.get_column("zero").to_numpy()
    # a bucket of zeros holds black to its right like any value; one of only NaN/Inf
    # (its × marks it) holds "no data": sentinels through the hold, -inf and +inf
    marked = np.where(zero & np.isnan(grid), -np.inf, grid)
    marked = np.where(bad & np.isnan(marked), np.inf, marked)
    per_row = frame.partition_by("metric", as_dict=True)
    steps = [np.empty(0)] * len(metrics)
    for key, part in per_row.items():
        steps[row_of[str(key[0])]] = np.unique(part.get_column("step").to_numpy())
    held = hold_sparse(marked, steps, c.xspan / b)
    zero |= np.isneginf(held)
    return np.where(np.isinf(held), np.nan, held), bad, zero


def tensor_panels(c: Canvas) -> set[str]:
    """Per-tensor families (``grad_norm/<tensor>``, …); returns the metrics drawn."""
    used: set[str] = set()
    for family, (key, title, unit) in TENSOR_FAMILIES.items():
        prefix = family + "/"
        metrics = sorted({m for m in c.all_metrics() if m.startswith(prefix)}, key=natural_key)
        if not metrics:
            continue
        used.update(metrics)
        if len(metrics) > MAX_TENSOR_MULTIPLES:
            heatmap(c, family, metrics)
        else:
            small_multiples(c, key, title, "tensors", metrics, log=True, ylabel=unit)
    return used


def other_panels(c: Canvas, taken: set[str]) -> None:
    """Every metric no other panel drew, :data:`OTHER_PER_FIGURE` to a figure."""
    rest = sorted((m for m in c.all_metrics() if m not in taken), key=natural_key)
    for i in range(0, len(rest), OTHER_PER_FIGURE):
        chunk = rest[i : i + OTHER_PER_FIGURE]
        part = i // OTHER_PER_FIGURE + 1
        key = "other" if part == 1 else f"other_{part}"
        title = "Other metrics" + (f" ({part})" if len(rest) > OTHER_PER_FIGURE else "")
        small_multiples(c, key, title, "other", chunk)
