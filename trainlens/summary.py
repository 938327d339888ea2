"""The run summary: what a person checks first, computed from the canonical frame."""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import polars as pl

from trainlens.core.frame import MANY_METRICS, MetricViews
from trainlens.core.run import Run
from trainlens.core.stats import median, quantile

# "final" is the last logged value. The mean of the last FINAL_WINDOW values is a
# separate figure (``final_mean_last_k``), given only when those points are at most a
# tenth of the series: over a short log the "last k" is most of the run, and its mean is
# no longer a final value (a 6-point log's mean of 6 mixed the first loss, 284, into it).
FINAL_WINDOW = 10
FINAL_WINDOW_SHARE = 10


def _f(x: float | None) -> float | None:
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def _train_time_segments(run: Run) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Steps, values and segment ids of the logged cumulative ``train_time``; a new
    segment starts where the value falls (the script restarted its timer: modded-nanogpt
    resets it after its 10 compile steps)."""
    s, v = run.series("train_time", finite=True)
    seg = np.r_[0, np.cumsum(np.diff(v) < 0)] if v.size else np.empty(0, dtype=np.int64)
    return s, v, seg


def _train_time_total(run: Run) -> float | None:
    """Seconds the logged ``train_time`` covers: the span of its first segment (as for wall
    times, the time before the first logged line is unknown) plus the whole of every
    segment after a timer restart (each counts from zero)."""
    _, v, seg = _train_time_segments(run)
    if v.size < 2:
        return None
    first = v[seg == 0]
    total = float(first[-1] - first[0])
    for k in range(1, int(seg[-1]) + 1):
        total += float(v[seg == k][-1])
    return total


def _wall_clock(run: Run, standing: pl.DataFrame) -> tuple[float | None, str | None]:
    """Seconds from the first to the last logged value, and where they came from: wall
    times, else the cumulative ``train_time`` a log prints (modded-nanogpt, llm.c)."""
    wall = standing.get_column("wall_time")
    if wall.null_count() < wall.len():
        return _f(float(wall.max()) - float(wall.min())), "wall_time"  # type: ignore[arg-type]
    if run.has("train_time"):
        total = _train_time_total(run)
        if total is not None:
            return _f(total), "train_time"
    return None, None


def _step_times(run: Run) -> tuple[np.ndarray, str | None]:
    """Seconds per step and their source: the logged step_time, else wall-clock deltas per
    step, else deltas of the logged cumulative train_time (within each timer segment)."""
    if run.has("step_time"):
        _, v = run.series("step_time", finite=True)
        return v, "step_time"
    clock = _densest_clock(run)
    if clock is not None:
        steps, wall = clock
        if len(steps) < 2:
            return np.empty(0), None
        dt = np.diff(wall) / np.maximum(np.diff(steps), 1)
        return dt[np.isfinite(dt) & (dt >= 0)], "wall_time"
    if run.has("train_time"):
        s, v, seg = _train_time_segments(run)
        same = (np.diff(seg) == 0) & (np.diff(s) > 0)
        dt = np.diff(v)[same] / np.diff(s)[same]
        return dt[np.isfinite(dt) & (dt >= 0)], "train_time"
    return np.empty(0), None


def _densest_clock(run: Run) -> tuple[np.ndarray, np.ndarray] | None:
    """(steps, wall time) of the clock of the series logged at the most steps (with a
    wall time), its latest time per step (NaNs aside, as polars' max), in step order;
    None when no value has a wall time. A metric sampled on a clock of its own (W&B's
    system metrics, every 15 s, each placed at the last step logged before it) would put
    its later times on the steps it lands on (a W&B run read 11 s mean against a 0.5 ms
    median step). Ties go to the first metric in the metric column's order (its names
    for a Categorical, as a sort of that column gives; the categories' order for an
    Enum). From each metric's standing rows as the run holds them (numpy: the group-bys
    and filters this was cost five polars queries, which polars ran on every core: 2.4 ms of
    CPU of a gated 1,200-step run's 10.3 on a 2-core machine)."""
    dtype = run.frame.schema["metric"]
    names = run.metrics
    if isinstance(dtype, pl.Enum):
        logged = set(names)
        names = [c for c in dtype.categories.to_list() if c in logged]
    best: tuple[int, np.ndarray, np.ndarray] | None = None
    for metric in names:
        cols = run.columns(metric, ("step", "wall_time"))
        if cols is None:
            continue
        step_col, wall_col = cols
        steps = step_col.to_numpy()
        wall = wall_col.to_numpy().astype(np.float64, copy=False)
        if wall_col.null_count():
            keep = wall_col.is_not_null().to_numpy()
            steps, wall = steps[keep], wall[keep]
        if not steps.size:
            continue
        increasing = steps.size < 2 or bool(np.all(steps[1:] > steps[:-1]))
        n = steps.size if increasing else np.unique(steps).size
        if best is None or n > best[0]:
            if not increasing:  # the latest time per step, in step order
                order = np.argsort(steps, kind="stable")
                steps, wall = steps[order], wall[order]
                starts = np.flatnonzero(np.r_[True, steps[1:] != steps[:-1]])
                steps, wall = steps[starts], np.fmax.reduceat(wall, starts)
            best = (n, steps, wall)
    return None if best is None else (best[1], best[2])


def _p95(dt: np.ndarray) -> float:
    """``np.percentile(dt, 95)``, the same float by one partition (core.stats.quantile);
    numpy's own for a zero, whose sign the partition may not keep."""
    q = quantile(dt, 0.95)
    return q if q != 0 else float(np.percentile(dt, 95))


def _step_time_summary(run: Run) -> dict[str, Any] | None:
    dt, source = _step_times(run)
    if dt.size:
        return {
            "mean": _f(dt.mean()),
            "p50": _f(median(dt)),  # (np.median's float, by one partition)
            "p95": _f(_p95(dt)),
            "source": source,
        }
    if run.has("step_time_avg"):
        # only a running mean is logged: its last value is the mean step time
        _, v = run.series("step_time_avg", finite=True)
        if v.size:
            return {"mean": _f(v[-1]), "p50": None, "p95": None, "source": "step_time_avg"}
    return None


def summarize(run: Run, *, perplexity: bool | str = "auto") -> dict[str, Any]:
    """A JSON-ready summary of one run (keys documented in docs/json.md).

    ``perplexity``: ``"auto"`` gives the perplexity of a loss only when the run shows it
    is a per-token language-model loss (:func:`perplexity_basis`); ``True`` always (for
    any loss in range), ``False`` never."""
    standing = run.standing()
    # per metric from its view when nothing is superseded and the metrics are few; else
    # one grouping of the frame (a pass per view is 0.3 ms: minutes for 100k metrics)
    many = len(run.metrics) > MANY_METRICS
    views = run._by_metric() if standing is run.frame and not many else None
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
    wall_clock, wall_source = _wall_clock(run, standing)
    out: dict[str, Any] = {
        "steps": {
            "first": int(steps.min()) if steps.len() else None,  # type: ignore[arg-type]
            "last": int(steps.max()) if steps.len() else None,  # type: ignore[arg-type]
            "count": _distinct_steps(views) if views is not None else int(steps.n_unique()),
        },
        "values": int(run.frame.height),
        "metrics": metrics,
        "wall_clock_seconds": wall_clock,
        "wall_clock_source": wall_source,
        "step_time": _step_time_summary(run),
    }
    for key in ("tokens_per_sec", "samples_per_sec"):
        if run.has(key):
            _, v = run.series(key, finite=True)
            out[key] = (
                {"mean": _f(v.mean()), "p50": _f(median(v)), "last": _f(v[-1])} if v.size else None
            )
        else:
            out[key] = None

    out["epochs"] = _epochs(run)
    token_level, reason = perplexity_basis(run, perplexity)
    out["perplexity"] = {"setting": _setting_text(perplexity), "shown": False, "basis": reason}
    for key, loss in (("train_loss", _train_loss), ("val_loss", _val_loss)):
        entry = loss(run, token_level)
        if entry is not None:  # absent, as before, when the loss has no finite value
            out[key] = entry
    shown = any(
        (out.get(k) or {}).get("final_perplexity") is not None for k in ("train_loss", "val_loss")
    )
    out["perplexity"]["shown"] = shown
    out["non_finite"] = _non_finite(run, many)
    out["restarts"] = [d.details for d in run.data_quality if d.kind == "restart"]
    return out


def _train_loss(run: Run, token_level: bool) -> dict[str, Any] | None:
    if not run.has("train/loss"):
        return None
    s, v = run.series("train/loss", finite=True)
    if not v.size:
        return None
    k = FINAL_WINDOW if v.size >= FINAL_WINDOW * FINAL_WINDOW_SHARE else None
    return {
        "first": _f(v[0]),
        "final": _f(v[-1]),
        "final_step": int(s[-1]),
        "final_mean_last_k": _f(v[-FINAL_WINDOW:].mean()) if k else None,
        "final_window": k,
        "min": _f(v.min()),
        "min_step": int(s[int(np.argmin(v))]),
        "final_perplexity": _perplexity(float(v[-1])) if token_level else None,
    }


def _val_loss(run: Run, token_level: bool) -> dict[str, Any] | None:
    if not run.has("val/loss"):
        return None
    s, v = run.series("val/loss", finite=True)
    if not v.size:
        return None
    best = int(np.argmin(v))
    return {
        "best": _f(v[best]),
        "best_step": int(s[best]),
        "final": _f(v[-1]),
        "final_step": int(s[-1]),
        "final_perplexity": _perplexity(float(v[-1])) if token_level else None,
        "evaluations": int(v.size),
    }


# ---- perplexity: only for a per-token language-model loss -----------------------------------

# A per-token cross-entropy in nats lies between 0 and about ln(vocabulary size) at
# initialisation: ln(50,257) = 10.8 (GPT-2), ln(151,936) = 11.9 (Qwen), ln(250,880) =
# 12.4 (BLOOM). 16 nats is a uniform guess over 8.9 million tokens: a loss above it is a
# sum (over tokens, or over accumulation steps), not a mean per token, and exp() of it
# is no perplexity.
MAX_TOKEN_NATS = 16.0

# raw names that only language-model trainers print for their per-token loss
_LM_LOSS_NAMES = {
    "lm loss": "Megatron `lm loss`",
    "lm_loss": "GPT-NeoX `lm_loss`",
    "lm loss validation": "Megatron `lm loss`",
    "train/lm_loss": "`lm_loss`",
    "trl": "llm.c `trl`",
    "tel": "llm.c `tel`",
}
# text-log shapes only GPT language-model trainers print (readers/textlog.py): llm.c and
# modded-nanogpt `key:value` lines, nanoGPT's `iter N: loss`, build-nanogpt's / llm.c's
# `step N | loss`
_LM_TEXT_SHAPES = frozenset({"key_value", "nanogpt", "build_nanogpt"})
# an accuracy beside the loss: a classifier (val/accuracy, val/g0_accuracy, top1_acc) —
# unless it is a token accuracy (TRL's mean_token_accuracy), which is an LM's
_ACCURACY = re.compile(r"(?:^|[/_])(?:accuracy|acc)$")
# metrics a run logs only when its loss is per token: a perplexity of its own, or a count
# or rate of tokens (tokens_per_sec, HF num_input_tokens_seen, TRL num_tokens)
_LM_SIGNS = re.compile(r"perplexity|ppl|token")


def _setting_text(setting: bool | str) -> str:
    if isinstance(setting, bool):
        return "true" if setting else "false"
    return setting


def _perplexity(loss: float) -> float | None:
    if not 0.0 <= loss <= MAX_TOKEN_NATS:
        return None
    return _f(math.exp(loss))


def perplexity_basis(run: Run, setting: bool | str = "auto") -> tuple[bool, str]:
    """Whether exp(loss) is a perplexity for this run, and why (said in the summary).

    ``setting`` True/False is the user's word (config ``perplexity``). ``"auto"``: yes
    only with a sign of a per-token language-model loss — the loss has a name only LM
    trainers print (Megatron ``lm loss``, NeoX ``lm_loss``, llm.c ``trl``/``tel``), the
    log is an llm.c / modded-nanogpt ``step:N/M`` log or a nanoGPT / build-nanogpt one,
    or the run logs a perplexity or a token count or rate itself (a metric named with
    ``perplexity``, ``ppl`` or ``token``)
    — and no accuracy other than a token accuracy is logged (a classifier's cross-entropy
    is per example, its exp() no perplexity). In every case a loss outside 0–16 nats
    (``MAX_TOKEN_NATS``) gets none."""
    if setting is True:
        return True, "config: perplexity = true"
    if setting is False:
        return False, "config: perplexity = false"
    metrics = run.metrics
    accuracy = [m for m in metrics if _ACCURACY.search(m) and "token" not in m]
    if accuracy:
        return False, f"not a language-model loss: {accuracy[0]} is logged (a classifier)"
    for metric in ("train/loss", "val/loss"):
        raw = run.raw_names.get(metric, metric).strip().lower()
        if raw in _LM_LOSS_NAMES:
            return True, f"{_LM_LOSS_NAMES[raw]} is a per-token language-model loss"
    shapes = run.metadata.get("text_shapes") or {}
    if run.format == "text" and shapes.keys() & _LM_TEXT_SHAPES:
        return True, "an llm.c / nanoGPT / modded-nanogpt log: its loss is per token"
    signs = [m for m in metrics if _LM_SIGNS.search(m.lower())]
    if signs:
        return True, f"the run logs {signs[0]}, so its loss is per token"
    return False, "no sign that the loss is a per-token language-model loss"


# ---- per-metric numbers: from the per-metric views when nothing is superseded --------------


def _increasing(steps: np.ndarray) -> bool:
    return steps.size < 2 or bool(np.all(steps[1:] > steps[:-1]))


def _step_arrays(views: MetricViews) -> dict[str, np.ndarray]:
    # (the step columns only: cutting every metric's view frame cost ~10 µs a metric)
    return {m: views.steps(m) for m in views}


def _metric_counts(run: Run, views: MetricViews | None) -> dict[str, tuple[int, int]]:
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


def _distinct_steps(views: MetricViews) -> int:
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


def _non_finite(run: Run, many: bool | None = None) -> dict[str, dict[str, int]]:
    """metric -> count and first step of its NaN/±inf standing values (``many``: more
    than MANY_METRICS metrics, known to the caller)."""
    if run.all_finite():
        return {}
    if many is None:
        many = len(run.metrics) > MANY_METRICS
    if many:
        if run.standing().get_column("value").is_finite().all():
            return {}
    elif all(v.get_column("value").is_finite().all() for v in run._by_metric().values()):
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
        # one point is no duration: HF logs the end of the last epoch as its exact number
        # (epoch 3.0 at the final step), which is no epoch 3 that took 0 s
        .filter(pl.col("n") >= 2)
        .sort("e")
    )
    result["seconds_per_epoch"] = {str(r["e"]): _f(r["seconds"]) for r in per.iter_rows(named=True)}
    return result
