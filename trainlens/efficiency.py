"""MFU, compute, GPU-hours and energy of a logged run, when the model size is known.

``analyze`` calls :func:`add_efficiency` when the model's parameter count is known (from
``--params``, ``[tool.trainlens.model]``, a run config beside the run or MLflow params):
it adds a derived ``mfu`` series to the frame (from the logged tokens/s; the report plots
it) and ``mfu`` / ``compute`` entries to the summary. An unknown device is said in the
summary, not raised: the rest of the analysis stands.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from trainlens.calculators import (
    attention_flops_per_token,
    dense_peak,
    energy,
    gpu_row,
    mfu_series,
    training_compute,
)
from trainlens.calculators.hardware import GPU
from trainlens.calculators.units import parse_number
from trainlens.core.errors import TrainlensError
from trainlens.core.run import Run


def _int(model: dict[str, Any], key: str) -> int | None:
    value = model.get(key)
    if value is None:
        return None
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


def attention_per_token(model: dict[str, Any]) -> float:
    """Attention FLOPs per token when layers, heads, head_dim and seq_len are known, else 0."""
    layers, heads, seq_len = _int(model, "layers"), _int(model, "heads"), _int(model, "seq_len")
    head_dim = _int(model, "head_dim")
    if layers and heads and seq_len and head_dim:
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


def mfu_of(run: Run, model: dict[str, Any], row: GPU | None = None) -> Mfu:
    """The run's MFU from its logged tokens/s: the one computation behind analyze's summary
    and the gate's MFU check (6·N plus the attention term where the shape is known).
    Raises TrainlensError (a sentence) when the model size, the GPU or tokens/s is missing."""
    raw = model.get("n_params")
    if raw is None:
        raise TrainlensError("needs n_params (--params, [tool.trainlens.model] or a run config)")
    params = parse_number(raw, "n_params")
    row = gpu_row(str(model.get("gpu")) if row is None else row, None, [])
    assert row is not None
    dtype = dtype_of(model)
    peak = dense_peak(row, dtype, None)
    assert peak is not None
    n_gpus = _int(model, "n_gpus") or 1
    _, tps = run.series("tokens_per_sec")
    values = mfu_series(tps, params, peak, n_gpus, attention_per_token(model))
    return Mfu(values, row.name, dtype, peak, n_gpus, params)


def add_efficiency(run: Run, model: dict[str, Any], summary: dict[str, Any]) -> None:
    """Add ``mfu`` and ``compute`` to ``summary`` (and an ``mfu`` series to the run)."""
    raw_params = model.get("n_params")
    if raw_params is None:
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
    if row is not None and run.has("tokens_per_sec"):
        try:
            got: Mfu | None = mfu_of(run, model, row)
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
                summary["mfu"] = {
                    "mean": float(finite.mean()),
                    "p50": float(np.median(finite)),
                    "gpu": got.gpu,
                    "dtype": got.dtype,
                    "peak_flops": got.peak_flops,
                    "n_gpus": got.n_gpus,
                    "text": (
                        f"MFU mean {finite.mean():.1%} (median {np.median(finite):.1%}) of "
                        f"{got.n_gpus} × {got.gpu}, dense {got.dtype} "
                        f"{got.peak_flops / 1e12:g} TFLOP/s, 6·N with N = {params:.3g}"
                    ),
                }
    if row is not None and wall and row.tdp_w:
        e = energy(wall_seconds=wall, n_gpus=n_gpus, gpu=row, tokens=tokens)
        compute.update(kwh=e.kwh, tco2e=e.tco2e, grid=e.grid, pue=e.pue)
    parts = []
    if compute.get("flops"):
        parts.append(f"{compute['flops']:.3g} FLOPs over {tokens:.3g} tokens")
    if compute.get("gpu_hours"):
        parts.append(f"{compute['gpu_hours']:.3g} GPU-hours")
    if compute.get("kwh"):
        parts.append(
            f"{compute['kwh']:.3g} kWh, {compute['tco2e']:.3g} tCO2e "
            f"(grid {compute['grid']}, PUE {compute['pue']:g})"
        )
    if parts:
        compute["text"] = "; ".join(parts)
        summary["compute"] = compute
