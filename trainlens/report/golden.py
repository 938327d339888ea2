"""``report --reference``: the candidate's curves over the references' band, one panel per
compared metric, the departures (REF001) marked where they begin.

The band drawn is the one the gate judges with (trainlens/gate/_band.py): the center,
and center ± z band units shaded; the candidate is drawn smoothed as it is compared
(raw values faint beneath), each departure as a shaded span from its first step to its
last, with a line at its first step. The numbers come computed
(:func:`trainlens.gate.reference.overlays`): the report only draws them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from trainlens.report.model import Panel
from trainlens.report.theme import DPI, RUN_COLORS, SEVERITY_COLORS, mpl_text

if TYPE_CHECKING:
    from trainlens.gate.reference import Overlay

WIDTH_IN = 11.0
BAND_COLOR = "#8C9BAB"


def golden_panels(overlays: Sequence[Overlay]) -> list[Panel]:
    panels: list[Panel] = []
    for i, o in enumerate(overlays):
        band, deps = o.band, o.departures
        fig = Figure(figsize=(WIDTH_IN, 2.6), dpi=DPI, layout="constrained")
        FigureCanvasAgg(fig)
        n = len(o.references)
        title = f"{o.metric}: {o.run} against {n} reference{'s' if n != 1 else ''}" + (
            f" — departs from step {round(deps[0].start)}" if deps else " — within the band"
        )
        fig.suptitle(mpl_text(title), x=0.01, ha="left", fontsize=11, fontweight="bold")
        ax = fig.add_subplot(1, 1, 1)
        half = band.z * band.scale
        ax.fill_between(
            band.x,
            band.center - half,
            band.center + half,
            color=BAND_COLOR,
            alpha=0.3,
            linewidth=0,
            label=f"band (± {band.z:g} units)" if band.kind == "seeds" else "tolerance",
        )
        ax.plot(band.x, band.center, color=BAND_COLOR, linewidth=1.0, label="references")
        ax.plot(o.x, o.raw, color=RUN_COLORS[0], alpha=0.25, linewidth=0.6)
        ax.plot(o.x, o.smoothed, color=RUN_COLORS[0], linewidth=1.4, label=mpl_text(o.run))
        color = SEVERITY_COLORS["error"]
        for d in deps:
            ax.axvspan(d.start, max(d.end, d.start + 0.5), color=color, alpha=0.12, linewidth=0)
            ax.axvline(d.start, color=color, linewidth=1.2)
            ax.annotate(
                f"REF001 from {round(d.start)}",
                (d.start, 1.0),
                xycoords=("data", "axes fraction"),
                xytext=(3, -12),
                textcoords="offset points",
                fontsize=8,
                color=color,
            )
        # the y range of the band and the smoothed candidate (raw spikes may leave it)
        lo = float(np.min(np.concatenate([band.center - half, o.smoothed])))
        hi = float(np.max(np.concatenate([band.center + half, o.smoothed])))
        pad = 0.05 * ((hi - lo) or abs(hi) or 1.0)
        ax.set_ylim(lo - pad, hi + pad)
        ax.set_xlabel(o.axis)
        ax.set_ylabel(mpl_text(o.metric))
        ax.legend(loc="upper right", fontsize=8, frameon=False)
        panel = Panel(key=f"golden_{i}", title=title, section="golden", figure=fig)
        panel.notes.append(
            f"{band.kind} band from {', '.join(o.references)}; smoothing: trailing "
            f"{'median' if band.robust else 'mean'} over {band.window:g} steps"
        )
        panels.append(panel)
    return panels
