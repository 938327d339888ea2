"""The run summary: what a person checks first, computed from the canonical frame."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import polars as pl

from trainlens.core.run import Run

FINAL_WINDOW = 10  # the final train loss is the mean of the last this-many logged values


def _f(x: float | None) -> float | None:
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def _step_times(run: Run) -> np.ndarray:
    """Seconds per step: the logged step_time, else wall-clock deltas per step."""
    if run.has("step_time"):
        _, v = run.series("step_time", finite=True)
        return v
    st = run.standing().filter(pl.col("wall_time").is_not_null())
    if st.height == 0:
        return np.empty(0)
    per_step = st.group_by("step").agg(pl.col("wall_time").max()).sort("step")
    steps = per_step.get_column("step").to_numpy()
    wall = per_step.get_column("wall_time").to_numpy()
    if len(steps) < 2:
        return np.empty(0)
    dt = np.diff(wall) / np.maximum(np.diff(steps), 1)
    return dt[np.isfinite(dt) & (dt >= 0)]


def summarize(run: Run) -> dict[str, Any]:
    """A JSON-ready summary of one run (keys documented in docs/json.md)."""
    standing = run.standing()
    steps = standing.get_column("step")
    counts = (
        run.frame.group_by("metric")
        .agg(pl.len().alias("values"), pl.col("step").n_unique().alias("steps"))
        .sort("metric")
    )
    metrics = {
        r["metric"]: {
            "values": int(r["values"]),
            "steps": int(r["steps"]),
            "logged_as": run.raw_names.get(r["metric"], r["metric"]),
        }
        for r in counts.iter_rows(named=True)
    }
    wall = standing.get_column("wall_time").drop_nulls()
    out: dict[str, Any] = {
        "steps": {
            "first": int(steps.min()) if steps.len() else None,  # type: ignore[arg-type]
            "last": int(steps.max()) if steps.len() else None,  # type: ignore[arg-type]
            "count": int(steps.n_unique()),
        },
        "values": int(run.frame.height),
        "metrics": metrics,
        "wall_clock_seconds": _f(float(wall.max()) - float(wall.min())) if wall.len() else None,  # type: ignore[arg-type]
    }

    dt = _step_times(run)
    out["step_time"] = (
        {"mean": _f(dt.mean()), "p50": _f(np.median(dt)), "p95": _f(np.percentile(dt, 95))}
        if dt.size
        else None
    )
    for key in ("tokens_per_sec", "samples_per_sec"):
        if run.has(key):
            _, v = run.series(key, finite=True)
            out[key] = (
                {"mean": _f(v.mean()), "p50": _f(np.median(v)), "last": _f(v[-1])}
                if v.size
                else None
            )
        else:
            out[key] = None

    out["epochs"] = _epochs(run)

    if run.has("train/loss"):
        s, v = run.series("train/loss", finite=True)
        if v.size:
            tail = v[-FINAL_WINDOW:]
            final = float(tail.mean())
            out["train_loss"] = {
                "first": _f(v[0]),
                "final": _f(final),
                "final_window": int(tail.size),
                "min": _f(v.min()),
                "min_step": int(s[int(np.argmin(v))]),
                "final_perplexity": _f(math.exp(final)) if final < 700 else None,
            }
    if run.has("val/loss"):
        s, v = run.series("val/loss", finite=True)
        if v.size:
            best = int(np.argmin(v))
            out["val_loss"] = {
                "best": _f(v[best]),
                "best_step": int(s[best]),
                "final": _f(v[-1]),
                "final_step": int(s[-1]),
                "final_perplexity": _f(math.exp(v[-1])) if v[-1] < 700 else None,
                "evaluations": int(v.size),
            }
    nonfinite = (
        run.standing()
        .filter(pl.col("value").is_nan() | pl.col("value").is_infinite())
        .group_by("metric")
        .agg(pl.len().alias("n"), pl.col("step").min().alias("first_step"))
    )
    out["non_finite"] = {
        r["metric"]: {"count": int(r["n"]), "first_step": int(r["first_step"])}
        for r in nonfinite.iter_rows(named=True)
    }
    out["restarts"] = [d.details for d in run.data_quality if d.kind == "restart"]
    return out


def _epochs(run: Run) -> dict[str, Any] | None:
    """Training time per epoch, when epochs and wall times are logged."""
    if not run.has("epoch"):
        return None
    ep = (
        run.standing()
        .filter(pl.col("metric") == "epoch")
        .select("step", pl.col("value").alias("epoch"))
        .unique("step", keep="last")
    )
    times = (
        run.standing()
        .filter(pl.col("wall_time").is_not_null())
        .group_by("step")
        .agg(pl.col("wall_time").max())
    )
    joined = ep.join(times, on="step", how="inner").filter(pl.col("epoch").is_finite())
    n_epochs = float(ep.get_column("epoch").max() or 0.0)  # type: ignore[arg-type]
    result: dict[str, Any] = {"count": _f(n_epochs)}
    if joined.height < 2:
        result["seconds_per_epoch"] = None
        return result
    per = (
        joined.with_columns(pl.col("epoch").floor().cast(pl.Int64).alias("e"))
        .group_by("e")
        .agg(
            (pl.col("wall_time").max() - pl.col("wall_time").min()).alias("seconds"),
            pl.len().alias("n"),
        )
        .sort("e")
    )
    result["seconds_per_epoch"] = {str(r["e"]): _f(r["seconds"]) for r in per.iter_rows(named=True)}
    return result
