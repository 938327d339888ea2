"""Robust y limits on every axes with lines (:func:`~trainlens.report.limits.robust_ylim`
decides them), and what falls outside marked on the edge: hollow triangles at its steps,
a label with the most extreme value, and a caption under the panel. Rings, markers and
the best-val star stay inside (:meth:`Canvas.keep <trainlens.report.canvas.Canvas.keep>`).
"""

from __future__ import annotations

import numpy as np
from matplotlib import transforms
from matplotlib.axes import Axes

from trainlens.report.canvas import Canvas, Line
from trainlens.report.decimate import first_per_bucket
from trainlens.report.labels import Note
from trainlens.report.limits import robust_ylim
from trainlens.report.theme import fmt_step, mpl_text, short

# schedules: every value is planned, the extremes are the point; MFU's axis starts at 0
UNCLIPPED = frozenset({"lr", "mfu"})


def apply_limits(c: Canvas) -> None:
    """Robust y limits on every axes with lines, what falls outside marked on the edge."""
    groups: dict[int, tuple[Axes, list[tuple[int, str]]]] = {}
    for key in c.lines:
        ax = c.axes_of[key]
        groups.setdefault(id(ax), (ax, []))[1].append(key)
    for ax, keys in groups.values():
        if any(m in UNCLIPPED for _, m in keys):
            continue
        lines = [c.lines[k] for k in keys]
        arrays = [a for ln in lines for a in (ln.values, *(v for _, v in ln.superseded))]
        log = ax.get_yscale() == "log"
        lim = robust_ylim(arrays, log=log, keep=c.keep_y.get(id(ax), []))
        if lim is None:
            continue
        ax.set_ylim(*lim)
        for key in keys:
            mark_clipped(c, ax, key, lim, named=len(keys) > 1)


def mark_clipped(
    c: Canvas, ax: Axes, key: tuple[int, str], lim: tuple[float, float], *, named: bool
) -> None:
    """Hollow triangles on the edge at the steps whose values are beyond the axis
    (one per pixel column), and a label with how many and the most extreme."""
    run, metric = key
    line = c.lines[key]
    s = np.concatenate([line.steps, *(ss for ss, _ in line.superseded)])
    v = np.concatenate([line.values, *(sv for _, sv in line.superseded)])
    finite = np.isfinite(v) & (v > 0) if line.log else np.isfinite(v)
    who = mpl_text(short(metric, 24)) + " " if named else ""
    if c.multi:
        who = f"#{run + 1} {who}"
    for side, mask in (("above", finite & (v > lim[1])), ("below", finite & (v < lim[0]))):
        if mask.any():
            _clipped_side(c, ax, key, line, s[mask], v[mask], side, lim, who)


def _clipped_side(
    c: Canvas,
    ax: Axes,
    key: tuple[int, str],
    line: Line,
    at: np.ndarray,
    vals: np.ndarray,
    side: str,
    lim: tuple[float, float],
    who: str,
) -> None:
    """The marks, label and caption for the values beyond one edge (``at``, ``vals``)."""
    run, metric = key
    above = side == "above"
    edge = transforms.blended_transform_factory(ax.transData, ax.transAxes)
    steps = first_per_bucket(np.sort(at), line.buckets, lo=c.xlo, hi=c.xhi)
    gid = f"clipped-{run}-{metric}-{side}"
    (art,) = ax.plot(
        steps,
        np.full(steps.size, 1.0 if above else 0.0),
        ls="none",
        marker="^" if above else "v",
        ms=5,
        mfc="white",
        mec=line.color,
        mew=1.2,
        transform=edge,
        clip_on=False,
        zorder=6,
    )
    art.set_gid(gid)
    i = int(np.argmax(vals) if above else np.argmin(vals))
    arrow, count = ("▲" if above else "▼"), int(vals.size)
    extreme = f"{'max' if above else 'min'} {vals[i]:.4g} @ {fmt_step(at[i])}"
    text = f"{who}{arrow} {extreme}" + (f" ({count:,} {side})" if count > 1 else "")
    c.note(Note(ax, float(at[i]), text, line.color, gid, bold=False))
    cut = lim[1] if above else lim[0]
    run_name = f" of {c.analyses[run].run.name}" if c.multi else ""
    c.caption(
        c.panel_of_axes[id(ax)],
        f"y axis cut at {cut:.4g}: {count:,} {metric}{run_name} value(s) {side} it "
        f"({extreme}), marked {arrow} on the edge",
    )
