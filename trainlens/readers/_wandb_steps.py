"""The trainer's own step in a W&B run (private to the W&B run reader).

Lightning's ``WandbLogger`` and HF's ``WandbCallback`` do not pass their step to
``wandb.log``: they log it as a metric (``trainer/global_step``, ``train/global_step``)
and declare it the x axis of every chart (``define_metric(..., step_metric=...)``), so
W&B's ``_step`` counts ``wandb.log`` calls. A run that logs a validation loss, or whose
callbacks log at the same step, moves ``_step`` ahead of the optimizer step by one per
such call: Lightning with a validation every 20 steps was 4 steps ahead by step 40.
Such a run's steps are the trainer's (each record at the trainer step it carries; a
record without one at the last one before it), and the step metric is no metric.
"""

from __future__ import annotations

import polars as pl

from trainlens.core.run import DataIssue

#: Lightning's WandbLogger, HF's WandbCallback
TRAINER_STEP_KEYS = ("trainer/global_step", "train/global_step")


def _names(metric: pl.Series) -> list[str]:
    if isinstance(metric.dtype, pl.Enum):
        return [str(c) for c in metric.dtype.categories.to_list()]
    return [str(c) for c in metric.unique().drop_nulls().to_list()]


def trainer_steps(frame: pl.DataFrame, source: str) -> tuple[pl.DataFrame, DataIssue] | None:
    """``frame`` (step = ``_step``) at the trainer's steps, and a note saying so; None
    when the run logged no trainer step (or one that is no step: not a whole number
    of at least 0 at every record that has it)."""
    names = _names(frame.get_column("metric"))
    key = next((k for k in TRAINER_STEP_KEYS if k in names), None)
    if key is None:
        return None
    metric = pl.col("metric").cast(pl.String)
    marks = (
        frame.filter(metric == key)
        .select("step", pl.col("value").alias("trainer_step"))
        .unique("step", keep="last", maintain_order=True)
        .sort("step")
    )
    values = marks.get_column("trainer_step")
    if values.is_empty() or not bool(
        (values.is_finite() & (values >= 0) & (values == values.floor())).all()
    ):
        return None
    rest = frame.filter(metric != key).with_columns(metric)
    logged = rest.select(pl.col("step").unique().sort())
    mapped = logged.join_asof(marks, on="step", strategy="backward").with_columns(
        pl.col("trainer_step").fill_null(values[0]).cast(pl.Int64)
    )
    step = rest.get_column("step").replace_strict(
        mapped.get_column("step"), mapped.get_column("trainer_step"), return_dtype=pl.Int64
    )
    note = DataIssue(
        kind="trainer-step",
        source=source,
        message=(
            f"steps are the run's {key} (W&B's _step counts wandb.log calls: "
            f"{frame.get_column('step').n_unique()} calls up to trainer step "
            f"{int(values.to_numpy().max())})"
        ),
        severity="info",
    )
    return rest.with_columns(step), note
