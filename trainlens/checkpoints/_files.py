"""Structural checks of one checkpoint file: torch zip archives, raw pickles, safetensors.

Nothing here unpickles or imports what a file names. Each check returns problems (what
is wrong, naming the member or tensor) and notes (what was not checked, and why).

Bounded work, whatever the file's size:

- a zip archive's end record and central directory are found by :mod:`zipfile` from the
  last 64 KiB and the directory itself; each member's extent is checked against the file
  length from the directory alone;
- member CRCs are checked by streaming each member in 1 MiB chunks (memory stays at one
  chunk), up to a byte budget per checkpoint (:data:`CRC_BUDGET`, 2 GiB: a few seconds
  of disk); members past the budget are named in a note, not read. A 50 GB checkpoint is
  therefore audited for structure in full and for bit rot up to the budget;
- a pickle is walked opcode by opcode up to :data:`PICKLE_BUDGET` (64 MiB; a torch zip's
  ``data.pkl`` holds only the object tree, the tensors live in other members, so real
  ones are kilobytes to a few MiB);
- a safetensors header is at most 100 MB (the safetensors library's own limit), read once
  and checked as :mod:`trainlens.checkpoints._safetensors` says.
"""

from __future__ import annotations

import os
import zipfile
from dataclasses import dataclass, field

from trainlens.checkpoints._model import Problem
from trainlens.checkpoints._pickles import PickleScan, scan
from trainlens.checkpoints._safetensors import Bad, read_header

CRC_BUDGET = 2 * 2**30
PICKLE_BUDGET = 64 * 2**20
_CHUNK = 2**20
_ZIP_MAGIC = b"PK\x03\x04"
_PICKLE_PROTO = 0x80  # protocol 2+ pickles start with PROTO


@dataclass
class FileAudit:
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    pickles: list[PickleScan] = field(default_factory=list)
    tensors: dict[str, int] = field(default_factory=dict)  # safetensors: name -> bytes
    crc_bytes: int = 0  # bytes read for CRC checks

    def problem(self, status: str, file: str, message: str) -> None:
        self.problems.append(Problem(status, file, message))

    def strings(self) -> set[str]:
        out: set[str] = set()
        for p in self.pickles:
            out |= p.strings
        return out


def audit_pickled(path: str, rel: str, budget: int = CRC_BUDGET) -> FileAudit:
    """A file torch.save or pickle wrote: a zip archive (torch >= 1.6) or a raw pickle."""
    out = FileAudit()
    with open(path, "rb") as fh:
        head = fh.read(4)
    if head == _ZIP_MAGIC:
        _audit_zip(path, rel, budget, out)
    elif not head:
        out.problem("truncated", rel, "empty file")
    else:
        with open(path, "rb") as fh:
            data = fh.read(PICKLE_BUDGET)
        _scan_pickles(data, rel, out, whole=os.path.getsize(path) <= PICKLE_BUDGET)
    return out


#: pickles read one after another in a raw file: torch's legacy format (before 1.6)
#: writes five (magic number, protocol, system info, the object, the storage keys),
#: then the tensors' raw bytes
_MAX_PICKLES = 5


def _scan_pickles(data: bytes, rel: str, out: FileAudit, *, whole: bool) -> None:
    """The pickles at the start of a raw file (protocol 0 to 5), opcodes only."""
    found = scan(data)
    scans = [found]
    while found.error is None and len(scans) < _MAX_PICKLES and found.end < len(data):
        if data[found.end] != _PICKLE_PROTO:
            break  # the legacy format's raw tensor bytes
        found = scan(data, start=found.end)
        scans.append(found)
    out.pickles.extend(scans)
    calls = [g for s in scans for g in s.unsafe]
    if calls:
        out.problem("unsafe", rel, f"loading it would call {', '.join(calls[:3])} (not loaded)")
    first = scans[0]
    if first.error is not None:  # a later pickle's error may be tensor bytes: not judged
        if whole:
            status = "truncated" if "STOP" in first.error else "corrupt"
            what = "the pickle" if rel.endswith(".pkl") else "not a zip archive, and a pickle that"
            out.problem(status, rel, f"{what} does not parse: {first.error}")
        else:
            out.notes.append(f"{rel}: pickle over {PICKLE_BUDGET >> 20} MiB, scanned in part")


def _audit_zip(path: str, rel: str, budget: int, out: FileAudit) -> None:
    size = os.path.getsize(path)
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        # the central directory sits at the end: a cut file loses it first
        out.problem(
            "truncated",
            rel,
            f"no readable zip directory at the end of the file ({exc}): the write was cut "
            "short, or its end overwritten",
        )
        return
    with zf:
        infos = zf.infolist()
        for info in infos:
            end = info.header_offset + 30 + len(info.filename.encode()) + info.compress_size
            if end > size:
                out.problem(
                    "truncated", rel, f"member {info.filename} ends past the file's end ({size} B)"
                )
                return
        pickles = [i for i in infos if i.filename.endswith(".pkl")]
        for info in pickles:
            _member_pickle(zf, info, rel, out)  # zf.read checks its CRC too
        small = [i for i in pickles if i.file_size <= PICKLE_BUDGET]
        _check_crcs(zf, [i for i in infos if i not in small], rel, budget, out)


def _member_pickle(zf: zipfile.ZipFile, info: zipfile.ZipInfo, rel: str, out: FileAudit) -> None:
    if info.file_size > PICKLE_BUDGET:
        out.notes.append(f"{rel}: {info.filename} over {PICKLE_BUDGET >> 20} MiB, not scanned")
        return
    try:
        data = zf.read(info)
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        out.problem("corrupt", rel, f"member {info.filename}: {exc}")
        return
    _scan_pickles(data, f"{rel}:{info.filename}", out, whole=True)


def _check_crcs(
    zf: zipfile.ZipFile, infos: list[zipfile.ZipInfo], rel: str, budget: int, out: FileAudit
) -> None:
    unread: list[str] = []
    for info in infos:
        if out.crc_bytes + info.file_size > budget:
            unread.append(info.filename)
            continue
        try:
            with zf.open(info) as member:  # ZipExtFile checks the CRC at the member's end
                while member.read(_CHUNK):
                    pass
        except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
            out.problem("corrupt", rel, f"member {info.filename}: {exc}")
        out.crc_bytes += info.file_size
    if unread:
        shown = ", ".join(unread[:3]) + (" …" if len(unread) > 3 else "")
        out.notes.append(
            f"{rel}: CRC of {len(unread)} member(s) not checked (over the "
            f"{budget / 2**30:.3g} GiB read budget): {shown}"
        )


def audit_safetensors(path: str, rel: str) -> FileAudit:
    """The header parses, every tensor's byte range matches its dtype and shape, the ranges
    tile the data without holes, and the file is exactly as long as the header says
    (:mod:`trainlens.checkpoints._safetensors`)."""
    out = FileAudit()
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        try:
            n, data_len, out.tensors = read_header(fh, size)
        except Bad as exc:
            out.problem(exc.status, rel, exc.message)
            return out
    want = 8 + n + data_len
    if size < want:
        out.problem("truncated", rel, f"{size:,} B but its header needs {want:,} B")
    elif size > want:
        out.problem("corrupt", rel, f"{size - want:,} B past the last tensor its header names")
    return out
