"""The numbers a gate judges a run by, from its canonical frame: validation loss, time to a
target quality (steps, tokens, seconds: MLPerf's time-to-train), throughput, peak
memory, MFU, restarts. Plain dicts (JSON-ready), so a stored gate report can serve as a
baseline.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import polars as pl

from trainlens.core.errors import TrainlensError
from trainlens.core.run import Run
from trainlens.efficiency import cumulative_tokens
from trainlens.gate.rules import Checks

MEMORY_METRICS = ("mem/allocated", "mem/reserved", "mem/rss")


def _f(x: Any) -> float | None:
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def throughput(summary: dict[str, Any]) -> dict[str, Any] | None:
    """Mean tokens/s, else samples/s, else steps/s from the mean step time."""
    for key in ("tokens_per_sec", "samples_per_sec"):
        entry = summary.get(key)
        if isinstance(entry, dict) and _f(entry.get("mean")):
            return {"metric": key, "mean": _f(entry["mean"])}
    st = summary.get("step_time")
    if isinstance(st, dict) and _f(st.get("mean")):
        return {"metric": "steps_per_sec", "mean": 1.0 / float(st["mean"])}
    return None


def val_loss(run: Run, metric: str) -> dict[str, Any] | None:
    if not run.has(metric):
        return None
    steps, values = run.series(metric)
    if not steps.size:
        return None
    finite = np.isfinite(values)
    out: dict[str, Any] = {
        "metric": metric,
        "final": _f(values[-1]),
        "final_step": int(steps[-1]),
        "final_finite": bool(finite[-1]),
        "best": None,
        "best_step": None,
        "evaluations": int(steps.size),
    }
    if finite.any():
        i = int(np.argmin(np.where(finite, values, np.inf)))
        out["best"], out["best_step"] = _f(values[i]), int(steps[i])
    return out


def peak_memory(run: Run) -> dict[str, Any] | None:
    for metric in MEMORY_METRICS:
        if run.has(metric):
            steps, values = run.series(metric, finite=True)
            if values.size:
                i = int(np.argmax(values))
                return {"metric": metric, "peak": float(values[i]), "step": int(steps[i])}
    return None


def _last_at_or_before(steps: np.ndarray, values: np.ndarray, step: int) -> float | None:
    k = int(np.searchsorted(steps, step, side="right")) - 1
    return float(values[k]) if k >= 0 else None


def elapsed_seconds(run: Run) -> tuple[np.ndarray, np.ndarray] | None:
    """Seconds since the run began at each step: wall clock, else summed step times."""
    st = run.standing().filter(pl.col("wall_time").is_not_null())
    if st.height >= 2:
        per_step = st.group_by("step").agg(pl.col("wall_time").max()).sort("step")
        steps = per_step.get_column("step").to_numpy()
        wall = per_step.get_column("wall_time").to_numpy()
        return steps, np.maximum.accumulate(wall) - float(np.min(wall))
    if run.has("step_time"):
        steps, dt = run.series("step_time", finite=True)
        if steps.size >= 2:
            gap = np.diff(steps, prepend=steps[0] - (steps[1] - steps[0]))
            return steps, np.cumsum(dt * gap)
    return None


def time_to_target(run: Run, metric: str, target: float) -> dict[str, Any]:
    """The first logged step whose validation loss is at or below ``target``, and the
    tokens and seconds it took to get there (None where the run does not say)."""
    out: dict[str, Any] = {"metric": metric, "target": target, "reached": False}
    out.update(step=None, tokens=None, seconds=None)
    if not run.has(metric):
        out["reason"] = f"{metric} not logged"
        return out
    steps, values = run.series(metric)
    hit = np.flatnonzero(np.isfinite(values) & (values <= target))
    if not hit.size:
        return out
    step = int(steps[hit[0]])
    out["reached"] = True
    out["step"] = step
    tokens = cumulative_tokens(run)
    if tokens is not None:
        out["tokens"] = _last_at_or_before(*tokens, step)
    secs = elapsed_seconds(run)
    if secs is not None:
        out["seconds"] = _last_at_or_before(*secs, step)
    return out


def mfu(run: Run, summary: dict[str, Any], model: dict[str, Any]) -> dict[str, Any]:
    """Mean MFU: analyze's figure when it computed one, else from the hardware table."""
    entry = summary.get("mfu")
    if isinstance(entry, dict) and entry.get("impossible"):
        # an MFU over 100 % is a wrong input, not a pass of min_mfu
        return {"mean": None, "reason": str(entry.get("problem") or "MFU is impossible")}
    if isinstance(entry, dict) and _f(entry.get("mean")) is not None:
        return {"mean": _f(entry["mean"]), "gpu": entry.get("gpu"), "n_gpus": entry.get("n_gpus")}
    if not run.has("tokens_per_sec"):
        return {"mean": None, "reason": "tokens_per_sec not logged"}
    params, gpu = model.get("n_params"), model.get("gpu")
    if params is None or gpu is None:
        missing = [k for k, v in (("n_params", params), ("gpu", gpu)) if v is None]
        return {
            "mean": None,
            "reason": f"needs {' and '.join(missing)} ([tool.trainlens.model] or a run config)",
        }
    from trainlens.efficiency import mfu_of  # analyze's own computation

    try:
        got = mfu_of(run, model)
    except TrainlensError as exc:
        return {"mean": None, "reason": str(exc)}
    finite = got.values[np.isfinite(got.values)]
    if not finite.size:
        return {"mean": None, "reason": "no finite tokens_per_sec"}
    from trainlens.calculators.mfu import is_impossible, peak_words

    if is_impossible(float(finite.mean())):
        peak = peak_words(got.gpu, got.dtype, got.peak_flops, got.dtype_source)
        return {
            "mean": None,
            "reason": f"MFU {finite.mean():.1%} is impossible: check n_params, the logged "
            f"tokens/s and the precision (peak used: {peak})",
        }
    return {"mean": float(finite.mean()), "gpu": got.gpu, "n_gpus": got.n_gpus}


def outcome_metrics(
    run: Run, summary: dict[str, Any], checks: Checks, model: dict[str, Any]
) -> dict[str, Any]:
    """Everything outcome and baseline checks compare, for one run."""
    out: dict[str, Any] = {
        "throughput": throughput(summary),
        "val_loss": val_loss(run, checks.val_metric),
        "peak_memory": peak_memory(run),
        "time_to_target": (
            time_to_target(run, checks.val_metric, checks.target_val_loss)
            if checks.target_val_loss is not None
            else None
        ),
        "restarts": len(summary.get("restarts") or []),
        "restart_details": list(summary.get("restarts") or []),
    }
    if checks.min_mfu is not None or "mfu" in summary:
        out["mfu"] = mfu(run, summary, model)
    return out


def outcomes_from_summary(summary: dict[str, Any]) -> dict[str, Any]:
    """What a stored ``trainlens analyze --json`` summary can say (no time to target, no
    memory peak: those need the series)."""
    val = summary.get("val_loss")
    return {
        "throughput": throughput(summary),
        "val_loss": (
            {
                "metric": "val/loss",
                "final": _f(val.get("final")),
                "final_step": val.get("final_step"),
                "final_finite": _f(val.get("final")) is not None,
                "best": _f(val.get("best")),
                "best_step": val.get("best_step"),
            }
            if isinstance(val, dict)
            else None
        ),
        "peak_memory": None,
        "time_to_target": None,
        "restarts": len(summary.get("restarts") or []),
        "restart_details": list(summary.get("restarts") or []),
    }
