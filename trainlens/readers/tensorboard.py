"""TensorBoard event files (``events.out.tfevents.*``) without TensorFlow.

Reads what ``torch.utils.tensorboard``, tensorboardX, TensorFlow 2 and Keras write: scalars
stored as ``simple_value`` and scalar-shaped tensors (``float_val``, ``double_val``,
``half_val``, ``int_val``/``int64_val`` and ``tensor_content`` for float32, float64, float16
and bfloat16). Histograms, images, audio, text and other non-scalar summaries are skipped and
counted in one data-quality note.

Layout on disk. A path is one events file or a directory tree. Each directory holding event
files is a run named by its path relative to the given directory (the directory's own name
for the top). Sub-directories written by ``add_scalars(main_tag, {k: v})`` belong to their
parent run: torch writes them as ``<main_tag with / as _>_<k>``, tensorboardX 2.6 as
``<main_tag>/<k>``, each holding the single tag ``main_tag``; they come back as metric
``main_tag/k``. Keras' callback writes one run as ``<logdir>/train`` and
``<logdir>/validation``: those two folders are one run at ``<logdir>``, the validation
metrics under ``val/``, Keras' tag names mapped with epoch- and batch-indexed series kept
apart (see :func:`_keras_label`). Several event files of one run (a resumed job writes a
new file) are read in the order of the timestamp in their names and concatenated, so a step
going back becomes a restart (see :func:`trainlens.core.run.build_run`).

Speed. A run held in one events file, read from its start, goes first to the compiled lane
(``_tbscan``, built from C at install when a compiler is there): one pass frames each
record, checks both checksums and decodes the Event layout of ``simple_value`` scalars,
without importing numpy. It takes the file only when every record is sound and of that
layout; anything else (a corrupt or truncated record, tensors, histograms, several files)
is read by the numpy reader (:mod:`trainlens.readers._tbdecode`), which decodes every shape
and reports every fault. Both give the same frame (tests compare them value for value). Why
the lane left a file it was offered is kept in ``Run.metadata["reader_note"]``
(``trainlens analyze -v`` shows it).

Resume. ``Run.cursor`` maps each file to the byte offset up to which complete records were
read; ``ReadOptions.start_offset`` (single files only) starts reading there, so a watcher can
read only what was appended. Record numbers in messages then count from that offset.
"""

from __future__ import annotations

import mmap
import os
import re
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from trainlens.core.errors import UnreadableInputError
from trainlens.core.paths import special_kind
from trainlens.core.run import DataIssue, Run, build_run
from trainlens.readers import _shrink, _sniff
from trainlens.readers._tbfile import FileInfo
from trainlens.readers._wide import enum_runs
from trainlens.readers.base import ReadOptions

if TYPE_CHECKING:
    from collections.abc import Iterable

    from trainlens.readers._tbrows import FileData, RunParts
    from trainlens.readers._tbtags import Tags

try:
    from trainlens.readers import _tbscan
except ImportError:  # not compiled at install: every file goes to the numpy reader
    _tbscan = None  # type: ignore[assignment]

FORMAT = "tensorboard"
SNIFF_MAX_FILES = 100_000  # a directory sniff gives up after looking at this many files


_TS = re.compile(r"tfevents\.(\d+)")
_is_event_file = _sniff.is_event_file_name


def sniff(path: Path, head: bytes) -> bool:
    """An events file by name or by a valid first record header; a directory holding an
    events file anywhere below it."""
    if path.is_dir():
        seen = 0
        for _, _, files in os.walk(path):
            if any(map(_is_event_file, files)):
                return True
            seen += len(files)
            if seen > SNIFF_MAX_FILES:
                break
        return False
    return _sniff.tensorboard_file(path, head)


# ---- runs ----------------------------------------------------------------------------------


def _file_order(p: Path) -> tuple[int, str]:
    m = _TS.search(p.name)
    return (int(m.group(1)) if m else 0, p.name)


def _event_dirs(root: Path) -> dict[Path, list[Path]]:
    found: dict[Path, list[Path]] = {}
    for d, dirs, files in os.walk(root):
        dirs.sort()
        # (os.walk lists a FIFO among the files: opening one would block for ever)
        events = [Path(d) / f for f in files if _is_event_file(f) and not special_kind(Path(d) / f)]
        if events:
            found[Path(d)] = sorted(events, key=_file_order)
    return found


def _without_lfs_pointers(
    dirs: dict[Path, list[Path]],
) -> tuple[dict[Path, list[Path]], list[Path]]:
    """The event files that are not Git LFS pointers (a clone without ``git lfs pull``
    holds 130-byte text files where the logs should be), and the pointers."""
    pointers = [f for files in dirs.values() for f in files if _sniff.is_lfs_pointer_file(f)]
    if not pointers:
        return dirs, []
    left = set(pointers)
    kept = {d: [f for f in files if f not in left] for d, files in dirs.items()}
    return {d: files for d, files in kept.items() if files}, pointers


def _scalars_parent(
    child: Path, tag: str, dirs: dict[Path, list[Path]], root: Path
) -> tuple[Path, str] | None:
    """The run an add_scalars sub-directory belongs to, and the key it logged."""
    for anc in child.parents:
        if anc in dirs:
            rel = child.relative_to(anc).as_posix()
            for prefix in (tag.replace("/", "_") + "_", tag + "/"):
                if rel.startswith(prefix) and len(rel) > len(prefix):
                    return anc, rel[len(prefix) :]
        if anc == root:
            break
    return None


# Keras' TensorBoard callback writes one run as two folders, ``train/`` and
# ``validation/``; they are read as one run at their parent, the validation folder's
# metrics under ``val/``.
SPLIT_DIRS = {"train": "train", "validation": "val"}
_KERAS_EVAL = re.compile(r"^evaluation_(.+)_vs_iterations$")


def _keras_label(split: str, tag: str, batch_axis: bool) -> str:
    """The name a tag of a Keras split folder is read as (then mapped by the alias table).

    Keras logs per epoch (``epoch_loss``: step = epoch) and, with ``update_freq``, per
    batch (``batch_loss``: step = optimizer iteration); at each validation it also writes
    ``evaluation_loss_vs_iterations`` (step = iteration), whatever ``update_freq`` is.
    The two axes must not meet in one series (epoch 3 beside iteration 3000 reads as a
    stall or a gap), and train/loss and val/loss must share one, so the run's axis is
    chosen once: when training logged per batch, ``batch_*`` is ``train/*`` and
    ``evaluation_*_vs_iterations`` is ``val/*``, the per-epoch series get Lightning's
    ``_epoch`` suffix; otherwise ``epoch_*`` is ``train/*`` / ``val/*`` and the
    iteration-indexed evaluation keeps a ``_vs_iterations`` suffix."""
    m = _KERAS_EVAL.match(tag)
    if m:
        name = m.group(1) + ("" if batch_axis else "_vs_iterations")
    elif tag.startswith("batch_"):
        name = tag[len("batch_") :]
    elif tag.startswith("epoch_"):
        name = tag[len("epoch_") :] + ("_epoch" if batch_axis else "")
    else:
        name = tag
    return f"{SPLIT_DIRS[split]}/{name}"


def _split_groups(dirs: dict[Path, list[Path]]) -> dict[Path, Path]:
    """Each ``train/`` or ``validation/`` events folder -> the run folder it belongs to."""
    return {d: d.parent for d in dirs if d.name in SPLIT_DIRS}


def _keras_split(d: Path, fds: list[FileData], tags: Tags, dirs: Iterable[Path]) -> bool:
    """A ``train/`` folder is a Keras split unless it stands alone (no ``validation/``
    beside it) and every tag in it is already namespaced: Ultralytics names its run
    folder ``train`` (``runs/detect/train``) and logs ``train/box_loss``,
    ``metrics/mAP50(B)``; read as a split, they became ``train/train/box_loss``."""
    import numpy as np

    if d.name != "train" or (d.parent / "validation") in set(dirs):
        return True
    ids = set().union(*(set(np.unique(fd.rows.tag).tolist()) for fd in fds))
    return not ids or not all(b"/" in tags.names[t] for t in ids)


def _split_renames(
    group: dict[Path, list[FileData]], tags: Tags
) -> tuple[list[FileData], list[dict[int, str] | None], dict[str, str]]:
    """The files of one Keras run, a tag-id -> label map for each, and label -> the tag
    as logged (``validation/epoch_loss``) for ``Run.raw_names``."""
    import numpy as np

    ids = {
        d: sorted(set().union(*(set(np.unique(fd.rows.tag).tolist()) for fd in fds)))
        for d, fds in group.items()
    }
    names = {
        d: {t: tags.names[t].decode("utf-8", "replace") for t in tids} for d, tids in ids.items()
    }
    batch_axis = any(
        n.startswith("batch_") for d, m in names.items() if d.name == "train" for n in m.values()
    )
    files: list[FileData] = []
    renames: list[dict[int, str] | None] = []
    logged: dict[str, str] = {}
    for d, fds in group.items():
        labels = {t: _keras_label(d.name, n, batch_axis) for t, n in names[d].items()}
        logged.update({lab: f"{d.name}/{names[d][t]}" for t, lab in labels.items()})
        files.extend(fds)
        renames.extend([labels] * len(fds))
    return files, renames, logged


def _run_name(d: Path, root: Path) -> str:
    if d == root or root not in d.parents:
        return d.resolve().name
    return d.relative_to(root).as_posix()


def _skipped_issue(files: list[FileInfo], source: str) -> list[DataIssue]:
    total: Counter[str] = Counter()
    for fd in files:
        total.update(fd.skipped)
    n = sum(total.values())
    if not n:
        return []
    parts = ", ".join(f"{k}: {v}" for k, v in total.most_common())
    return [
        DataIssue(
            kind="non-scalar",
            source=source,
            message=f"{n} non-scalar summaries skipped ({parts})",
            count=n,
            severity="info",
            details=dict(total),
        )
    ]


# Megatron-LM logs every scalar twice: `lm loss` at the iteration and `lm loss vs samples`
# (Megatron-DeepSpeed also `… vs tokens`) at the consumed-sample count. The second is the
# same series on another x-axis; kept beside the first it would stretch the run's steps to
# millions and read as huge gaps.
_OTHER_AXIS = re.compile(r"^(?P<base>.+) vs (?:samples|tokens)$")


def _without_other_axes(
    frame: pl.DataFrame, blocks: list[int] | None, source: str
) -> tuple[pl.DataFrame, list[int] | None, list[DataIssue]]:
    """The frame without the ``<tag> vs samples`` / ``vs tokens`` series whose ``<tag>``
    is logged against the step too (counted in one info note)."""
    dtype = frame.schema["metric"]
    if not isinstance(dtype, pl.Enum):
        return frame, blocks, []
    names = [str(c) for c in dtype.categories.to_list()]
    present = set(names)
    drop = [
        i for i, n in enumerate(names) if (m := _OTHER_AXIS.match(n)) and m.group("base") in present
    ]
    if not drop:
        return frame, blocks, []
    gone = frame.get_column("metric").to_physical().is_in(drop)
    n = int(gone.sum())
    if not n:
        return frame, blocks, []
    shown = ", ".join(repr(names[i]) for i in drop[:4]) + ("…" if len(drop) > 4 else "")
    note = DataIssue(
        kind="other-axis",
        source=source,
        message=(
            f"{n} values of {len(drop)} tag(s) logged against samples or tokens rather than "
            f"the step ({shown}) are left out: the same series is there against the step"
        ),
        count=n,
        severity="info",
    )
    # (the per-metric block lengths no longer match the Enum: build_run regroups)
    return frame.filter(~gone), None, [note]


def _build(
    name: str,
    source: str,
    files: list[FileInfo],
    frame: pl.DataFrame,
    blocks: list[int] | None,
    base: Path,
    opts: ReadOptions,
) -> Run:
    issues = [i for fd in files for i in fd.issues]
    issues.extend(_skipped_issue(files, source))
    frame, blocks, off_axis = _without_other_axes(frame, blocks, source)
    issues.extend(off_axis)
    rel = []
    for fd in files:
        try:
            rel.append(fd.path.relative_to(base).as_posix())
        except ValueError:
            rel.append(fd.path.name)
    plugins = sorted(set().union(*(fd.plugins for fd in files)))
    metadata: dict[str, Any] = {
        "files": rel,
        "records": dict(zip(rel, (fd.records for fd in files), strict=True)),
        "plugins": plugins,
    }
    version = next((fd.file_version for fd in files if fd.file_version), None)
    if version:
        metadata["file_version"] = version
    run = build_run(
        frame,
        name=name,
        source=source,
        fmt=FORMAT,
        aliases=opts.aliases,
        metadata=metadata,
        issues=issues,
        blocks=blocks,
    )
    run.cursor = {str(fd.path): fd.end for fd in files}
    return run


# why the numpy reader read a file the compiled lane was offered (Run.metadata; -v shows it)
NOTE_KEY = "reader_note"


def _scan(path: Path) -> tuple[_tbscan.ScanResult | str, int, list[DataIssue]]:
    """The compiled lane's columns for one whole events file, the number of bytes they
    came from (a file still being written may have grown since) and the note when it
    shrank while read; or why the lane does not take it (not compiled, or a record it
    leaves to the numpy reader).

    The file is mapped, under the guard (:mod:`trainlens.readers._shrink`); when a page
    was cut from under the scan, or the guard is not built, the lane scans a copy."""
    if _tbscan is None:
        return "it is not built (no C compiler at install)", 0, []
    size = 0
    if _shrink.GUARDED:
        try:
            with _shrink.guard(path) as g, open(path, "rb") as f:
                size = g.size
                with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
                    got, size = _tbscan.scan(m), len(m)
        except (OSError, ValueError):  # an empty file cannot be mapped; no mmap here
            g = None
        if g is not None and not g.cut:
            return (f"it met {got}" if isinstance(got, str) else got), size, []
    try:
        copy = _shrink.read_copy(path)
    except OSError:
        return "the file cannot be read into memory", 0, []
    got = _tbscan.scan(copy.data)
    notes = _shrink.note_if_shrank(path, copy.end, max(size, copy.size))
    return (f"it met {got}" if isinstance(got, str) else got), copy.end, notes


def _read_compiled(
    path: Path, name: str, source: str, base: Path, opts: ReadOptions
) -> Run | tuple[str, list[DataIssue]]:
    """The run held in the one events file ``path``, read by the compiled lane; or, when
    the lane leaves the file to the numpy reader, the note that says why (and the note
    that the file shrank while read, which the numpy reader's run carries)."""
    got, size, notes = _scan(path)
    if isinstance(got, str):
        return f"read by the numpy reader: the compiled lane left it, as {got}", notes
    tags, counts, grouped = got.tags, got.counts, got.grouped
    try:
        names = [t.decode("utf-8") for t in tags]
    except UnicodeDecodeError:  # a tag that is not UTF-8: the numpy reader says so
        why = "read by the numpy reader: the compiled lane left it, as a tag is not UTF-8"
        return why, notes
    if grouped:
        metric = enum_runs(names, counts)
    else:
        metric = pl.Series("metric", names, dtype=pl.Enum(names)).gather(pl.Series(got.code))
    frame = pl.DataFrame(
        [
            pl.Series(got.step).alias("step"),
            metric.alias("metric"),
            pl.Series(got.value).alias("value"),
            pl.Series(got.wall).alias("wall_time"),
        ]
    )
    version = got.file_version
    info = FileInfo(
        path,
        0,
        size,
        size,
        got.records,
        plugins={"scalars"},
        file_version=version.decode("utf-8", "replace") if version is not None else None,
    )
    info.issues.extend(notes)
    return _build(name, source, [info], frame, counts if grouped else None, base, opts)


def _no_scalars(path: Path, files: list[FileInfo]) -> UnreadableInputError:
    records = sum(fd.records for fd in files)
    if records == 0:
        problems = [i.message for fd in files for i in fd.issues]
        if all(fd.size == 0 for fd in files):
            what = "the file is empty" if len(files) == 1 else "the event files are empty"
            return UnreadableInputError(f"{path}: {what} (no TensorBoard records)")
        return UnreadableInputError(
            f"{path}: not a TensorBoard event file: no valid record found"
            + (f" ({problems[0]})" if problems else "")
        )
    skipped = sum(sum(fd.skipped.values()) for fd in files)
    return UnreadableInputError(
        f"{path}: no scalar summaries found in {records} records"
        + (f" ({skipped} non-scalar summaries skipped)" if skipped else "")
    )


def _numpy_run(
    name: str, source: str, parts: RunParts, tags: Tags, base: Path, opts: ReadOptions
) -> Run:
    from trainlens.readers._tbdecode import frame_of, tag_issues

    frame, blocks = frame_of(parts, tags)
    run = _build(name, source, list(parts.files), frame, blocks, base, opts)
    run.data_quality.extend(tag_issues(frame, tags, source))
    if parts.logged:
        run.raw_names = {c: parts.logged.get(r, r) for c, r in run.raw_names.items()}
    return run


def read(path: Path, opts: ReadOptions) -> list[Run]:
    """Read an events file or every run in a directory tree (see the module docstring).

    ``opts.start_offset`` applies to a single file only (a directory is read in full); a
    file read from an offset with nothing new yields a run with an empty frame."""
    path = Path(path)
    if not path.exists():
        raise UnreadableInputError(f"{path}: no such file or directory")
    if path.is_file():
        return _read_file(path, opts)

    dirs = _event_dirs(path)
    if not dirs:
        raise UnreadableInputError(f"{path}: no TensorBoard event files (events.out.tfevents.*)")
    dirs, pointers = _without_lfs_pointers(dirs)
    if not dirs:
        where = pointers[0] if len(pointers) == 1 else path
        raise UnreadableInputError(
            _sniff.lfs_message(where)
            if len(pointers) == 1
            else f"{where}: its {len(pointers)} event files are Git LFS pointers, not the logs "
            "themselves; run `git lfs pull`"
        )
    note, shrank = None, list[DataIssue]()
    if len(dirs) == 1:  # one run in one file: the compiled lane may take it
        ((d, files),) = dirs.items()
        if len(files) == 1 and d.name not in SPLIT_DIRS:
            name = path.resolve().name if d == path else d.relative_to(path).as_posix()
            compiled = _read_compiled(files[0], name, str(d), d, opts)
            if isinstance(compiled, Run):
                return _note_pointers([compiled], pointers, path)
            note, shrank = compiled

    from trainlens.readers._tbdecode import read_events_file
    from trainlens.readers._tbtags import Tags

    tags = Tags()
    data = {d: [read_events_file(f, tags) for f in files] for d, files in dirs.items()}
    out: list[Run] = []
    for d, parts in _group_runs(path, dirs, data, tags).items():
        has_values = any(len(fd.rows.record) for fd in parts.files)
        has_warnings = any(i.severity != "info" for fd in parts.files for i in fd.issues)
        if not has_values and not has_warnings:
            continue
        out.append(_numpy_run(_run_name(d, path), str(d), parts, tags, d, opts))
    if not any(r.frame.height for r in out):
        raise _no_scalars(path, [fd for fds in data.values() for fd in fds])
    if note is not None:
        out[0].metadata[NOTE_KEY] = note
        out[0].data_quality[:0] = shrank
    return _note_pointers(out, pointers, path)


def _read_file(path: Path, opts: ReadOptions) -> list[Run]:
    split = _is_event_file(path.name) and path.resolve().parent.name in SPLIT_DIRS
    name = path.resolve().parent.name if _is_event_file(path.name) else path.stem
    note, shrank = None, list[DataIssue]()
    if opts.start_offset == 0 and not split:
        compiled = _read_compiled(path, name, str(path), path.parent, opts)
        if isinstance(compiled, Run):
            return [compiled]
        note, shrank = compiled
    from trainlens.readers._tbdecode import read_events_file
    from trainlens.readers._tbrows import RunParts
    from trainlens.readers._tbtags import Tags

    tags = Tags()
    fd = read_events_file(path, tags, start_offset=opts.start_offset)
    if not len(fd.rows.record) and opts.start_offset == 0:
        raise _no_scalars(path, [fd])
    parts = RunParts([fd], [None])
    split = split and _keras_split(path.resolve().parent, [fd], tags, [])
    if split:  # one file of a Keras logdir: named and mapped as its run would be
        parts = RunParts(*_split_renames({path.resolve().parent: [fd]}, tags))
        name = path.resolve().parent.parent.name
    run = _numpy_run(name, str(path), parts, tags, path.parent, opts)
    if note is not None:
        run.metadata[NOTE_KEY] = note
    run.data_quality[:0] = shrank
    return [run]


def _folded_scalars(
    root: Path, dirs: dict[Path, list[Path]], data: dict[Path, list[FileData]], tags: Tags
) -> dict[Path, tuple[Path, str, int]]:
    """add_scalars sub-directories: folder -> (its run's folder, metric, tag id)."""
    import numpy as np

    folded: dict[Path, tuple[Path, str, int]] = {}
    for d, fds in data.items():
        if d == root:
            continue
        tag_ids = set().union(*(set(np.unique(fd.rows.tag).tolist()) for fd in fds))
        if len(tag_ids) != 1 or any(fd.skipped for fd in fds):
            continue
        (tid,) = tag_ids
        tag = tags.names[tid].decode("utf-8", "replace")
        hit = _scalars_parent(d, tag, dirs, root)
        if hit is not None:
            folded[d] = (hit[0], f"{tag}/{hit[1]}", tid)
    return folded


def _group_runs(
    root: Path, dirs: dict[Path, list[Path]], data: dict[Path, list[FileData]], tags: Tags
) -> dict[Path, RunParts]:
    """The runs of a tree: each events folder, with add_scalars folders folded into their
    run and a Keras logdir's split folders into one."""
    folded = _folded_scalars(root, dirs, data, tags)
    # (tensorboardX writes add_scalars("loss", {"train": …}) to loss/train: folded above,
    # not a Keras split; one under a Keras split folder is left a run of its own)
    splits = {
        d: p
        for d, p in _split_groups(dirs).items()
        if d not in folded and _keras_split(d, data[d], tags, dirs)
    }
    folded = {d: f for d, f in folded.items() if f[0] not in splits}
    from trainlens.readers._tbrows import RunParts

    runs: dict[Path, RunParts] = {}
    by_parent: dict[Path, dict[Path, list[FileData]]] = {}
    for d, fds in data.items():
        if d in splits:
            by_parent.setdefault(splits[d], {})[d] = fds
            runs.setdefault(splits[d], RunParts())
        elif d not in folded:
            runs.setdefault(d, RunParts()).files.extend(fds)
            runs[d].renames.extend([None] * len(fds))
    for parent, group in by_parent.items():
        split_files, renames, logged = _split_renames(group, tags)
        runs[parent].files.extend(split_files)
        runs[parent].renames.extend(renames)
        runs[parent].logged.update(logged)
    for d, (parent, metric, tid) in folded.items():
        target = parent
        while target in folded:  # never expected, but keep the chain finite
            target = folded[target][0]
        runs[target].files.extend(data[d])
        runs[target].renames.extend([{tid: metric}] * len(data[d]))
    return runs


def _note_pointers(runs: list[Run], pointers: list[Path], path: Path) -> list[Run]:
    """Some files were pulled, some not: say so on the first run."""
    if pointers:
        runs[0].data_quality.append(
            DataIssue(
                kind="lfs-pointer",
                source=str(path),
                message=(
                    f"{len(pointers)} event file(s) are Git LFS pointers, not the logs "
                    f"themselves, and were left out (first: {pointers[0]}); run `git lfs pull`"
                ),
                count=len(pointers),
            )
        )
    return runs
