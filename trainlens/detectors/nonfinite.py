"""Non-finite values: the first NaN or ±Inf of each metric.

What it flags
    NAN001 ``non-finite-value``: for each metric, the first step whose value is NaN or
    ±Inf, how many there are, and whether finite values came back afterwards.

Why it matters
    A NaN loss or gradient poisons every weight it touches; after it the run is usually
    dead, and every later number is meaningless. The first step is where to look (the
    batch, the LR, the loss scale at that step), and what moved just before it (see the
    GRAD findings) is usually the cause.

Default thresholds
    Any non-finite value counts (there is no threshold to tune). Severity: error for the
    training or validation loss when it does not recover; warning when finite values
    come back or for other metrics; info for gradient norms that are Inf on isolated
    steps while a loss scale is logged — fp16 dynamic loss scaling skips those steps by
    design (Micikevicius et al. 2018, "Mixed Precision Training"; Megatron counts them as
    "skipped iterations").

Known false positives
    fp16 loss-scale overflow steps without a logged loss scale look like Inf gradient
    norms (reported as warnings, since finite values return). Metrics that are NaN by
    convention before their first computation (modded-nanogpt prints ``step_avg:nanms``
    on its first steps) are reported as info only: non-finite values that all come
    before the metric's first finite value.

Example
    ``ERROR  NAN001  steps 812–830  train/loss became NaN at step 812 (19 non-finite
    values, never finite again); look at the batch and the LR at step 812 and what
    spiked before it.``
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from trainlens.core.dataclass import dataclass
from trainlens.core.findings import Finding
from trainlens.core.frame import MANY_METRICS
from trainlens.core.run import Run
from trainlens.detectors.base import Context, Skip, finding

CODES = {"NAN001": "non-finite-value"}

LOSSES = ("train/loss", "val/loss")


@dataclass(frozen=True)
class Params:
    #: report at most this many metrics (the rest are summarized in the last finding)
    max_metrics: int = 20


def detect(run: Run, params: Params, ctx: Context) -> list[Finding]:
    standing = run.standing()
    if standing.height == 0:
        raise Skip("no values")
    if run.all_finite():
        return []
    if len(run.metrics) > MANY_METRICS:  # a pass per view would be minutes for 100k
        if standing.get_column("value").is_finite().all():
            return []
        return _grouped(run, standing, params)
    # the usual case, every value finite, decided on the per-metric views (no copy, no
    # grouping); otherwise the grouping below finds where
    views = run._by_metric()
    rows = []
    for metric, v in views.items():
        if v.get_column("value").is_finite().all():
            continue
        # only the metrics with non-finite values are looked at, one view each
        r = v.with_columns(_BAD).select(_per_metric()).row(0, named=True)
        if r["n_bad"] > 0:
            rows.append({"metric": metric, **r})
    rows.sort(key=lambda r: (r["first"], r["metric"]))
    return _findings(run, rows, params)


_BAD = (pl.col("value").is_nan() | pl.col("value").is_infinite()).alias("_bad")


def _per_metric() -> list[pl.Expr]:
    """What is told about one metric's non-finite values."""
    return [
        pl.col("_bad").sum().alias("n_bad"),
        pl.col("step").filter(pl.col("_bad")).min().alias("first"),
        pl.col("step").filter(pl.col("_bad")).max().alias("last_bad"),
        pl.col("step").filter(~pl.col("_bad")).max().alias("last_good"),
        pl.col("step").filter(~pl.col("_bad")).min().alias("first_good"),
        pl.col("value").filter(pl.col("_bad")).first().alias("kind"),
        pl.len().alias("n"),
    ]


def _grouped(run: Run, standing: pl.DataFrame, params: Params) -> list[Finding]:
    """The findings from grouping the standing values by metric (the general path)."""
    per = (
        standing.with_columns(_BAD)
        .group_by("metric")
        .agg(_per_metric())
        .filter(pl.col("n_bad") > 0)
    )
    # sorted here as the per-view path sorts (a Categorical sorts by its codes in polars)
    rows = sorted(per.iter_rows(named=True), key=lambda r: (r["first"], str(r["metric"])))
    return _findings(run, rows, params)


def _findings(run: Run, rows: list[dict[str, Any]], params: Params) -> list[Finding]:
    """NAN001 findings from one row per metric with non-finite values (by first step)."""
    if not rows:
        return []
    has_scale = run.has("loss_scale")
    # the losses are told first whatever their names sort as: with more than max_metrics
    # series going NaN at one step, `train/loss` sorted after the `grad_norm/...` series
    # and its error was folded into the summary warning (seen on a monitored tiny GPT)
    shown = {id(r) for r in sorted(rows, key=_told_first)[: params.max_metrics]}
    rest = [r for r in rows if id(r) not in shown]
    out: list[Finding] = []
    for r in (r for r in rows if id(r) in shown):
        metric = r["metric"]
        first, last_bad = int(r["first"]), int(r["last_bad"])
        recovered = r["last_good"] is not None and int(r["last_good"]) > last_bad
        kind = "NaN" if np.isnan(r["kind"]) else ("+Inf" if r["kind"] > 0 else "-Inf")
        n_bad = int(r["n_bad"])
        is_loss = _is_loss(metric)
        is_grad = metric == "grad_norm" or metric.startswith("grad_norm/")
        # non-finite only before the first finite value: a metric logged before it is
        # computed (a running mean printed as nan on the first steps), not a divergence
        leading = r["first_good"] is not None and last_bad < int(r["first_good"])
        if leading:
            severity = "info"
        elif is_loss and not recovered:
            severity = "error"
        elif is_grad and has_scale and recovered:
            severity = "info"
        else:
            severity = "warning"
        tail = "finite values came back afterwards" if recovered else "never finite again"
        if leading:
            advice = "only before its first finite value: logged before it was computed?"
        elif severity == "info":
            advice = "fp16 loss scaling skips such steps; check the loss scale kept up"
        else:
            advice = f"look at the batch and the LR at step {first} and at what spiked before it"
        out.append(
            finding(
                "NAN001",
                CODES["NAN001"],
                severity,
                f"{metric} became {kind} at step {first} ({n_bad} non-finite value"
                f"{'s' if n_bad != 1 else ''}, {tail}); {advice}.",
                metric=metric,
                step_start=first,
                step_end=last_bad,
                first_step=first,
                last_step=last_bad,
                count=n_bad,
                of=int(r["n"]),
                kind=kind,
                recovered=recovered,
                leading_only=leading,
            )
        )
    if rest:
        out.append(
            finding(
                "NAN001",
                CODES["NAN001"],
                "warning",
                f"{len(rest)} more metrics hold non-finite values (first at step "
                f"{min(int(r['first']) for r in rest)}).",
                step_start=min(int(r["first"]) for r in rest),
                metrics=[r["metric"] for r in rest],
            )
        )
    return out


def _is_loss(metric: str) -> bool:
    return metric in LOSSES or metric.startswith("val/loss/")


def _told_first(r: dict[str, Any]) -> tuple[bool, int, str]:
    """Losses before the rest, then by first step and name."""
    return (not _is_loss(r["metric"]), int(r["first"]), r["metric"])
