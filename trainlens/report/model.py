"""What the report's figures are built from and what building them returns: each
metric's series as drawn, and the panels with where every finding was drawn."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import polars as pl
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.text import Text

from trainlens.core.dataclass import dataclass, field
from trainlens.core.findings import Finding
from trainlens.core.incidents import Incident, incident_order, membership
from trainlens.report.theme import DPI

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
    ring: tuple[float, float] | None = None  # (step, y) of its ring, when it has one

    @property
    def anchor(self) -> str:
        return f"finding-{self.run_index}-{self.index}"


@dataclass
class IncidentLabel:
    """The one label of an incident on one axes (``rank``: its place in the run's
    incidents, worst first; ``id``: :attr:`Incident.id`)."""

    run_index: int
    rank: int
    id: str
    panel: str
    axes: Axes
    text: Text


@dataclass
class Figures:
    panels: list[Panel]
    findings: list[DrawnFinding]
    undrawn: list[tuple[int, int]]  # (run, finding) with no panel to draw on
    labels: list[IncidentLabel] = field(default_factory=list)

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


def _segments(steps: np.ndarray, values: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Superseded values in file order, cut where the step goes back (a new segment)."""
    segments: list[tuple[np.ndarray, np.ndarray]] = []
    cuts = np.flatnonzero(np.diff(steps) < 0) + 1
    for a, b in zip(np.r_[0, cuts], np.r_[cuts, steps.size], strict=True):
        order = np.argsort(steps[a:b], kind="stable")
        segments.append((steps[a:b][order], values[a:b][order]))
    return segments


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
            segments = _segments(steps[sup], values[sup])
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


def run_incidents(a: Any) -> list[Incident]:
    """The run's incidents, worst first, and a finding no incident names as one of its
    own (an analysis built by hand, without the grouping step)."""
    incidents = list(a.incidents)
    home = membership(incidents)
    for i, f in enumerate(a.findings):
        if i not in home:
            incidents.append(
                Incident(
                    id=f"finding-{i}",
                    code=f.code,
                    name=f.name,
                    severity=f.severity,
                    title=f.message,
                    step_start=f.step_start,
                    step_end=f.step_end,
                    onset=f.step_start,
                    first_mover=None,
                    first_mover_step=None,
                    chain=(),
                    members=(i,),
                    codes=(f.code,),
                    metrics=(f.metric,) if f.metric else (),
                )
            )
    return incident_order(incidents)
