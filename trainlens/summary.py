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
    views = run._by_metric() if standing is run.frame else None
    counts = _metric_counts(run, views)
    metrics = {
        m: {
            "values": values,
            "steps": steps,
            "logged_as": run.raw_names.get(m, m),
        }
        for m, (values, steps) in counts.items()
    }
    steps = standing.get_column("step")
    wall = standing.get_column("wall_time")
    has_wall = wall.null_count() < wall.len()
    out: dict[str, Any] = {
        "steps": {
            "first": int(steps.min()) if steps.len() else None,  # type: ignore[arg-type]
            "last": int(steps.max()) if steps.len() else None,  # type: ignore[arg-type]
            "count": _distinct_steps(views) if views is not None else int(steps.n_unique()),
        },
        "values": int(run.frame.height),
        "metrics": metrics,
        "wall_clock_seconds": _f(float(wall.max()) - float(wall.min())) if has_wall else None,  # type: ignore[arg-type]
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
    out["non_finite"] = _non_finite(run)
    out["restarts"] = [d.details for d in run.data_quality if d.kind == "restart"]
    return out


# ---- per-metric numbers: from the per-metric views when nothing is superseded --------------


def _increasing(steps: np.ndarray) -> bool:
    return steps.size < 2 or bool(np.all(steps[1:] > steps[:-1]))


def _step_arrays(views: dict[str, pl.DataFrame]) -> dict[str, np.ndarray]:
    return {m: v.get_column("step").to_numpy() for m, v in views.items()}


def _metric_counts(run: Run, views: dict[str, pl.DataFrame] | None) -> dict[str, tuple[int, int]]:
    """metric -> (values, distinct steps) over the whole frame, sorted by metric."""
    if views is not None:
        out: dict[str, tuple[int, int]] = {}
        for m, st in sorted(_step_arrays(views).items()):
            n = int(st.size)
            out[m] = (n, n if _increasing(st) else int(pl.Series(st).n_unique()))
        return out
    counts = (
        run.frame.group_by("metric")
        .agg(pl.len().alias("values"), pl.col("step").n_unique().alias("steps"))
        .sort("metric")
    )
    return {r["metric"]: (int(r["values"]), int(r["steps"])) for r in counts.iter_rows(named=True)}


def _distinct_steps(views: dict[str, pl.DataFrame]) -> int:
    """Distinct steps over all metrics; metrics that share one step buffer (a wide table's
    step column, cut per metric) are counted once."""
    arrays: dict[tuple[int, int], np.ndarray] = {}
    for st in _step_arrays(views).values():
        arrays.setdefault((st.__array_interface__["data"][0], st.size), st)
    parts = sorted(arrays.values(), key=lambda a: -a.size)
    if not parts:
        return 0
    # metrics logged on the same lines repeat the densest one's steps in their own
    # buffers: comparing is far cheaper than hashing them all
    densest = parts[0]
    rest = [a for a in parts[1:] if not np.array_equal(a, densest)]
    if not _increasing(densest):
        return int(pl.Series(np.concatenate([densest, *rest])).n_unique())
    if not rest:
        return int(densest.size)
    # the densest metric's steps, and the others' steps it does not have
    other = np.concatenate(rest)
    at = np.minimum(np.searchsorted(densest, other), densest.size - 1)
    new = other[densest[at] != other]
    return int(densest.size) + (int(pl.Series(new).n_unique()) if new.size else 0)


def _non_finite(run: Run) -> dict[str, dict[str, int]]:
    """metric -> count and first step of its NaN/±inf standing values."""
    views = run._by_metric()
    if all(v.get_column("value").is_finite().all() for v in views.values()):
        return {}
    nonfinite = (
        run.standing()
        .filter(pl.col("value").is_nan() | pl.col("value").is_infinite())
        .group_by("metric")
        .agg(pl.len().alias("n"), pl.col("step").min().alias("first_step"))
    )
    # in name order: group_by's own order changes from one run to the next
    rows = sorted(nonfinite.iter_rows(named=True), key=lambda r: str(r["metric"]))
    return {r["metric"]: {"count": int(r["n"]), "first_step": int(r["first_step"])} for r in rows}


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
