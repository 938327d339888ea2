"""MFU, compute, GPU-hours and energy of a logged run, when the model size is known.

``analyze`` calls :func:`add_efficiency` when the model's parameter count is known (from
``--params``, ``[tool.trainlens.model]``, a run config beside the run or MLflow params):
it adds a derived ``mfu`` series to the frame (from the logged tokens/s; the report plots
it) and ``mfu`` / ``compute`` entries to the summary. An unknown device is said in the
summary, not raised: the rest of the analysis stands.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from trainlens.core.dataclass import dataclass
from trainlens.core.errors import TrainlensError
from trainlens.core.names import GPU_METRIC, GPU_POWER_FIELD
from trainlens.core.run import Run

if TYPE_CHECKING:  # the calculators are imported where a figure is computed: a run that
    # names no model and logs no GPU power needs none of them (~10 ms of start-up)
    from trainlens.calculators.hardware import GPU


def _int(model: dict[str, Any], key: str) -> int | None:
    value = model.get(key)
    if value is None:
        return None
    from trainlens.calculators.units import parse_number

    try:
        return int(parse_number(value, key))
    except TrainlensError:
        return None


def cumulative_tokens(run: Run) -> tuple[np.ndarray, np.ndarray] | None:
    """Tokens seen by each logged step: a logged ``tokens`` count, else the integral of
    tokens/s over the step time (or over wall-clock deltas)."""
    if run.has("tokens"):
        steps, v = run.series("tokens", finite=True)
        if v.size:
            return steps, np.maximum.accumulate(v)
    if not run.has("tokens_per_sec"):
        return None
    steps, tps = run.series("tokens_per_sec", finite=True)
    if steps.size < 2:
        return None
    if run.has("step_time"):
        st_steps, st = run.series("step_time", finite=True)
        joined = pl.DataFrame({"step": steps, "tps": tps}).join(
            pl.DataFrame({"step": st_steps, "dt": st}), on="step", how="inner"
        )
        if joined.height >= 2:
            s = joined.get_column("step").to_numpy()
            # each logged point stands for the steps since the one before it
            gap = np.diff(s, prepend=s[0] - (s[1] - s[0]))
            per = joined.get_column("tps").to_numpy() * joined.get_column("dt").to_numpy() * gap
            return s, np.cumsum(per)
    frame = run.series_frame("tokens_per_sec").drop_nulls("wall_time")
    frame = frame.filter(pl.col("value").is_finite())
    if frame.height >= 2:
        s = frame.get_column("step").to_numpy()
        wall = frame.get_column("wall_time").to_numpy()
        rate = frame.get_column("value").to_numpy()
        dt = np.clip(np.diff(wall, prepend=wall[0]), 0.0, None)
        return s, np.cumsum(rate * dt)
    return None


def total_tokens(run: Run) -> float | None:
    """Tokens processed over the run (see :func:`cumulative_tokens`)."""
    got = cumulative_tokens(run)
    return float(got[1][-1]) if got is not None and got[1].size else None


#: framework spellings of a training precision -> the hardware table's dtype names
DTYPES = {
    "bfloat16": "bf16",
    "float16": "fp16",
    "float32": "fp32",
    "16-mixed": "fp16",
    "bf16-mixed": "bf16",
    "32": "fp32",
    "32-true": "fp32",
}


def dtype_of(model: dict[str, Any]) -> str:
    """The model's training precision as the hardware table names it (bf16 by default)."""
    dtype = str(model.get("dtype") or "bf16").lower()
    return DTYPES.get(dtype, dtype)


#: where the precision came from when nothing said: bf16, the usual training precision
DEFAULT_DTYPE_SOURCE = "bf16 by default, none given; --dtype sets it"


def dtype_source(model: dict[str, Any], sources: dict[str, str] | None) -> str:
    """Where the precision came from, in words: ``from --dtype``, ``from the run config's
    `dtype: float32` (path)``, or that it is the default."""
    if not model.get("dtype"):
        return DEFAULT_DTYPE_SOURCE
    where = (sources or {}).get("dtype")
    return f"from {where}" if where else f"{model['dtype']} as given"


def attention_per_token(model: dict[str, Any]) -> float:
    """Attention FLOPs per token when layers, heads, head_dim and seq_len are known, else 0."""
    layers, heads, seq_len = _int(model, "layers"), _int(model, "heads"), _int(model, "seq_len")
    head_dim = _int(model, "head_dim")
    if layers and heads and seq_len and head_dim:
        from trainlens.calculators import attention_flops_per_token

        return attention_flops_per_token(layers, heads, head_dim, seq_len)
    return 0.0


@dataclass(frozen=True)
class Mfu:
    """MFU at each logged tokens/s point, and what it was computed against."""

    values: np.ndarray
    gpu: str
    dtype: str
    peak_flops: float
    n_gpus: int
    params: float
    dtype_source: str


def mfu_of(
    run: Run,
    model: dict[str, Any],
    row: GPU | None = None,
    sources: dict[str, str] | None = None,
) -> Mfu:
    """The run's MFU from its logged tokens/s: the one computation behind analyze's summary
    and the gate's MFU check (6·N plus the attention term where the shape is known).
    Raises TrainlensError (a sentence) when the model size, the GPU or tokens/s is missing."""
    from trainlens.calculators import dense_peak, gpu_row, mfu_series
    from trainlens.calculators.units import parse_number

    raw = model.get("n_params")
    if raw is None:
        raise TrainlensError("needs n_params (--params, [tool.trainlens.model] or a run config)")
    params = parse_number(raw, "n_params")
    row = gpu_row(str(model.get("gpu")) if row is None else row, None, [])
    assert row is not None
    dtype = dtype_of(model)
    from trainlens.calculators.hardware import DTYPES as TABLE_DTYPES

    if dtype not in TABLE_DTYPES:
        raise TrainlensError(
            f"the precision {model.get('dtype')!r} ({dtype_source(model, sources)}) has no "
            f"peak in the hardware table (it knows {', '.join(TABLE_DTYPES)}); --dtype sets it"
        )
    peak = dense_peak(row, dtype, None)
    assert peak is not None
    n_gpus = _int(model, "n_gpus") or 1
    _, tps = run.series("tokens_per_sec")
    values = mfu_series(tps, params, peak, n_gpus, attention_per_token(model))
    return Mfu(values, row.name, dtype, peak, n_gpus, params, dtype_source(model, sources))


def _user_gave(sources: dict[str, str], key: str) -> bool:
    """Whether the user set ``key`` (a flag or the config file), not the run's own config:
    a run config with a model size and no GPU is common, and no mistake of the user's."""
    where = sources.get(key, "")
    return where.startswith("--") or where.startswith("[tool.trainlens.model]")


def _check_words(got: Mfu, sources: dict[str, str]) -> str:
    """What to check when the MFU is impossible, the parameter count named by its source."""
    where = sources.get("n_params")
    return (
        f"N = {got.params:.3g} ({'from ' + where if where else 'n_params'}: the non-embedding "
        "parameters), the tokens/s the run logged (the whole job's, counted once) and the "
        "precision"
    )


def _mfu_entry(got: Mfu, finite: np.ndarray, sources: dict[str, str]) -> dict[str, Any]:
    """The summary's ``mfu`` entry: the figure, the peak and precision it rests on, and a
    ``problem`` sentence when it is impossible (the formatters print it beneath)."""
    from trainlens.calculators.mfu import impossible_message, is_impossible, peak_words

    mean, median = float(finite.mean()), float(np.median(finite))
    entry: dict[str, Any] = {
        "mean": mean,
        "p50": median,
        "gpu": got.gpu,
        "dtype": got.dtype,
        "dtype_source": got.dtype_source,
        "peak_flops": got.peak_flops,
        "n_gpus": got.n_gpus,
        "impossible": is_impossible(mean),
        "text": (
            f"MFU mean {mean:.1%} (median {median:.1%}) of {got.n_gpus} × {got.gpu}, dense "
            f"{got.dtype} {got.peak_flops / 1e12:g} TFLOP/s (precision {got.dtype_source}), "
            f"6·N with N = {got.params:.3g}"
        ),
    }
    if entry["impossible"]:
        peak = peak_words(got.gpu, got.dtype, got.peak_flops, got.dtype_source)
        entry["problem"] = impossible_message(mean, "MFU", _check_words(got, sources), peak)
    return entry


def add_efficiency(
    run: Run,
    model: dict[str, Any],
    summary: dict[str, Any],
    sources: dict[str, str] | None = None,
) -> None:
    """Add ``mfu`` and ``compute`` to ``summary`` (and an ``mfu`` series to the run).
    ``sources`` says where each model key came from (:class:`Context.model_sources`), for
    the words that name the precision and what to check."""
    from trainlens.calculators import gpu_row, training_compute
    from trainlens.calculators.units import parse_number

    sources = sources or {}
    raw_params = model.get("n_params")
    if raw_params is None:
        if _user_gave(sources, "gpu"):  # --gpu alone: say what MFU still needs
            summary["efficiency_note"] = (
                f"MFU not computed: the GPU is given ({sources['gpu']}) but not the model's "
                "parameter count (--params or [tool.trainlens.model] n_params)"
            )
        return
    try:
        params = parse_number(raw_params, "n_params")
    except TrainlensError as exc:
        summary["efficiency_note"] = str(exc)
        return
    n_gpus = _int(model, "n_gpus") or 1
    attn = attention_per_token(model)

    tokens = total_tokens(run)
    compute: dict[str, Any] = {"params": params, "tokens": tokens}
    if tokens:
        result = training_compute(params, tokens, attn_flops_per_token=attn)
        compute["flops"] = result.flops
    wall = summary.get("wall_clock_seconds")
    if wall:
        compute["gpu_hours"] = wall / 3600.0 * n_gpus

    gpu_name = model.get("gpu")
    row = None
    if gpu_name:
        try:
            row = gpu_row(str(gpu_name), None, [])
        except TrainlensError as exc:
            summary["efficiency_note"] = f"MFU not computed: {exc}"
    if row is None and not gpu_name and _user_gave(sources, "n_params"):
        summary["efficiency_note"] = (
            f"MFU not computed: the parameter count is given ({sources['n_params']}) but not "
            "the GPU (--gpu or [tool.trainlens.model] gpu)"
        )
    elif row is not None and not run.has("tokens_per_sec"):
        summary["efficiency_note"] = (
            "MFU not computed: the run logs no tokens/s (tokens_per_sec or one of its "
            "aliases; --alias maps another name to it)"
        )
    if row is not None and run.has("tokens_per_sec"):
        try:
            got: Mfu | None = mfu_of(run, model, row, sources)
        except TrainlensError as exc:
            summary["efficiency_note"] = f"MFU not computed: {exc}"
            got = None
        if got is not None:
            frame = run.series_frame("tokens_per_sec")
            values = got.values
            run.add_derived("mfu", frame.with_columns(pl.Series("value", values, dtype=pl.Float64)))
            run.metadata.setdefault("derived", []).append("mfu")
            finite = values[np.isfinite(values)]
            if finite.size:
                summary["mfu"] = _mfu_entry(got, finite, sources)
    chosen = summary.get("energy")
    if isinstance(chosen, dict) and chosen.get("kwh") is not None:
        # the energy entry's figure (measured when the run sampled its GPUs' power);
        # its text is the summary's energy line, not repeated here
        compute.update(
            kwh=chosen["kwh"],
            tco2e=chosen["tco2e"],
            grid=chosen["grid"],
            pue=chosen["pue"],
            energy_source=chosen["source"],
        )
    parts = []
    if compute.get("flops"):
        parts.append(f"{compute['flops']:.3g} FLOPs over {tokens:.3g} tokens")
    if compute.get("gpu_hours"):
        parts.append(f"{compute['gpu_hours']:.3g} GPU-hours")
    if parts:
        compute["text"] = "; ".join(parts)
        summary["compute"] = compute


# ---- energy: measured from sampled GPU power, else estimated from the TDP ---------------


def gpu_power_samples(run: Run) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Each device's power samples (``gpu<i>/power_w``): wall times and watts, every
    value logged — a restart's superseded samples too, as that power was drawn."""
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    names = [m for m in run.metrics if (g := GPU_METRIC.match(m)) and g.group(2) == GPU_POWER_FIELD]
    if not names:
        return out
    rows = run.frame.filter(pl.col("metric").cast(pl.String).is_in(names))
    for (name,), part in rows.group_by("metric", maintain_order=True):
        out[str(name)] = (
            part.get_column("wall_time").cast(pl.Float64).fill_null(float("nan")).to_numpy(),
            part.get_column("value").to_numpy(),
        )
    return dict(sorted(out.items(), key=lambda kv: int(GPU_METRIC.match(kv[0]).group(1))))  # type: ignore[union-attr]


def _power_source(run: Run, names: list[str]) -> str:
    raw = " ".join(run.raw_names.get(n, n) for n in names).lower()
    return "W&B GPU power" if "powerwatts" in raw else "logged GPU power"


def _hours(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.3g} s"
    return f"{seconds / 60:.3g} min" if seconds < 7200 else f"{seconds / 3600:.3g} h"


def _measured_entry(run: Run) -> tuple[dict[str, Any] | None, str | None]:
    """The measured-energy entry, or None and why not (None when no power is logged)."""
    samples = gpu_power_samples(run)
    if not samples:
        return None, None
    from trainlens.calculators import measured_energy
    from trainlens.calculators.energy import GAP_INTERVALS

    got = measured_energy(samples)
    if got is None:
        return None, "GPU power logged without two timed samples per GPU: energy not measured"
    source = _power_source(run, list(samples))
    gpus = f"{got.n_gpus} GPU{'s' if got.n_gpus != 1 else ''}"
    text = f"measured from {source}, {gpus} over {_hours(got.seconds)}"
    if got.gaps:
        text += (
            f" ({_hours(got.left_out_seconds)} of GPU time in {got.gaps} gap"
            f"{'s' if got.gaps != 1 else ''} longer than {GAP_INTERVALS:g} sampling "
            "intervals left out)"
        )
    entry = {
        "kwh": got.kwh,
        "tco2e": got.tco2e,
        "source": source,
        "n_gpus": got.n_gpus,
        "seconds": got.seconds,
        "gpu_hours": got.gpu_hours,
        "mean_watts": got.mean_watts,
        "left_out_seconds": got.left_out_seconds,
        "gaps": got.gaps,
        "sampling_interval": float(np.median([d.interval for d in got.devices.values()])),
        "text": text,
    }
    return entry, None


def _estimated_entry(
    model: dict[str, Any], wall: float | None, n_gpus: int | None
) -> dict[str, Any] | None:
    """The TDP estimate: the device's TDP × GPUs × wall time (× PUE), when all are known."""
    gpu_name = model.get("gpu")
    if not gpu_name or not wall:
        return None
    from trainlens.calculators import energy, gpu_row

    try:
        row = gpu_row(str(gpu_name), None, [])
    except TrainlensError:
        return None  # said by add_efficiency's note when the model size is known
    if row is None or not row.tdp_w:
        return None
    n = _int(model, "n_gpus") or n_gpus or 1
    e = energy(wall_seconds=wall, n_gpus=n, gpu=row)
    return {
        "kwh": e.kwh,
        "tco2e": e.tco2e,
        "gpu": row.name,
        "watts": e.watts,
        "n_gpus": n,
        "text": f"estimated from TDP, {n} × {row.name} at {e.watts:g} W over {_hours(wall)}",
    }


def add_energy(run: Run, model: dict[str, Any], summary: dict[str, Any]) -> None:
    """Add ``energy`` to ``summary``: measured from the run's sampled GPU power when it
    logged some (trapezoid over wall time per GPU, summed, × PUE), else estimated from
    the GPU's TDP when the device is known; both when both are, the measured one counting
    (kWh, tCO2e). Carbon follows the figure that counts."""
    measured, why_not = _measured_entry(run)
    estimated = _estimated_entry(
        model, summary.get("wall_clock_seconds"), measured["n_gpus"] if measured else None
    )
    chosen = measured or estimated
    if chosen is None and not why_not:
        return
    from trainlens.calculators import DEFAULT_GRID, DEFAULT_PUE, GRID_PRESETS

    grid = GRID_PRESETS[DEFAULT_GRID]
    if chosen is None:
        if why_not:  # power was logged, but nothing to integrate: say so, no figure
            summary["energy"] = {
                "kwh": None,
                "tco2e": None,
                "source": None,
                "grid": grid.name,
                "pue": DEFAULT_PUE,
                "measured": None,
                "estimated": None,
                "text": why_not,
            }
        return
    label = "measured" if measured else "estimated"
    text = f"{chosen['kwh']:.3g} kWh, {chosen['tco2e']:.3g} tCO2e {chosen['text']}"
    text += f" (grid {grid.name}, PUE {DEFAULT_PUE:g})"
    if measured and estimated:
        text += f"; {estimated['kwh']:.3g} kWh {estimated['text']}"
    elif why_not:
        text += f"; {why_not}"
    summary["energy"] = {
        "kwh": chosen["kwh"],
        "tco2e": chosen["tco2e"],
        "source": label,
        "grid": grid.name,
        "pue": DEFAULT_PUE,
        "measured": measured,
        "estimated": estimated,
        "text": text,
    }
