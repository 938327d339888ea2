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
- a pickle is walked opcode by opcode on one budget for the whole checkpoint (bytes,
  opcodes, memo entries, seconds: :class:`~trainlens.checkpoints._budget.PickleBudget`);
  a raw pickle file is mapped, not read, so a tensor's bytes inside it are skipped
  without being loaded; when the budget runs out the checkpoint is ``over-budget``;
- a safetensors header is at most 100 MB (the safetensors library's own limit), read once
  and checked as :mod:`trainlens.checkpoints._safetensors` says.
"""

from __future__ import annotations

import mmap
import os
import zipfile

from trainlens.checkpoints._budget import Spend
from trainlens.checkpoints._model import Problem
from trainlens.checkpoints._pickles import PickleScan, scan
from trainlens.checkpoints._safetensors import Bad, read_header
from trainlens.core.dataclass import dataclass, field

CRC_BUDGET = 2 * 2**30
#: a JSON file in a checkpoint (an index, trainer_state.json) is read up to this
JSON_MAX = 64 * 2**20
SAFETENSORS_HEADER_MAX = 100_000_000
_CHUNK = 2**20
_ZIP_MAGIC = b"PK\x03\x04"


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


def audit_pickled(path: str, rel: str, spend: Spend, budget: int = CRC_BUDGET) -> FileAudit:
    """A file torch.save or pickle wrote: a zip archive (torch >= 1.6) or a raw pickle."""
    out = FileAudit()
    with open(path, "rb") as fh:
        head = fh.read(4)
        if head == _ZIP_MAGIC:
            _audit_zip(path, rel, budget, out, spend)
        elif not head:
            out.problem("truncated", rel, "empty file")
        elif spend.spent is not None:
            out.notes.append(f"{rel}: not scanned (the checkpoint's pickle budget is spent)")
        else:  # mapped: pages are read as the walk reaches them, a skipped payload never
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
                _scan_pickles(data, rel, out, spend)
    return out


#: pickles read one after another in a raw file: torch's legacy format (before 1.6)
#: writes five (magic number, protocol, system info, the object, the storage keys),
#: then the tensors' raw bytes. ``torch.load`` unpickles all five whatever protocol each
#: is in, so each is walked: a protocol 0 or 1 one starts with no PROTO byte
_MAX_PICKLES = 5


def _scan_pickles(data: bytes | mmap.mmap, rel: str, out: FileAudit, spend: Spend) -> None:
    """The pickles at the start of a raw file (protocol 0 to 5), opcodes only."""
    found = scan(data, spend=spend)
    scans = [found]
    while found.error is None and len(scans) < _MAX_PICKLES and 0 < found.end < len(data):
        found = scan(data, start=found.end, spend=spend)
        scans.append(found)
    out.pickles.extend(scans)
    verdicts = [v for v in (s.verdict() for s in scans) if v]
    if verdicts:
        out.problem("unsafe", rel, verdicts[0])
    budget_problem(spend, rel, out)
    first = scans[0]
    if first.error is not None:  # a later pickle's error may be tensor bytes: not judged
        status = "truncated" if "STOP" in first.error else "corrupt"
        what = "the pickle" if rel.endswith(".pkl") else "not a zip archive, and a pickle that"
        out.problem(status, rel, f"{what} does not parse: {first.error}")


def budget_problem(spend: Spend, rel: str, out: FileAudit) -> None:
    """The checkpoint's pickle budget ran out in ``rel``: said once, where it happened."""
    if spend.spent is not None and spend.where is None:
        spend.where = rel
        out.problem("over-budget", rel, spend.message())


def _audit_zip(path: str, rel: str, budget: int, out: FileAudit, spend: Spend) -> None:
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
        read = [
            i
            for i in infos
            if i.filename.endswith(".pkl") and _member_pickle(zf, i, rel, out, spend)
        ]
        if spend.spent is not None:  # a bomb: reading its other members adds nothing
            out.notes.append(f"{rel}: CRCs not checked (the checkpoint's pickle budget is spent)")
            return
        _check_crcs(zf, [i for i in infos if i not in read], rel, budget, out, spend)


def _member_pickle(
    zf: zipfile.ZipFile, info: zipfile.ZipInfo, rel: str, out: FileAudit, spend: Spend
) -> bool:
    """Scan one ``*.pkl`` member whole (zf.read checks its CRC too); False when the budget
    left it unread."""
    where = f"{rel}:{info.filename}"
    if spend.spent is None and info.file_size > spend.bytes_left():
        spend.spent = f"{spend.budget.bytes:,} bytes"
    if spend.spent is not None or spend.out_of_time():
        budget_problem(spend, where, out)
        return False
    try:
        data = zf.read(info)
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        out.problem("corrupt", rel, f"member {info.filename}: {exc}")
        return True
    _scan_pickles(data, where, out, spend)
    return True


def _check_crcs(
    zf: zipfile.ZipFile,
    infos: list[zipfile.ZipInfo],
    rel: str,
    budget: int,
    out: FileAudit,
    spend: Spend,
) -> None:
    unread: list[str] = []
    for info in infos:
        if out.crc_bytes + info.file_size > budget or spend.out_of_time():
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
