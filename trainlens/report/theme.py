"""How the report looks: matplotlib style, colours, units and the text helpers every
panel shares. Nothing here reads a run; it is the one place a colour or a unit is named.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import matplotlib

from trainlens.core.sanitize import xml

DPI = 100

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
TITLE_COLOR = "#222222"

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


@contextmanager
def style() -> Iterator[None]:
    rc: Any = STYLE  # typed rc keys in matplotlib's stubs; these are all valid
    with matplotlib.rc_context(rc):
        yield


def mpl_text(text: str) -> str:
    """Literal text for matplotlib: a ``$`` would start mathtext, and a control code from
    the input would be a missing glyph in the PNG and invalid XML in the SVG (the XML rule
    of :mod:`trainlens.core.sanitize` shows it escaped)."""
    return xml(text).replace("$", r"\$")


def short(text: str, limit: int = 48) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def natural_key(name: str) -> list[Any]:
    """``layer10`` after ``layer9``."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def fmt_step(step: float) -> str:
    return f"{int(step):,}"


def compact(x: float) -> str:
    """A step tick: 250k, 1.5M."""
    ax = abs(x)
    if ax >= 1e6:
        return f"{x / 1e6:g}M"
    if ax >= 1e4:
        return f"{x / 1e3:g}k"
    return f"{x:g}"
