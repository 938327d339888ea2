"""A user's regular expression (``ReadOptions.regex``) for a log shape textlog does not
know: group ``step`` is the step, every other named group a metric of that name; only it
is used when given. It is a Python regex, so it is applied line by line."""

from __future__ import annotations

import re

import polars as pl

from trainlens.core.errors import UsageError
from trainlens.readers.textlog.notes import Notes
from trainlens.readers.textlog.pipeline import LONG_SCHEMA, empty_long


def compile_regex(pattern: str) -> re.Pattern[str]:
    try:
        rx = re.compile(pattern)
    except re.error as exc:
        raise UsageError(f"the regex {pattern!r} does not compile: {exc}") from None
    if "step" not in rx.groupindex:
        raise UsageError(
            f"the regex {pattern!r} has no named group `step`; write (?P<step>\\d+) "
            "where the step number is"
        )
    if len(rx.groupindex) < 2:
        raise UsageError(
            f"the regex {pattern!r} names no metric: add a named group per metric, "
            "e.g. (?P<loss>[0-9.eE+-]+)"
        )
    return rx


def _matches(
    lines: list[str], rx: re.Pattern[str], names: list[str], notes: Notes
) -> pl.DataFrame | None:
    """One row per matching line: ``lineno``, ``_step`` and each metric's text."""
    linenos: list[int] = []
    steps: list[str | None] = []
    cols: dict[str, list[str | None]] = {n: [] for n in names}
    unmatched = 0
    first_unmatched: int | None = None
    for i, line in enumerate(lines, start=1):  # a Python regex: line by line
        m = rx.search(line)
        if m is None:
            if line.strip():
                unmatched += 1
                first_unmatched = first_unmatched or i
            continue
        linenos.append(i)
        steps.append(m.group("step"))
        for n in names:
            cols[n].append(m.group(n))
    if unmatched:
        notes.add(
            "unmatched-line",
            f"{unmatched} non-empty line(s) did not match the regex and were skipped",
            line=first_unmatched or 0,
            count=unmatched,
            severity="info",
        )
    if not linenos:
        return None
    return pl.DataFrame(
        {"lineno": linenos, "_step": steps, **cols},
        schema={"lineno": pl.Int64, "_step": pl.String, **dict.fromkeys(names, pl.String)},
    )


def parse(lines: list[str], pattern: str, notes: Notes) -> pl.DataFrame:
    """The long frame (``lineno, field, step, metric, raw``) of the lines ``pattern``
    matches."""
    rx = compile_regex(pattern)
    names = [n for n, _ in sorted(rx.groupindex.items(), key=lambda kv: kv[1]) if n != "step"]
    wide = _matches(lines, rx, names, notes)
    if wide is None:
        return empty_long()
    step_f = pl.col("_step").str.strip_chars().cast(pl.Float64, strict=False)
    wide = wide.with_columns(
        # (within 64 bits: a 20-digit step skips its line, with the note below)
        pl.when(step_f.is_finite() & (step_f == step_f.round(0)) & (step_f.abs() < 2.0**63))
        .then(step_f)
        .otherwise(None)
        .cast(pl.Int64)
        .alias("step")
    )
    bad = wide.filter(pl.col("step").is_null())
    if bad.height:
        notes.add(
            "bad-step",
            f"{bad.height} matched line(s) have a step that is not a whole number "
            f"within 64 bits (first: {bad.get_column('_step')[0]!r}); their values "
            "were skipped",
            line=int(bad.get_column("lineno")[0]),
            count=bad.height,
        )
        wide = wide.filter(pl.col("step").is_not_null())
    return (
        wide.unpivot(index=["lineno", "step"], on=names, variable_name="metric", value_name="raw")
        .with_columns(
            pl.col("metric")
            .replace_strict({n: i for i, n in enumerate(names)}, return_dtype=pl.Int64)
            .alias("field")
        )
        .filter(pl.col("raw").is_not_null())
        .select(list(LONG_SCHEMA))
        .sort("lineno", "field")
    )
