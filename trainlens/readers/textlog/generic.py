"""The general key/value reader: a log no shape was written for (issue 26, item 2).

Most trainers print something a person reads as "step N: name value, name value". When a
file has no line of a known shape, every line is cut into ``key=value``, ``key: value``
and ``key value`` pairs (quoted keys and values too: a printed Python dict; ``[1/10]``
totals; units ``ms``, ``s``, ``%``, ``KB``/``MB``/``GB``/``KiB``/``MiB``/``GiB``). A
line counts when, after its first pair, nearly all of its words are in pairs (prose and
tracebacks are not). Nothing is evaluated: pairs are picked out with a regular
expression.

The step is found by rule, never by naming a framework: of the step-like names
(``global_step``, ``step``, ``iteration``, ``iter``, ``update``, ``batch``, ``epoch`` ...)
that hold whole numbers, the finest one that rises through the file (allowing a few
restarts); a batch counter that starts again each epoch with its total printed
(``Epoch [2/10], Step [100/600]``) becomes ``(epoch - 1) * total + batch``. Lines with
pairs but no step (an evaluation printed after the epoch) take the last step before
them. A note says that this reader was used and which step it chose; ``--regex`` stays
for the rest.
"""

from __future__ import annotations

import re

import polars as pl

from trainlens.core.dataclass import dataclass, field
from trainlens.readers._step_rule import EPOCH_NAMES, RISE, STEP_NAMES
from trainlens.readers.textlog import counters
from trainlens.readers.textlog.notes import Notes
from trainlens.readers.textlog.shapes import NUM

# a name may be written in Chinese, Japanese or Korean (`训练损失: 4.61`, see _CJK_WORDS)
_CJK = "\u3040-\u30ff\u4e00-\u9fff\uac00-\ud7af"
_KEY = rf"[A-Za-z_{_CJK}][A-Za-z0-9_./@(){_CJK}-]*"
# a key of one or two words (`valid loss 5.48`, `Train PPL: 92.8`)
# (or a name and its unit in brackets: `Time (mins): 0.015`)
_KEYS = rf"{_KEY}(?: [A-Za-z_][A-Za-z0-9_./@()-]*| \([A-Za-z%/]+\))?"
# a colon, or the full-width one of CJK text (`当前损失值：10.113`)
_COLON = "[=:\uff1a]"
_UNIT = r"ms|s|%|[KMGT]i?B"
# a pair's end (consumed: polars' regex has no look-ahead); a full stop may end a line
_END = r"(?:[ \t,;:|)\]}]|\.?$)"
# one pair; or a counter written `200/ 2983 batches` (the name after the number)
_PAIR = (
    rf"['\"]?(?P<key>{_KEYS})['\"]?(?:[ \t]*{_COLON}[ \t]*|[ \t]+)\[?['\"]?(?P<value>{NUM})"
    rf"(?P<unit>{_UNIT})?['\"]?(?:[ \t]*/[ \t]*(?P<of>[0-9]+))?\]?{_END}"
    rf"|(?P<cvalue>[0-9]+)[ \t]*/[ \t]*(?P<cof>[0-9]+)[ \t]+"
    rf"(?P<ckey>batches|batch|steps|iters|iterations|updates){_END}"
    # a counter written against its name in brackets: `Epoch[2] Iteration[150/3385]`
    rf"|(?P<bkey>[A-Za-z][A-Za-z_]*)\[(?P<bvalue>[0-9]+)(?:/(?P<bof>[0-9]+))?\]"
    # a counter with its total and no name (`Epoch 0 [20/188] loss: 2.3`): read as
    # `batch` (a step when it starts again each epoch, see choose_step)
    rf"|\[[ \t]*(?P<uvalue>[0-9]+)[ \t]*/[ \t]*(?P<uof>[0-9]+)[ \t]*\]"
)
_PAIR_TOKEN = re.sub(r"\(\?P<[a-z]+>", "(?:", _PAIR)
# a counter's name as a step name
_COUNTERS = {"batches": "batch", "steps": "step", "iters": "iter", "iterations": "iteration"}
_COUNTERS |= {"updates": "update", "batch": "batch"}
# step-like names, finest first, epoch-like ones last: one list with the JSONL/CSV rule
_EPOCHS = EPOCH_NAMES
_MEMORY = {"KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12, "KiB": 2.0**10, "MiB": 2.0**20}
_MEMORY |= {"GiB": 2.0**30, "TiB": 2.0**40}
_WORD = r"[A-Za-z]{2,}"
# a line with at least two pairs is worth a look
_HINT = rf"{_KEY}['\"]?(?:[ \t]*{_COLON}[ \t]*|[ \t]+)\[?['\"]?[-+.0-9]"
# a file's head holding a step-like pair and another pair is a log this reader may read
# (single quotes only: a JSON line is the JSONL reader's)
_STEP_WORD = rf"(?:\b|(?<=[{_CJK}]))(?i:global_step|step|iters|iter|iteration|epoch|batch)'?"
SNIFF = (
    # a step pair, then a `key=value` / `key: value` pair, or a `key value` one after a
    # separator (`| loss 2.3`)
    rf"^[^\n]*{_STEP_WORD}[ \t]*{_COLON}?[ \t]*\[?[0-9]+[^\n]*?"
    rf"(?:[ \t,;|{{]'?{_KEY}'?[ \t]*{_COLON}[ \t]*'?{NUM}"
    rf"|[ \t]*[|,;][ \t]*{_KEY}[ \t]+{NUM})"
    # a step, a colon, then `key value` pairs (`[train] iter 10: loss 8.8782 2903 ms/iter`)
    rf"|^[^\n]*{_STEP_WORD}[ \t]+[0-9]+:[ \t]+{_KEY}[ \t]+{NUM}(?:[ \t]|$)"
    # a step header, then an indented `key=value` line
    rf"|^[ \t]*{_STEP_WORD}[ \t]*{_COLON}?[ \t]*\[?[0-9]+(?:/[0-9]+)?\]?:?[ \t]*\n"
    rf"[ \t]+{_KEY}[ \t]*{_COLON}[ \t]*{NUM}"
    # two counters in brackets, then a pair (`[0 :   6700] loss G : 1.495 loss D : 2.846`)
    rf"|^[ \t]*\[[ \t]*[0-9]+[ \t]*:[ \t]*[0-9]+[ \t]*\][ \t]*{_KEYS}[ \t]*{_COLON}[ \t]*{NUM}"
)
_MIN_LINES = counters.MIN_LINES  # step lines a file needs before its guess is trusted
_RISE = RISE  # share of a step's moves that must go up (or no more than one move down:
# a job launched again and appended to its log, in a short log)


@dataclass
class Pairs:
    """The pairs of every counted line, over the pieces of a read."""

    frames: list[pl.DataFrame] = field(default_factory=list)

    def add(self, df: pl.DataFrame) -> None:
        """Cut the lines of one piece (``lineno, line``) into pairs; keep the lines that
        are made of pairs."""
        # a line that only announces an evaluation (`testing in eval mode……`) names the
        # split of the pairs on the line after it
        announced = pl.col("line").shift(1).str.contains(_ANNOUNCE).fill_null(False)
        lines = df.with_columns(announced.alias("_announced"))
        if lines.get_column("line").str.contains(_STAGE_ITER).any():
            # two counters in brackets before the pairs, `[0 :   6700] loss G : 1.495`
            # (a progressive GAN's scale and its iteration): a stage and its iteration
            lines = lines.with_columns(pl.col("line").str.replace(_STAGE_ITER, "stage=$1 iter=$2 "))
        lines = lines.filter(pl.col("line").str.contains(_HINT))
        if lines.height == 0:
            return
        tokens = lines.with_columns(pl.col("line").str.extract_all(_PAIR_TOKEN).alias("_t"))
        tokens = tokens.filter(pl.col("_t").list.len() > 0)
        if tokens.height == 0:
            return
        # the words after the first pair that are in no pair: few, or the line is prose
        first = pl.col("_t").list.first()
        after = pl.col("line").str.slice(pl.col("line").str.find(first, literal=True))
        rest = after.str.replace_all(_PAIR_TOKEN, " ")
        in_pairs = pl.col("_t").list.join(" ").str.count_matches(_WORD)
        stray = rest.str.count_matches(_WORD)
        ok = stray <= pl.max_horizontal(pl.lit(2), in_pairs // 4)
        kept = tokens.filter(ok.fill_null(True))
        if kept.height == 0:
            return
        pairs = (
            kept.select(
                "lineno",
                "_t",
                pl.col("line").str.contains(r"^[ \t]").alias("_indent"),
                pl.when(pl.col("_announced"))
                .then(pl.lit("eval"))
                .otherwise(pl.col("line").str.extract(_LABEL, 1).str.to_lowercase())
                .alias("_label"),
                (
                    pl.col("line")
                    .str.slice(0, pl.col("line").str.find(first, literal=True))
                    .str.contains(_BEST)
                    .fill_null(False)
                    if kept.get_column("line").str.contains(_BEST).any()
                    else pl.lit(False)
                ).alias("_best"),
            )
            .explode("_t")
            # a list's first item (`STEPS: [50, 70, 90]` in a printed config) is no pair
            .pipe(_no_list_items, kept.get_column("line").str.contains(r"\[[^\]/]*,").any())
            .with_row_index("field")
            .with_columns(pl.col("_t").str.extract_groups(_PAIR).alias("_p"))
            .unnest("_p")
            .with_columns(
                pl.coalesce(
                    "key",
                    pl.col("ckey").replace(_COUNTERS),
                    "bkey",
                    pl.when(pl.col("uvalue").is_not_null()).then(pl.lit("batch")),
                ).alias("key"),
                pl.coalesce("value", "cvalue", "bvalue", "uvalue").alias("value"),
                pl.coalesce("of", "cof", "bof", "uof").alias("of"),
            )
            .pipe(_in_english, kept.get_column("line").str.contains(f"[{_CJK}]").any())
            .pipe(_no_copula, kept.get_column("line").str.contains(_COPULA_LINE).any())
            .with_columns(_step_word_alone(pl.col("key"), pl.col("value")).alias("key"))
            .pipe(_running_bests)
            .pipe(_evaluation_lines)
            .pipe(_bare_splits)
            .pipe(_labelled_lines)
            .pipe(_repeats_after_evaluation)
            # a one-letter key is a unit or a fragment (`Time: 8m 32s`), not a metric; a key
            # holding a function word is prose (`2000000 buckets and 50 dimensions`)
            .filter(pl.col("key").str.len_chars() > 1)
            .filter(~pl.col("key").str.contains(_PROSE_WORD))
            .filter(~pl.col("key").str.contains(_LEVEL_WORD))
        )
        # kept compact until the file is read: numbers, names as categories (a 1M-line
        # log of 5 pairs a line held 1.7 GB as strings)
        self.frames.append(
            pairs.select(
                pl.col("lineno").cast(pl.UInt32),
                pl.col("field").cast(pl.UInt32),
                pl.col("key").cast(pl.Categorical),
                pl.col("key").str.to_lowercase().cast(pl.Categorical).alias("_lower"),
                _number().alias("value"),
                pl.col("of").cast(pl.Int64, strict=False),
                "_indent",
            )
        )

    def finish(self, notes: Notes) -> tuple[pl.DataFrame, str | None]:
        """The long frame (``lineno, field, step, metric, value``) and the step's name, or
        None when no step is found."""
        if not self.frames:
            return _empty(), None
        pairs = pl.concat(self.frames).with_columns(pl.col("_lower").cast(pl.String))
        self.frames = []
        step_key, per_epoch = choose_step(pairs)
        if step_key is None:
            return _empty(), None
        steps = _steps(pairs, step_key, per_epoch).sort("lineno")
        step_lines = steps.height
        if step_lines < _MIN_LINES:
            return _empty(), None
        counted = step_key in _EPOCHS and _repeats(steps) and _keys_repeat(pairs, steps, step_key)
        if counted:  # many lines per epoch: the k-th of them is step k, the epoch a metric
            steps = steps.with_columns(pl.int_range(1, pl.len() + 1).alias("step"))
        # the step's names are the axis, not metrics (another epoch count stays a metric)
        drop = [] if counted else [step_key, *([per_epoch] if per_epoch else [])]
        # a line that names the epoch but no batch (`Epoch 0 val acc: 0.41` among `Epoch 0
        # [20/188] loss: …`) is the epoch's: its pair is no lone one
        dated = pairs.filter(pl.col("_lower").is_in(drop)).select("lineno").unique()
        pairs = pairs.filter(~pl.col("_lower").is_in(drop)).drop("_lower", "of")
        long = pairs.join(steps, on="lineno", how="left", maintain_order="left")
        del pairs
        loose = long.filter(pl.col("step").is_null())
        if loose.height:
            long, dumped = _place_loose(
                long.filter(pl.col("step").is_not_null()), loose, steps, dated
            )
            if dumped:
                notes.add(
                    "ignored-lines",
                    f"{dumped} line(s) of names and values printed between two training "
                    f"steps, {DUMP_LINES} or more names at once (a configuration a relaunch "
                    f"printed) or one name on {_ITEM_LINES} or more lines (a figure per "
                    "tensor or per sample): no step's metrics (left out)",
                    count=dumped,
                    severity="info",
                )
        notes.add(
            "inferred-step",
            "read by the general key/value reader (no known log shape in the file): the "
            + (
                f"step counts the lines that name `{step_key}` (it repeats over several "
                f"lines; kept as a metric)"
                if counted
                else f"step is `{step_key}`"
                + (f" counted over the run's {per_epoch}s" if per_epoch else "")
            )
            + "; lines without it take the last step before them. Use --regex to read "
            "the file another way",
            count=step_lines,
            severity="info",
            step_column=step_key,
        )
        return long.select(
            "lineno",
            pl.col("field").cast(pl.Int32),
            "step",
            pl.col("key").alias("metric"),
            "value",
        ), step_key


def _repeats(steps: pl.DataFrame) -> bool:
    """True when a step value is on two lines or more on average (`Epoch 1 - Batch loss:
    …` on every batch of the epoch; a relaunch repeats a few values only)."""
    per = steps.group_by("step").len().get_column("len")
    return bool(per.len()) and float(per.mean() or 1) >= 2  # type: ignore[arg-type]


def _keys_repeat(pairs: pl.DataFrame, steps: pl.DataFrame, step_key: str) -> bool:
    """True when the lines of one epoch say a name again (a batch's loss on every line),
    False when each says its own (`Epoch: 1, loss: 8.8` then `Epoch: 1 Dev Bleu Score:
    …` then `[Epoch 1] Validating...`: the epoch is the step of all of them)."""
    on = pairs.filter(pl.col("_lower") != step_key).join(steps, on="lineno", how="inner")
    if on.height == 0:
        return True
    again = on.group_by("step", "key").len().get_column("len") > 1
    return float(again.mean() or 0.0) >= 0.1  # type: ignore[arg-type]


_EVAL_WORDS = ["test", "val", "valid", "validation", "eval", "evaluation", "dev"]


def _evaluation_lines(pairs: pl.DataFrame) -> pl.DataFrame:
    """A line whose first pair is an evaluation word (`Test: [10/50]  Loss 0.3`) holds
    evaluation metrics: that pair (a batch counter) is left out, the others are named
    ``val/<key>``."""
    first = pl.col("key").first().over("lineno").str.to_lowercase().is_in(_EVAL_WORDS)
    pairs = pairs.with_columns(first.alias("_eval"))
    if not pairs.get_column("_eval").any():
        return pairs.drop("_eval")
    own = pl.col("field") == pl.col("field").min().over("lineno")
    named = pl.col("key").str.contains(r"(?i)^(?:val|valid|eval|test)")
    return (
        pairs.filter(~(pl.col("_eval") & own))
        .with_columns(
            pl.when(pl.col("_eval") & ~named)
            .then(pl.lit("val/") + pl.col("key"))
            .otherwise(pl.col("key"))
            .alias("key")
        )
        .drop("_eval")
    )


_EVAL_KEY = r"(?i)^(?:val|valid|validation|eval|evaluation|test|dev)\b"
# a label in no pair that names the split of the pairs after it (`Epoch 2 - Validation
# BLEU: BLEU-1 71.65, BLEU-2 65.76` beside `Epoch 2 - Dev BLEU: BLEU-1 63.88, …`)
_LABEL = (
    r"(?i)(?:^|[-|,;>\]][ \t]*)(validation|valid|val|evaluation|eval|dev|test)"
    r"(?:[ \t]+[A-Za-z][A-Za-z0-9_-]*)?[ \t]*:[ \t]+[A-Za-z]"
)
_STAGE_ITER = r"^[ \t]*\[[ \t]*([0-9]+)[ \t]*:[ \t]*([0-9]+)[ \t]*\]"
#: the outer counter of :data:`_STAGE_ITER`, whose iteration starts again at each stage
_STAGE = "stage"
# a line of a few words, no number, that says an evaluation starts (`testing in eval
# mode……`, `Evaluating...`, `Validation:`)
_ANNOUNCE = (
    r"(?i)^[ \t]*(?:testing|evaluating|validating|evaluation|validation|eval|test)\b"
    r"[^0-9=:]{0,40}[.…:!]*[ \t]*$"
)
_LABEL_SPLIT = {"validation": "val", "valid": "val", "evaluation": "val", "eval": "val"}


_VAL_WORDS = ["val", "valid", "validation", "eval", "test"]
# a logger's name and level before the message (`DBNet INFO: [1/200]`) are no key
_LEVEL_WORD = r"(?:^| )(?:INFO|WARNING|WARN|DEBUG|ERROR|CRITICAL)$"
_PROSE_WORD = r"(?i)(?:^| )(?:and|or|for|of|the|with|to|in|on|at|by|from|is|are|was|were)(?:$| )"


# the words of a name written in Chinese that say what the metric is (`训练损失` train loss,
# `验证损失` val loss, `当前准确率` the current accuracy), longest first; a word not here
# stays as it is written
_CJK_WORDS = {
    "损失值": " loss ",
    "损失": " loss ",
    "准确率": " accuracy ",
    "正确率": " accuracy ",
    "学习率": " lr ",
    "困惑度": " perplexity ",
    "训练": " train ",
    "验证": " val ",
    "测试": " test ",
    "平均": " avg ",
    "轮次": " epoch ",
    "批次": " batch ",
    "步数": " step ",
    "迭代": " iter ",
    "时间": " time ",
    "当前": " ",  # (current)
    "值": " ",  # (value: `损失值` the loss' value)
}


def _in_english(pairs: pl.DataFrame, any_cjk: bool) -> pl.DataFrame:
    """The pairs, their keys' Chinese words of :data:`_CJK_WORDS` said in English (looked
    for only when a line of the piece has such a character, ``any_cjk``)."""
    if not any_cjk:
        return pairs
    has = pl.col("key").str.contains(f"[{_CJK}]")
    words = list(_CJK_WORDS)
    spelled = pl.col("key").str.replace_many(words, [_CJK_WORDS[w] for w in words])
    plain = spelled.str.replace_all(r"[ \t]+", " ").str.strip_chars()
    return pairs.with_columns(pl.when(has).then(plain).otherwise(pl.col("key")).alias("key"))


# a running best before the first pair (`Best Valid accuracy: 77.00%`, `best model saved,
# val loss: 5.96`): the best so far, not the step's value
_BEST = r"(?i)\bbest\b|最佳"


_COPULA = r" (?:is|was|are|were)$"
_COPULA_LINE = r" (?:is|was|are|were)[ \t]*[=:\uff1a]"


def _no_copula(pairs: pl.DataFrame, any_copula: bool) -> pl.DataFrame:
    """A copula after the name is no part of it (`loss is: 0.62, acc is: 0.78`); looked
    for only when a line of the piece has one (``any_copula``)."""
    if not any_copula:
        return pairs
    return pairs.with_columns(pl.col("key").str.replace(_COPULA, "").alias("key"))


def _no_list_items(tokens: pl.DataFrame, any_list: bool) -> pl.DataFrame:
    """Without a list's first item (`STEPS: [50, 70, 90]` in a printed config: no pair);
    looked for only when a line of the piece has a bracket before a comma."""
    if not any_list:
        return tokens
    return tokens.filter(~pl.col("_t").str.contains(r"\[[^\]/]*,[ \t]*$"))


def _running_bests(pairs: pl.DataFrame) -> pl.DataFrame:
    """The pairs of a line that names a best before them (`Best Valid accuracy: 77.00%`
    after each epoch's `Validation accuracy: 64.00%`) are the best so far: named
    ``best <key>`` (kept, never aliased to the metric itself, whose value at that step
    they would overwrite)."""
    if not pairs.get_column("_best").any():
        return pairs.drop("_best")
    return pairs.with_columns(
        pl.when(
            pl.col("_best")
            & ~pl.col("key").str.contains(r"(?i)\bbest\b")
            & ~pl.col("key").str.to_lowercase().is_in(list(STEP_NAMES))  # (its step stays)
        )
        .then(pl.lit("best ") + pl.col("key"))
        .otherwise(pl.col("key"))
        .alias("key")
    ).drop("_best")


def _bare_splits(pairs: pl.DataFrame) -> pl.DataFrame:
    """A line that names bare splits as keys, ``train 9.85 val 9.84`` (nanoGPT-style
    ``estimate_loss`` lines: ``[eval] iter 500: train 3.71 val 3.65``), gives each split's
    loss: the validation word is ``<word> loss`` (read as val/loss); ``train`` keeps its
    name (the interval lines' loss is the train loss, logged at every step)."""
    low = pl.col("key").str.to_lowercase()
    has_train = (low == "train").any().over("lineno")
    bare_val = low.is_in(_VAL_WORDS)
    return pairs.with_columns(
        pl.when(has_train & bare_val)
        .then(pl.col("key") + pl.lit(" loss"))
        .otherwise(pl.col("key"))
        .alias("key")
    )


def _labelled_lines(pairs: pl.DataFrame) -> pl.DataFrame:
    """The pairs after a split label (``Validation BLEU:``, ``Dev BLEU:``) are that split's:
    ``val/<key>``, ``dev/<key>``, ``test/<key>`` (the line's first pair, its step, is kept
    as it is). Read as one name, a Dev set's BLEU overwrote the validation set's."""
    if not pairs.get_column("_label").is_not_null().any():
        return pairs.drop("_label")
    first = pl.col("field") == pl.col("field").min().over("lineno")
    split = pl.col("_label").replace(_LABEL_SPLIT)
    named = pl.col("key").str.contains(_EVAL_KEY)
    return pairs.with_columns(
        pl.when(pl.col("_label").is_not_null() & ~first & ~named)
        .then(split + pl.lit("/") + pl.col("key"))
        .otherwise(pl.col("key"))
        .alias("key")
    ).drop("_label")


def _repeats_after_evaluation(pairs: pl.DataFrame) -> pl.DataFrame:
    """A key said again on its line after an evaluation's key (`Train Loss: 11.2 | Token
    Acc: 0.05 | Val Loss: 10.9 | Token Acc: 0.07`) is the evaluation's: ``val/<key>``
    (read as one name, the validation accuracy overwrote the training one)."""
    at = pl.when(pl.col("key").str.contains(_EVAL_KEY)).then(pl.col("field")).min().over("lineno")
    again = pl.col("field").cum_count().over("lineno", "key") > 1
    later = at.is_not_null() & (pl.col("field") > at) & again
    return pairs.with_columns(
        pl.when(later).then(pl.lit("val/") + pl.col("key")).otherwise(pl.col("key")).alias("key")
    )


# a count of iterations done, in the plural (`iters: 100, loss:1.3818`), is the step word
_PLURAL_STEPS = {"iters": "iter", "Iters": "Iter", "ITERS": "ITER"}


def _step_word_alone(key: pl.Expr, value: pl.Expr) -> pl.Expr:
    """A two-word key ending in a step name, before a whole number, is that name (`end of
    epoch 1`: `epoch`; `Change from previous epoch: 1.58` is no epoch); a plural `iters`
    is `iter`."""
    last = key.str.extract(r" ([A-Za-z_]+)$", 1)
    whole = value.str.contains(r"^[0-9]+$").fill_null(False)
    return (
        pl.when(last.str.to_lowercase().is_in(list(STEP_NAMES)) & whole)
        .then(last)
        .otherwise(key)
        .replace(_PLURAL_STEPS)
    )


#: lines and names of stepless pairs between two step lines from which on they are a
#: configuration printed by a relaunch (an evaluation prints fewer: HF's eval block has 7)
DUMP_LINES = 10
#: lines between two step lines that say one name from which on it is a per-item figure
_ITEM_LINES = 3


def _place_loose(
    long: pl.DataFrame, loose: pl.DataFrame, steps: pl.DataFrame, dated: pl.DataFrame
) -> tuple[pl.DataFrame, int]:
    """``long`` with the pairs of lines without a step: a line with two pairs (an
    evaluation's results) or an indent (a block under a step header) takes the last step
    above it; a lone pair on a line of its own is left out, unless its line names the
    epoch (``dated``: the epoch's result) or its name follows most steps (an evaluation
    printed on a line of its own after each epoch). So are the pairs between two
    step lines that fill ``DUMP_LINES`` lines with as many names: the configuration a
    relaunch prints (maskrcnn-benchmark's yacs dump, a pprint of a config dict), whose
    values are no step's (an evaluation printed between the same two steps goes with
    it), and a name said on ``_ITEM_LINES`` lines or more between two steps (a figure per
    tensor or per sample). Also the number of lines so left out."""
    pairs_on = loose.group_by("lineno").len()
    # a lone pair said again after most steps (`Validation accuracy: 51.00%` on the line
    # after each epoch's) is an evaluation's result; a configuration's value is said once
    again = pl.col("lineno").n_unique().over("key") * 2 >= steps.height
    loose = loose.join(pairs_on, on="lineno", how="left", maintain_order="left").filter(
        (pl.col("len") >= 2)
        | pl.col("_indent")
        | again
        | pl.col("lineno").is_in(dated.get_column("lineno").implode())
    )
    placed = (
        loose.drop("step", "len")
        .join_asof(steps.rename({"lineno": "_at"}), left_on="lineno", right_on="_at")
        .filter(pl.col("step").is_not_null())
    )
    dump = (pl.col("lineno").n_unique().over("_at") >= DUMP_LINES) & (
        pl.col("key").n_unique().over("_at") >= DUMP_LINES
    )
    # a name said on several lines between two steps is a per-item figure (`Gradient
    # stats for <tensor>:` then `Norm: 0.17, Mean: …` for every tensor; a molecule's
    # embedding stats): no one value is the step's, and the last would stand for all
    items = pl.col("lineno").n_unique().over("_at", "key") >= _ITEM_LINES
    dumped = placed.filter(dump | items).get_column("lineno").n_unique()
    placed = placed.filter(~(dump | items)).drop("_at")
    out = pl.concat([long, placed.select(long.columns)])
    return out.sort("lineno", "field", maintain_order=True), dumped


def _empty() -> pl.DataFrame:
    from trainlens.readers.textlog.pipeline import empty_long

    return empty_long()


_SCALES = {**_MEMORY, "ms": 1e-3, "s": 1.0, "%": 0.01, "": 1.0}


def _number() -> pl.Expr:
    """The value in canonical units: ``ms`` as seconds, a percent as a fraction, memory
    in bytes (``nan``/``inf`` kept)."""
    factor = pl.col("unit").fill_null("").replace_strict(_SCALES, return_dtype=pl.Float64)
    return pl.col("value").cast(pl.Float64, strict=False) * factor


def choose_step(pairs: pl.DataFrame) -> tuple[str | None, str | None]:
    """The step's name (lower case) and, when it is a batch counter that starts again each
    epoch, the epoch's name; (None, None) when no name qualifies."""
    cands = pairs.filter(pl.col("_lower").is_in(list(STEP_NAMES)))
    if cands.height == 0:
        return None, None
    per = (
        cands.with_columns(pl.col("value").alias("_v"))
        .group_by("_lower", maintain_order=True)
        .agg(
            pl.len().alias("n"),
            (pl.col("_v") == pl.col("_v").round()).all().alias("whole"),
            (pl.col("_v").diff() >= 0).mean().alias("rise"),
            (pl.col("_v").diff() < 0).sum().alias("drops"),
            pl.col("of").drop_nulls().first().alias("of"),
        )
    )
    whole = per.filter(pl.col("whole"))
    names = {r["_lower"]: r for r in whole.iter_rows(named=True)}
    epoch = next((n for n in STEP_NAMES if n in _EPOCHS and n in names), None)
    staged = pairs.filter(pl.col("_lower") == _STAGE).height > 0
    for name in STEP_NAMES:
        row = names.get(name)
        if row is None:
            continue
        if name in _EPOCHS:
            counter = counters.unnamed_counter(pairs, name)
            if counter is not None:
                return counter, name
        rise = row["rise"] if row["rise"] is not None else 1.0
        counted = name not in _EPOCHS and epoch is not None and row["of"] is not None
        if counted and rise < 1.0:
            return name, epoch  # a batch counter per epoch (it starts again), total printed
        if rise < 1.0 and staged and row["of"] is None:
            return name, _STAGE  # an iteration that starts again at each stage
        if rise >= _RISE or row["drops"] <= 1:
            return name, None
    return None, None


def _steps(pairs: pl.DataFrame, step_key: str, per_epoch: str | None) -> pl.DataFrame:
    """``lineno, step`` for the lines that carry the step."""
    value = pl.col("value").round().cast(pl.Int64, strict=False)
    steps = (
        pairs.filter(pl.col("_lower") == step_key)
        .select("lineno", value.alias("step"), pl.col("of").cast(pl.Int64, strict=False))
        .unique("lineno", keep="first", maintain_order=True)
    )
    if per_epoch is None:
        return steps.select("lineno", "step")
    epochs = (
        pairs.filter(pl.col("_lower") == per_epoch)
        .select("lineno", value.alias("_epoch"))
        .unique("lineno", keep="first", maintain_order=True)
    )
    if per_epoch == _STAGE:
        return counters.staged_steps(steps.join(epochs, on="lineno", how="inner"))
    first = epochs.get_column("_epoch").min()
    return steps.join(epochs, on="lineno", how="inner").select(
        "lineno",
        ((pl.col("_epoch") - pl.lit(first)) * pl.col("of") + pl.col("step")).alias("step"),
    )
