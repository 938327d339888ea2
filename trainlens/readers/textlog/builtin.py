"""Read every built-in shape (:data:`~.shapes.SHAPES`, then DeepSpeed's) out of a log.

Several shapes may share one file. Printed Trainer dicts carry no step and are used only
when no shape with real steps is in the file; DeepSpeed's engine lines only when no
Megatron or ``key:value`` line is (Megatron-DeepSpeed prints both: its own lines are the
record).

The file is read in pieces (:func:`~.cursor.pieces`): each piece's values become numbers
at once and only they are kept (line, field, step, the metric as a category, value), so
the strings of one piece are alive at a time. What the file as a whole decides (which
shapes win, the planned length, every note, DeepSpeed's and the Trainer dicts' step-less
lines, which are kept as lines until then) is decided in :meth:`Reader.finish`, with the
result and the notes of the file read at once.
"""

from __future__ import annotations

import re
from typing import Any

import polars as pl

from trainlens.readers.textlog import blocks, d2eval, deepspeed, follow, frameworks, generic, values
from trainlens.readers.textlog import notes as dq
from trainlens.readers.textlog.notes import Notes
from trainlens.readers.textlog.pipeline import apply_from, empty_long, n_lines, trainer_dict_steps
from trainlens.readers.textlog.registry import SHAPES
from trainlens.readers.textlog.shapes import MEG_MARK, Shape

_MAX_WRAPPED_LINES = 5
_FRAMEWORK_IDS = frozenset(id(s) for s in frameworks.SHAPES)
_FRAMEWORK_HINT = "|".join(
    [f"(?:{s.hint or s.line})" for s in frameworks.SHAPES]
    + [f"(?:{b.member_hint})" for b in blocks.BLOCKS]
)
_MEG_MARK_RE = re.compile(MEG_MARK)
# a wrapped continuation: `<part of a key>: value | ...` with no new iteration in it
_MEG_CONTINUATION = re.compile(r"^[^|\[]*:[^|]*\|")


class Reader:
    """Every built-in shape of a log, read piece by piece: :meth:`add` each piece's
    lines in order, then :meth:`finish`."""

    def __init__(self, notes: Notes) -> None:
        self.notes = notes
        self.lineno = 0  # lines before the piece
        self.carry: pl.Series | None = None  # a wrapped iteration line a piece cut
        self.fields = [0] * len(SHAPES)  # fields of each shape before the piece
        self.unplaced = [(0, 0)] * len(SHAPES)  # (lines, first line) per shape
        self.totals: list[int | None] = [None] * len(SHAPES)
        self.seen: set[int] = set()  # shapes with lines
        self.lines_of: dict[str, int] = {}  # lines with values per shape name
        self.found: list[pl.DataFrame] = []
        self.stepless: list[pl.DataFrame] = []
        self.marked: list[pl.DataFrame] = []  # DeepSpeed's lines (lineno, line)
        self.errors: list[pl.Series] = []  # lines that may end a crash
        self.dropped = dq.Dropped()
        self.bad = values.BadValues()
        # issue 26: values that take the last step before them, multi-line blocks
        self.following: list[pl.DataFrame] = []
        self.carries = [blocks.Carry() for _ in blocks.BLOCKS]
        self.block_fields = [0] * len(blocks.BLOCKS)
        self.block_totals: list[int | None] = [None] * len(blocks.BLOCKS)
        self.generic = generic.Pairs()  # read while no line of a known shape is seen
        self.stepped = False  # a shape gave a value at a step of its own
        self.deepspeed_seen = False  # (DeepSpeed's lines are a known shape too)
        self.d2_carry: list[tuple[int, str]] = []  # a detectron2 result a piece cut
        self.d2_fields = 0

    def add(self, lines: pl.Series, last: bool) -> None:
        """Read the ``lines`` of one piece (``last``: the file's end)."""
        if self.carry is not None:
            lines = pl.concat([self.carry, lines])
            self.carry = None
        if not last:
            lines, self.carry = _hold_back_wrapped(lines)
        lines, redraws = _redrawn(lines, self.lineno)
        self.errors.append(lines.filter(lines.str.contains(dq.ERROR_HINT)))
        df = (
            join_wrapped_megatron(lines)
            .to_frame("line")
            .with_row_index("lineno", offset=self.lineno + 1)
            .with_columns(pl.col("lineno").cast(pl.Int64))
        )
        self.lineno += lines.len()
        marked = df.filter(pl.col("line").str.contains(deepspeed.MARKERS))
        self.marked.append(marked)
        if not self.deepspeed_seen and marked.height:
            self.deepspeed_seen = marked.get_column("line").str.contains(deepspeed.SNIFF).any()
        found: dict[str, list[pl.DataFrame]] = {}
        hinted: dict[str, pl.DataFrame] = {}  # shapes that share a hint filter the lines once
        hinted_follow: list[list[pl.DataFrame]] = []  # the lines of the following shapes
        # the frameworks' shapes and blocks look only at the lines one of their hints
        # matches: one pass over the piece instead of one per hint (a Megatron log's
        # lines match none: +13 % CPU on a 1M-line log with a pass per hint)
        fw = df.filter(pl.col("line").str.contains(_FRAMEWORK_HINT))
        if redraws is not None:
            redraws = redraws.filter(pl.col("line").str.contains(_FRAMEWORK_HINT))
        for i, shape in enumerate(SHAPES):
            hint = shape.hint or shape.line
            key = f"{hint}\r" if shape.redrawn and redraws is not None else hint
            if key not in hinted:
                source = fw if id(shape) in _FRAMEWORK_IDS else df
                if key != hint:
                    source = _with_redraws(fw, redraws)
                hinted[key] = source.filter(pl.col("line").str.contains(hint))
            lines_of = hinted[key]
            self._count_unplaced(i, shape, df)
            if lines_of.height == 0:
                continue
            self.seen.add(i)
            long, total, n_fields = apply_from(shape, lines_of, self.fields[i])
            self.fields[i] += n_fields
            if total is not None:
                self.totals[i] = total
            if shape.follows:
                hinted_follow.append([long.select("lineno")])  # (read, not only hinted)
                long = self._hold_following(long, shape.name)
            elif not shape.stepless and long.height:
                self.stepped = True
            (self.stepless if shape.stepless else found.setdefault(shape.name, [])).append(long)
        for j, block in enumerate(blocks.BLOCKS):
            if fw.height == 0:
                blocks.carry_last(block, df, self.carries[j])
                continue
            long, total, n_fields = blocks.read(block, df, self.carries[j], self.block_fields[j])
            if not n_fields:
                continue
            self.block_fields[j] += n_fields
            if total is not None:
                self.block_totals[j] = total
            found.setdefault(block.name, []).append(self._hold_following(long, block.name))
        d2 = d2eval.read(df, self.d2_carry, self.d2_fields)
        if d2.height:  # (its numbers take the last training step before them)
            self.d2_fields += d2.height
            found.setdefault("detectron2_eval", []).append(
                self._hold_following(d2, "detectron2_eval")
            )
        # (lines of a shape that only follows steps, pycocotools' summary, are no reason to
        # stop reading pairs: a hand-rolled `Epoch 0 [20/188] loss=…` log with COCO results)
        known = self.stepped or any(self.lines_of.get(b.name) for b in blocks.BLOCKS)
        known = known or self.deepspeed_seen
        if not known and not any(x.height for xs in found.values() for x in xs):
            # (the lines a following shape read are its: COCO's summary is no pairs)
            held = [x for xs in hinted_follow for x in xs]
            self.generic.add(df.join(pl.concat(held), on="lineno", how="anti") if held else df)
        for name, longs in found.items():
            self.lines_of[name] = self.lines_of.get(name, 0) + n_lines(pl.concat(longs))
        if found:
            out = pl.concat([x for xs in found.values() for x in xs])
            self.found.append(self._numbers(out.sort("lineno", "field", maintain_order=True)))

    def _read_generic(self, shapes: dict[str, int], meta: dict[str, Any]) -> None:
        """The general key/value reader's values, when no known shape gave any."""
        long, step_key = self.generic.finish(self.notes)
        if step_key is None or long.height == 0:
            return
        shapes["key_value_guess"] = n_lines(long)
        meta["step_column"] = step_key
        self.found.append(_compact(long))  # (its values are numbers already)

    def _hold_following(self, long: pl.DataFrame, name: str | None = None) -> pl.DataFrame:
        """``long`` without its values that take the last step before them (kept as
        numbers until :meth:`finish` places them; their lines counted for ``name``)."""
        if not long.select(pl.col("step").is_null().any()).item():
            return long
        held = long.filter(pl.col("step").is_null())
        if name is not None:
            self.lines_of[name] = self.lines_of.get(name, 0) + n_lines(held)
        self.following.append(self._as_numbers(held))
        return long.filter(pl.col("step").is_not_null())

    def _numbers(self, long: pl.DataFrame) -> pl.DataFrame:
        """A long frame with its values as numbers, what is left out counted."""
        long = dq.drop_mfu_placeholder(long, self.dropped)
        long = dq.drop_huge_steps(long, self.dropped)
        return _compact(values.convert(long, self.bad))

    def _count_unplaced(self, i: int, shape: Shape, df: pl.DataFrame) -> None:
        if shape.unplaced is None:
            return
        unplaced = df.filter(pl.col("line").str.contains(shape.unplaced[0]))
        if unplaced.height:
            n, first = self.unplaced[i]
            here = int(unplaced.get_column("lineno")[0])
            self.unplaced[i] = (n + unplaced.height, first or here)

    def finish(self, meta: dict[str, Any]) -> pl.DataFrame:
        """The long frame (``step``, ``metric`` an Enum in order of first appearance,
        ``value``, and ``wall_time`` when DeepSpeed timestamps give one); sets
        ``meta["text_shapes"]`` (lines per shape) and ``max_steps``, and writes the notes
        in the order a read of the whole file at once gave them."""
        notes = self.notes
        for i, shape in enumerate(SHAPES):
            n, first = self.unplaced[i]
            if shape.unplaced is not None and n:
                notes.ignored(n, shape.unplaced[1], line=first)
        seen = [SHAPES[i] for i in sorted(self.seen)]
        shapes = {s.name: self.lines_of.get(s.name, 0) for s in seen if not s.stepless}
        if (
            not self.stepped
            and not any(self.lines_of.get(b.name) for b in blocks.BLOCKS)
            and not self.deepspeed_seen
        ):
            self._read_generic(shapes, meta)
        dicts = empty_long()
        if self.stepless:
            placed = _trainer_dicts(pl.concat(self.stepless), shapes, notes)
            if placed:
                dicts = dq.drop_mfu_placeholder(placed[0], self.dropped)
                dicts = dq.drop_huge_steps(dicts, self.dropped)
        for block in blocks.BLOCKS:
            if self.lines_of.get(block.name):
                shapes[block.name] = self.lines_of[block.name]
        self.found = follow.place(self.found, self.following, notes)
        self.following = []
        if shapes.get("fairseq_epoch") and not shapes.get("fairseq"):
            self.found = [follow.strip_prefix(f, frameworks.EPOCH_PREFIX) for f in self.found]
        meta["text_shapes"] = {k: v for k, v in shapes.items() if v}
        totals = [*self.totals, *self.block_totals]
        total = next((t for t in totals if t is not None), None)
        if total is not None:
            meta["max_steps"] = total
        self.dropped.note(notes)
        marked = pl.concat(self.marked)
        self.marked = []
        out = self._with_deepspeed(marked, dicts, meta)
        self.bad.note(notes)
        if self.lines_of.get(frameworks.EPOCH_ITER.name) and out.height:
            out, n = frameworks.epoch_iter_steps(out)
            notes.add(
                "inferred-step",
                "epoch and iteration lines (`Epoch: [e][i]`, `Epoch[e] Batch [i]`) print no "
                f"iterations per epoch: the step is e × {n} + i, "
                f"{n} being the last iteration logged in an epoch plus the logging interval; "
                "each epoch's first iteration (the loader starting) gives no step or data time",
                severity="info",
            )
        columns = ["step", "metric", "value"] + (
            ["wall_time"] if "wall_time" in out.columns else []
        )
        first_line = out.get_column("lineno").min() if "lineno" in out.columns else None
        if isinstance(first_line, int):  # (what came before the first step)
            meta["_first_line"] = first_line
        names = out.get_column("metric").unique(maintain_order=True).cast(pl.String)
        return out.select(columns).with_columns(pl.col("metric").cast(pl.Enum(names.to_list())))

    def _with_deepspeed(
        self, marked: pl.DataFrame, dicts: pl.DataFrame, meta: dict[str, Any]
    ) -> pl.DataFrame:
        """The values read, with the DeepSpeed engine / DeepSpeed-Chat lines when no
        Megatron or ``key:value`` line is in the file (Megatron-DeepSpeed prints both;
        its own lines are the record)."""
        found = (
            pl.concat(self.found)
            if self.found
            else _compact(values.convert(empty_long(), self.bad))
        )
        self.found = []
        shapes = meta["text_shapes"]
        if not marked.height:
            return pl.concat([found, self._as_numbers(dicts)])
        if shapes.get("megatron") or shapes.get("key_value"):
            n = marked.filter(pl.col("line").str.contains(deepspeed.SNIFF)).height
            if n:
                self.notes.ignored(
                    n,
                    "DeepSpeed engine line(s) were left out: the file's "
                    "Megatron / key:value lines record the same steps",
                )
            return pl.concat([found, self._as_numbers(dicts)])
        ds, counts = deepspeed.parse(marked)
        if not sum(counts.values()):
            return pl.concat([found, self._as_numbers(dicts)])
        if shapes.pop("trainer_dict", None):
            dicts = dicts.head(0)  # printed dicts carry no step; these lines do
        dq.deepspeed(self.notes, counts)
        shapes.update({k: v for k, v in counts.items() if v})
        meta["_logged_as"] = deepspeed.logged_as(marked)
        walls = deepspeed.wall_times(marked).with_columns(pl.col("lineno").cast(pl.UInt32))
        out = pl.concat([found, self._as_numbers(dicts), self._as_numbers(ds)])
        out = out.sort("lineno", "field", maintain_order=True)
        return out.join(walls, on="lineno", how="left")

    def _as_numbers(self, long: pl.DataFrame) -> pl.DataFrame:
        return _compact(values.convert(long, self.bad))


def _compact(long: pl.DataFrame) -> pl.DataFrame:
    """What is kept per value: line and field (for order) as 32-bit integers, step, the metric as
    a category, value (a 289 MB Megatron log's 9M values: 252 MB; as the strings of
    the whole file's fields they were ~2 GB)."""
    return long.select(
        pl.col("lineno").cast(pl.UInt32),
        pl.col("field").cast(pl.Int32),
        "step",
        pl.col("metric").cast(pl.Categorical),
        "value",
    )


def _hold_back_wrapped(lines: pl.Series) -> tuple[pl.Series, pl.Series | None]:
    """A piece's lines, and those to read with the next piece: from a wrapped iteration
    line near the end on (its continuation may be in the next piece)."""
    tail = lines.tail(_MAX_WRAPPED_LINES)
    broken = tail.str.contains(MEG_MARK) & ~tail.str.strip_chars_end().str.ends_with("|")
    at = broken.arg_true()
    if at.len() == 0:
        return lines, None
    cut = lines.len() - tail.len() + int(at[0])
    return lines.slice(0, cut), lines.slice(cut)


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


def _redrawn(lines: pl.Series, before: int) -> tuple[pl.Series, pl.DataFrame | None]:
    """The lines as a terminal shows them (a CR redraws: what follows the last one), and
    every drawn state of the lines that hold a CR (``lineno, line``), for progress-bar
    shapes (NeMo's), or None when no line holds one."""
    has_cr = lines.str.contains("\r", literal=True)
    if not has_cr.any():
        return lines, None
    redraws = (
        lines.to_frame("line")
        .with_row_index("lineno", offset=before + 1)
        .with_columns(pl.col("lineno").cast(pl.Int64))
        .filter(has_cr)
        .with_columns(pl.col("line").str.split("\r"))
        .explode("line")
    )
    return lines.str.replace(r"^[^\n]*\r", ""), redraws


def _with_redraws(df: pl.DataFrame, redraws: pl.DataFrame | None) -> pl.DataFrame:
    """``df`` with each redrawn line replaced by all of its drawn states."""
    if redraws is None:
        return df
    drawn = redraws.get_column("lineno").unique()
    return pl.concat([df.filter(~pl.col("lineno").is_in(drawn.implode())), redraws]).sort(
        "lineno", maintain_order=True
    )
