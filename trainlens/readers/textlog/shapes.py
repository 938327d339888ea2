"""The text shapes textlog knows, as data: one :class:`Shape` per kind of metric line.

Adding a shape is an entry in :data:`SHAPES` (and a test): how its lines are recognised,
where the step and the fields are, what the fields are called and which units their
values carry. :func:`trainlens.readers.textlog.pipeline.apply` reads any entry; nothing
else needs to change. Several entries may share a ``name`` when one program prints more
than one line shape (nanoGPT's iteration and evaluation lines): they are counted as one
in ``run.metadata["text_shapes"]``.

Every pattern is valid both for Python's ``re`` (sniffing) and polars' Rust regex
(reading), and names its groups ``(?P<name>...)``: ``step``, optionally ``total`` (the
run's planned length, ``max_steps``), then either ``body`` (the fields, cut by ``split`` or
``tokens``) or ``key`` and ``value`` (a line that is one field). Any other named group is
kept as a column for a ``metric`` expression (Megatron's validation set name).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import field as _default

import polars as pl

from trainlens.core.dataclass import dataclass

# ---- pattern pieces ---------------------------------------------------------------------

NUM = (
    r"[+-]?(?:[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?"
    r"|(?i:nan|inf(?:inity)?))"
)
_KEY = r"[A-Za-z_][A-Za-z0-9_./-]*"
_BRACKET_PREFIX = r"(?:\[[^\]\n]*\]:?[ \t]*)?"
ANSI = r"\x1b\[[0-9;]*[A-Za-z]"


@dataclass(frozen=True)
class Shape:
    """One kind of metric line, and how its fields become (step, metric, raw value)."""

    name: str  # its key in run.metadata["text_shapes"]
    line: str  # the whole line's pattern, with the named groups described above
    # a cheaper pattern every such line matches: lines are filtered by it before ``line``
    # is applied (shapes that share one filter the lines once); None: ``line`` itself
    hint: str | None = None
    # what a sniff looks for; "" for a shape that never makes a file a text log on its
    # own (Megatron's validation lines); None: ``line``
    sniff: str | None = None
    # how ``body`` is cut into fields: at a literal separator, or the matches of a pattern
    split: str | None = None
    tokens: str | None = None
    # how a field becomes key and value: split once at a literal, or a pattern with the
    # groups key and value (and unit: a suffix looked up in ``units``)
    pair: str | None = None
    field: str | None = None
    # a pattern a key must match to count (Megatron: a segment like `| 12 |` is no field)
    key_must: str | None = None
    # (pattern, replacement) applied to every value text: np.float64(2.1) → 2.1
    value_fix: tuple[str, str] | None = None
    units: Mapping[str, str] = _default(default_factory=dict)  # unit group → kept suffix
    # fields that are a number and a unit, no key: (unit pattern, metric, kept suffix)
    unit_fields: tuple[tuple[str, str, str], ...] = ()
    names: Mapping[str, str] = _default(default_factory=dict)  # the log's word → metric
    thousands: bool = False  # drop "," in values (7,282)
    si: bool = False  # 634K, 11.5G: a K/M/G/T suffix multiplies by a power of 1000
    # the metric name from the key and the line's extra groups (columns of those names)
    metric: Callable[[], pl.Expr] | None = None
    # the line has no step: the shape's steps are inferred (only when no shape with steps
    # is in the file; see pipeline.trainer_dict_steps)
    stepless: bool = False
    # lines of the shape that cannot be placed (no step): counted in a note, left out
    unplaced: tuple[str, str] | None = None
    # ---- issue 26: frameworks' own stdout (see frameworks.py) ----
    # the step computed from the line's groups (MMEngine: (epoch - 1) * per_epoch + iter)
    step_from: Callable[[], pl.Expr] | None = None
    # the key of a field whose value is the step (fairseq: num_updates); that field is no
    # metric. A line without it takes the last step before it
    step_field: str | None = None
    # a line with no step of its own (an evaluation's result) takes the last step logged
    # before it in the file, by any shape
    follows: bool = False
    # keys that are no metric (an ETA, a version number)
    skip: frozenset[str] = frozenset()
    # a progress bar redrawn with a CR: every drawn state is read, not only the last
    redrawn: bool = False

    @property
    def sniff_pattern(self) -> str:
        return self.line if self.sniff is None else self.sniff


# ---- Megatron-LM / Megatron-DeepSpeed / nanotron ------------------------------------------

# `iteration N/ M | key: value | ...` (nanotron: `iteration: N / M | lm_loss: 2.38 | ...`)
MEG_MARK = r"iteration:?[ \t]+[0-9]+[ \t]*/[ \t]*[0-9]+[ \t]*\|"
_MEG_ITER = r"iteration:?[ \t]+(?P<step>[0-9]+)[ \t]*/[ \t]*(?P<total>[0-9]+)[ \t]*\|(?P<body>.*)$"
_MEG_SNIFF = (
    rf"iteration:?[ \t]+[0-9]+[ \t]*/[ \t]*[0-9]+[ \t]*\|[^\n]*?:[ \t]*{NUM}[KMGT]?[ \t]*\|"
)
# `validation loss at iteration N [on validation set] | lm loss value: v | lm loss PPL: p |`
_MEG_VAL = (
    r"(?:^|[^A-Za-z0-9_.-])(?P<set>[A-Za-z_][A-Za-z0-9_.-]*)[ \t]+loss at iteration[ \t]+"
    r"(?P<step>[0-9]+)(?P<suffix>[^|]*)\|(?P<body>.*)$"
)
_MEG_VAL_END = r"loss at the end of training[^|]*\|[^|]*:[ \t]*[-+0-9.a-zA-Z]+[ \t]*\|"
_VAL_SETS = ["validation", "valid", "val", "eval", "evaluation"]


def _megatron_validation_metric() -> pl.Expr:
    """``lm loss value`` → ``lm loss validation``, ``lm loss PPL`` → ``lm loss validation
    ppl``: the names Megatron gives the same numbers in TensorBoard. A test set is ``test``;
    another set keeps its word; an evaluation ``on N-sample draw from validation set`` (at
    the same iteration as the full one) is ``... draw``, so it does not overwrite it."""
    word = pl.col("set").str.to_lowercase()
    suffix = pl.col("suffix").str.to_lowercase()
    setname = (
        pl.when(suffix.str.contains("test") | word.str.contains("test"))
        .then(pl.lit("test"))
        .when(word.is_in(_VAL_SETS))
        .then(pl.lit("validation"))
        .otherwise(pl.lit("validation ") + pl.col("set"))
    )
    setname = (
        pl.when(suffix.str.contains(r"\bdraw\b")).then(setname + pl.lit(" draw")).otherwise(setname)
    )
    key = pl.col("key")
    lower = key.str.to_lowercase()
    return (
        pl.when(lower.str.ends_with(" value"))
        .then(key.str.slice(0, key.str.len_chars() - 6) + pl.lit(" ") + setname)
        .when(lower.str.ends_with(" ppl"))
        .then(key.str.slice(0, key.str.len_chars() - 4) + pl.lit(" ") + setname + pl.lit(" ppl"))
        .otherwise(key + pl.lit(" ") + setname)
    )


MEGATRON = Shape(
    name="megatron",
    line=_MEG_ITER,
    hint=MEG_MARK,
    sniff=_MEG_SNIFF,
    split="|",
    pair=":",
    key_must="^[A-Za-z]",
    si=True,  # nanotron's human_format (634K, 85.8G); only on iteration lines
)
MEGATRON_VALIDATION = Shape(
    name="megatron_validation",
    line=_MEG_VAL,
    hint="loss at iteration",
    sniff="",
    split="|",
    pair=":",
    key_must="^[A-Za-z]",
    metric=_megatron_validation_metric,
    unplaced=(
        _MEG_VAL_END,
        "validation line(s) 'at the end of training' name no iteration and were left out",
    ),
)

# ---- llm.c / modded-nanogpt `s:N k:v ...` and `step:N/M k:v ...`: the whole line ----------

KEY_VALUE = Shape(
    name="key_value",
    line=(
        rf"^[ \t]*{_BRACKET_PREFIX}(?:s|step):(?P<step>[0-9]+)(?:/(?P<total>[0-9]+))?"
        rf"(?P<body>(?:[ \t]+{_KEY}:{NUM}(?:ms|s)?)+)[ \t]*$"
    ),
    tokens=rf"{_KEY}:[^ \t]+",
    pair=":",
)

# ---- nanoGPT: `iter N: loss X, time Yms, mfu Z%`, `step N: train loss X, val loss Y` --------

_NANO_KEY = r"[A-Za-z_][A-Za-z0-9_]*"
_NANO_PAIR = rf"{_NANO_KEY}[ \t]+{NUM}(?:ms|s|%)?"
_NANO_HINT = r"(?:iter|step)[ \t]+[0-9]+:"
# nanoGPT's names for what the alias table knows under other names: `time` is the
# iteration's own time (dt), and the evaluation's `train loss` is a mean over eval_iters
# batches, not the step's loss, so it keeps a name of its own beside train/loss
_NANO_NAMES = {"time": "iter_time", "train loss": "train loss (eval)"}

NANOGPT_ITER = Shape(
    name="nanogpt",
    line=(
        rf"(?:^|[^A-Za-z0-9_])iter[ \t]+(?P<step>[0-9]+):[ \t]*"
        rf"(?P<body>loss[ \t]+{NUM}(?:,[ \t]*{_NANO_PAIR})*)[ \t]*$"
    ),
    hint=_NANO_HINT,
    tokens=_NANO_PAIR,
    field=rf"^(?P<key>{_NANO_KEY})[ \t]+(?P<value>.*)$",
    names=_NANO_NAMES,
)
NANOGPT_EVAL = Shape(
    name="nanogpt",
    line=(
        rf"(?:^|[^A-Za-z0-9_])step[ \t]+(?P<step>[0-9]+):[ \t]*(?P<body>train loss[ \t]+"
        rf"{NUM},[ \t]*val loss[ \t]+{NUM})[ \t]*(?:,[^\n]*)?$"
    ),
    hint=_NANO_HINT,
    tokens=rf"(?:train|val) loss[ \t]+{NUM}",
    field=r"^(?P<key>(?:train|val) loss)[ \t]+(?P<value>.*)$",
    names=_NANO_NAMES,
)

# ---- build-nanogpt and llm.c's stdout ---------------------------------------------------
# build-nanogpt (Karpathy's "Let's reproduce GPT-2"): stdout `step    10 | loss: 9.123456 |
# lr 8.3916e-05 | norm: 2.1234 | dt: 345.67ms | tok/sec: 1516721.23` and its log file,
# `<step> train <loss>` / `<step> val <loss>` / `<step> hella <accuracy>`
# llm.c's stdout is the same shape: `step   61/74 | loss 3.208939 (+nanz)| norm 1.4800
# (+nanz)| lr 3.00e-04 | 44.57 ms | -100.0% bf16 MFU | 91886 tok/s` (older: `train loss`)

_BNG_HINT = r"^[ \t]*(?:step[ \t]+)?[0-9]+[ \t/]"
_BNG_NAMES = {
    "dt": "iter_time",
    "tok/sec": "tokens_per_sec",
    "train": "train_loss",
    "train loss": "loss",
    "val": "val_loss",
    # (not *_acc: an accuracy beside the loss would make it a classifier's)
    "hella": "hellaswag",
}
BUILD_NANOGPT = Shape(
    name="build_nanogpt",
    line=(
        rf"^[ \t]*step[ \t]+(?P<step>[0-9]+)(?:/[0-9]+)?[ \t]*\|[ \t]*"
        rf"(?P<body>(?:train )?loss:?[ \t]+{NUM}[^|]*\|.*)$"
    ),
    hint=_BNG_HINT,
    split="|",
    field=(
        r"^[ \t]*(?P<key>[A-Za-z_/][A-Za-z_/ ]*?):?[ \t]+"
        rf"(?P<value>{NUM}(?:ms|s)?)[ \t]*(?:\([^)]*\))?[ \t]*$"
    ),
    # fields that are a value and its unit: `44.57 ms`, `-100.0% bf16 MFU`, `91886 tok/s`
    unit_fields=(
        ("ms", "iter_time", "ms"),
        ("tok/s", "tokens_per_sec", ""),
        (r"%[ \t]*[A-Za-z0-9]*[ \t]*MFU", "mfu", "%"),
    ),
    names=_BNG_NAMES,
)
BUILD_NANOGPT_FILE = Shape(
    name="build_nanogpt",
    line=rf"^(?P<step>[0-9]+) (?P<key>train|val|hella) (?P<value>{NUM})$",
    hint=_BNG_HINT,
    names=_BNG_NAMES,
)

# ---- torchtitan: `step: 14  loss:  3.24405  grad_norm:  0.8319  memory: 9.46GiB(64.99%)
# tps: 7,282  tflops: 0.52  mfu: 0.17%` (after its logging prefix; colours removed) -------

_TITAN_VALUE = r"[+-]?[0-9][0-9,]*(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?|(?i:nan|inf)"
_TITAN_PAIR = rf"(?P<key>[A-Za-z_]+):[ \t]*(?P<value>{_TITAN_VALUE})(?P<unit>GiB|%)?"
TORCHTITAN = Shape(
    name="torchtitan",
    line=(
        r"(?:^|[^A-Za-z0-9_])step:[ \t]*(?P<step>[0-9]+)[ \t]+"
        rf"(?P<body>loss:[ \t]*(?:{NUM})[ \t].*)$"
    ),
    hint=r"step:[ \t]*[0-9]+[ \t]+loss:",
    tokens=_TITAN_PAIR,
    field=_TITAN_PAIR,
    # the memory is its peak reserved GiB (the share of the device in brackets is left
    # out); mfu is a percent
    units={"%": "%", "GiB": ""},
    thousands=True,
    # torchtitan's own names for the console's numbers (its TensorBoard tags)
    names={"memory": "memory/max_reserved(GiB)"},
)

# ---- the Hugging Face Trainer's printed dicts: {'loss': 2.1, 'grad_norm': 1.3, ...} --------

TRAINER_DICT = Shape(
    name="trainer_dict",
    line=r"\{(?P<body>'[^'\n]+':[^{}\n]*)\}",
    # (transformers 5 prints the numbers quoted: {'loss': '2.897', 'grad_norm': '0.7695'})
    sniff=rf"\{{[^{{}}\n]*'(?:loss|eval_loss)':[ \t]*'?{NUM}'?[^{{}}\n]*\}}",
    tokens=r"'[^'\n]+':\s*[^,]+",
    field=r"^'(?P<key>[^']+)':\s*'?(?P<value>.*?)'?\s*$",
    # np.float64(2.1) and the like, as newer numpy prints scalars
    value_fix=(r"^[A-Za-z_][A-Za-z0-9_.]*\(\s*([^(),]*?)\s*\)$", "$1"),
    stepless=True,
)

#: every shape, in the order their values are read (and listed in text_shapes); the
#: first with a ``total`` group that has one gives ``max_steps``
SHAPES: tuple[Shape, ...] = (
    MEGATRON,
    MEGATRON_VALIDATION,
    KEY_VALUE,
    NANOGPT_ITER,
    NANOGPT_EVAL,
    TORCHTITAN,
    BUILD_NANOGPT,
    BUILD_NANOGPT_FILE,
    TRAINER_DICT,
)


def _unnamed(pattern: str) -> str:
    """The pattern without group names (one alternation cannot repeat a name in ``re``)."""
    return re.sub(r"\(\?P<[A-Za-z_][A-Za-z0-9_]*>", "(?:", pattern)


def sniff_regex(extra: tuple[str, ...] = ()) -> re.Pattern[str]:
    """One pattern matching a line of any shape that makes a file a text log."""
    parts = [_unnamed(s.sniff_pattern) for s in SHAPES if s.sniff_pattern]
    parts += [_unnamed(p) for p in extra]
    return re.compile("|".join(f"(?:{p})" for p in parts), re.MULTILINE)
