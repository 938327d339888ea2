"""Sniffing a single file without importing its reader.

Telling a JSONL or CSV file from a TensorBoard events file or an MLflow database takes a
look at the first bytes only; importing the TensorBoard and MLflow readers to do it would
import numpy too, a noticeable share of the time a small file takes to read. The reader
modules use these same functions for their own ``sniff``.
"""

from __future__ import annotations

import os
import re
import struct
from pathlib import Path

from trainlens.readers._tfrecord_format import HEADER as TFRECORD_HEADER
from trainlens.readers._tfrecord_format import masked_length_crc

SQLITE_MAGIC = b"SQLite format 3\x00"
WANDB_MAGIC = b":W&B\xe1\xbe"  # a W&B transaction log (run-<id>.wandb)
PARQUET_MAGIC = b"PAR1"  # a parquet file starts (and ends) with it


UTF8_BOM = b"\xef\xbb\xbf"


def text_head(head: bytes) -> bytes:
    """The first bytes of a text file without the UTF-8 byte-order mark some Windows
    tools write (a JSONL file starting with one is still JSONL, not CSV)."""
    return head[len(UTF8_BOM) :] if head.startswith(UTF8_BOM) else head


LFS_POINTER = b"version https://git-lfs.github.com/spec/v1"
LFS_POINTER_MAX = 1024  # git-lfs: a pointer file is "less than 1024 bytes" (spec v1)


def is_lfs_pointer(head: bytes) -> bool:
    """A Git LFS pointer: the small text file git keeps where the content was not pulled."""
    return text_head(head).startswith(LFS_POINTER)


def is_lfs_pointer_file(path: Path) -> bool:
    try:
        if path.stat().st_size >= LFS_POINTER_MAX:
            return False
        with path.open("rb") as fh:
            return is_lfs_pointer(fh.read(len(LFS_POINTER) + 3))
    except OSError:
        return False


def lfs_message(path: Path) -> str:
    return f"{path}: this is a Git LFS pointer, not the log itself; run `git lfs pull`"


def is_event_file_name(name: str) -> bool:
    """TensorBoard's own rule (``io_wrapper.IsTensorFlowEventsFile``): "tfevents" in the
    file's name. The one test of it: the readers, sniffing and the gate's discovery."""
    return "tfevents" in name


def tensorboard_file(path: Path, head: bytes) -> bool:
    """An events file by name, or by a first record header whose length checksum holds."""
    if is_event_file_name(path.name):
        return True
    if len(head) < TFRECORD_HEADER:
        return False
    length, lcrc = struct.unpack_from("<QI", head)
    return bool(lcrc == masked_length_crc(length))


def is_mlflow_export_head(head: bytes) -> bool:
    return b'"run_id"' in head and (b'"mlflow"' in head or b'"info"' in head)


def mlflow_file(path: Path, head: bytes) -> bool | None:
    """False when the file is surely not MLflow's; None when it is an SQLite database
    (whether it has MLflow's tables takes the MLflow reader to tell); True for an
    mlflow-export-import run.json."""
    if head.startswith(SQLITE_MAGIC):
        return None
    return path.suffix == ".json" and is_mlflow_export_head(head)


def entry_is_dir(entry: os.DirEntry[str]) -> bool:
    """``entry.is_dir()``, False for a symlink loop (ELOOP: DirEntry raises where Path
    returns False)."""
    try:
        return entry.is_dir()
    except OSError:
        return False


def entry_is_file(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_file()
    except OSError:
        return False


def mlflow_dir_maybe(path: Path) -> bool:
    """False when ``path`` surely is no MLflow file store or export (no meta.yaml,
    metrics/, run.json or experiment.json in it or in a folder just below it); True
    means the MLflow reader has to look."""
    if path.name == "metrics":
        return True
    names = {"meta.yaml", "metrics", "run.json", "experiment.json"}
    try:
        with os.scandir(path) as it:
            entries = list(it)
    except OSError:
        return False
    if any(e.name in names for e in entries):
        return True
    for e in sorted((e for e in entries if entry_is_dir(e)), key=lambda e: e.name)[:200]:
        try:
            with os.scandir(e.path) as sub:
                if any(s.name in names for s in sub):
                    return True
        except OSError:
            continue
    return False


def may_be(fmt: str, path: Path, head: bytes) -> bool:
    """False when a first look (no reader imported: the TensorBoard and MLflow readers
    import numpy) rules ``fmt`` out for ``path``; True when its reader must decide."""
    if fmt == "wandb-run":
        if not path.is_dir():
            return head.startswith(WANDB_MAGIC)
        from trainlens.readers._wandb_meta import is_run_folder

        return is_run_folder(path)  # (the W&B reader's import is ~13 ms)
    if fmt == "parquet":
        return not path.is_dir() and head.startswith(PARQUET_MAGIC)
    if fmt == "tensorboard" and not path.is_dir():
        return tensorboard_file(path, head)
    if fmt == "mlflow":
        return mlflow_dir_maybe(path) if path.is_dir() else mlflow_file(path, head) is not False
    if fmt == "dvclive":
        return path.is_dir()  # (a folder of TSVs; its reader's import is ~15 ms)
    return True


def is_utf16(head: bytes) -> bool:
    """A UTF-16 byte-order mark, then text with its NUL high (or low) bytes."""
    return head.startswith((b"\xff\xfe", b"\xfe\xff")) and b"\x00" in head[2:64]


# ---- text in a legacy East-Asian encoding (issue 26: a GBK log, round 9) ------------------
# Tried only when the bytes are no UTF-8, in this order; each is taken only when its text
# is that script's (a Latin-1 `café` decodes as GB18030 too, as one unlikely ideograph).
_LEGACY = (
    ("gb18030", "GB18030 (GBK, GB2312: Windows' code page for Simplified Chinese)", "han"),
    ("big5", "Big5 (Traditional Chinese)", "han"),
    ("cp932", "Shift-JIS (Windows' code page for Japanese)", "kana"),
    ("euc-kr", "EUC-KR (Korean)", "hangul"),
)
_SCRIPT = {
    "han": re.compile(r"[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]"),
    "kana": re.compile(r"[\u3000-\u30ff\u4e00-\u9fff\uff00-\uffef]"),
    "hangul": re.compile(r"[\u3000-\u303f\u1100-\u11ff\uac00-\ud7af\uff00-\uffef]"),
}
_HIGH_RUN = re.compile(rb"[\x80-\xff]+")
LEGACY_HEAD_BYTES = 1 << 16


def legacy_codec(head: bytes) -> tuple[str, str] | None:
    """The codec and its description of a text ``head`` that is no UTF-8 but decodes
    whole in a double-byte East-Asian code page (a Chinese Windows console's log), or
    None. Taken when nearly every run of non-ASCII bytes has an even length (two bytes
    a character) and 95 % of the characters they decode to are that script's."""
    if not head or b"\x00" in head or is_utf16(head):
        return None
    try:
        head.decode("utf-8")
        return None
    except UnicodeDecodeError as exc:
        if exc.start >= len(head) - 3 and exc.reason == "unexpected end of data":
            return None  # (UTF-8 cut at the head's end)
    runs = _HIGH_RUN.findall(head)
    even = sum(1 for r in runs if len(r) % 2 == 0)
    if not runs or even < 0.9 * len(runs):
        return None
    for codec, label, script in _LEGACY:
        for cut in range(4):  # (a character cut at the head's end)
            try:
                text = head[: len(head) - cut].decode(codec)
                break
            except UnicodeDecodeError:
                continue
        else:
            continue
        wide = [c for c in text if ord(c) > 0x7F]
        if wide and sum(1 for c in wide if _SCRIPT[script].match(c)) >= 0.95 * len(wide):
            return codec, label
    return None
