"""Energy and carbon of training: E = GPU-hours × watts × PUE; CO2e = E × grid intensity.

When a run sampled its GPUs' power (W&B's system metrics, nvidia-smi columns: the
``gpu<i>/power_w`` metrics), :func:`measured_energy` integrates the samples over wall time
instead of assuming the TDP.

The grid intensity is a named preset (each with its source) or a number in gCO2e/kWh.
The default is the world average; the default PUE is 1.1. Both are stated in every result.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

from trainlens.calculators.hardware import GPU, HardwareTable, gpu_row
from trainlens.calculators.units import parse_number, require_positive
from trainlens.core.dataclass import dataclass, field
from trainlens.core.errors import UsageError

if TYPE_CHECKING:
    from numpy.typing import ArrayLike


@dataclass(frozen=True)
class GridPreset:
    """A grid carbon intensity in gCO2e per kWh and where the figure comes from."""

    name: str
    g_per_kwh: float
    source: str


_PRESETS: tuple[GridPreset, ...] = (
    GridPreset(
        "world",
        481.0,
        "Ember, Global Electricity Review 2024: world average of electricity generation, 2023",
    ),
    GridPreset(
        "world-iea-2018",
        475.0,
        "IEA, Global Energy & CO2 Status Report 2019: world average CO2 intensity of power "
        "generation, 2018",
    ),
    GridPreset("france", 56.0, "Ember via Our World in Data, 2023"),
    GridPreset("germany", 381.0, "Ember via Our World in Data, 2023"),
    GridPreset("china", 582.0, "Ember via Our World in Data, 2023"),
    GridPreset("india", 713.0, "Ember via Our World in Data, 2023"),
    GridPreset("canada", 170.0, "Ember via Our World in Data, 2023"),
    GridPreset("brazil", 98.0, "Ember via Our World in Data, 2023"),
    GridPreset("australia", 549.0, "Ember via Our World in Data, 2023"),
    GridPreset("norway", 30.0, "Ember, 2023 (as reported by Statista)"),
    GridPreset(
        "us-epa-strubell",
        432.7,
        "Strubell et al. 2019: US average from the EPA, 0.954 lb CO2e per kWh",
    ),
    GridPreset(
        "gpt3-patterson",
        429.0,
        "Patterson et al. 2021: the grid factor used for GPT-3 (0.429 kgCO2e/kWh, PUE 1.1)",
    ),
    GridPreset(
        "bloom-jean-zay",
        57.0,
        "Luccioni et al. 2022: the Jean Zay supercomputer (France) where BLOOM was trained",
    ),
    GridPreset(
        "llama2-implied",
        423.5,
        "implied by the Llama 2 model card: 31.22 tCO2e for 184,320 A100 GPU-hours at 400 W",
    ),
)
GRID_PRESETS: dict[str, GridPreset] = {p.name: p for p in _PRESETS}
DEFAULT_GRID = "world"
DEFAULT_PUE = 1.1
PUE_SOURCE = (
    "Patterson et al. 2021 used 1.1 for GPT-3's and Google's data centres; industry-wide "
    "averages are nearer 1.5-1.6"
)


def resolve_grid(grid: str | float | None) -> GridPreset:
    """A preset by name, or a number (``"350"``) as a custom intensity in gCO2e/kWh."""
    if grid is None:
        return GRID_PRESETS[DEFAULT_GRID]
    if isinstance(grid, int | float) and not isinstance(grid, bool):
        value = parse_number(grid, "grid intensity", allow_zero=True)
        return GridPreset("custom", value, "given")
    key = str(grid).strip().lower().replace("_", "-").replace(" ", "-")
    if key in GRID_PRESETS:
        return GRID_PRESETS[key]
    if key and (key[0].isdigit() or key[0] in "+-."):
        value = parse_number(str(grid), "--grid", allow_zero=True)
        return GridPreset("custom", value, "given")
    raise UsageError(
        f"unknown grid {grid!r}: give a number in gCO2e/kWh or one of {', '.join(GRID_PRESETS)}."
    )


@dataclass(frozen=True)
class EnergyResult:
    """kWh and tCO2e of a training job, and per million tokens when tokens are known."""

    gpu_hours: float
    watts: float
    watts_source: str
    pue: float
    kwh: float
    grid: str
    grid_g_per_kwh: float
    grid_source: str
    tco2e: float
    gpu: str | None = None
    tokens: float | None = None
    kwh_per_million_tokens: float | None = None
    kg_co2e_per_million_tokens: float | None = None
    assumptions: list[str] = field(default_factory=list)


def energy(
    *,
    gpu_hours: float | None = None,
    n_gpus: int | None = None,
    hours: float | None = None,
    wall_seconds: float | None = None,
    watts: float | None = None,
    gpu: str | GPU | None = None,
    pue: float = DEFAULT_PUE,
    grid: str | float | None = DEFAULT_GRID,
    tokens: float | None = None,
    table: HardwareTable | None = None,
) -> EnergyResult:
    """Energy (kWh) and emissions (tCO2e) of a run.

    Device time is ``gpu_hours``, or ``n_gpus`` × ``hours`` (or × ``wall_seconds``, e.g. a
    run's own wall time). Power is ``watts`` (measured, per GPU) or the ``gpu``'s TDP.
    """
    assumptions: list[str] = []
    durations = [x for x in (hours, wall_seconds) if x is not None]
    if len(durations) > 1:
        raise UsageError("give the wall time once: hours or seconds, not both.")
    if gpu_hours is not None and (durations or n_gpus is not None):
        raise UsageError("give either GPU-hours or GPUs × wall time, not both.")
    if gpu_hours is not None:
        require_positive(gpu_hours, "GPU-hours")
        device_hours = float(gpu_hours)
    elif durations:
        wall_h = float(hours) if hours is not None else float(durations[0]) / 3600.0
        require_positive(wall_h, "wall time")
        if n_gpus is None:
            n_gpus = 1
            assumptions.append("Number of GPUs not given: 1 assumed.")
        require_positive(n_gpus, "GPUs")
        device_hours = n_gpus * wall_h
        assumptions.append(
            f"GPU-hours = {n_gpus} GPU{'s' if n_gpus != 1 else ''} × {wall_h:,.6g} h of wall "
            "time, every GPU busy throughout."
        )
    else:
        raise UsageError("give GPU-hours, or the number of GPUs and the wall time.")

    row = gpu_row(gpu, table, assumptions)
    if watts is not None:
        require_positive(watts, "watts")
        power = float(watts)
        watts_source = "given"
        assumptions.append(f"Power: {power:g} W per GPU as given (measured average draw).")
    elif row is not None:
        if row.tdp_w is None:
            raise UsageError(
                f"{row.name} has no TDP in the hardware table; give the measured --watts."
            )
        power = float(row.tdp_w)
        watts_source = f"TDP of {row.name}"
        assumptions.append(
            f"Power: {power:g} W per GPU, the TDP of {row.name}: an upper bound on the average "
            "draw; measured watts (nvidia-smi, DCGM) give a tighter figure."
        )
    else:
        raise UsageError("give a GPU (for its TDP) or the measured --watts per GPU.")

    require_positive(pue, "PUE")
    if pue < 1.0:
        raise UsageError(f"PUE is at least 1 (facility power ÷ IT power); got {pue:g}.")
    preset = resolve_grid(grid)
    pue_text = (
        f"PUE {pue:g}"
        + (f" (the default: {PUE_SOURCE})" if pue == DEFAULT_PUE else " (as given)")
        + "."
    )
    assumptions.append(pue_text)
    if preset.name == "custom":
        assumptions.append(f"Grid: {preset.g_per_kwh:g} gCO2e/kWh as given.")
    else:
        assumptions.append(
            f"Grid: {preset.g_per_kwh:g} gCO2e/kWh, preset {preset.name!r}"
            + (" (the default)" if preset.name == DEFAULT_GRID else "")
            + f" — {preset.source}."
        )
    assumptions.append(
        "Counts the GPUs' power times PUE only: CPUs, network and storage beyond the PUE, idle "
        "time and manufacturing are left out (adding them took BLOOM from 24.7 t to 50.5 t, "
        "Luccioni et al. 2022)."
    )

    kwh = device_hours * power * pue / 1000.0
    tco2e = kwh * preset.g_per_kwh / 1e6
    per_m_kwh = per_m_kg = None
    if tokens is not None:
        require_positive(tokens, "tokens")
        per_m_kwh = kwh / (tokens / 1e6)
        per_m_kg = tco2e * 1000.0 / (tokens / 1e6)
    return EnergyResult(
        gpu_hours=device_hours,
        watts=power,
        watts_source=watts_source,
        pue=float(pue),
        kwh=kwh,
        grid=preset.name,
        grid_g_per_kwh=preset.g_per_kwh,
        grid_source=preset.source,
        tco2e=tco2e,
        gpu=row.name if row is not None else None,
        tokens=None if tokens is None else float(tokens),
        kwh_per_million_tokens=per_m_kwh,
        kg_co2e_per_million_tokens=per_m_kg,
        assumptions=assumptions,
    )


# ---- measured energy: sampled GPU power integrated over wall time ------------------------

#: a pause longer than this many sampling intervals is not integrated across: the device
#: was not sampled (the job was stopped, or the logger was), so what it drew is unknown.
#: W&B samples every 15 s; an interval of up to 3 keeps ordinary jitter (a late sample,
#: one sample lost) and drops a stop.
GAP_INTERVALS = 3.0


@dataclass(frozen=True)
class PowerIntegral:
    """One device's sampled power integrated over its wall time (trapezoid rule)."""

    joules: float
    seconds: float  # wall time integrated over
    left_out_seconds: float  # in gaps longer than GAP_INTERVALS sampling intervals
    gaps: int
    samples: int
    interval: float  # the median sampling interval, seconds
    first: float  # wall time of the first and last usable sample
    last: float


def integrate_power(wall: ArrayLike, watts: ArrayLike) -> PowerIntegral | None:
    """Joules drawn by one device from its power samples (wall time in seconds, watts),
    or None with fewer than two usable samples. Samples are taken in time order; a
    non-finite value or wall time is no sample. Between two samples the draw is taken
    to move linearly (trapezoid); a step between samples longer than GAP_INTERVALS times
    the median interval is left out and counted."""
    import numpy as np  # here: the calculators' commands start without numpy

    t = np.asarray(wall, dtype=np.float64)
    w = np.asarray(watts, dtype=np.float64)
    ok = np.isfinite(t) & np.isfinite(w)
    t, w = t[ok], w[ok]
    order = np.argsort(t, kind="stable")
    t, w = t[order], w[order]
    if t.size < 2:
        return None
    dt = np.diff(t)
    positive = dt[dt > 0]
    if positive.size == 0:
        return None
    interval = float(np.median(positive))
    gap = dt > GAP_INTERVALS * interval
    area = (w[1:] + w[:-1]) / 2.0 * dt
    return PowerIntegral(
        joules=float(area[~gap].sum()),
        seconds=float(dt[~gap].sum()),
        left_out_seconds=float(dt[gap].sum()),
        gaps=int(gap.sum()),
        samples=int(t.size),
        interval=interval,
        first=float(t[0]),
        last=float(t[-1]),
    )


@dataclass(frozen=True)
class MeasuredEnergy:
    """Energy from sampled GPU power: every device's integral summed, times PUE."""

    kwh: float
    tco2e: float
    pue: float
    grid: str
    grid_g_per_kwh: float
    n_gpus: int
    seconds: float  # first to last sample over all devices
    gpu_hours: float  # device time integrated over (summed over devices)
    left_out_seconds: float  # device time in gaps, summed over devices
    gaps: int
    mean_watts: float  # per device, over the time integrated
    devices: dict[str, PowerIntegral]


def measured_energy(
    devices: Mapping[str, tuple[ArrayLike, ArrayLike]],
    *,
    pue: float = DEFAULT_PUE,
    grid: str | float | None = DEFAULT_GRID,
) -> MeasuredEnergy | None:
    """kWh and tCO2e from each device's (wall times, watts) samples; None when no device
    has two usable samples. The PUE applies as in :func:`energy` (the samples are the
    GPUs' own draw, not the facility's)."""
    require_positive(pue, "PUE")
    preset = resolve_grid(grid)
    got: dict[str, PowerIntegral] = {}
    first, last = math.inf, -math.inf
    for name, (wall, watts) in devices.items():
        one = integrate_power(wall, watts)
        if one is None:
            continue
        got[name] = one
        first, last = min(first, one.first), max(last, one.last)
    if not got:
        return None
    joules = sum(d.joules for d in got.values())
    device_seconds = sum(d.seconds for d in got.values())
    kwh = joules / 3.6e6 * pue
    return MeasuredEnergy(
        kwh=kwh,
        tco2e=kwh * preset.g_per_kwh / 1e6,
        pue=float(pue),
        grid=preset.name,
        grid_g_per_kwh=preset.g_per_kwh,
        n_gpus=len(got),
        seconds=last - first,
        gpu_hours=device_seconds / 3600.0,
        left_out_seconds=sum(d.left_out_seconds for d in got.values()),
        gaps=sum(d.gaps for d in got.values()),
        mean_watts=joules / device_seconds if device_seconds > 0 else 0.0,
        devices=got,
    )
