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
  :mod:`trainlens.readers._textlog_deepspeed`.
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

Matching is done by polars' regex engine over all lines at once (linear time); only the
user's regex, which is a Python regex, is applied line by line.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import polars as pl

from trainlens.core.errors import UnreadableInputError, UsageError
from trainlens.core.run import DataIssue, Run, build_run
from trainlens.readers import _textlog_deepspeed as deepspeed
from trainlens.readers.base import HEAD_BYTES, ReadOptions, run_name_for

FORMAT = "text"

# how far sniffing looks when the head (HEAD_BYTES) holds no metric line: logs that
# start with an echoed training script or environment dump put their first metric line
# far in (modded-nanogpt: ~25 kB)
SNIFF_SCAN_BYTES = 1 << 20
_MAX_WRAPPED_LINES = 5

# ---- patterns (valid both for Python's re and polars' Rust regex) -----------------------

_NUM = (
    r"[+-]?(?:[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?"
    r"|(?i:nan|inf(?:inity)?))"
)
_KEY = r"[A-Za-z_][A-Za-z0-9_./-]*"
_BRACKET_PREFIX = r"(?:\[[^\]\n]*\]:?[ \t]*)?"

# llm.c `s:N k:v ...` and modded-nanogpt `step:N/M k:v ...`: the whole line, nothing else
_KV_LINE = (
    rf"^[ \t]*{_BRACKET_PREFIX}(?:s|step):([0-9]+)(?:/([0-9]+))?"
    rf"((?:[ \t]+{_KEY}:{_NUM}(?:ms|s)?)+)[ \t]*$"
)
_KV_TOKEN = rf"{_KEY}:[^ \t]+"

# Megatron: `iteration N/ M | key: value | ...`
# (nanotron writes the same line as `iteration: N / M | lm_loss: 2.38 | ...`)
_MEG_MARK = r"iteration:?[ \t]+[0-9]+[ \t]*/[ \t]*[0-9]+[ \t]*\|"
_MEG_ITER = r"iteration:?[ \t]+([0-9]+)[ \t]*/[ \t]*([0-9]+)[ \t]*\|(.*)$"
_MEG_SNIFF = (
    rf"iteration:?[ \t]+[0-9]+[ \t]*/[ \t]*[0-9]+[ \t]*\|[^\n]*?:[ \t]*{_NUM}[KMGT]?[ \t]*\|"
)
# a wrapped continuation: `<part of a key>: value | ...` with no new iteration in it
_MEG_CONTINUATION = re.compile(r"^[^|\[]*:[^|]*\|")
# Megatron validation: `validation loss at iteration N [on validation set] | k value: v |`
_MEG_VAL = (
    r"(?:^|[^A-Za-z0-9_.-])([A-Za-z_][A-Za-z0-9_.-]*)[ \t]+loss at iteration[ \t]+([0-9]+)"
    r"([^|]*)\|(.*)$"
)
_MEG_VAL_END = r"loss at the end of training[^|]*\|[^|]*:[ \t]*[-+0-9.a-zA-Z]+[ \t]*\|"

# nanoGPT's own prints: `iter N: loss X, time Yms, mfu Z%` and, at each evaluation,
# `step N: train loss X, val loss Y` (after any prefix: a timestamp, `> ` quoting)
_NANO_KEY = r"[A-Za-z_][A-Za-z0-9_]*"
_NANO_PAIR = rf"{_NANO_KEY}[ \t]+{_NUM}(?:ms|s|%)?"
_NANO_ITER = (
    rf"(?:^|[^A-Za-z0-9_])iter[ \t]+([0-9]+):[ \t]*(loss[ \t]+{_NUM}(?:,[ \t]*{_NANO_PAIR})*)"
    r"[ \t]*$"
)
_NANO_EVAL = (
    rf"(?:^|[^A-Za-z0-9_])step[ \t]+([0-9]+):[ \t]*train loss[ \t]+({_NUM}),[ \t]*"
    rf"val loss[ \t]+({_NUM})[ \t]*(?:,[^\n]*)?$"
)
# nanoGPT's names for what the alias table knows under other names: `time` is the
# iteration's own time (dt), and the evaluation's `train loss` is a mean over eval_iters
# batches, not the step's loss, so it keeps a name of its own beside train/loss
_NANO_NAMES = {"time": "iter_time", "train loss": "train loss (eval)"}

# build-nanogpt (Karpathy's "Let's reproduce GPT-2"): stdout `step    10 | loss: 9.123456 |
# lr 8.3916e-05 | norm: 2.1234 | dt: 345.67ms | tok/sec: 1516721.23` and its log file,
# `<step> train <loss>` / `<step> val <loss>` / `<step> hella <accuracy>`
# llm.c's stdout is the same shape: `step   61/74 | loss 3.208939 (+nanz)| norm 1.4800
# (+nanz)| lr 3.00e-04 | 44.57 ms | -100.0% bf16 MFU | 91886 tok/s` (older: `train loss`)
_BNG_LINE = (
    rf"^[ \t]*step[ \t]+([0-9]+)(?:/[0-9]+)?[ \t]*\|[ \t]*"
    rf"((?:train )?loss:?[ \t]+{_NUM}[^|]*\|.*)$"
)
_BNG_FIELD = (
    rf"^[ \t]*([A-Za-z_/][A-Za-z_/ ]*?):?[ \t]+({_NUM}(?:ms|s)?)[ \t]*(?:\([^)]*\))?[ \t]*$"
)
# fields that are a value and its unit: `44.57 ms`, `-100.0% bf16 MFU`, `91886 tok/s`
_BNG_UNIT = rf"^[ \t]*({_NUM})[ \t]*(ms|tok/s|%[ \t]*[A-Za-z0-9]*[ \t]*MFU)[ \t]*$"
_BNG_FILE = rf"^([0-9]+) (train|val|hella) ({_NUM})$"
_BNG_NAMES = {
    "dt": "iter_time",
    "tok/sec": "tokens_per_sec",
    "train": "train_loss",
    "train loss": "loss",
    "val": "val_loss",
    # (not *_acc: an accuracy beside the loss would make it a classifier's)
    "hella": "hellaswag",
}

# torchtitan's metrics line: `step: 14  loss:  3.24405  grad_norm:  0.8319  memory:
# 9.46GiB(64.99%)  tps: 7,282  tflops: 0.52  mfu: 0.17%` (after its logging prefix)
_TITAN_VALUE = r"[+-]?[0-9][0-9,]*(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?|(?i:nan|inf)"
_TITAN_LINE = rf"(?:^|[^A-Za-z0-9_])step:[ \t]*([0-9]+)[ \t]+(loss:[ \t]*(?:{_NUM})[ \t].*)$"
_TITAN_PAIR = rf"([A-Za-z_]+):[ \t]*({_TITAN_VALUE})(GiB|%)?"
# torchtitan's own names for the console's numbers (its TensorBoard tags)
_TITAN_NAMES = {"memory": "memory/max_reserved(GiB)"}
_ANSI = r"\x1b\[[0-9;]*[A-Za-z]"

# Hugging Face Trainer's printed dicts
_HF_DICT = r"\{('[^'\n]+':[^{}\n]*)\}"
_HF_PAIR = r"'[^'\n]+':\s*[^,]+"
_HF_SNIFF = rf"\{{[^{{}}\n]*'(?:loss|eval_loss)':[ \t]*{_NUM}[^{{}}\n]*\}}"
# np.float64(2.1) and the like, as newer numpy prints scalars
_WRAPPED_SCALAR = r"^[A-Za-z_][A-Za-z0-9_.]*\(\s*([^(),]*?)\s*\)$"

_SNIFF = re.compile(
    "|".join(
        f"(?:{p})"
        for p in (
            _KV_LINE,
            _MEG_SNIFF,
            _NANO_ITER,
            _NANO_EVAL,
            _TITAN_LINE,
            _BNG_LINE,
            _BNG_FILE,
            _HF_SNIFF,
            deepspeed.SNIFF,
        )
    ),
    re.MULTILINE,
)

# the last line of a Python traceback, after any launcher prefix (`[rank3]: `, `3: `)
_EXCEPTION = re.compile(
    r"^(?:\[[^\]\n]*\]:?[ \t]*)*(?:[0-9]+:[ \t]*)?"
    r"((?:[A-Za-z_][A-Za-z0-9_]*\.)*[A-Za-z_][A-Za-z0-9_]*(?:Error|Exception|Interrupt|Fault))"
    r"(?::[ \t]*(.*))?$"
)
# launchers' wrappers around a worker's error: the worker's own error says more
_WRAPPER_ERRORS = {"ChildFailedError", "CalledProcessError"}
_MEG_MARK_RE = re.compile(_MEG_MARK)

_SI = {"K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}

_VAL_SETS = {"validation", "valid", "val", "eval", "evaluation"}

_LONG_SCHEMA: dict[str, pl.DataType] = {
    "lineno": pl.Int64(),
    "field": pl.Int64(),
    "step": pl.Int64(),
    "metric": pl.String(),
    "raw": pl.String(),
}


# ---- sniffing -------------------------------------------------------------------------


def has_metric_line(data: bytes) -> bool:
    """True when ``data`` holds a line of one of the shapes this reader knows."""
    text = data.decode("utf-8", errors="replace").replace("\r", "\n")
    if "\x1b" in text:
        text = re.sub(_ANSI, "", text)
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
    issues: list[DataIssue] = []
    start = max(int(opts.start_offset), 0)
    if start > path.stat().st_size:
        # the file was replaced or truncated (log rotation) since the offset was taken
        issues.append(
            DataIssue(
                kind="truncated-file",
                source=source,
                message=(
                    f"the file is shorter than the resume offset {start}; "
                    "it was read again from the start"
                ),
                details={"start_offset": start},
            )
        )
        start = 0
    with path.open("rb") as fh:
        fh.seek(start)
        data = fh.read()
    resumed = start > 0
    if not data.strip() and not resumed:
        raise UnreadableInputError(f"{path}: the file is empty")

    end = data.rfind(b"\n") + 1
    cursor = start + end
    where = _Where(start)
    tail = data[end:]
    if tail.strip():
        line_no = data.count(b"\n") + 1
        issues.append(
            DataIssue(
                kind="unterminated-line",
                source=source,
                location=where.line(line_no),
                message=(
                    f"the last line ({len(tail)} bytes) has no line end — a run still being "
                    "written? Its values were read, but the resume cursor stays before it"
                ),
                severity="warning",
                details={"byte_offset": cursor},
            )
        )

    text = _decode(data, source, where, issues)
    parts = text.split("\n")
    if text.endswith("\n"):
        parts.pop()
    lines = pl.Series("line", parts, dtype=pl.String)
    del parts
    if "\r" in text:
        # CRLF line ends; a bare CR (progress bars) rewrites the line: keep what was last
        lines = lines.str.strip_chars_end("\r").str.replace(r"^[^\n]*\r", "")
    if "\x1b" in text:
        # terminal colours (torchtitan colours each field of its metrics line)
        lines = lines.str.replace_all(_ANSI, "")

    meta: dict[str, Any] = {}
    if opts.regex:
        long = _parse_user_regex(lines.to_list(), opts.regex, source, where, issues)
        meta["text_shapes"] = {"regex": int(long.get_column("lineno").n_unique())}
    else:
        long = _parse_builtin(lines, source, where, issues, meta)

    long = _values(long, source, where, issues)
    if long.height == 0 and not resumed:
        if opts.regex:
            raise UnreadableInputError(
                f"{path}: no line matched the regex {opts.regex!r} with a numeric value"
            )
        crash = _final_error(lines)
        if crash is not None:
            raise UnreadableInputError(
                f"{path}: no training step was logged; the log ends in an error: {crash}"
            )
        raise UnreadableInputError(
            f"{path}: no training metrics found (looked for Megatron `iteration N/ M | key: "
            "value |` lines, llm.c `s:N key:value` lines, `step:N/M key:value` lines, "
            "DeepSpeed step, timer and perplexity lines and printed Trainer dicts)",
            hint="use --regex with a named group `step` for another log shape",
        )
    columns = ["step", "metric", "value", *(["wall_time"] if "wall_time" in long.columns else [])]
    logged_as: dict[str, str] = meta.pop("_logged_as", {})
    run = build_run(
        long.select(columns),
        name=run_name_for(path),
        source=source,
        fmt=FORMAT,
        aliases=opts.aliases,
        metadata=meta,
        issues=issues,
    )
    run.cursor[source] = cursor
    # DeepSpeed shapes are read under canonical names: show what the log calls them
    for canonical, shown in logged_as.items():
        if run.raw_names.get(canonical) == canonical:
            run.raw_names[canonical] = shown
    return [run]


def _final_error(lines: pl.Series) -> str | None:
    """The error a log that logged no metric ends with: its last Python exception line
    (a launcher's wrapper only when nothing else), quoted, with how many lines repeat it."""
    found: list[tuple[str, str]] = []
    for line in lines.filter(lines.str.contains(r"(?:Error|Exception|Interrupt|Fault)")):
        m = _EXCEPTION.match(line.strip())
        if m:
            found.append((m.group(1), (m.group(2) or "").strip()))
    if not found:
        return None
    own = [f for f in found if f[0].rsplit(".", 1)[-1] not in _WRAPPER_ERRORS] or found
    kind, text = own[-1]
    quote = f"{kind}: {text}" if text else kind
    if len(quote) > 200:
        quote = quote[:199] + "…"
    same = sum(1 for k, _ in found if k == kind)
    return quote + (f" ({same} {kind} lines)" if same > 1 else "")


class _Where:
    """Line locations for messages; after a resume they count from the resume offset."""

    def __init__(self, start: int) -> None:
        self.start = start

    def line(self, n: int) -> str:
        return f"line {n}" if self.start == 0 else f"line {n} after byte {self.start}"


def _decode(data: bytes, source: str, where: _Where, issues: list[DataIssue]) -> str:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line_no = data.count(b"\n", 0, exc.start) + 1
        text = data.decode("utf-8", errors="replace")
        n_bad = text.count("\ufffd") - data.count("\ufffd".encode())
        issues.append(
            DataIssue(
                kind="encoding",
                source=source,
                location=where.line(line_no),
                message=(
                    f"bytes that are not UTF-8 (first at {where.line(line_no)}) were "
                    "replaced; the lines around them were read as far as they parse"
                ),
                count=max(n_bad, 1),
                details={"first_byte_offset": where.start + exc.start},
            )
        )
    return text.removeprefix("\ufeff")


# ---- built-in shapes --------------------------------------------------------------------


def _parse_builtin(
    lines: pl.Series,
    source: str,
    where: _Where,
    issues: list[DataIssue],
    meta: dict[str, Any],
) -> pl.DataFrame:
    df = (
        _join_wrapped_megatron(lines)
        .to_frame("line")
        .with_row_index("lineno", offset=1)
        .with_columns(pl.col("lineno").cast(pl.Int64))
    )

    megatron, meg_total = _megatron_iterations(df)
    validation = _megatron_validation(df)
    unplaced = df.filter(pl.col("line").str.contains(_MEG_VAL_END))
    if unplaced.height:
        issues.append(
            DataIssue(
                kind="ignored-lines",
                source=source,
                location=where.line(int(unplaced.get_column("lineno")[0])),
                message=(
                    f"{unplaced.height} validation line(s) 'at the end of training' name no "
                    "iteration and were left out"
                ),
                count=unplaced.height,
                severity="info",
            )
        )
    kv, kv_total = _kv_lines(df)
    nano = _nanogpt_lines(df, source, where, issues)
    titan = _torchtitan_lines(df)
    bng = _build_nanogpt_lines(df)
    shapes = {
        "megatron": _n_lines(megatron),
        "megatron_validation": _n_lines(validation),
        "key_value": _n_lines(kv),
        "nanogpt": _n_lines(nano),
        "torchtitan": _n_lines(titan),
        "build_nanogpt": _n_lines(bng),
    }
    parts = [megatron, validation, kv, nano, titan, bng]
    hf, hf_lines = _hf_dicts(df)
    if hf_lines:
        if any(shapes.values()):
            issues.append(
                DataIssue(
                    kind="ignored-lines",
                    source=source,
                    message=(
                        f"{hf_lines} printed metric dict line(s) carry no step and were left "
                        "out: the file has lines with real steps"
                    ),
                    count=hf_lines,
                    severity="info",
                )
            )
        else:
            parts.append(hf)
            shapes["trainer_dict"] = hf_lines
            issues.append(
                DataIssue(
                    kind="inferred-step",
                    source=source,
                    message=(
                        f"steps inferred for {hf_lines} printed metric dict line(s): the k-th "
                        "training dict ('loss') is step k, an evaluation dict (eval_*) takes "
                        "the last training step, the final summary is named final/<key>"
                    ),
                    count=hf_lines,
                    severity="info",
                )
            )
    meta["text_shapes"] = {k: v for k, v in shapes.items() if v}
    total = meg_total if meg_total is not None else kv_total
    if total is not None:
        meta["max_steps"] = total
    out = pl.concat(parts, how="vertical").sort("lineno", "field", maintain_order=True)
    out = _drop_mfu_placeholder(out, source, where, issues)
    out = _drop_huge_steps(out, source, where, issues)
    return _with_deepspeed(df, out, source, issues, meta)


def _with_deepspeed(
    df: pl.DataFrame,
    found: pl.DataFrame,
    source: str,
    issues: list[DataIssue],
    meta: dict[str, Any],
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
            issues.append(
                DataIssue(
                    kind="ignored-lines",
                    source=source,
                    message=(
                        f"{n_lines} DeepSpeed engine line(s) were left out: the file's "
                        "Megatron / key:value lines record the same steps"
                    ),
                    count=n_lines,
                    severity="info",
                )
            )
        return found
    ds, counts = deepspeed.parse(marked)
    if not sum(counts.values()):
        return found
    if shapes.pop("trainer_dict", None):
        found = found.head(0)  # printed dicts carry no step; these lines do
    _note_deepspeed(counts, source, issues)
    shapes.update({k: v for k, v in counts.items() if v})
    meta["_logged_as"] = deepspeed.logged_as(marked)
    walls = deepspeed.wall_times(marked)
    out = pl.concat([found, ds]).sort("lineno", "field", maintain_order=True)
    return out.join(walls, on="lineno", how="left")


def _note_deepspeed(counts: dict[str, int], source: str, issues: list[DataIssue]) -> None:
    unplaced = counts.pop("deepspeed_overflow_unplaced", 0)
    if unplaced:
        issues.append(
            DataIssue(
                kind="ignored-lines",
                source=source,
                message=(
                    f"{unplaced} DeepSpeed overflow line(s) were left out: the file logs no "
                    "global step to place them at (DeepSpeed's steps_per_print prints one)"
                ),
                count=unplaced,
                severity="info",
            )
        )
    if counts["deepspeed_overflow"]:
        issues.append(
            DataIssue(
                kind="inferred-step",
                source=source,
                message=(
                    f"{counts['deepspeed_overflow']} DeepSpeed OVERFLOW line(s) carry no step: "
                    "each logging interval's count ('overflow steps') and the loss scale "
                    "after it are placed at the interval's next logged step"
                ),
                count=counts["deepspeed_overflow"],
                severity="info",
            )
        )
    if counts["deepspeed_eval"] and not (counts["deepspeed_steps"] or counts["deepspeed_timer"]):
        issues.append(
            DataIssue(
                kind="inferred-step",
                source=source,
                message=(
                    "the file logs no global step: each perplexity evaluation is placed at "
                    "its epoch number"
                ),
                count=counts["deepspeed_eval"],
                severity="info",
            )
        )


def _drop_huge_steps(
    long: pl.DataFrame, source: str, where: _Where, issues: list[DataIssue]
) -> pl.DataFrame:
    """Values whose line's step does not fit 64 bits (a 20-digit ``s:N``) are left out
    with a note; the rest of the log is kept."""
    bad = long.filter(pl.col("step").is_null())
    if bad.height == 0:
        return long
    lines = bad.get_column("lineno").unique(maintain_order=True)
    shown = ", ".join(str(where.line(int(n))) for n in lines.head(5).to_list())
    issues.append(
        DataIssue(
            kind="bad-step",
            source=source,
            location=where.line(int(lines[0])),
            message=(
                f"{bad.height} value(s) on {lines.len()} line(s) whose step does not fit in "
                f"64 bits were skipped ({shown}{'…' if lines.len() > 5 else ''})"
            ),
            count=bad.height,
            details={"lines": lines.head(100).to_list()},
        )
    )
    return long.filter(pl.col("step").is_not_null())


def _n_lines(df: pl.DataFrame) -> int:
    return int(df.get_column("lineno").n_unique()) if df.height else 0


def _empty_long() -> pl.DataFrame:
    return pl.DataFrame(schema=_LONG_SCHEMA)


def _join_wrapped_megatron(lines: pl.Series) -> pl.Series:
    """Join an iteration line hard-wrapped over a few lines back into one (the
    continuation lines become empty so line numbers stay right)."""
    broken = (
        lines.str.contains(_MEG_MARK) & ~lines.str.strip_chars_end().str.ends_with("|")
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


def _fields(df: pl.DataFrame, rest: str) -> pl.DataFrame:
    """Split a ``| key: value | key: value |`` column into one row per field."""
    long = (
        df.with_columns(pl.col(rest).str.split("|").alias("_seg"))
        .explode("_seg")
        .with_row_index("field")  # file order within a line is all that is needed
        .with_columns(
            pl.col("field").cast(pl.Int64), pl.col("_seg").str.splitn(":", 2).alias("_kv")
        )
        .with_columns(
            pl.col("_kv").struct.field("field_0").str.strip_chars().alias("_key"),
            pl.col("_kv").struct.field("field_1").str.strip_chars().alias("raw"),
        )
        .filter(pl.col("raw").is_not_null() & pl.col("_key").str.contains("^[A-Za-z]"))
    )
    # keys wrapped over lines hold runs of white space; few distinct keys, so fix those
    keys = long.get_column("_key").unique().to_list()
    fixed = {k: " ".join(k.split()) for k in keys if " ".join(k.split()) != k}
    if fixed:
        long = long.with_columns(pl.col("_key").replace(fixed))
    return long


def _megatron_iterations(df: pl.DataFrame) -> tuple[pl.DataFrame, int | None]:
    hits = df.filter(pl.col("line").str.contains(_MEG_MARK))
    if hits.height == 0:
        return _empty_long(), None
    hits = (
        hits.select("lineno", pl.col("line").str.extract_groups(_MEG_ITER).alias("_g"))
        .unnest("_g")
        .select(
            "lineno",
            pl.col("1").cast(pl.Int64, strict=False).alias("step"),
            pl.col("2").cast(pl.Int64, strict=False).alias("_total"),
            pl.col("3").alias("_rest"),
            pl.col("1").is_null().alias("_unmatched"),
        )
        .filter(~pl.col("_unmatched"))
    )
    total = hits.get_column("_total").drop_nulls()
    long = _fields(hits, "_rest").select(
        "lineno", "field", "step", pl.col("_key").alias("metric"), _si_raw(pl.col("raw"))
    )
    return long, (int(total[-1]) if total.len() else None)


def _si_raw(raw: pl.Expr) -> pl.Expr:
    """nanotron's human_format values (634K, 11.5K, 85.8G: powers of 1000) as plain
    numbers; only on iteration lines, where nanotron writes them."""
    si = raw.str.extract(r"^[ \t]*([-+0-9.eE]+)([KMGT])[ \t]*$", 2)
    number = raw.str.extract(r"^[ \t]*([-+0-9.eE]+)[KMGT][ \t]*$", 1).cast(pl.Float64, strict=False)
    scaled = number * si.replace_strict(_SI, default=None, return_dtype=pl.Float64)
    return pl.when(scaled.is_not_null()).then(scaled.cast(pl.String)).otherwise(raw).alias("raw")


def _megatron_validation(df: pl.DataFrame) -> pl.DataFrame:
    hits = df.filter(pl.col("line").str.contains("loss at iteration"))
    if hits.height == 0:
        return _empty_long()
    hits = hits.select(
        "lineno",
        pl.col("line").str.extract(_MEG_VAL, 1).alias("_set"),
        pl.col("line").str.extract(_MEG_VAL, 2).cast(pl.Int64, strict=False).alias("step"),
        pl.col("line").str.extract(_MEG_VAL, 3).alias("_suffix"),
        pl.col("line").str.extract(_MEG_VAL, 4).alias("_rest"),
        pl.col("line").str.extract(_MEG_VAL, 2).is_null().alias("_unmatched"),
    ).filter(~pl.col("_unmatched"))
    word = pl.col("_set").str.to_lowercase()
    suffix = pl.col("_suffix").str.to_lowercase()
    setname = (
        pl.when(suffix.str.contains("test") | word.str.contains("test"))
        .then(pl.lit("test"))
        .when(word.is_in(list(_VAL_SETS)))
        .then(pl.lit("validation"))
        .otherwise(pl.lit("validation ") + pl.col("_set"))
    )
    # Megatron-DeepSpeed's end-of-training `... at iteration 500 on 160-sample draw from
    # validation set` is another evaluation (a sample of the set) at the same iteration:
    # named apart, it does not overwrite the full validation at that step
    setname = (
        pl.when(suffix.str.contains(r"\bdraw\b")).then(setname + pl.lit(" draw")).otherwise(setname)
    )
    key = pl.col("_key")
    lower = key.str.to_lowercase()
    metric = (
        pl.when(lower.str.ends_with(" value"))
        .then(key.str.slice(0, key.str.len_chars() - 6) + pl.lit(" ") + setname)
        .when(lower.str.ends_with(" ppl"))
        .then(key.str.slice(0, key.str.len_chars() - 4) + pl.lit(" ") + setname + pl.lit(" ppl"))
        .otherwise(key + pl.lit(" ") + setname)
    )
    return _fields(hits, "_rest").select("lineno", "field", "step", metric.alias("metric"), "raw")


def _kv_lines(df: pl.DataFrame) -> tuple[pl.DataFrame, int | None]:
    hits = df.filter(pl.col("line").str.contains(_KV_LINE))
    if hits.height == 0:
        return _empty_long(), None
    hits = (
        hits.select("lineno", pl.col("line").str.extract_groups(_KV_LINE).alias("_g"))
        .unnest("_g")
        .select(
            "lineno",
            pl.col("1").cast(pl.Int64, strict=False).alias("step"),
            pl.col("2").cast(pl.Int64, strict=False).alias("_total"),
            pl.col("3").str.extract_all(_KV_TOKEN).alias("_tok"),
        )
    )
    total = hits.get_column("_total").drop_nulls()
    long = (
        hits.explode("_tok")
        .with_row_index("field")
        .with_columns(pl.col("field").cast(pl.Int64))
        .select(
            "lineno",
            "field",
            "step",
            pl.col("_tok").str.extract(r"^([^:]+):", 1).alias("metric"),
            pl.col("_tok").str.extract(r"^[^:]+:(.*)$", 1).alias("raw"),
        )
    )
    return long, (int(total[-1]) if total.len() else None)


def _drop_mfu_placeholder(
    long: pl.DataFrame, source: str, where: _Where, issues: list[DataIssue]
) -> pl.DataFrame:
    """An ``mfu`` below zero is a placeholder, not a measurement: nanoGPT and llm.c print
    ``-100%`` until they have timed their first iterations. Left out, with a note."""
    placeholder = (pl.col("metric") == "mfu") & pl.col("raw").str.starts_with("-")
    n_placeholder = long.filter(placeholder).height
    if n_placeholder:
        first = int(long.filter(placeholder).get_column("lineno")[0])
        issues.append(
            DataIssue(
                kind="ignored-values",
                source=source,
                location=where.line(first),
                message=(
                    f"{n_placeholder} negative mfu value(s) were left out: nanoGPT and llm.c "
                    "print -100% until they have timed their first iterations"
                ),
                count=n_placeholder,
                severity="info",
            )
        )
        long = long.filter(~placeholder)
    return long


def _nanogpt_lines(
    df: pl.DataFrame, source: str, where: _Where, issues: list[DataIssue]
) -> pl.DataFrame:
    """nanoGPT's ``iter N: loss X, time Yms, mfu Z%`` and ``step N: train loss X, val loss
    Y`` lines."""
    hits = df.filter(pl.col("line").str.contains(r"(?:iter|step)[ \t]+[0-9]+:"))
    if hits.height == 0:
        return _empty_long()
    iters = (
        hits.select("lineno", pl.col("line").str.extract_groups(_NANO_ITER).alias("_g"))
        .unnest("_g")
        .filter(pl.col("1").is_not_null())
        .select(
            "lineno",
            pl.col("1").cast(pl.Int64, strict=False).alias("step"),
            pl.col("2").str.split(",").alias("_pair"),
        )
        .explode("_pair")
        .with_columns(pl.col("_pair").str.strip_chars().str.splitn(" ", 2).alias("_kv"))
        .select(
            "lineno",
            "step",
            pl.col("_kv").struct.field("field_0").alias("metric"),
            pl.col("_kv").struct.field("field_1").str.strip_chars().alias("raw"),
        )
    )
    evals = (
        hits.select("lineno", pl.col("line").str.extract_groups(_NANO_EVAL).alias("_g"))
        .unnest("_g")
        .filter(pl.col("1").is_not_null())
        .select(
            "lineno",
            pl.col("1").cast(pl.Int64, strict=False).alias("step"),
            pl.concat_list(pl.lit("train loss"), pl.lit("val loss")).alias("metric"),
            pl.concat_list("2", "3").alias("raw"),
        )
        .explode("metric", "raw")
    )
    long = (
        pl.concat([iters, evals])
        .sort("lineno", maintain_order=True)
        .with_row_index("field")
        .with_columns(pl.col("field").cast(pl.Int64), pl.col("metric").replace(_NANO_NAMES))
        .select("lineno", "field", "step", "metric", "raw")
    )
    return long


def _build_nanogpt_lines(df: pl.DataFrame) -> pl.DataFrame:
    """build-nanogpt's and llm.c's stdout (``step N | loss: X | lr Y | norm: Z | dt: Tms |
    tok/sec: R``, ``step N/M | loss X (+0.1z)| norm Y (+0.2z)| lr Z | T ms | P% bf16 MFU
    | R tok/s``: fields ``key: value``, ``key value`` or ``value unit`` between bars) and
    build-nanogpt's log file (``N train X``, ``N val X``, ``N hella X``)."""
    hits = df.filter(pl.col("line").str.contains(r"^[ \t]*(?:step[ \t]+)?[0-9]+[ \t/]"))
    if hits.height == 0:
        return _empty_long()
    out = (
        hits.select("lineno", pl.col("line").str.extract_groups(_BNG_LINE).alias("_g"))
        .unnest("_g")
        .filter(pl.col("1").is_not_null())
        .select(
            "lineno",
            pl.col("1").cast(pl.Int64, strict=False).alias("step"),
            pl.col("2").str.split("|").alias("_f"),
        )
        .explode("_f")
        .with_columns(pl.col("_f").str.extract(_BNG_UNIT, 2).alias("_unit"))
        .select(
            "lineno",
            "step",
            pl.when(pl.col("_unit") == "ms")
            .then(pl.lit("iter_time"))
            .when(pl.col("_unit") == "tok/s")
            .then(pl.lit("tokens_per_sec"))
            .when(pl.col("_unit").is_not_null())
            .then(pl.lit("mfu"))
            .otherwise(pl.col("_f").str.extract(_BNG_FIELD, 1))
            .alias("metric"),
            pl.when(pl.col("_unit") == "ms")
            .then(pl.col("_f").str.extract(_BNG_UNIT, 1) + pl.lit("ms"))
            .when(pl.col("_unit") == "tok/s")
            .then(pl.col("_f").str.extract(_BNG_UNIT, 1))
            .when(pl.col("_unit").is_not_null())
            .then(pl.col("_f").str.extract(_BNG_UNIT, 1) + pl.lit("%"))
            .otherwise(pl.col("_f").str.extract(_BNG_FIELD, 2))
            .alias("raw"),
        )
        .filter(pl.col("metric").is_not_null())
    )
    logged = (
        hits.select("lineno", pl.col("line").str.extract_groups(_BNG_FILE).alias("_g"))
        .unnest("_g")
        .filter(pl.col("1").is_not_null())
        .select(
            "lineno",
            pl.col("1").cast(pl.Int64, strict=False).alias("step"),
            pl.col("2").alias("metric"),
            pl.col("3").alias("raw"),
        )
    )
    return (
        pl.concat([out, logged])
        .sort("lineno", maintain_order=True)
        .with_row_index("field")
        .select(
            "lineno",
            pl.col("field").cast(pl.Int64),
            "step",
            pl.col("metric").replace(_BNG_NAMES),
            "raw",
        )
    )


def _torchtitan_lines(df: pl.DataFrame) -> pl.DataFrame:
    """torchtitan's ``step: N  loss: X  grad_norm: Y  memory: 9.46GiB(64.99%)  tps: 7,282
    tflops: 0.52  mfu: 0.17%`` lines: thousands separators dropped, the memory is its
    peak reserved GiB (the share of the device in brackets is left out), mfu a percent."""
    hits = df.filter(pl.col("line").str.contains(r"step:[ \t]*[0-9]+[ \t]+loss:"))
    if hits.height == 0:
        return _empty_long()
    pairs = (
        hits.select("lineno", pl.col("line").str.extract_groups(_TITAN_LINE).alias("_g"))
        .unnest("_g")
        .filter(pl.col("1").is_not_null())
        .select(
            "lineno",
            pl.col("1").cast(pl.Int64, strict=False).alias("step"),
            pl.col("2").str.extract_all(_TITAN_PAIR).alias("_pair"),
        )
        .explode("_pair")
        .with_row_index("field")
    )
    unit = pl.col("_pair").str.extract(_TITAN_PAIR, 3).fill_null("")
    return pairs.select(
        "lineno",
        pl.col("field").cast(pl.Int64),
        "step",
        pl.col("_pair").str.extract(_TITAN_PAIR, 1).replace(_TITAN_NAMES).alias("metric"),
        (
            pl.col("_pair").str.extract(_TITAN_PAIR, 2).str.replace_all(",", "")
            + pl.when(unit == "%").then(pl.lit("%")).otherwise(pl.lit(""))
        ).alias("raw"),
    ).filter(pl.col("metric").is_not_null())


def _hf_dicts(df: pl.DataFrame) -> tuple[pl.DataFrame, int]:
    hits = df.filter(pl.col("line").str.contains(_HF_DICT))
    if hits.height == 0:
        return _empty_long(), 0
    pairs = (
        hits.select(
            "lineno",
            pl.col("line").str.extract(_HF_DICT, 1).str.extract_all(_HF_PAIR).alias("_pair"),
        )
        .explode("_pair")
        .with_row_index("field")
        .with_columns(pl.col("field").cast(pl.Int64))
        .select(
            "lineno",
            "field",
            pl.col("_pair").str.extract(r"^'([^']+)'", 1).alias("metric"),
            pl.col("_pair")
            .str.extract(r":\s*(.*?)\s*$", 1)
            .str.replace(_WRAPPED_SCALAR, "$1")
            .alias("raw"),
        )
        .filter(pl.col("metric").is_not_null())
    )
    kinds = (
        pairs.group_by("lineno", maintain_order=True)
        .agg(
            (pl.col("metric") == "loss").any().alias("_train"),
            pl.col("metric").str.starts_with("eval_").any().alias("_eval"),
            (pl.col("metric") == "train_runtime").any().alias("_final"),
        )
        .with_columns(
            (pl.col("_train") & ~pl.col("_final")).alias("_train"),
        )
        .filter(pl.col("_train") | pl.col("_eval") | pl.col("_final"))
        .with_columns(pl.col("_train").cast(pl.Int64).cum_sum().alias("step"))
    )
    if kinds.height == 0:
        return _empty_long(), 0
    long = pairs.join(kinds, on="lineno", how="inner").select(
        "lineno",
        "field",
        "step",
        pl.when(pl.col("_final") & ~pl.col("_train"))
        .then(pl.lit("final/") + pl.col("metric"))
        .otherwise(pl.col("metric"))
        .alias("metric"),
        "raw",
    )
    return long, kinds.height


# ---- a user's regex -----------------------------------------------------------------------


def _compile_user_regex(pattern: str) -> re.Pattern[str]:
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


def _parse_user_regex(
    lines: list[str], pattern: str, source: str, where: _Where, issues: list[DataIssue]
) -> pl.DataFrame:
    rx = _compile_user_regex(pattern)
    names = [n for n, _ in sorted(rx.groupindex.items(), key=lambda kv: kv[1]) if n != "step"]
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
        issues.append(
            DataIssue(
                kind="unmatched-line",
                source=source,
                location=where.line(first_unmatched or 0),
                message=f"{unmatched} non-empty line(s) did not match the regex and were skipped",
                count=unmatched,
                severity="info",
            )
        )
    if not linenos:
        return _empty_long()
    wide = pl.DataFrame(
        {"lineno": linenos, "_step": steps, **cols},
        schema={"lineno": pl.Int64, "_step": pl.String, **dict.fromkeys(names, pl.String)},
    )
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
        issues.append(
            DataIssue(
                kind="bad-step",
                source=source,
                location=where.line(int(bad.get_column("lineno")[0])),
                message=(
                    f"{bad.height} matched line(s) have a step that is not a whole number "
                    f"within 64 bits (first: {bad.get_column('_step')[0]!r}); their values "
                    "were skipped"
                ),
                count=bad.height,
            )
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
        .select(list(_LONG_SCHEMA))
        .sort("lineno", "field")
    )


# ---- values ---------------------------------------------------------------------------------


def _values(
    long: pl.DataFrame, source: str, where: _Where, issues: list[DataIssue]
) -> pl.DataFrame:
    """Parse the value texts: numbers, nan/inf in any case, ``ms`` → seconds; report the
    rest."""
    raw = pl.col("raw").str.strip_chars()
    is_ms = raw.str.ends_with("ms")
    is_s = ~is_ms & raw.str.ends_with("s")
    is_pct = raw.str.ends_with("%")
    number = (
        pl.when(is_ms)
        .then(raw.str.slice(0, raw.str.len_chars() - 2))
        .when(is_s | is_pct)
        .then(raw.str.slice(0, raw.str.len_chars() - 1))
        .otherwise(raw)
        .str.strip_chars()
    )
    # a percent is a fraction (canonical mfu is 0..1; nanoGPT prints `mfu 15.34%`)
    scale = pl.when(is_ms).then(pl.lit(1e-3)).when(is_pct).then(pl.lit(0.01)).otherwise(1.0)
    long = long.with_columns((number.cast(pl.Float64, strict=False) * scale).alias("value"))
    bad = long.filter(pl.col("value").is_null())
    if bad.height:
        first = bad.row(0, named=True)
        names = sorted(bad.get_column("metric").unique().to_list())
        issues.append(
            DataIssue(
                kind="non-numeric",
                source=source,
                location=where.line(int(first["lineno"])),
                message=(
                    f"{bad.height} value(s) are not numbers and were skipped (first: "
                    f"{first['metric']}={first['raw']!r}; metrics: {', '.join(names[:5])}"
                    f"{'…' if len(names) > 5 else ''})"
                ),
                count=bad.height,
                details={"metrics": names},
            )
        )
        long = long.filter(pl.col("value").is_not_null())
    return long
