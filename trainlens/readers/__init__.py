"""Readers: every format a run is logged in, into the same canonical Run.

Formats are sniffed from the content (first bytes, or a directory's layout), not only the
name; ``format=`` forces one. Reader modules are imported lazily.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType

from trainlens.core.errors import UnreadableInputError, UsageError
from trainlens.core.paths import require_file_or_folder
from trainlens.core.run import DataIssue, Run
from trainlens.readers import _sniff
from trainlens.readers.base import (
    HEAD_BYTES,
    ReadOptions,
    read_head,
    readable_runs,
    run_name_for,
)

#: how far a text file's head is read when its first lines are wider than HEAD_BYTES
WIDE_HEAD_BYTES = 1 << 20

# sniffing order: most specific first
FORMATS: dict[str, str] = {
    "wandb-run": "trainlens.readers.wandb_run",
    "tensorboard": "trainlens.readers.tensorboard",
    "mlflow": "trainlens.readers.mlflow",
    "parquet": "trainlens.readers.parquet",
    "hf-trainer": "trainlens.readers.hf_trainer",
    # --- issue 26, CSV-family frameworks (a folder of one TSV per metric)
    "dvclive": "trainlens.readers.dvclive",
    # --- end CSV-family frameworks
    # ---- issue 26, JSON family (t23-fwjson): Sacred / DVCLive metrics.json, fairseq
    # --log-format json (one object, or prefixed lines: before keras-history and jsonl)
    "framework-json": "trainlens.readers.framework_json",
    # ---- end t23-fwjson
    "keras-history": "trainlens.readers.keras_history",  # one JSON object: before jsonl
    "jsonl": "trainlens.readers.jsonl",
    "csv": "trainlens.readers.csv",
    "text": "trainlens.readers.textlog",
}

# --- issue 26, CSV-family frameworks: folder layouts sniffed after the stores above
FOLDER_FORMATS_CSV = ("dvclive",)
# --- end CSV-family frameworks

BINARY_FORMATS = frozenset(
    {"wandb-run", "tensorboard", "mlflow", "parquet"}
)  # (an MLflow sqlite database)

#: what a file no reader takes is told (kept short: docs/formats.md has the whole list)
NOT_KNOWN = (
    "not a format trainlens knows; it reads JSONL, CSV/TSV, parquet, TensorBoard, MLflow, "
    "W&B runs, HF trainer_state.json, Keras history, frameworks' own files (detectron2, "
    "MMEngine, Ultralytics, YOLOX, timm, fastai, fairseq, LLaMA-Factory, Ray, DVCLive, "
    "Sacred, Stable-Baselines3 …) and text logs of `step N: name value` lines "
    "(docs/formats.md lists them)"
)
NOT_KNOWN_HINT = "use --reader to force one, or --regex for another text log shape"

__all__ = ["FORMATS", "ReadOptions", "detect_format", "folder_runs", "read_runs"]


def _module(fmt: str) -> ModuleType:
    return importlib.import_module(FORMATS[fmt])


# a folder of metrics files that is no run store of its own (see folder_runs)
FOLDER_SUFFIXES = (".csv", ".tsv", ".jsonl", ".ndjson", ".parquet")
# text logs count only when they sniff as one (a README.txt or requirements.txt does not)
FOLDER_TEXT_SUFFIXES = (".log", ".txt", ".out")
LIGHTNING_METRICS = "metrics.csv"
SACRED_METRICS = ("metrics.json", "run.json")  # FileStorageObserver's <basedir>/<id>/


def folder_runs(path: Path) -> list[tuple[Path, str]]:
    """(metrics file, run name) for a directory read as a store of CSV/JSONL runs:

    - Lightning's CSVLogger: ``version_N/metrics.csv`` (pointed at one ``version_N/``, at
      ``lightning_logs/`` holding many, or at the ``save_dir`` above ``<name>/version_N``),
      each a run named after its folder (``version_13``, ``exp/version_0``);
    - a Sacred ``FileStorageObserver`` run folder (``metrics.json`` beside ``run.json``);
    - otherwise a folder holding exactly one metrics file (``.csv``, ``.tsv``, ``.jsonl``,
      ``.ndjson``: a Keras CSVLogger's ``logs/training_log.csv``; failing those, one
      ``.log``/``.txt``/``.out`` that sniffs as a log), named as that file.

    Empty when neither holds (several loose files are ambiguous: the caller says so)."""
    if (path / LIGHTNING_METRICS).is_file():
        return [(path / LIGHTNING_METRICS, path.resolve().name)]
    subdirs = _subdirs(path)
    found = [(d / LIGHTNING_METRICS, d.name) for d in subdirs if (d / LIGHTNING_METRICS).is_file()]
    if not found:
        found = [
            (v / LIGHTNING_METRICS, f"{d.name}/{v.name}")
            for d in subdirs
            for v in _subdirs(d)
            if (v / LIGHTNING_METRICS).is_file()
        ]
    if found:
        return found
    if (path / SACRED_METRICS[0]).is_file() and (path / SACRED_METRICS[1]).is_file():
        return [(path / SACRED_METRICS[0], path.resolve().name)]  # a Sacred run's folder
    loose = _loose_metrics_files(path)
    return [(loose[0], run_name_for(loose[0]))] if len(loose) == 1 else []


def _subdirs(path: Path) -> list[Path]:
    try:
        return sorted(p for p in path.iterdir() if p.is_dir() and not p.name.startswith("."))
    except OSError:
        return []


def _loose_metrics_files(path: Path) -> list[Path]:
    """The metrics files directly in ``path``: tables first; text logs only when there is
    no table and they sniff as a log (a Megatron stdout beside its LICENSE)."""
    try:
        files = sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith("."))
    except OSError:
        return []
    tables = [p for p in files if p.name.lower().endswith(FOLDER_SUFFIXES)]
    if tables:
        return tables
    return [p for p in files if p.name.lower().endswith(FOLDER_TEXT_SUFFIXES) and _is_log(p)]


def _is_log(path: Path) -> bool:
    try:
        return detect_format(path) in ("text", "jsonl", "csv")
    except (UnreadableInputError, OSError):
        return False


def _no_run_in_folder(path: Path) -> UnreadableInputError:
    loose = _loose_metrics_files(path)
    if len(loose) > 1:
        names = ", ".join(p.name for p in loose[:5]) + ("…" if len(loose) > 5 else "")
        return UnreadableInputError(
            f"{path}: {len(loose)} metrics files in this directory ({names}); "
            "which one is the run is not clear",
            hint="point at one of them, or use `trainlens gate` to judge each",
        )
    return UnreadableInputError(
        f"{path}: no TensorBoard event files, MLflow store, trainer_state.json, "
        "Lightning metrics.csv or metrics file found in this directory",
        hint="point at a metrics file, or use `trainlens gate` for a folder of runs",
    )


def detect_format(path: Path) -> str:
    """The format of ``path``, sniffed from its content or layout."""
    require_file_or_folder(path)
    if path.is_dir():
        for fmt in ("wandb-run", "mlflow", "tensorboard", "hf-trainer", *FOLDER_FORMATS_CSV):
            if _sniff.may_be(fmt, path, b"") and _module(fmt).sniff(path, b""):
                return fmt
        raise _no_run_in_folder(path)
    head = read_head(path)
    if len(head) == HEAD_BYTES and head.count(b"\n") < 3 and b"\x00" not in head:
        # a text file whose first lines do not fit in the head: a W&B chart export of many
        # runs has a 4,005-byte header, and a header with a cut line is no table. Text
        # sniffers need a few whole lines (binary formats have NUL bytes early)
        head = read_head(path, WIDE_HEAD_BYTES)
    if not head.strip():
        raise UnreadableInputError(f"{path}: the file is empty")
    if _sniff.is_lfs_pointer(head):
        raise UnreadableInputError(_sniff.lfs_message(path))
    if _sniff.is_utf16(head):  # (read by _read_utf16; this is for a sniff alone)
        raise UnreadableInputError(
            f"{path}: UTF-16 text (what Windows PowerShell's `>` writes); trainlens reads "
            f"UTF-8: convert it first, e.g. `iconv -f UTF-16 -t UTF-8 {path.name} > "
            f"{path.stem}.utf8{path.suffix}`"
        )
    # text formats are sniffed without a UTF-8 byte-order mark (Windows tools write one:
    # a JSONL file starting with it is JSONL, not CSV); binary ones see the bytes as they are
    text = _sniff.text_head(head)
    for fmt in FORMATS:
        h = head if fmt in BINARY_FORMATS else text
        if _sniff.may_be(fmt, path, h) and _module(fmt).sniff(path, h):
            # a head holding lines of a known log shape is a log, though its commas count
            # like a CSV's (nanoGPT: `iter 0: loss 4.26, time 93.7ms, mfu 16.68%`)
            if fmt == "csv" and _module("text").has_metric_line(h):
                return "text"
            return fmt
    crashed = _crashed_log(path, head)
    if crashed is not None:
        raise UnreadableInputError(crashed)
    framework = _framework_of(text)
    if framework is not None:
        raise UnreadableInputError(
            f"{path}: a {framework} log with no training step in it (set-up, configuration "
            "or evaluation lines only: the job stopped before it trained, or this is not "
            "the log of its training)"
        )
    raise UnreadableInputError(f"{path}: {NOT_KNOWN}", hint=NOT_KNOWN_HINT)


# the logger names a framework's set-up lines carry (a log with no training step is
# still said to be that framework's: a detectron2 job's config dump, an MMEngine run's
# environment block)
_FRAMEWORK_LOGGERS = (
    ("detectron2", re.compile(r"\] (?:detectron2|d2\.[a-z_.]+|fvcore\.[a-z_.]+) INFO: ")),
    ("MMEngine", re.compile(r" - mmengine - (?:INFO|WARNING) - ")),
    ("fairseq", re.compile(r"\| (?:INFO|WARNING) \| fairseq")),
    ("YOLOX", re.compile(r"\| (?:INFO|WARNING)\s+\| yolox\.")),
    ("NeMo", re.compile(r"\[NeMo [IW] ")),
    ("HF Trainer", re.compile(r"transformers\.trainer")),
)


def _framework_of(head: bytes) -> str | None:
    text = head.decode("utf-8", errors="replace")
    for name, pattern in _FRAMEWORK_LOGGERS:
        if pattern.search(text):
            return name
    return None


CRASH_TAIL_BYTES = 1 << 18  # where a text file's last error is looked for


def _crashed_log(path: Path, head: bytes) -> str | None:
    """The refusal of a text file that is no known format and ends in an error (a training
    script's log of set-up lines and a traceback: CUDA out of memory before the first
    step), or None."""
    if b"\x00" in head:
        return None
    try:
        with path.open("rb") as fh:
            size = fh.seek(0, 2)
            fh.seek(max(0, size - CRASH_TAIL_BYTES))
            tail = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return None
    if "Traceback" not in tail and "Error" not in tail:
        return None
    import polars as pl

    from trainlens.readers.textlog.notes import crashed_message, final_error

    crash = final_error(pl.Series(tail.splitlines(), dtype=pl.String))
    return None if crash is None else crashed_message(path, crash)


def read_runs(
    paths: Path | str | Iterable[Path | str],
    *,
    format: str | None = None,
    options: ReadOptions | None = None,
) -> list[Run]:
    """Read every run at the given path(s) into canonical Runs."""
    opts = options or ReadOptions()
    if isinstance(paths, (str, Path)):
        paths = [paths]
    runs: list[Run] = []
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            raise UnreadableInputError(f"{path}: no such file or directory")
        require_file_or_folder(path)  # before anything opens it: a FIFO blocks the open
        if format is not None and format not in FORMATS:
            raise UsageError(f"unknown format {format!r}; choose one of {', '.join(FORMATS)}")
        got = _read_path(path, format, opts)
        if opts.runs:
            _check_selectable(path, got)
        runs.extend(got)
    _dedupe_names(runs)
    return runs


#: the formats whose reader keeps only the runs ``ReadOptions.runs`` names (id or name)
SELECTS_RUNS = frozenset({"mlflow"})


def _check_selectable(path: Path, got: list[Run]) -> None:
    """``--run`` given for a source whose reader does not select: it was ignored, and
    every run was judged as if it had not been given."""
    other = sorted({r.format for r in got} - SELECTS_RUNS)
    if other:
        raise UsageError(
            f"--run selects runs in an MLflow store, but {path} is read as "
            f"{', '.join(other)}, which --run does not select from: name the run's own "
            "file or folder instead"
        )


def _read_path(path: Path, format: str | None, opts: ReadOptions) -> list[Run]:
    if path.is_dir() and format in (None, "csv", "jsonl"):
        store = None
        if format is None:
            try:
                store = detect_format(path)  # a TensorBoard tree, an MLflow store, ...
            except UnreadableInputError:
                store = None
        if store is None:
            return _read_folder(path, format, opts)
        format = store
    return _read_one(path, format, opts)


def _read_folder(path: Path, format: str | None, opts: ReadOptions) -> list[Run]:
    found = folder_runs(path)
    if not found:
        raise _no_run_in_folder(path)
    runs: list[Run] = []
    unreadable: list[UnreadableInputError] = []
    for file, name in found:
        # (Lightning's metrics.csv is CSV even with a header only: no body to sniff)
        fmt = format or ("csv" if file.name == LIGHTNING_METRICS else None)
        try:
            got = _read_one(file, fmt, opts)
        except UnreadableInputError as exc:
            if len(found) == 1:
                raise
            unreadable.append(exc)  # one version just started (a header only): not all
            continue
        for run in got:
            if run.name == run_name_for(file):  # (a W&B export names its own runs)
                run.name = name
            runs.append(run)
    return readable_runs(path, runs, unreadable)


def _read_one(path: Path, format: str | None, opts: ReadOptions) -> list[Run]:
    if path.is_file() and _sniff.is_lfs_pointer_file(path):  # (whatever format is forced)
        raise UnreadableInputError(_sniff.lfs_message(path))
    if path.is_file() and not opts.start_offset and _sniff.is_utf16(read_head(path, 64)):
        return _read_utf16(path, format, opts)
    if path.is_file() and not opts.start_offset and format in (None, "text"):
        head = read_head(path)
        legacy = _sniff.legacy_codec(head) if not head.isascii() else None
        if legacy is not None:
            return _read_transcoded(path, legacy[0], legacy[1], format, opts)
    if opts.regex and format is None and path.is_file():
        fmt = "text"
    else:
        fmt = format or detect_format(path)
    try:
        runs: list[Run] = _module(fmt).read(path, opts)
    except (UnicodeDecodeError, ValueError) as exc:
        if isinstance(exc, UnreadableInputError):
            raise
        # one sentence: a parser's own message (polars') can run over several lines
        why = next(
            (line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__
        )
        raise UnreadableInputError(f"{path}: cannot be read as {fmt}: {why}") from None
    # --- issue 26, CSV-family frameworks: Ultralytics' TensorBoard holds its results.csv
    if fmt == "tensorboard":
        from trainlens.readers import _fwtables

        for run in runs:
            _fwtables.finish(run)
    # --- end CSV-family frameworks
    from trainlens.readers import _coco

    for run in runs:
        _coco.drop_undefined(run)  # (COCO's NaN or -1 results: no ground truth, no value)
    return runs


def _read_utf16(path: Path, format: str | None, opts: ReadOptions) -> list[Run]:
    """A UTF-16 text file (Windows PowerShell 5's ``python train.py > train.log``): decoded
    (its byte-order mark says the byte order), read, with a note."""
    return _read_transcoded(
        path, "utf-16", "UTF-16 text (what Windows PowerShell's `>` writes)", format, opts
    )


def _read_transcoded(
    path: Path, codec: str, label: str, format: str | None, opts: ReadOptions
) -> list[Run]:
    """A text file in another encoding than UTF-8 (UTF-16; a legacy code page, see
    :func:`trainlens.readers._sniff.legacy_codec`): decoded into a scratch UTF-8 copy of
    the same name, read, and its runs given back as the file's own, with a note saying
    which encoding was read."""
    import tempfile

    try:
        text = path.read_bytes().decode(codec)
    except UnicodeDecodeError as exc:
        if codec == "utf-16":
            raise UnreadableInputError(
                f"{path}: UTF-16 text with an invalid sequence at byte {exc.start}"
            ) from None
        text = path.read_bytes().decode(codec, errors="replace")
    with tempfile.TemporaryDirectory(prefix="trainlens-text-") as scratch:
        copy = Path(scratch) / path.name
        copy.write_text(text, encoding="utf-8", newline="")
        there, here = str(copy), str(path)
        try:
            runs = _read_one(copy, format, opts)
        except UnreadableInputError as exc:  # (it names the file the user gave)
            raise UnreadableInputError(exc.message.replace(there, here), hint=exc.hint) from None
    named, name = run_name_for(copy), run_name_for(path)  # (a `train.log` is its folder's)
    how = (
        "read decoded from UTF-16"
        if codec == "utf-16"
        else "not UTF-8: read decoded as " + label.split(" (")[0]
    )
    for run in runs:
        run.source = run.source.replace(there, here)
        if run.name.startswith(named):
            run.name = name + run.name[len(named) :]
        run.cursor = {}  # (its offsets are the copy's: a watch reads the file again)
        for issue in run.data_quality:
            issue.source = issue.source.replace(there, here)
            issue.message = issue.message.replace(there, here)
        run.data_quality.insert(
            0,
            DataIssue(
                kind="encoding",
                source=here,
                message=f"{label}: {how}"
                if codec == "utf-16"
                else f"{label} text, {how} (its bytes are valid in that code page and "
                "their characters are its script's)",
                severity="info",
            ),
        )
    return runs


def _dedupe_names(runs: list[Run]) -> None:
    seen: dict[str, int] = {}
    for run in runs:
        n = seen.get(run.name, 0)
        seen[run.name] = n + 1
        if n:
            run.name = f"{run.name}#{n + 1}"
