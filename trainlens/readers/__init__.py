"""Readers: every format a run is logged in, into the same canonical Run.

Formats are sniffed from the content (first bytes, or a directory's layout), not only the
name; ``format=`` forces one. Reader modules are imported lazily.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType

from trainlens.core.errors import UnreadableInputError, UsageError
from trainlens.core.run import Run
from trainlens.readers import _sniff
from trainlens.readers.base import ReadOptions, read_head

# sniffing order: most specific first
FORMATS: dict[str, str] = {
    "tensorboard": "trainlens.readers.tensorboard",
    "mlflow": "trainlens.readers.mlflow",
    "hf-trainer": "trainlens.readers.hf_trainer",
    "jsonl": "trainlens.readers.jsonl",
    "csv": "trainlens.readers.csv",
    "text": "trainlens.readers.textlog",
}

__all__ = ["FORMATS", "ReadOptions", "detect_format", "read_runs"]


def _module(fmt: str) -> ModuleType:
    return importlib.import_module(FORMATS[fmt])


def detect_format(path: Path) -> str:
    """The format of ``path``, sniffed from its content or layout."""
    if path.is_dir():
        for fmt in ("mlflow", "tensorboard", "hf-trainer"):
            if _sniff.may_be(fmt, path, b"") and _module(fmt).sniff(path, b""):
                return fmt
        raise UnreadableInputError(
            f"{path}: no TensorBoard event files, MLflow store or trainer_state.json "
            "found in this directory",
            hint="point at a metrics file, or use `trainlens gate` for a folder of runs",
        )
    head = read_head(path)
    if not head.strip():
        raise UnreadableInputError(f"{path}: the file is empty")
    for fmt in FORMATS:
        if _sniff.may_be(fmt, path, head) and _module(fmt).sniff(path, head):
            return fmt
    raise UnreadableInputError(
        f"{path}: not a format trainlens knows (JSONL, CSV/TSV, TensorBoard events, MLflow, "
        "trainer_state.json, Megatron or llm.c text logs)",
        hint="use --format to force one, or --regex for another text log shape",
    )


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
        if format is not None and format not in FORMATS:
            raise UsageError(f"unknown format {format!r}; choose one of {', '.join(FORMATS)}")
        if opts.regex and format is None and path.is_file():
            fmt = "text"
        else:
            fmt = format or detect_format(path)
        try:
            got = _module(fmt).read(path, opts)
        except (UnicodeDecodeError, ValueError) as exc:
            if isinstance(exc, UnreadableInputError):
                raise
            raise UnreadableInputError(f"{path}: cannot be read as {fmt}: {exc}") from None
        runs.extend(got)
    _dedupe_names(runs)
    return runs


def _dedupe_names(runs: list[Run]) -> None:
    seen: dict[str, int] = {}
    for run in runs:
        n = seen.get(run.name, 0)
        seen[run.name] = n + 1
        if n:
            run.name = f"{run.name}#{n + 1}"
