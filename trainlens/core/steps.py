"""What a step is, for every reader: a whole number that fits the frame's Int64.

A value in a step column that is no such number — ``1.5``, ``-1.5``, ``2**63``,
``1e66``, ``NaN``, ``"abc"``, ``true`` — is never rounded or clamped into one: the record
(line, row, history record) it is on is skipped, its values counted in a ``bad-step``
note that says where and why (:func:`bad_step_note`). A whole number written as a float
(``6.0``, ``1e3``) is that number.

Negative steps: TensorBoard's and MLflow's writers take any int64 (torch's SummaryWriter
writes ``-1`` when asked) and a hand-rolled JSONL or CSV may log a step ``-1`` before
training, so those readers keep them. W&B's SDK never writes one: ``run.log(..., step=-1)``
writes no record at all (measured, wandb 0.31: the SDK drops a step below the current
one, and a run starts at 0), so a negative ``_step`` in a ``.wandb`` log is damage and is
skipped (``negative=False``); HF's ``global_step`` counts from 0 likewise.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

import polars as pl

from trainlens.core.frame import DataIssue

MAX_STEP = 2**63 - 1
MIN_STEP = -(2**63)
# the largest float below 2**63: a float step must be below it to fit the Int64
_FLOAT_LIMIT = float(2**63 - 1024)
_INTEGER_TEXT = re.compile(r"^[+-]?[0-9]+$")

NOT_A_NUMBER = "not a number"
NOT_FINITE = "NaN or infinite"
NOT_WHOLE = "not a whole number"
TOO_LARGE = "beyond 64 bits"
NEGATIVE = "negative"


def step_of(value: object, *, negative: bool = True) -> int | str:
    """The step ``value`` (an int, a float or the text of a number) stands for, or why it
    stands for none (one of the reasons above)."""
    if isinstance(value, bool) or value is None:
        return NOT_A_NUMBER
    if isinstance(value, str):
        text = value.strip()
        if _INTEGER_TEXT.match(text):
            value = int(text)
        else:
            try:
                value = float(text)
            except ValueError:
                return NOT_A_NUMBER
    if isinstance(value, float):
        if not math.isfinite(value):
            return NOT_FINITE
        if value != math.floor(value):
            return NOT_WHOLE
        if abs(value) > _FLOAT_LIMIT:
            return TOO_LARGE
        value = int(value)
    if not isinstance(value, int):
        return NOT_A_NUMBER
    if not MIN_STEP <= value <= MAX_STEP:
        return TOO_LARGE
    if value < 0 and not negative:
        return NEGATIVE
    return value


def steps_of(column: pl.Series, *, negative: bool = True) -> tuple[pl.Series, pl.Series]:
    """A column of steps as Int64 (null where a cell is no step) and, per row, why not
    (null where the step is good or the cell was empty). Integer columns pass as they
    are; text is parsed exactly (an integer's digits never go through a float)."""
    name = column.name
    if column.dtype.is_integer():
        step = column.cast(pl.Int64, strict=False)  # (a UInt64 beyond Int64: null)
        why = pl.Series(name, [None] * column.len(), dtype=pl.String)
        why = why.set(step.is_null() & column.is_not_null(), TOO_LARGE)
        return _negatives(step, why, negative)
    if column.dtype == pl.String:
        text = column.str.strip_chars()
        is_int = text.str.contains(r"^[+-]?[0-9]+$")
        as_int = text.cast(pl.Int64, strict=False)
        step = pl.select(pl.when(is_int).then(as_int)).to_series()
        too_large = (is_int & as_int.is_null()).fill_null(False)
        as_float = text.cast(pl.Float64, strict=False)
        rest = ~is_int.fill_null(True)
    elif column.dtype.is_float():
        as_float = column.cast(pl.Float64)
        step = pl.Series(name, [None] * column.len(), dtype=pl.Int64)
        too_large = pl.Series(name, [False] * column.len())
        rest = column.is_not_null()
    else:  # booleans, lists, objects: no step
        why = pl.Series(name, [None] * column.len(), dtype=pl.String)
        return pl.Series(name, [None] * column.len(), dtype=pl.Int64), why.set(
            column.is_not_null(), NOT_A_NUMBER
        )
    finite = as_float.is_finite().fill_null(False)
    whole = finite & (as_float == as_float.floor()).fill_null(False)
    fits = whole & (as_float.abs() <= _FLOAT_LIMIT).fill_null(False)
    from_float = pl.select(pl.when(rest & fits).then(as_float.cast(pl.Int64, strict=False)))
    step = step.zip_with(step.is_not_null(), from_float.to_series()).alias(name)
    why = (
        pl.select(
            pl.when(too_large)
            .then(pl.lit(TOO_LARGE))
            .when(~rest | fits)
            .then(None)
            .when(as_float.is_null())
            .then(pl.lit(NOT_A_NUMBER))
            .when(~finite)
            .then(pl.lit(NOT_FINITE))
            .when(~whole)
            .then(pl.lit(NOT_WHOLE))
            .otherwise(pl.lit(TOO_LARGE))
        )
        .to_series()
        .alias(name)
    )
    why = why.set(column.is_null(), None)
    return _negatives(step, why, negative)


def _negatives(step: pl.Series, why: pl.Series, negative: bool) -> tuple[pl.Series, pl.Series]:
    if negative:
        return step, why
    below = (step < 0).fill_null(False)
    if not below.any():
        return step, why
    return step.set(below, None), why.set(below, NEGATIVE)


def bad_step_note(
    *,
    source: str,
    unit: str,
    where: Sequence[int | str],
    n_values: int,
    n_records: int,
    reasons: Counter[str],
    key: str | None,
) -> DataIssue:
    """The note for values skipped because their record has no usable step: how many,
    from how many records (``unit``: line, row, record at byte…), the first few places,
    and why (each reason with its count)."""
    shown = ", ".join(map(str, where[:5])) + ("…" if n_records > len(where[:5]) else "")
    why = ", ".join(f"{r}: {n}" for r, n in reasons.most_common())
    return DataIssue(
        kind="bad-step",
        source=source,
        location=f"{unit} {where[0]}" if where else None,
        message=(
            f"{n_values} value(s) on {n_records} {unit}(s) without a usable step "
            f"({why or 'missing'}; a step is a whole number within 64 bits) were skipped "
            f"({unit}s {shown})"
        ),
        count=n_values,
        details={
            unit + "s": list(where[:100]),
            "values": n_values,
            "key": key,
            "reasons": dict(reasons),
        },
    )
