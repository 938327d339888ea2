"""The step of a table of records that names none of the usual step keys (issue 26, item 2).

A JSON-lines log is read at its ``step`` (or ``global_step``, ``iteration``, ``iter`` …:
:data:`trainlens.readers._wide.STEP_KEYS`). Many are not: the step is in a field of
another name (``train_step``, ``num_updates``, ``batch``), written as text ``"N/M"``
(``{"batch": "10/500"}``, ``{"step": "10/500"}``), counted again from 0 in each epoch
(``{"epoch": 2, "iter": 40}``), or the log has epochs only. Read at the line number,
such a log put every message at a step nobody logged, and an iteration counter that
starts again each epoch was read as a restart.

The step is found by rule, never by naming a framework:

- a column is a step candidate when its name is, or ends in, a step word
  (:data:`STEP_NAMES`: ``train_step``, ``n_iter``, ``optim/steps`` …; not a rate or a
  size: ``steps_per_sec``, ``per_step``, ``batch_size``), and its cells are whole
  numbers (or ``"N/M"`` text, the numerator read and ``M`` kept as the total);
- it must be on nearly every line (90 %) and rise along the file's densest metric: that
  metric's values are at distinct steps, each above the last (90 % of the moves; or one
  move down only, a job launched again and appended). A counter that stays flat
  (``skipped_steps``) or a total (``max_steps``) does not;
- the finest word first (``global_step``, ``step``, ``iteration``, ``iter``, ``update``,
  ``batch``), an epoch count last: an epoch-only log (one line per epoch) is read at its
  epoch, which stays a metric too (as the CSV reader does for Keras' CSVLogger);
- a counter that starts again each time the epoch rises (and only then) is counted over
  the run: ``(epoch - first epoch) × N + counter``, ``N`` the printed total of ``"N/M"``
  or, when none is printed, the largest count logged (plus one logging interval when the
  count starts at 0): the epoch's true length is not in the file, and the note says so.

A guess is told in an info note (kind ``inferred-step``: which reader, which column, why)
and ``Run.metadata["step_column"]``. The check is a few column operations on a frame
already parsed: a file with a numeric ``step`` column costs one name lookup (and, with
an ``epoch`` column beside it, one pass to see whether the step ever goes back).
"""

from __future__ import annotations

import re

import polars as pl

from trainlens.core.dataclass import dataclass, field
from trainlens.core.steps import steps_of

#: step-like words, finest first; epoch-like ones last (the general text reader's too)
STEP_NAMES: tuple[str, ...] = (
    "global_step",
    "step",
    "steps",
    "iteration",
    "iter",
    "it",
    "num_updates",
    "update",
    "updates",
    "batch",
    "epoch",
    "ep",
)
EPOCH_NAMES = frozenset({"epoch", "ep"})
#: share of a step's moves that must go up
RISE = 0.9
#: share of the lines that must carry a guessed step
COVER = 0.9

# the words a compound name may end in (`train_step`, `n_iter`, `optim/steps`)
_WORDS = {
    "step": "step",
    "steps": "steps",
    "iteration": "iteration",
    "iterations": "iteration",
    "iter": "iter",
    "iters": "iter",
    "update": "update",
    "updates": "updates",
    "batch": "batch",
    "batches": "batch",
    "epoch": "epoch",
    "epochs": "epoch",
    # reinforcement learning's count of environment steps (`total timesteps`)
    "timestep": "step",
    "timesteps": "step",
}
_SPLIT = re.compile(r"[_/ .:-]+")
# a word before the step word that makes the name a rate or a duration, not a count (a
# budget such as `max_steps` or `total_steps` is constant: the rise rule refuses it, while
# `total/steps`, OpenAI baselines' running count, is the step)
_NOT_A_COUNT = frozenset({"per", "time", "ms", "sec", "s"})
_FRACTION = r"^\s*([0-9]+)\s*/\s*([0-9]+)\s*$"


def step_word(name: str) -> str | None:
    """The step word ``name`` is or ends in (:data:`STEP_NAMES`), or None."""
    low = name.strip().lower()
    if low in STEP_NAMES:
        return low
    words = [w for w in _SPLIT.split(low) if w]
    if len(words) < 2:
        return None
    last = _WORDS.get(words[-1])
    if last is None or _NOT_A_COUNT & set(words[:-1]):
        return None
    return last


@dataclass
class StepGuess:
    """How a table's step was found: the frame to read (the step column as whole numbers,
    an axis-only counter dropped), the step column, the notes and metadata."""

    df: pl.DataFrame
    step_key: str
    step_name: str
    notes: list[str] = field(default_factory=list)
    metadata: dict[str, object] = field(default_factory=dict)


def resolve(df: pl.DataFrame, known: str | None, what: str = "JSON lines") -> StepGuess | None:
    """The step of ``df`` when a rule finds one the plain reading would miss; None when
    the plain reading stands (``known``, a usual step key, holds numbers that never count
    again from 0 each epoch; or no column qualifies: the line number is the step)."""
    cols = [c for c in df.columns if c != "_line"]
    epoch_col = _epoch_column(cols)
    if known is not None:
        if df.schema[known].is_numeric():
            if epoch_col is None or epoch_col == known:
                return None
            if not bool((df.get_column(known).diff() < 0).any()):
                return None  # (the common case: a step that never goes back)
        return _per_epoch_or_text(df, known, epoch_col, what)
    ranked = sorted(
        (c for c in cols if step_word(c) is not None),
        key=lambda c: (
            step_word(c) in EPOCH_NAMES,
            STEP_NAMES.index(step_word(c) or "step"),
            c.lower() not in STEP_NAMES,
        ),
    )
    densest = _densest(df, set(ranked))
    for col in ranked:
        got = _candidate(df, col, epoch_col, densest, what)
        if got is not None:
            return got
    return None


def _epoch_column(cols: list[str]) -> str | None:
    """The epoch count's column: a name that is an epoch word, else one ending in it."""
    named = [c for c in cols if "ep" in c.lower()]  # (a cheap look first: wide tables)
    exact = next((c for c in named if c.strip().lower() in EPOCH_NAMES), None)
    return exact or next((c for c in named if step_word(c) in EPOCH_NAMES), None)


def _densest(df: pl.DataFrame, skip: set[str]) -> str | None:
    """The numeric column (not a candidate) with the most values: the metric a step must
    rise along."""
    best, most = None, 0
    for c, dt in df.schema.items():
        if c in skip or c == "_line" or not dt.is_numeric():
            continue
        n = df.height - df.get_column(c).null_count()
        if n > most:
            best, most = c, n
    return best


def _whole(df: pl.DataFrame, col: str) -> tuple[pl.Series, int | None] | None:
    """``col`` as Int64 steps and its printed total (``"N/M"``: a constant M), or None
    when a cell is neither a whole number nor ``"N/M"``."""
    s = df.get_column(col)
    total = None
    if s.dtype == pl.String:
        parts = s.str.extract_groups(_FRACTION)
        num = parts.struct.field("1").cast(pl.Int64, strict=False)
        if num.null_count() != s.null_count():
            return None
        of = parts.struct.field("2").cast(pl.Int64, strict=False).drop_nulls()
        if of.len() and of.n_unique() == 1:
            total = int(of[0])
        return num.alias(col), total
    if not (s.dtype.is_numeric()):
        return None
    steps, why = steps_of(s)
    if why.null_count() != why.len():
        return None
    return steps.alias(col), None


def _rises(steps: pl.Series) -> bool:
    d = steps.drop_nulls().diff().drop_nulls()
    if d.len() == 0:
        return False
    up = float((d > 0).mean())  # type: ignore[arg-type]
    return up >= RISE or (int((d < 0).sum()) <= 1 and int((d == 0).sum()) == 0)


def _candidate(
    df: pl.DataFrame, col: str, epoch_col: str | None, densest: str | None, what: str
) -> StepGuess | None:
    got = _whole(df, col)
    if got is None or densest is None:
        return None
    steps, total = got
    if steps.len() - steps.null_count() < max(2, COVER * df.height):
        return None
    along = steps.filter(df.get_column(densest).is_not_null())
    is_epoch = step_word(col) in EPOCH_NAMES
    if not _rises(along):
        if is_epoch or epoch_col is None:
            return None
        return _composed(df, col, steps, total, epoch_col, what)
    word = "an epoch count" if is_epoch else "a step-like name"
    note = (
        f"read as {what} without a usual step key (`step`, `global_step`, `iteration`, "
        f"`iter`): the step is `{col}` ({word}"
        + (", written `N/M`" if df.schema[col] == pl.String else "")
        + ", on every line and rising along the run)"
        + (f"; `{col}` stays a metric too" if is_epoch else "")
        + ". Use --regex to read the file another way"
    )
    meta: dict[str, object] = {"step_column": col}
    if total is not None and not is_epoch:
        meta["max_steps"] = total
    if is_epoch:
        key = "_epoch_step"
        frame = df.with_columns(steps.alias(key))
        if df.schema[col] == pl.String:
            frame = frame.with_columns(steps.cast(pl.Float64).alias(col))
    else:
        key = col
        frame = df.with_columns(steps)
    return StepGuess(frame, key, col, [note], meta)


def _per_epoch_or_text(
    df: pl.DataFrame, known: str, epoch_col: str | None, what: str
) -> StepGuess | None:
    """A usual step key that is ``"N/M"`` text, or counts again from 0 each epoch."""
    got = _whole(df, known)
    if got is None:
        return None  # (text that is no step: reported line by line as bad steps)
    steps, total = got
    if epoch_col is not None and epoch_col != known:
        composed = _composed(df, known, steps, total, epoch_col, what)
        if composed is not None:
            return composed
    if df.schema[known] != pl.String:
        return None
    note = f"read as {what}: the step `{known}` is written `N/M`; N is the step" + (
        f", M ({total}) the run's planned length" if total is not None else ""
    )
    meta: dict[str, object] = {"step_column": known}
    if total is not None:
        meta["max_steps"] = total
    return StepGuess(df.with_columns(steps), known, known, [note], meta)


def _composed(
    df: pl.DataFrame, col: str, steps: pl.Series, total: int | None, epoch_col: str, what: str
) -> StepGuess | None:
    """``col`` counted over the run when it starts again exactly where ``epoch_col``
    rises (a resumed job goes back in its epoch too: not this)."""
    got = _whole(df, epoch_col)
    if got is None:
        return None
    epoch, _ = got
    both = pl.DataFrame({"k": steps, "e": epoch}).drop_nulls()
    if both.height < max(2, COVER * df.height):
        return None
    k, e = both.get_column("k"), both.get_column("e")
    dk, de = k.diff().drop_nulls(), e.diff().drop_nulls()
    drops = dk < 0
    if not bool(drops.any()) or bool((de < 0).any()) or not bool((de.filter(drops) > 0).all()):
        return None
    if total is not None:
        per_epoch, how = total, "the total it prints"
    else:
        gaps = dk.filter(dk > 0)
        interval = int(gaps.median() or 0) if gaps.len() else 0  # type: ignore[arg-type]
        starts_at_zero = int(k.min() or 0) == 0  # type: ignore[arg-type]
        per_epoch = int(k.max() or 0) + (interval if starts_at_zero else 0)  # type: ignore[arg-type]
        how = "the largest count logged" + (
            " plus one logging interval (it counts from 0)" if starts_at_zero else ""
        )
        how += "; the epoch's true length is not in the file"
    first = int(e.min() or 0)  # type: ignore[arg-type]
    key = "_epoch_count_step"
    step = (epoch - first) * per_epoch + steps
    note = (
        f"read as {what}: `{col}` counts within each epoch (it starts again each time "
        f"`{epoch_col}` rises), so the step is ({epoch_col} - {first}) × {per_epoch} + "
        f"{col}, {per_epoch} being {how}. Use --regex to read the file another way"
    )
    frame = df.with_columns(step.alias(key)).drop(col)
    if df.schema[epoch_col] == pl.String:
        frame = frame.with_columns(epoch.cast(pl.Float64).alias(epoch_col))
    meta: dict[str, object] = {"step_column": col, "steps_per_epoch": per_epoch}
    return StepGuess(frame, key, col, [note], meta)
