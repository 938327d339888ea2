"""Read every built-in shape (:data:`~.shapes.SHAPES`, then DeepSpeed's) out of a log.

Several shapes may share one file. Printed Trainer dicts carry no step and are used only
when no shape with real steps is in the file; DeepSpeed's engine lines only when no
Megatron or ``key:value`` line is (Megatron-DeepSpeed prints both: its own lines are the
record).
"""

from __future__ import annotations

import re
from typing import Any

import polars as pl

from trainlens.readers.textlog import deepspeed
from trainlens.readers.textlog import notes as dq
from trainlens.readers.textlog.notes import Notes
from trainlens.readers.textlog.pipeline import apply, empty_long, n_lines, trainer_dict_steps
from trainlens.readers.textlog.shapes import MEG_MARK, SHAPES, Shape

_MAX_WRAPPED_LINES = 5
_MEG_MARK_RE = re.compile(MEG_MARK)
# a wrapped continuation: `<part of a key>: value | ...` with no new iteration in it
_MEG_CONTINUATION = re.compile(r"^[^|\[]*:[^|]*\|")


def parse(lines: pl.Series, notes: Notes, meta: dict[str, Any]) -> pl.DataFrame:
    """The long frame (``lineno, field, step, metric, raw``, and ``wall_time`` when
    DeepSpeed timestamps give one) of every known shape in ``lines``; sets
    ``meta["text_shapes"]`` (lines per shape) and ``max_steps``."""
    df = (
        join_wrapped_megatron(lines)
        .to_frame("line")
        .with_row_index("lineno", offset=1)
        .with_columns(pl.col("lineno").cast(pl.Int64))
    )
    found: dict[str, list[pl.DataFrame]] = {}
    stepless: list[pl.DataFrame] = []
    total: int | None = None
    hinted: dict[str, pl.DataFrame] = {}  # shapes that share a hint filter the lines once
    for shape in SHAPES:
        hint = shape.hint or shape.line
        if hint not in hinted:
            hinted[hint] = df.filter(pl.col("line").str.contains(hint))
        lines_of = hinted[hint]
        _note_unplaced(shape, df, notes)
        if lines_of.height == 0:
            continue
        long, shape_total = apply(shape, lines_of)
        (stepless if shape.stepless else found.setdefault(shape.name, [])).append(long)
        total = total if total is not None else shape_total
    parts = {name: pl.concat(longs) for name, longs in found.items()}
    shapes = {name: n_lines(long) for name, long in parts.items()}
    used = list(parts.values())
    if stepless:
        used += _trainer_dicts(pl.concat(stepless), shapes, notes)
    meta["text_shapes"] = {k: v for k, v in shapes.items() if v}
    if total is not None:
        meta["max_steps"] = total
    out = pl.concat(used or [empty_long()], how="vertical").sort(
        "lineno", "field", maintain_order=True
    )
    out = dq.drop_mfu_placeholder(out, notes)
    out = dq.drop_huge_steps(out, notes)
    return _with_deepspeed(df, out, notes, meta)


def _note_unplaced(shape: Shape, df: pl.DataFrame, notes: Notes) -> None:
    if shape.unplaced is None:
        return
    pattern, why = shape.unplaced
    unplaced = df.filter(pl.col("line").str.contains(pattern))
    if unplaced.height:
        notes.ignored(unplaced.height, why, line=int(unplaced.get_column("lineno")[0]))


def _trainer_dicts(pairs: pl.DataFrame, shapes: dict[str, int], notes: Notes) -> list[pl.DataFrame]:
    """The printed Trainer dicts, placed at inferred steps when no other shape has lines."""
    long, n_dicts = trainer_dict_steps(pairs)
    if not n_dicts:
        return []
    used = not any(shapes.values())
    dq.trainer_dicts(notes, n_dicts, used=used)
    if not used:
        return []
    shapes["trainer_dict"] = n_dicts
    return [long]


def _with_deepspeed(
    df: pl.DataFrame, found: pl.DataFrame, notes: Notes, meta: dict[str, Any]
) -> pl.DataFrame:
    """Add the DeepSpeed engine / DeepSpeed-Chat lines when no Megatron or ``key:value``
    line is in the file (Megatron-DeepSpeed prints both; its own lines are the record)."""
    shapes = meta["text_shapes"]
    # one pass over literal markers (0.04 s on a 1M-line llm.c log; contains_any took
    # 0.14 s), then the patterns on the few lines that hold one
    marked = df.filter(pl.col("line").str.contains(deepspeed.MARKERS))
    if not marked.height:
        return found
    if shapes.get("megatron") or shapes.get("key_value"):
        n_lines = marked.filter(pl.col("line").str.contains(deepspeed.SNIFF)).height
        if n_lines:
            notes.ignored(
                n_lines,
                "DeepSpeed engine line(s) were left out: the file's "
                "Megatron / key:value lines record the same steps",
            )
        return found
    ds, counts = deepspeed.parse(marked)
    if not sum(counts.values()):
        return found
    if shapes.pop("trainer_dict", None):
        found = found.head(0)  # printed dicts carry no step; these lines do
    dq.deepspeed(notes, counts)
    shapes.update({k: v for k, v in counts.items() if v})
    meta["_logged_as"] = deepspeed.logged_as(marked)
    walls = deepspeed.wall_times(marked)
    out = pl.concat([found, ds]).sort("lineno", "field", maintain_order=True)
    return out.join(walls, on="lineno", how="left")


def join_wrapped_megatron(lines: pl.Series) -> pl.Series:
    """Join an iteration line hard-wrapped over a few lines (as when copied from a
    terminal into notes) back into one; the continuation lines become empty so line
    numbers stay right."""
    broken = (
        lines.str.contains(MEG_MARK) & ~lines.str.strip_chars_end().str.ends_with("|")
    ).arg_true()
    if broken.len() == 0:
        return lines
    n = lines.len()
    fixed: dict[int, str] = {}
    for i in broken.to_list():  # rare: only lines copied from a terminal into notes
        joined = lines[i]
        for j in range(i + 1, min(i + 1 + _MAX_WRAPPED_LINES, n)):
            nxt = lines[j]
            if not nxt.strip() or _MEG_MARK_RE.search(nxt) or not _MEG_CONTINUATION.match(nxt):
                break
            joined = f"{joined} {nxt}"
            if joined.rstrip().endswith("|"):
                fixed[i] = joined
                fixed.update(dict.fromkeys(range(i + 1, j + 1), ""))
                break
    if not fixed:
        return lines
    return lines.scatter(list(fixed), list(fixed.values()))
