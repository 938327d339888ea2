"""DeepSpeed engine and DeepSpeed-Chat lines in a plain-text log (used by textlog).

Shapes, all from DeepSpeed's own logger or DeepSpeed-Chat's ``main.py``:

* ``[Rank 0] step=4890, skipped=90, lr=[2.6e-06, 2.6e-06], mom=[...]`` (``steps_per_print``):
  ``lr`` (first param group) and ``skipped steps``, DeepSpeed's running count of steps it
  skipped. ``step=0`` is the engine's report at start-up, before any optimizer step: left out.
* ``[timer.py] epoch=0/micro_step=10/global_step=10, RunningAvgSamplesPerSec=173.4,
  CurrSamplesPerSec=171.9, MemAllocated=3.96GB, MaxMemAllocated=22.95GB``: every
  ``Key=number`` field at the global step; ``CurrSamplesPerSec`` is ``samples_per_sec``,
  ``MemAllocated`` is ``mem/allocated``; ``GB`` (DeepSpeed divides by 1024³) becomes bytes;
  ``epoch`` = E + M / the epoch's micro batches (when DeepSpeed-Chat prints them).
* ``[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to
  32768`` (fp16 dynamic loss scaling; ``but hysteresis is 2`` when the scale is kept): the
  line carries no step, so each logging interval's overflows are placed at the next logged
  step — ``loss_scale``, the scale after the interval's last overflow, and ``overflow
  steps``, how many steps the interval skipped.
* ``***** Evaluating perplexity, Epoch 3/16 *****`` then ``ppl: 1.93``: ``val/perplexity``
  and ``val/loss`` = ln(ppl) (shown as logged ``ln(ppl)``; the printed loss when the line
  is ``ppl: 1.93, loss: 0.66``, as later versions print it) at the last global step logged
  before the evaluation (0 before the first).

Timestamps (``[2023-04-18 01:46:59,171]``) of the step lines become wall times. The file's
Megatron lines, when it has any, are the better record of the same steps (Megatron-DeepSpeed
prints both): textlog uses these shapes only when no Megatron or ``key:value`` line exists.
"""

from __future__ import annotations

import re

import polars as pl

from trainlens.readers.textlog.pipeline import empty_long as _empty
from trainlens.readers.textlog.pipeline import n_lines as _n
from trainlens.readers.textlog.shapes import NUM

_NUM = NUM  # the number every text shape uses (nan/inf in any case, with a sign)

_STEP_LINE = rf"\bstep=([0-9]+),[ \t]*skipped=([0-9]+),[ \t]*lr=\[[ \t]*({_NUM})"
_TIMER = r"\bglobal_step=([0-9]+),[ \t]*(.*)$"
_TIMER_FIELD = rf"([A-Za-z_]+)=({_NUM})(GB|MB)?"
_TIMER_EPOCH = r"\bepoch=([0-9]+)/micro_step=([0-9]+)/global_step="
_EPOCH_HEAD = r"Beginning of Epoch [0-9]+/[0-9]+, Total Micro Batches ([0-9]+)"
# `[deepspeed] OVERFLOW! Rank 0 Skipping step.` (DeepSpeed ≤ 0.9) and `[Rank 0] Overflow
# detected. Skipping step.` (later): the same event
_OVERFLOW = (
    r"(?:\[deepspeed\] OVERFLOW!|Overflow detected\.) .*?Attempted loss scale: "
    rf"({_NUM})(?:, reducing to ({_NUM}))?"
)
_EVAL_HEAD = r"\*+ Evaluating perplexity(?:, Epoch ([0-9]+)/[0-9]+)? \*+"
# `ppl: X`, or `ppl: X, loss: Y` (later DeepSpeed-Chat versions print the eval loss too)
_PPL = rf"^[ \t]*ppl:[ \t]*({_NUM})(?:,[ \t]*loss:[ \t]*({_NUM}))?[ \t]*$"
_STAMP = r"^\[?([0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2})[,.]([0-9]{3})\]?"

# every line of these shapes holds one of these: a cheap pre-filter before the patterns
MARKERS = "|".join(
    re.escape(m)
    for m in (
        "skipped=",
        "global_step=",
        "OVERFLOW!",
        "Overflow detected",
        "Evaluating perplexity",
        "ppl:",
        "Total Micro Batches",
    )
)
# what a sniff looks for (with textlog's own shapes)
SNIFF = rf"(?:{_EVAL_HEAD})|(?:{_OVERFLOW})|(?:{_TIMER})|(?:{_STEP_LINE})"

# the name each metric is shown under ("logged as"), DeepSpeed's words for it
LOGGED_AS = {
    "val/perplexity": "ppl",
    "val/loss": "ln(ppl)",
    "samples_per_sec": "CurrSamplesPerSec",
    "mem/allocated": "MemAllocated",
    "loss_scale": "Attempted loss scale",
    "lr": "lr=[…]",
}
_TIMER_NAMES = {"CurrSamplesPerSec": "samples_per_sec", "MemAllocated": "mem/allocated"}
_UNIT = {"GB": float(1 << 30), "MB": float(1 << 20)}


def _long(df: pl.DataFrame, pairs: list[tuple[str, pl.Expr]]) -> pl.DataFrame:
    """One row per (line, metric) from per-line columns: ``pairs`` of (metric, raw text)."""
    parts = [
        df.select(
            "lineno",
            pl.lit(i, dtype=pl.Int64).alias("field"),
            "step",
            pl.lit(name).alias("metric"),
            expr.alias("raw"),
        )
        for i, (name, expr) in enumerate(pairs)
    ]
    return pl.concat(parts).filter(pl.col("raw").is_not_null()) if parts else _empty()


def _step_lines(lines: pl.DataFrame) -> pl.DataFrame:
    hits = lines.filter(pl.col("line").str.contains(_STEP_LINE)).with_columns(
        pl.col("line").str.extract_groups(_STEP_LINE).alias("_g")
    )
    hits = hits.unnest("_g").with_columns(pl.col("1").cast(pl.Int64).alias("step"))
    hits = hits.filter(pl.col("step") > 0)  # step=0: the start-up report, no step taken
    return _long(hits, [("lr", pl.col("3")), ("skipped steps", pl.col("2"))])


def _timer_lines(lines: pl.DataFrame) -> pl.DataFrame:
    hits = lines.filter(pl.col("line").str.contains(_TIMER)).select(
        "lineno",
        pl.col("line").str.extract(_TIMER, 1).cast(pl.Int64).alias("step"),
        pl.col("line").str.extract(_TIMER, 2).str.extract_all(_TIMER_FIELD).alias("_f"),
    )
    if hits.height == 0:
        return _empty()
    long = (
        hits.explode("_f")
        .with_row_index("field")
        .select(
            "lineno",
            pl.col("field").cast(pl.Int64),
            "step",
            pl.col("_f").str.extract(_TIMER_FIELD, 1).alias("_key"),
            pl.col("_f").str.extract(_TIMER_FIELD, 2).cast(pl.Float64, strict=False).alias("_v"),
            pl.col("_f").str.extract(_TIMER_FIELD, 3).alias("_unit"),
        )
        .filter(pl.col("_key").is_not_null())
    )
    scale = pl.col("_unit").replace_strict(_UNIT, default=1.0, return_dtype=pl.Float64)
    long = long.select(
        "lineno",
        "field",
        "step",
        pl.col("_key").replace(_TIMER_NAMES).alias("metric"),
        (pl.col("_v") * scale).cast(pl.String).alias("raw"),
    )
    return pl.concat([long, _timer_epochs(lines, hits)])


def _timer_epochs(lines: pl.DataFrame, hits: pl.DataFrame) -> pl.DataFrame:
    """``epoch`` from the timer's ``epoch=E/micro_step=M``: E + M / (the epoch's micro
    batches, from DeepSpeed-Chat's ``Beginning of Epoch k/N, Total Micro Batches B``) —
    fractional like the HF Trainer's, 1.0 at the end of the first epoch; E alone (DeepSpeed
    counts from 0) when the epoch's size is not printed."""
    parts = lines.filter(pl.col("lineno").is_in(hits.get_column("lineno").implode())).select(
        "lineno",
        pl.col("line").str.extract(_TIMER_EPOCH, 1).cast(pl.Float64).alias("_e"),
        pl.col("line").str.extract(_TIMER_EPOCH, 2).cast(pl.Float64).alias("_m"),
    )
    sizes = lines.filter(pl.col("line").str.contains(_EPOCH_HEAD)).select(
        "lineno", pl.col("line").str.extract(_EPOCH_HEAD, 1).cast(pl.Float64).alias("_b")
    )
    parts = parts.join_asof(sizes, on="lineno", strategy="backward").join(
        hits.select("lineno", "step"), on="lineno"
    )
    epoch = pl.when(pl.col("_b") > 0).then(pl.col("_e") + pl.col("_m") / pl.col("_b"))
    return _long(
        parts.filter(pl.col("_e").is_not_null()),
        [("epoch", epoch.otherwise(pl.col("_e")).cast(pl.String))],
    ).with_columns(pl.lit(-1, dtype=pl.Int64).alias("field"))


def _attach(rows: pl.DataFrame, steps: pl.DataFrame, strategy: str) -> pl.DataFrame:
    """Give each row (sorted by lineno) the step of the nearest step line after it
    (``forward``) or before it (``backward``)."""
    return rows.join_asof(steps, on="lineno", strategy=strategy)  # type: ignore[arg-type]


def _overflows(lines: pl.DataFrame, steps: pl.DataFrame) -> tuple[pl.DataFrame, int]:
    hits = lines.filter(pl.col("line").str.contains(_OVERFLOW)).select(
        "lineno",
        pl.col("line").str.extract(_OVERFLOW, 1).cast(pl.Float64, strict=False).alias("_tried"),
        pl.col("line").str.extract(_OVERFLOW, 2).cast(pl.Float64, strict=False).alias("_to"),
    )
    if hits.height == 0 or steps.height == 0:
        return _empty(), hits.height
    placed = _attach(hits, steps, "forward")
    # overflows after the last step line belong to the last logged interval
    last = int(steps.get_column("step")[-1])
    placed = placed.with_columns(pl.col("step").fill_null(last))
    per_step = (
        placed.group_by("step", maintain_order=True)
        .agg(
            pl.col("lineno").last(),
            pl.len().alias("_n"),
            pl.coalesce("_to", "_tried").last().alias("_scale"),
        )
        .sort("lineno")
    )
    return _long(
        per_step,
        [
            ("loss_scale", pl.col("_scale").cast(pl.String)),
            ("overflow steps", pl.col("_n").cast(pl.String)),
        ],
    ), hits.height


def _evaluations(lines: pl.DataFrame, steps: pl.DataFrame, has_steps: bool) -> pl.DataFrame:
    head = pl.col("line").str.contains(_EVAL_HEAD)
    marks = lines.filter(head | pl.col("line").str.contains(_PPL)).select(
        "lineno",
        head.alias("_head"),
        pl.col("line").str.extract(_EVAL_HEAD, 1).cast(pl.Int64).alias("_epoch"),
        pl.col("line").str.extract(_PPL, 1).alias("_ppl"),
        pl.col("line").str.extract(_PPL, 2).alias("_loss"),
    )
    if marks.height == 0:
        return _empty()
    # a ppl line belongs to the evaluation header before it; only its first ppl counts
    marks = marks.with_columns(
        pl.col("_head").cum_sum().alias("_n"),
        pl.when(pl.col("_head")).then(pl.col("_epoch")).forward_fill().alias("_of"),
    )
    ppl = (
        marks.filter(pl.col("_ppl").is_not_null() & (pl.col("_n") > 0))
        .unique("_n", keep="first", maintain_order=True)
        .sort("lineno")
    )
    if ppl.height == 0:
        return _empty()
    if has_steps:
        ppl = _attach(ppl, steps, "backward").with_columns(pl.col("step").fill_null(0))
    else:
        ppl = ppl.with_columns(pl.col("_of").alias("step")).filter(pl.col("step").is_not_null())
    ln_ppl = pl.col("_ppl").cast(pl.Float64, strict=False).log().cast(pl.String)
    return _long(
        ppl,
        [
            ("val/perplexity", pl.col("_ppl")),
            # the eval loss as printed; else ln(ppl), which is what it is the exp() of
            ("val/loss", pl.coalesce("_loss", ln_ppl)),
        ],
    )


def logged_as(lines: pl.DataFrame) -> dict[str, str]:
    """The name each metric is shown under; ``val/loss`` is ``ln(ppl)`` unless the file
    prints the evaluation loss itself."""
    out = dict(LOGGED_AS)
    if (
        lines.filter(pl.col("line").str.contains(_PPL))
        .get_column("line")
        .str.contains(r"loss:")
        .any()
    ):
        out["val/loss"] = "loss (after ppl:)"
    return out


def wall_times(lines: pl.DataFrame) -> pl.DataFrame:
    """lineno → wall time (seconds since the epoch, the log's clock read as UTC: only
    differences are used) for lines that start with a DeepSpeed timestamp."""
    stamped = lines.select(
        "lineno",
        pl.col("line").str.extract(_STAMP, 1).alias("_t"),
        pl.col("line").str.extract(_STAMP, 2).cast(pl.Float64, strict=False).alias("_ms"),
    ).filter(pl.col("_t").is_not_null())
    return stamped.select(
        "lineno",
        (
            pl.col("_t")
            .str.to_datetime("%Y-%m-%d %H:%M:%S", strict=False, time_unit="ms")
            .dt.epoch("ms")
            .cast(pl.Float64)
            / 1000.0
            + pl.col("_ms") / 1000.0
        ).alias("wall_time"),
    ).filter(pl.col("wall_time").is_not_null())


def parse(lines: pl.DataFrame) -> tuple[pl.DataFrame, dict[str, int]]:
    """The DeepSpeed shapes of ``lines`` (lineno, line) as textlog's long frame (lineno,
    field, step, metric, raw), and how many lines of each shape were read."""
    step_rows = _step_lines(lines)
    timer_rows = _timer_lines(lines)
    steps = (
        pl.concat([step_rows.select("lineno", "step"), timer_rows.select("lineno", "step")])
        .unique("lineno")
        .sort("lineno")
    )
    overflow_rows, n_overflow = _overflows(lines, steps)
    eval_rows = _evaluations(lines, steps, has_steps=steps.height > 0)
    counts = {
        "deepspeed_steps": _n(step_rows),
        "deepspeed_timer": _n(timer_rows),
        "deepspeed_overflow": n_overflow if steps.height else 0,
        "deepspeed_eval": _n(eval_rows),
    }
    if not steps.height:
        counts["deepspeed_overflow_unplaced"] = n_overflow
    long = pl.concat([step_rows, timer_rows, overflow_rows, eval_rows])
    return long.sort("lineno", "field", maintain_order=True), counts
