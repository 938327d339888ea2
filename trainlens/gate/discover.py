"""Find the runs under the paths and globs given to ``trainlens gate``.

- a file is one run source (whatever its name);
- a directory that is itself a run store (an MLflow store, a Hugging Face output
  directory, a folder holding TensorBoard event files, a Keras logdir with ``train/`` and
  ``validation/``) is one source; a Lightning ``version_N/`` folder is found by its
  ``metrics.csv`` (named ``version_N``);
- any other directory is walked: each run-store sub-directory and each file that holds
  metrics becomes a source. Hidden entries and run-configuration files (config.json,
  hparams.yaml, meta.yaml, labels.json, ...) are skipped. A ``.jsonl``/``.csv`` file
  that cannot be sniffed is still taken (it is then reported unreadable, so an empty or
  corrupt metrics file never disappears silently); a ``.log``/``.txt``/``.json`` file is
  taken only when it looks like a run.
- globs are expanded (``**`` crosses directories); names are relative to the glob's
  fixed prefix.
- a FIFO, socket or device found in a folder or by a glob is never opened (reading a
  FIFO blocks): it is listed as :class:`Skipped`. One named on the command line is a
  source, which the reader refuses (an unreadable input).

A run is named by its path relative to the root it was found under, without a generic
file name: ``runs/lr_shock/metrics.jsonl`` under ``runs`` is ``lr_shock``.
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

from trainlens.core.dataclass import dataclass
from trainlens.core.errors import TrainlensError, UsageError
from trainlens.core.paths import special_file_sentence, special_kind
from trainlens.readers._sniff import entry_is_dir, entry_is_file, is_event_file_name

SKIP_NAMES = frozenset(
    {
        "config.json",
        "run_config.json",
        "trainlens.json",
        "trainlens.toml",
        "pyproject.toml",
        "hparams.yaml",
        "hparams.yml",
        "config.yaml",
        "config.yml",
        "meta.yaml",
        "labels.json",
        "tags.json",
        "requirements.txt",
    }
)
# a metrics file with one of these suffixes is a run even when it cannot be sniffed
METRIC_SUFFIXES = (".jsonl", ".ndjson", ".csv", ".tsv")
# these are taken only when they sniff as a run
MAYBE_SUFFIXES = (".json", ".log", ".txt", ".out", ".db", ".sqlite", ".parquet")
GENERIC_STEMS = frozenset({"metrics", "trainer_state", "log", "train", "events", "scalars"})
STRIP_SUFFIXES = (".jsonl", ".ndjson", ".json", ".csv", ".tsv", ".log", ".txt", ".parquet")
_GLOB_CHARS = re.compile(r"[*?\[]")


@dataclass(frozen=True)
class Source:
    """One run source: a file or a run-store directory, and the name the gate gives it."""

    path: str
    name: str


@dataclass(frozen=True)
class Skipped:
    """An entry that is no file or folder trainlens reads: what it is (``a FIFO``)."""

    path: str
    kind: str

    def text(self) -> str:
        return special_file_sentence(self.path, self.kind)

    def to_dict(self) -> dict[str, str]:
        return {"path": self.path, "kind": self.kind, "message": self.text()}


def _special(p: Path | os.DirEntry[str], skipped: list[Skipped] | None) -> bool:
    """True (and ``p`` added to ``skipped``) when ``p`` is a FIFO, a socket or a device."""
    kind = special_kind(p)
    if kind is not None and skipped is not None:
        skipped.append(Skipped(os.fspath(p.path if isinstance(p, os.DirEntry) else p), kind))
    return kind is not None


def is_glob(spec: str) -> bool:
    return bool(_GLOB_CHARS.search(spec))


def _hidden(name: str) -> bool:
    return name.startswith(".") or name == "__pycache__"


def _has_event_files(path: Path) -> bool:
    try:
        return any(is_event_file_name(e.name) and entry_is_file(e) for e in os.scandir(path))
    except OSError:
        return False


def is_run_store(path: Path) -> bool:
    """An MLflow store, a Hugging Face output dir, a folder with TensorBoard events, or a
    Keras logdir (its events in ``train/`` and ``validation/``: one run).

    (A folder with event files only deeper down is walked instead, so a tree of several
    TensorBoard runs beside JSONL runs yields each of them.)"""
    from trainlens.readers import hf_trainer, mlflow, wandb_run
    from trainlens.readers.tensorboard import SPLIT_DIRS

    if _has_event_files(path) or any(_has_event_files(path / s) for s in SPLIT_DIRS):
        return True
    if wandb_run.sniff(path, b""):  # a W&B run folder, or W&B's wandb/ holding them
        return True
    try:
        return bool(mlflow.sniff(path, b"") or hf_trainer.sniff(path, b""))
    except OSError:
        return False


def _file_is_run(path: Path) -> bool:
    name = path.name
    lower = name.lower()
    if lower in SKIP_NAMES or lower.endswith(".config.json") or _hidden(name):
        return False
    if is_event_file_name(name) or lower.endswith(".wandb"):
        return True
    if lower.endswith(METRIC_SUFFIXES):
        return True
    if not lower.endswith(MAYBE_SUFFIXES):
        return False
    from trainlens.readers import _sniff, detect_format

    if _sniff.is_lfs_pointer_file(path):
        return True  # a log not pulled yet: reported unreadable ("run git lfs pull"), not hidden

    try:
        fmt = detect_format(path)
    except (TrainlensError, OSError):
        return False
    if lower.endswith(".json"):
        # a compact JSON object sniffs as JSONL; only run formats count here
        return fmt in ("hf-trainer", "mlflow", "keras-history")
    return True


def _first_visit(path: Path | str, visited: set[str] | None) -> bool:
    """False for a folder already walked under another name: a symbolic link that
    points back up the tree (a loop, which would be walked forever) or to a sibling."""
    if visited is None:
        return True
    real = os.path.realpath(path)
    if real in visited:
        return False
    visited.add(real)
    return True


def _walk(
    top: Path, visited: set[str] | None = None, skipped: list[Skipped] | None = None
) -> Iterator[Path]:
    """Sources under a directory that is not itself a run store, in sorted order; a
    folder reached twice through symbolic links is walked once; FIFOs, sockets and
    devices go to ``skipped``."""
    if visited is None:
        visited = set()
    if not _first_visit(top, visited):
        return
    try:
        entries = sorted(os.scandir(top), key=lambda e: e.name)
    except OSError:
        return
    for e in entries:
        if _hidden(e.name):
            continue
        p = Path(e.path)
        if entry_is_dir(e):
            if is_run_store(p):
                yield p
            else:
                yield from _walk(p, visited, skipped)
        elif entry_is_file(e):
            if _file_is_run(p):
                yield p
        else:
            _special(e, skipped)


def _glob(spec: str) -> list[str]:
    """``glob.glob(spec, recursive=True)``, but a ``**`` never walks a folder twice:
    glob follows symbolic links to folders, and a link back up the tree made it walk
    for ever (two such links: 2**40 paths before the system's link limit)."""
    if "**" not in spec:
        return sorted(glob.glob(spec))
    root = _glob_root(spec)
    parts = Path(spec).parts[len(root.parts) :]
    dirs_only = spec.endswith(("/", os.sep))  # "runs/**/": folders only, as glob
    hits: list[str] = []
    visited: set[str] = set()
    for d, dirs, files in os.walk(root, followlinks=True):
        if not _first_visit(d, visited):
            dirs[:] = []
            continue
        dirs[:] = sorted(x for x in dirs if not x.startswith("."))
        rel = Path(d).relative_to(root).parts
        for name in dirs:
            if _glob_match([*rel, name], list(parts), is_dir=True):
                hits.append(str(Path(d) / name))
        for name in [] if dirs_only else files:
            if not name.startswith(".") and _glob_match([*rel, name], list(parts)):
                hits.append(str(Path(d) / name))
        if not rel and _glob_match([], list(parts), is_dir=True):
            hits.append(os.path.join(str(root), ""))
    return sorted(hits)


def _glob_match(segments: list[str], patterns: list[str], *, is_dir: bool = False) -> bool:
    """Whether path segments match glob patterns segment by segment (``**``: any
    number of segments; a ``**`` that ends the pattern and matches nothing names the
    folder before it, so a file cannot match that way)."""
    import fnmatch

    if not patterns:
        return not segments
    head, rest = patterns[0], patterns[1:]
    if head == "**":
        if not rest and not segments:
            return is_dir
        return any(_glob_match(segments[k:], rest, is_dir=is_dir) for k in range(len(segments) + 1))
    return (
        bool(segments)
        and fnmatch.fnmatchcase(segments[0], head)
        and _glob_match(segments[1:], rest, is_dir=is_dir)
    )


def run_name(source: Path, root: Path) -> str:
    """``root/a/b/metrics.jsonl`` -> ``a/b``; ``root/a/b.csv`` -> ``a/b``."""
    try:
        rel = source.relative_to(root)
    except ValueError:
        rel = Path(source.name)
    parts = list(rel.parts) if rel.parts else [source.resolve().name]
    if source.is_file() or not source.exists():
        last = parts[-1]
        stem = last
        for suffix in STRIP_SUFFIXES:
            if stem.lower().endswith(suffix):
                stem = stem[: -len(suffix)]
                break
        if stem.lower() in GENERIC_STEMS or is_event_file_name(last):
            parts.pop()
            if not parts:
                parent = source.resolve().parent.name
                parts = [parent or stem]
        else:
            parts[-1] = stem
    return "/".join(parts)


def _glob_root(spec: str) -> Path:
    fixed: list[str] = []
    for part in Path(spec).parts:
        if is_glob(part):
            break
        fixed.append(part)
    return Path(*fixed) if fixed else Path(".")


def _expand(spec: str, skipped: list[Skipped] | None = None) -> Iterator[tuple[Path, Path]]:
    """(source path, root it is named under) for one command-line argument."""
    if is_glob(spec):
        root = _glob_root(spec)
        hits = _glob(spec)
        if not hits:
            raise UsageError(f"{spec}: the pattern matches nothing")
        # "runs/*/metrics.jsonl" or "*.log" name the files wanted: take every hit;
        # "runs/**/*" also matches READMEs and configs: take only what looks like a run
        explicit = not Path(spec).name.endswith(("*", "?", "]"))
        for hit in hits:
            p = Path(hit)
            if p.is_dir():
                if is_run_store(p):
                    yield p, root
                else:
                    for sub in _walk(p, skipped=skipped):
                        yield sub, root
            elif _special(p, skipped):
                continue
            elif _file_is_run(p) or (
                explicit and not _hidden(p.name) and p.name.lower() not in SKIP_NAMES
            ):
                yield p, root
        return
    p = Path(spec)
    if p.is_dir() and not is_run_store(p):
        here: list[Skipped] = []
        under = list(_walk(p, skipped=here))
        if skipped is not None:
            skipped.extend(here)
        if not under:
            hint = f"skipped: {here[0].text()}" if here else None
            raise UsageError(f"{spec}: no runs found in this directory", hint=hint)
        for sub in under:
            yield sub, p
    else:
        # a file, a run store, or a path that does not exist (reported unreadable)
        yield p, p


def discover(specs: Iterable[str], skipped: list[Skipped] | None = None) -> list[Source]:
    """Every run source under the given paths / globs, deduplicated, in a stable order;
    the FIFOs, sockets and devices found on the way are added to ``skipped``."""
    seen: set[str] = set()
    found: list[tuple[Path, Path]] = []
    for spec in specs:
        for path, root in _expand(str(spec), skipped):
            key = os.path.realpath(path)
            if key in seen:
                continue
            seen.add(key)
            found.append((path, root))
    names = [run_name(p, r) for p, r in found]
    # two sources under one name (metrics.jsonl and metrics.csv in one folder): keep the
    # file names to tell them apart
    counts: dict[str, int] = {}
    for n in names:
        counts[n] = counts.get(n, 0) + 1
    out: list[Source] = []
    used: set[str] = set()
    for (path, root), name in zip(found, names, strict=True):
        if counts[name] > 1:
            try:
                name = path.relative_to(root).as_posix()
            except ValueError:
                name = path.name
        base, k = name, 2
        while name in used:
            name = f"{base}#{k}"
            k += 1
        used.add(name)
        out.append(Source(path=str(path), name=name))
    return out
