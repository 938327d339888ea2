"""One polars pipeline that reads any :class:`~.shapes.Shape` out of a log's lines.

Every line of every shape goes the same way, vectorized over all lines at once: filter by
the shape's hint, match its line pattern (step, total, body), cut the body into fields,
split each field into key and value, then name the metric and fix the value's text
(units, thousands separators, SI suffixes). The result is the long frame ``lineno, field,
step, metric, raw`` that :func:`trainlens.readers.textlog.values.parse` turns into numbers.
``field`` orders the values of one line (file order); lines are ordered by ``lineno``.
"""

from __future__ import annotations

import re

import polars as pl

from trainlens.readers.textlog.shapes import NUM, Shape

LONG_SCHEMA: dict[str, pl.DataType] = {
    "lineno": pl.Int64(),
    "field": pl.Int64(),
    "step": pl.Int64(),
    "metric": pl.String(),
    "raw": pl.String(),
}
_SI = {"K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}


def empty_long() -> pl.DataFrame:
    return pl.DataFrame(schema=LONG_SCHEMA)


def n_lines(long: pl.DataFrame) -> int:
    """How many lines gave at least one value."""
    return int(long.get_column("lineno").n_unique()) if long.height else 0


def _groups(pattern: str) -> list[str]:
    return list(re.compile(pattern).groupindex)


def match(shape: Shape, lines: pl.DataFrame) -> pl.DataFrame:
    """The lines of ``shape`` (from ``lineno, line``), one column per named group of its
    line pattern; ``step`` an Int64 (null where it does not fit 64 bits: reported later)."""
    groups = _groups(shape.line)
    found = (
        lines.select("lineno", pl.col("line").str.extract_groups(shape.line).alias("_g"))
        .unnest("_g")
        # a group every match fills: the step, else the body (else the one field's value)
        .filter(pl.col(next(g for g in ("step", "body", "value") if g in groups)).is_not_null())
    )
    if "step" in groups:
        found = found.with_columns(pl.col("step").cast(pl.Int64, strict=False))
    if shape.step_from is not None:
        found = found.with_columns(shape.step_from().cast(pl.Int64, strict=False).alias("step"))
    return found


def last_total(matched: pl.DataFrame) -> int | None:
    """The run's planned length as the last matched line gives it (``iteration N/ M``)."""
    if "total" not in matched.columns:
        return None
    total = matched.get_column("total").cast(pl.Int64, strict=False).drop_nulls()
    return int(total[-1]) if total.len() else None


def _fields(shape: Shape, matched: pl.DataFrame, offset: int = 0) -> pl.DataFrame:
    """One row per field of each line: the line's columns, ``field`` (its order, from
    ``offset``), ``key``, ``value`` and, where the shape has them, ``unit``."""
    if "body" not in matched.columns:  # the line is one field: key and value groups
        return matched.with_row_index("field", offset=offset)
    body = pl.col("body")
    cut = body.str.split(shape.split) if shape.split is not None else None
    if shape.tokens is not None:
        cut = body.str.extract_all(shape.tokens)
    if cut is None:
        raise ValueError(f"shape {shape.name}: a body needs split or tokens")
    out = matched.with_columns(cut.alias("_f")).drop("body").explode("_f")
    out = out.with_row_index("field", offset=offset)
    if shape.pair is not None:
        kv = pl.col("_f").str.splitn(shape.pair, 2)
        out = out.with_columns(
            kv.struct.field("field_0").str.strip_chars().alias("key"),
            kv.struct.field("field_1").str.strip_chars().alias("value"),
        )
        return _squeeze_key_spaces(out)
    if shape.field is None:
        raise ValueError(f"shape {shape.name}: fields need pair or field")
    return out.with_columns(pl.col("_f").str.extract_groups(shape.field).alias("_kv")).unnest("_kv")


def _squeeze_key_spaces(out: pl.DataFrame) -> pl.DataFrame:
    """Keys hard-wrapped over lines hold runs of white space: one space each (few distinct
    keys, so the fix is computed once per key)."""
    keys = out.get_column("key").drop_nulls().unique().to_list()
    fixed = {k: " ".join(k.split()) for k in keys if " ".join(k.split()) != k}
    return out.with_columns(pl.col("key").replace(fixed)) if fixed else out


def _metric(shape: Shape) -> pl.Expr:
    metric = shape.metric() if shape.metric is not None else pl.col("key")
    if shape.names:
        metric = metric.replace(dict(shape.names))
    for unit, name, _ in reversed(shape.unit_fields):
        metric = pl.when(_unit_value(unit).is_not_null()).then(pl.lit(name)).otherwise(metric)
    return metric


def _unit_value(unit: str) -> pl.Expr:
    """The number of a ``<number> <unit>`` field, null when the field is not one."""
    return pl.col("_f").str.extract(rf"^[ \t]*({NUM})[ \t]*(?:{unit})[ \t]*$", 1)


def _raw(shape: Shape, columns: list[str]) -> pl.Expr:
    raw = pl.col("value")
    if shape.value_fix is not None:
        raw = raw.str.replace(*shape.value_fix)
    if shape.thousands:
        raw = raw.str.replace_all(",", "")
    if shape.units and "unit" in columns:
        raw = raw + pl.col("unit").replace_strict(
            dict(shape.units), default="", return_dtype=pl.String
        ).fill_null("")
    if shape.si:
        raw = _si_raw(raw)
    for unit, _, suffix in reversed(shape.unit_fields):
        number = _unit_value(unit)
        raw = pl.when(number.is_not_null()).then(number + pl.lit(suffix)).otherwise(raw)
    return raw


def _si_raw(raw: pl.Expr) -> pl.Expr:
    """nanotron's human_format values (634K, 11.5K, 85.8G: powers of 1000) as plain
    numbers."""
    si = raw.str.extract(r"^[ \t]*([-+0-9.eE]+)([KMGT])[ \t]*$", 2)
    number = raw.str.extract(r"^[ \t]*([-+0-9.eE]+)[KMGT][ \t]*$", 1).cast(pl.Float64, strict=False)
    scaled = number * si.replace_strict(_SI, default=None, return_dtype=pl.Float64)
    return pl.when(scaled.is_not_null()).then(scaled.cast(pl.String)).otherwise(raw)


def apply(shape: Shape, lines: pl.DataFrame) -> tuple[pl.DataFrame, int | None]:
    """The values of every line of ``shape`` among ``lines`` (``lineno, line``) as the long
    frame, and the run's planned length when the shape gives one."""
    long, total, _ = apply_from(shape, lines, 0)
    return long, total


def apply_from(
    shape: Shape, lines: pl.DataFrame, field_offset: int
) -> tuple[pl.DataFrame, int | None, int]:
    """:func:`apply` on one piece of a file: ``field`` counts on from ``field_offset`` (the
    fields of the pieces before), and the fields of this piece are counted too, so the
    pieces give the numbers the whole file gives."""
    matched = match(shape, lines)
    if matched.height == 0:
        return empty_long(), None, 0
    if shape.step_field is not None:  # (a redrawn line's states share its lineno)
        matched = matched.with_row_index("_seg")
    fields = _fields(shape, matched, field_offset)
    n_fields = fields.height
    keep = pl.col("metric").is_not_null() & pl.col("raw").is_not_null()
    if shape.key_must is not None:
        keep = keep & pl.col("key").str.contains(shape.key_must)
    if shape.skip:
        keep = keep & ~pl.col("key").is_in(list(shape.skip))
    if shape.step_field is not None:
        fields = _step_from_field(fields, shape.step_field)
        keep = keep & (pl.col("key") != shape.step_field)
    step = pl.col("step") if "step" in fields.columns else pl.lit(None, dtype=pl.Int64)
    long = fields.select(
        "lineno",
        pl.col("field").cast(pl.Int64),
        step.alias("step"),
        _metric(shape).alias("metric"),
        _raw(shape, fields.columns).alias("raw"),
        *(["key"] if shape.key_must or shape.skip or shape.step_field else []),
    ).filter(keep)
    if shape.redrawn:  # a bar drawn again without news: its values once per step
        long = long.unique(["step", "metric"], keep="last", maintain_order=True)
    return long.select(list(LONG_SCHEMA)), last_total(matched), n_fields


def _step_from_field(fields: pl.DataFrame, key: str) -> pl.DataFrame:
    """``fields`` with ``step``: the value of the line's field ``key`` (fairseq's
    ``num_updates``, NeMo's ``global_step=39.00``); null on a line without it."""
    value = pl.col("value").str.strip_chars().cast(pl.Float64, strict=False)
    steps = (
        fields.filter(pl.col("key") == key)
        .select("_seg", value.round().cast(pl.Int64, strict=False).alias("step"))
        .unique("_seg", keep="last")
    )
    return fields.drop("step", strict=False).join(
        steps, on="_seg", how="left", maintain_order="left"
    )


def trainer_dict_steps(pairs: pl.DataFrame) -> tuple[pl.DataFrame, int]:
    """Steps for the Hugging Face Trainer's printed dicts, which carry none: the k-th
    training dict (``loss``) is step k, an evaluation dict (``eval_*``) shares the last
    training step, the end-of-training summary (``train_runtime`` ...) becomes
    ``final/<key>`` at the last step, as in the trainer_state.json reader. Other dicts are
    left out. Returns the long frame and how many dicts were placed."""
    kinds = (
        pairs.group_by("lineno", maintain_order=True)
        .agg(
            (pl.col("metric") == "loss").any().alias("_train"),
            pl.col("metric").str.starts_with("eval_").any().alias("_eval"),
            (pl.col("metric") == "train_runtime").any().alias("_final"),
        )
        .with_columns((pl.col("_train") & ~pl.col("_final")).alias("_train"))
        .filter(pl.col("_train") | pl.col("_eval") | pl.col("_final"))
        .with_columns(pl.col("_train").cast(pl.Int64).cum_sum().alias("step"))
    )
    if kinds.height == 0:
        return empty_long(), 0
    long = (
        pairs.drop("step")
        .join(kinds, on="lineno", how="inner")
        .select(
            "lineno",
            "field",
            "step",
            pl.when(pl.col("_final") & ~pl.col("_train"))
            .then(pl.lit("final/") + pl.col("metric"))
            .otherwise(pl.col("metric"))
            .alias("metric"),
            "raw",
        )
    )
    return long, kinds.height
