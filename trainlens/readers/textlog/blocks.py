"""Multi-line metric blocks: a header line that names the step, then one indented line
per metric (issue 26).

* Composer / LLM Foundry's ``ConsoleLogger``::

      [batch=2/100]:
               Train LanguageCrossEntropy: 10.9724
               Train loss/train/total: 10.9724

  (``[epoch=1][batch=5/5]:`` in epoch units; a launcher's ``0: `` rank prefix before
  each line). ``Train ``/``Eval `` is the split Composer prints before each key and is
  not part of the metric's name; an evaluation block (``[Eval batch=3/3]:``) has no
  training step of its own and takes the last one before it.
* OLMo's and OLMo-core's trainer: ``[step=2/739328]`` (``[step=15000/30000, eta=...]``,
  ``[step=10/100,epoch=1]``) after the logging prefix, then ``    train/CrossEntropyLoss=
  10.73`` lines, numbers with thousands separators (``45,538``). An evaluator's block is
  headed by its label, not a step: its ``eval/...=`` lines take the last step before it.

Read vectorized per piece: every line is a header, a member or another line; a member
belongs to the header or other line nearest above it (carried over from the piece
before when a piece starts inside a block).
"""

from __future__ import annotations

import re

import polars as pl

from trainlens.core.dataclass import dataclass
from trainlens.readers.textlog.pipeline import LONG_SCHEMA, empty_long
from trainlens.readers.textlog.shapes import NUM


@dataclass(frozen=True)
class Block:
    """One framework's blocks: how a header and a member line look."""

    name: str  # its key in run.metadata["text_shapes"]
    header: str  # a line opening a block at a step: groups ``step`` (and ``total``)
    member: str  # a metric line of a block: groups ``key`` and ``value``
    member_hint: str  # a cheap pattern every member line matches
    sniff: str  # what makes a file a log of this kind (a header and a member)
    # a line opening a block with no step (an evaluation): its members take the last
    # step before them
    stepless_header: str | None = None
    # members under any other line take the last step before them (OLMo's evaluator
    # label heads its block); else they are left out
    orphans_follow: bool = False
    thousands: bool = False  # drop "," in values


_RANK = r"(?:[0-9]+:[ \t]*)?"  # a launcher's rank prefix (`0: `)
COMPOSER = Block(
    name="composer",
    header=(rf"^{_RANK}(?:\[epoch=[0-9]+\])?\[batch=(?P<step>[0-9]+)/(?P<total>[0-9]+)\]:[ \t]*$"),
    stepless_header=rf"^{_RANK}\[Eval batch=[0-9]+/[0-9]+\]",
    member=(
        rf"^{_RANK}[ \t]+(?:Train|Eval) (?P<key>[^:\n]*[^: \t\n]):[ \t]*(?P<value>{NUM})[ \t]*$"
    ),
    member_hint=rf"^{_RANK}[ \t]+(?:Train|Eval) ",
    sniff=(rf"\[batch=[0-9]+/[0-9]+\]:[ \t]*\n{_RANK}[ \t]+(?:Train|Eval) [^\n:]*:[ \t]*{NUM}"),
)
_OLMO_VALUE = r"[+-]?[0-9][0-9,]*(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?|(?i:nan|inf)"
OLMO = Block(
    name="olmo",
    header=r"\[step=(?P<step>[0-9]+)/(?P<total>[0-9]+)[^\]\n]*\][ \t]*$",
    member=(rf"^[ \t]+(?P<key>[A-Za-z][^=\n]*/[^=\n]*[^= \t\n])=(?P<value>{_OLMO_VALUE})[ \t]*$"),
    member_hint=r"^[ \t]+[A-Za-z][^=\n]*/[^=\n]*=",
    sniff=r"\[step=[0-9]+/[0-9]+[^\]\n]*\][ \t]*\n[ \t]+[A-Za-z][^=\n]*/[^=\n]*=[-+0-9]",
    orphans_follow=True,
    thousands=True,
)
BLOCKS: tuple[Block, ...] = (COMPOSER, OLMO)

# what the anchor of a member is: a header with a step, one without, another line
_HEADER, _STEPLESS, _OTHER = 1, 2, 3


@dataclass
class Carry:
    """The anchor of a block that a piece cut: the kind of the last non-member line of
    the pieces before, and its step."""

    kind: int = _OTHER
    step: int | None = None


def read(
    block: Block, df: pl.DataFrame, carry: Carry, field_offset: int
) -> tuple[pl.DataFrame, int | None, int]:
    """The values of ``block`` in the piece ``df`` (``lineno, line``) as the long frame
    (``step`` null for a member that takes the last step before it), the planned length
    from the last header, and the number of fields; ``carry`` is updated."""
    members = df.get_column("line").str.contains(block.member_hint)
    if not members.any():
        carry_last(block, df, carry)
        return empty_long(), None, 0
    parsed = df.with_columns(pl.col("line").str.extract_groups(block.member).alias("_m")).unnest(
        "_m"
    )
    line = pl.col("line")
    stepless = line.str.contains(block.stepless_header) if block.stepless_header else pl.lit(False)
    kind = (
        pl.when(line.str.contains(block.header))
        .then(pl.lit(_HEADER))
        .when(stepless)
        .then(pl.lit(_STEPLESS))
    )
    header = line.str.extract_groups(block.header)
    parsed = parsed.with_columns(
        (pl.col("key").is_not_null() & pl.col("value").is_not_null()).alias("_member")
    ).with_columns(
        pl.when(~pl.col("_member")).then(kind.otherwise(pl.lit(_OTHER))).alias("_kind"),
        pl.when(~pl.col("_member"))
        .then(header.struct.field("step").cast(pl.Int64, strict=False))
        .alias("_step"),
        pl.when(~pl.col("_member"))
        .then(header.struct.field("total").cast(pl.Int64, strict=False))
        .alias("_total"),
    )
    totals = parsed.get_column("_total").drop_nulls()
    total = int(totals[-1]) if totals.len() else None
    # the anchor of every line: the nearest non-member line above it; a member before the
    # piece's first one belongs to the anchor carried over from the piece before. (Where
    # the anchor is a header, the step filled forward over anchors is its own.)
    anchor = ~pl.col("_member")
    filled = parsed.with_columns(
        pl.when(anchor).then(pl.col("_kind")).forward_fill().fill_null(carry.kind).alias("_akind"),
        pl.when(anchor)
        .then(pl.col("_step"))
        .forward_fill()
        .fill_null(pl.lit(carry.step, dtype=pl.Int64))
        .alias("_astep"),
    )
    last = filled.filter(anchor).tail(1)
    if last.height:
        carry.kind = int(last.get_column("_kind")[0])
        s = last.get_column("_step")[0]
        carry.step = None if s is None else int(s)
    keep = pl.col("_member")
    if not block.orphans_follow:
        keep = keep & (pl.col("_akind") != _OTHER)
    rows = filled.filter(keep)
    value = pl.col("value")
    if block.thousands:
        value = value.str.replace_all(",", "")
    long = rows.with_row_index("field", offset=field_offset).select(
        "lineno",
        pl.col("field").cast(pl.Int64),
        pl.when(pl.col("_akind") == _HEADER).then(pl.col("_astep")).alias("step"),
        pl.col("key").str.strip_chars().alias("metric"),
        value.alias("raw"),
    )
    return long.select(list(LONG_SCHEMA)), total, rows.height


def carry_last(block: Block, df: pl.DataFrame, carry: Carry) -> None:
    """The anchor the next piece's first members would have: the piece's last line."""
    if df.height == 0:
        return
    line = str(df.get_column("line")[-1])
    m = re.search(block.header, line)
    if m:
        carry.kind, carry.step = _HEADER, int(m.group("step"))
    elif block.stepless_header is not None and re.search(block.stepless_header, line):
        carry.kind, carry.step = _STEPLESS, None
    else:
        carry.kind, carry.step = _OTHER, None


def sniff_patterns() -> tuple[str, ...]:
    return tuple(b.sniff for b in BLOCKS)
