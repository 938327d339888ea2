"""Plain-text training logs: the metrics printed to stdout or written to a ``.log`` file.

Shapes recognised (sniffed from the content, several may share one file):

* Megatron-LM / Megatron-DeepSpeed iteration lines (and nanotron's, ``iteration: N / M |
  lm_loss: 2.38 | tokens_per_sec: 22.8K |``: a value ending in K, M, G or T after a digit
  is in powers of 1000, as nanotron's human_format writes it),
  ``iteration  3000/ 292968 | lm loss: 2.365880E+00 | grad norm: 0.234 | ...`` — the step
  is the iteration; every ``key: number`` field is a metric named by its key as written
  (the alias table maps ``lm loss``, ``grad norm``, ``learning rate`` ...). The line may
  carry a prefix (``[default7]:``, a timestamp) and may be hard-wrapped over a few lines
  (as when copied from a terminal into notes). Validation lines
  (``validation loss at iteration 1000 | lm loss value: ... | lm loss PPL: ... |``) give
  ``<key> validation`` and ``<key> validation ppl``, the names Megatron gives the same
  numbers in TensorBoard; an evaluation ``on N-sample draw from validation set`` gives
  ``<key> validation draw``.
* DeepSpeed engine and DeepSpeed-Chat lines (``step=N, skipped=K, lr=[...]``, timer
  throughput lines, ``OVERFLOW! ... Attempted loss scale``, ``Evaluating perplexity`` +
  ``ppl:``), when the file has no Megatron or ``key:value`` line: see
  :mod:`trainlens.readers.textlog.deepspeed`.
* llm.c / modded-nanogpt ``key:value`` lines: ``s:0 trl:10.9 lr:0.0006 norm:1.2`` and
  ``step:10/5100 train_loss:4.3 train_time:1234ms step_avg:123.4ms``. A line counts only
  when it consists entirely of ``key:number`` tokens and starts with the step key, so the
  training script many of these logs begin with (f-strings holding ``step:``) gives
  nothing. A value ending in ``ms`` is converted to seconds, ``s`` is dropped.
* nanoGPT's ``iter N: loss X, time Yms, mfu Z%`` and ``step N: train loss X, val loss Y``
  (``time`` is the iteration's step time, ``mfu`` a fraction; nanoGPT's ``-100%`` before
  it has timed five iterations is left out; the evaluation's train-split mean is named
  ``train loss (eval)``, apart from ``train/loss``).
* build-nanogpt's ``step N | loss: X | lr Y | norm: Z | dt: Tms | tok/sec: R`` and its
  log file's ``N train X`` / ``N val X`` / ``N hella X`` lines; llm.c's stdout, ``step
  N/M | loss X (+0.1z)| norm Y (+0.2z)| lr Z | T ms | P% bf16 MFU | R tok/s``. A negative
  mfu (nanoGPT's and llm.c's -100% before they have timed an iteration) is left out.
* torchtitan's ``step: N  loss: X  grad_norm: Y  memory: 9.46GiB(64.99%)  tps: 7,282
  tflops: 0.52  mfu: 0.17%`` (terminal colours removed; memory is its peak reserved GiB).
* Printed metric dicts of the Hugging Face Trainer, ``{'loss': 2.1, 'grad_norm': 1.3,
  'learning_rate': 5e-05, 'epoch': 0.01}``. They carry no step: the k-th training dict is
  step k and an evaluation dict (``eval_*`` keys) shares the last training step (reported
  as an info issue); the end-of-training summary (``train_runtime`` ...) becomes
  ``final/<key>`` at the last step, as in the trainer_state.json reader. They are used only
  when no shape with real steps is in the file. Nothing is evaluated: the pairs are picked
  out with a regular expression.
* A user's regular expression (``ReadOptions.regex``): group ``step`` is the step, every
  other named group a metric of that name; only it is used when given.

A file in which no metric line is found but which ends in a Python exception (a run that
crashed before its first step) is reported with that exception quoted.

Values ``nan``/``inf`` (any case, with a sign) are kept as NaN/±inf. A value that is not a
number is counted and reported with its first line. Bytes that are not UTF-8 are replaced
and reported with the first line where they occur. ``start_offset`` resumes reading at a
byte offset; ``run.cursor[path]`` is the offset just past the last complete line (a last
line without a line end is read but left for the next read, which may see it finished); a
resumed read that finds nothing new returns an empty run instead of failing. Line ends may
be CRLF; a bare CR (a progress bar redrawn) keeps what was written after it.

Matching is done by polars' regex engine over all lines of a piece at once (linear time),
the file read a few MB at a time so that memory stays near the frame (see :mod:`.builtin`);
only the user's regex, which is a Python regex, is applied line by line, to the whole text.

The package, by job: :mod:`.shapes` (every shape as a table entry), :mod:`.pipeline` (the
one pipeline that reads an entry), :mod:`.builtin` (all shapes of one file, which one wins),
:mod:`.deepspeed` (DeepSpeed's step-less lines, placed by position), :mod:`.values` (value
texts to numbers), :mod:`.notes` (data quality), :mod:`.cursor` (the resume cursor and the
lines), :mod:`.user_regex`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from trainlens.core.errors import UnreadableInputError
from trainlens.core.names import Alias, AliasTable
from trainlens.core.run import Run, build_run
from trainlens.readers import _run_end, _run_resume
from trainlens.readers.base import HEAD_BYTES, ReadOptions, run_name_for
from trainlens.readers.textlog import (
    blocks,
    builtin,
    cursor,
    deepspeed,
    frameworks,
    generic,
    registry,
    user_regex,
    values,
)
from trainlens.readers.textlog.notes import Notes, crashed_message, final_error
from trainlens.readers.textlog.shapes import sniff_regex

FORMAT = "text"

# how far sniffing looks when the head (HEAD_BYTES) holds no metric line: logs that
# start with an echoed training script or environment dump put their first metric line
# far in (modded-nanogpt: ~25 kB)
SNIFF_SCAN_BYTES = 1 << 20

_SNIFF = sniff_regex(
    extra=(
        deepspeed.SNIFF,
        *(s.sniff_pattern for s in frameworks.SHAPES if s.sniff_pattern),
        *blocks.sniff_patterns(),
        generic.SNIFF,
    )
)

__all__ = ["FORMAT", "SNIFF_SCAN_BYTES", "has_metric_line", "read", "sniff"]


# ---- sniffing -------------------------------------------------------------------------


def has_metric_line(data: bytes) -> bool:
    """True when ``data`` holds a line of one of the shapes this reader knows."""
    text = cursor.strip_ansi(data.decode("utf-8", errors="replace").replace("\r", "\n"))
    return _SNIFF.search(text) is not None


def sniff(path: Path, head: bytes) -> bool:
    """True when a line has one of the known shapes: a Megatron iteration line, an llm.c
    ``s:N`` line, a ``step:N/M`` line or a printed Trainer dict. When the head holds none,
    up to ``SNIFF_SCAN_BYTES`` of the file are searched (logs that echo a script first)."""
    if path.is_dir():
        return False
    if has_metric_line(head):
        return True
    if len(head) < HEAD_BYTES:
        return False
    try:
        with path.open("rb") as fh:
            more = fh.read(SNIFF_SCAN_BYTES)
    except OSError:
        return False
    return len(more) > len(head) and has_metric_line(more)


# ---- reading --------------------------------------------------------------------------


def read(path: Path, opts: ReadOptions) -> list[Run]:
    source = str(path)
    start, notes = cursor.resume_offset(path, opts.start_offset, source)
    meta: dict[str, Any] = {}
    if opts.regex:
        long, end = _read_regex(path, start, opts, notes, meta)
    else:
        long, end = _read_builtin(path, start, opts, notes, meta)
    logged_as: dict[str, str] = meta.pop("_logged_as", {})
    first_line = meta.pop("_first_line", None)
    if first_line is not None and not start:  # (a whole read: the set-up is in it)
        restored = _run_resume.restored_before(path, first_line)
        if restored is not None:
            meta[_run_resume.KEY] = restored
    run = build_run(
        long,
        name=run_name_for(path),
        source=source,
        fmt=FORMAT,
        aliases=_d2_case(long, opts.aliases),
        metadata=meta,
        issues=notes.issues,
    )
    run.cursor[source] = end
    _run_end.attach(run, _run_end.text_end(path, registry.training_lines()))
    # DeepSpeed shapes are read under canonical names: show what the log calls them
    for canonical, shown in logged_as.items():
        if run.raw_names.get(canonical) == canonical:
            run.raw_names[canonical] = shown
    return [run]


def _d2_case(long: pl.DataFrame, table: AliasTable) -> AliasTable:
    """detectron2's results keep their case (``val/bbox/AP``, as its metrics.json reads:
    a split folder's rest is otherwise looked up folded)."""
    from trainlens.readers import _coco

    metric = long.get_column("metric")
    dtype = metric.dtype
    names = list(dtype.categories) if isinstance(dtype, pl.Enum) else metric.unique().to_list()
    own = {n: Alias(n) for n in names if n.startswith("val/") and _coco.EVAL.match(n)}
    if not own:
        return table
    from trainlens.readers._fwtables import with_aliases

    return with_aliases(table, own)


def _read_builtin(
    path: Path, start: int, opts: ReadOptions, notes: Notes, meta: dict[str, Any]
) -> tuple[pl.DataFrame, int]:
    """The built-in shapes, the file read in pieces (see :mod:`.builtin`); the long
    frame and the resume cursor."""
    seen = cursor.Pieces(start)
    reader = builtin.Reader(notes)
    for text, last in cursor.pieces(path, seen):
        reader.add(cursor.split_lines(text, redraws=True), last)
    if not seen.text_seen and not start:
        raise UnreadableInputError(f"{path}: the file is empty")
    seen.note(notes)
    long = reader.finish(meta)
    if long.height == 0 and not start:
        raise _nothing_read(path, opts, pl.concat(reader.errors))
    return long, seen.cursor


def _read_regex(
    path: Path, start: int, opts: ReadOptions, notes: Notes, meta: dict[str, Any]
) -> tuple[pl.DataFrame, int]:
    """A user's regex, applied line by line to the whole text."""
    chunk = cursor.read_chunk(path, start, notes)
    if not chunk.data.strip() and not chunk.resumed:
        raise UnreadableInputError(f"{path}: the file is empty")
    lines = cursor.split_lines(cursor.decode(chunk.data, notes))
    assert opts.regex is not None
    long = user_regex.parse(lines.to_list(), opts.regex, notes)
    meta["text_shapes"] = {"regex": int(long.get_column("lineno").n_unique())}
    long = values.parse(long, notes)
    if long.height == 0 and not chunk.resumed:
        raise _nothing_read(path, opts, lines)
    return long.select("step", "metric", "value"), chunk.cursor


def _nothing_read(path: Path, opts: ReadOptions, lines: pl.Series) -> UnreadableInputError:
    """The error for a log in which no value was found: a crash, or another shape."""
    if opts.regex:
        return UnreadableInputError(
            f"{path}: no line matched the regex {opts.regex!r} with a numeric value"
        )
    crash = final_error(lines)
    if crash is not None:
        return UnreadableInputError(crashed_message(path, crash))
    return UnreadableInputError(
        f"{path}: no training metrics found (looked for Megatron `iteration N/ M | key: "
        "value |` lines, llm.c `s:N key:value` lines, `step:N/M key:value` lines, "
        "DeepSpeed step, timer and perplexity lines and printed Trainer dicts)",
        hint="use --regex with a named group `step` for another log shape",
    )
