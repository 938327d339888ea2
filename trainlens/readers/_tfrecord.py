"""TFRecord framing and CRC32C checks, vectorized with numpy (private to the TensorBoard reader).

The format (record layout, masked CRC-32C, constants) is in
:mod:`trainlens.readers._tfrecord_format`.

Two things make a naive reader slow: walking the records one at a time, and one CRC call per
record. Here the walk *speculates* that record lengths repeat with a period (a training loop
logs the same tags in the same order every step, so the sequence of lengths is periodic) and
checks a whole stretch of predicted records with one numpy gather; the check is exact (each
record's length field must equal the prediction and its length checksum must match), so a
wrong guess costs time, never correctness. Stretches that are not periodic, corrupt headers
and the tail of the file are walked one record at a time.

Data checksums use the linearity of CRC over GF(2). With the C CRC32C available, each
record's stored checksum is rewritten in our copy of the file so that a correct record's raw
CRC register becomes 0, and then one C call over a whole stretch of records checks all of
them (see :func:`verify_records`); only a stretch that fails is checked record by record.
Without it, numpy tables check many records at once (:mod:`trainlens.readers._tfrecord_crc`).
"""

from __future__ import annotations

import itertools
import mmap
import os
import struct

import numpy as np

from trainlens.core.dataclass import dataclass, field
from trainlens.readers import _tfrecord_crc as crc
from trainlens.readers._shrink import fill
from trainlens.readers._tfrecord_format import HEADER, OVERHEAD, masked_crc

MAX_PERIOD = 2048  # longest repeating pattern of record lengths looked for
_PAD = 64  # zero bytes after the file so fixed-width reads near the end stay in bounds


class Buffer:
    """The file's bytes with unaligned fixed-width views at every offset.

    In a copy, ``pad`` zero bytes follow the ``n`` bytes of data, so that fixed-width
    reads near the end stay in bounds; a buffer that maps the file has none. Vectorized
    decoders leave records that end past :attr:`safe_end` to the general decoder."""

    def __init__(
        self, data: np.ndarray, n: int, mapping: mmap.mmap | None = None, base: int = 0
    ) -> None:
        self.arr = data
        self.n = n
        self.pad = len(data) - n  # zero bytes after the data
        self._mapping = mapping  # the memory under ``data``, when from_file maps the file
        self._base = base  # offset of data[0] within the mapping
        self._released = 0
        self._scratch = np.empty(0, dtype=np.uint8)
        self.wanted = n  # bytes the file had from the start offset when it was opened

        def view(dt: str, size: int) -> np.ndarray:
            return np.ndarray((max(len(data) - size + 1, 0),), dtype=dt, buffer=data, strides=(1,))

        self.u16 = view("<u2", 2)
        self.u32 = view("<u4", 4)
        self.u64 = view("<u8", 8)
        self.i32 = view("<i4", 4)
        self.i64 = view("<i8", 8)
        self.f32 = view("<f4", 4)
        self.f64 = view("<f8", 8)
        self.mv = data.data  # the (padded) bytes as a memoryview
        self.raw = self.mv[:n]

    def words(self, pos: np.ndarray) -> np.ndarray:
        """The little-endian 8-byte word at each offset in ``pos``; an offset too near the
        end (a mapped file has no zero padding) reads the last whole word instead. Callers
        mask or discard the bytes past a record, so what stands there does not matter; an
        unclipped read raised IndexError on valid files (a 64+ byte tag beside short
        ones, a partly written last record)."""
        return self.u64[np.minimum(pos, len(self.u64) - 1)]

    def scratch(self, size: int) -> np.ndarray:
        """A byte array of ``size`` bytes to work in, reused between calls (its pages are
        already in memory and in cache)."""
        if len(self._scratch) < size:
            self._scratch = np.empty(max(size, 2 * len(self._scratch)), dtype=np.uint8)
        return self._scratch[:size]

    @property
    def safe_end(self) -> int:
        """Offsets up to which a vectorized decoder may read 16 bytes past a record's data
        (its checksum and beyond) and stay inside the buffer."""
        return self.n + self.pad - 16

    @classmethod
    def from_file(cls, path: str, start: int = 0, *, mapped: bool = True) -> Buffer:
        """Read ``path`` from byte ``start``; offsets in the Buffer are relative to start.

        With ``mapped`` and where the platform allows, the file is mapped read-only and
        privately: no copy is made, pages come in as they are decoded, and
        :meth:`release` drops the decoded ones from the process' memory; the caller reads
        it under the guard of :mod:`trainlens.readers._shrink` (a file cut short meanwhile
        would otherwise end the process). Else (and for an empty file) it is read into a
        zero-padded copy. Only the bytes present when the file is opened are read (a file
        still being written grows at its end; the rest is for the next read);
        :attr:`wanted` is how many there were."""
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            n = max(0, size - start)
            if n and mapped and _CAN_MAP:
                lo = start - start % mmap.ALLOCATIONGRANULARITY
                try:
                    mapping = mmap.mmap(
                        fh.fileno(),
                        size - lo,
                        flags=mmap.MAP_PRIVATE,
                        prot=mmap.PROT_READ,
                        offset=lo,
                    )
                except OSError:  # a file system that cannot map files: read a copy
                    pass
                else:
                    data = np.frombuffer(mapping, dtype=np.uint8)[start - lo :]
                    return cls(data, n, mapping, start - lo)
            data = np.zeros(n + _PAD, dtype=np.uint8)
            fh.seek(start)
            got = fill(fh, data.data[:n]) if n else 0
        buf = cls(data, got)
        buf.wanted = n
        return buf

    def release(self, upto: int) -> None:
        """Drop bytes [0, upto) from the process' memory (whole pages only), for a reader
        done with them: the peak memory of a read is then not the whole file plus
        everything decoded from it. They stay readable (the file is read again)."""
        if self._mapping is None:
            return
        end = self._base + upto
        end -= end % mmap.PAGESIZE
        if end > self._released:
            self._mapping.madvise(mmap.MADV_DONTNEED, self._released, end - self._released)
            self._released = end

    @classmethod
    def from_bytes(cls, raw: bytes) -> Buffer:
        data = np.zeros(len(raw) + _PAD, dtype=np.uint8)
        data[: len(raw)] = np.frombuffer(raw, dtype=np.uint8)
        return cls(data, len(raw))


_CAN_MAP = all(hasattr(mmap, a) for a in ("MAP_PRIVATE", "PROT_READ", "MADV_DONTNEED"))


@dataclass
class FrameProblem:
    """Something wrong with the framing: a corrupt header (resynchronised or not) or a
    truncated last record."""

    kind: str  # "corrupt-header" | "truncated"
    record: int  # 0-based number of the record where it happened
    offset: int  # byte offset (relative to the buffer start)
    skipped: int = 0  # bytes skipped to resynchronise
    resynced: bool = False
    detail: str = ""


@dataclass
class Framing:
    starts: np.ndarray  # int64 offset of each complete record's header
    lens: np.ndarray  # int64 data length of each record
    end: int  # offset up to which complete records (or skipped garbage) were consumed
    problems: list[FrameProblem] = field(default_factory=list)
    sequential: int = 0  # records found one at a time (diagnostics)
    periods: list[int] = field(default_factory=list)  # record-length periods seen, most used first


_HDR = struct.Struct("<QI")


class _Framer:
    def __init__(self, buf: Buffer, *, speculate: bool = True) -> None:
        self.buf = buf
        self.n = buf.n
        self.speculate = speculate
        self.o = 0
        self.count = 0
        self.chunks_s: list[np.ndarray] = []
        self.chunks_l: list[np.ndarray] = []
        self.seq_s: list[int] = []
        self.seq_l: list[int] = []
        self.problems: list[FrameProblem] = []
        self.sequential = 0
        self.end = 0
        self.period_use: dict[int, int] = {}  # period -> records its speculation confirmed

    # ---- one record at a time --------------------------------------------------------
    def _flush(self) -> None:
        if self.seq_s:
            self.chunks_s.append(np.array(self.seq_s, dtype=np.int64))
            self.chunks_l.append(np.array(self.seq_l, dtype=np.int64))
            self.seq_s, self.seq_l = [], []

    def step(self) -> bool:
        """Frame the record at self.o; False when the walk is over."""
        o, n = self.o, self.n
        if o + HEADER > n:
            if o < n:
                self.problems.append(
                    FrameProblem(
                        "truncated", self.count, o, detail=f"{n - o} of {HEADER} header bytes"
                    )
                )
            self.end = o
            return False
        length, lcrc = _HDR.unpack_from(self.buf.mv, o)
        if lcrc != crc.length_crc(length):
            return self._resync(o)
        if o + OVERHEAD + length > n:
            self.problems.append(
                FrameProblem(
                    "truncated",
                    self.count,
                    o,
                    detail=f"{n - o} of {OVERHEAD + length} bytes present",
                )
            )
            self.end = o
            return False
        self.seq_s.append(o)
        self.seq_l.append(length)
        self.count += 1
        self.sequential += 1
        self.o = self.end = o + OVERHEAD + length
        return True

    def _resync(self, o: int) -> bool:
        """The header at o is corrupt: find the next offset whose length checksum is right
        (and whose data checksum is right too, when that record is complete)."""
        n, arr = self.n, self.buf.arr
        lo = o + 1
        block = 1 << 16
        while lo + HEADER <= n:
            hi = min(lo + block, n - HEADER + 1)
            crcs = crc.window8_masked_crcs(arr, lo, hi)
            hits = np.flatnonzero(crcs == self.buf.u32[lo + 8 : hi + 8]) + lo
            for p in hits.tolist():
                length = int(self.buf.u64[p])
                if p + OVERHEAD + length <= n:
                    stored = int(self.buf.u32[p + HEADER + length])
                    got = masked_crc(crc.crc32c(self.buf.mv[p + HEADER : p + HEADER + length]))
                    if stored != got:
                        continue
                elif length > 1 << 31:
                    continue
                self.problems.append(
                    FrameProblem("corrupt-header", self.count, o, skipped=p - o, resynced=True)
                )
                self.o = p
                return True
            lo = hi
        self.problems.append(
            FrameProblem("corrupt-header", self.count, o, skipped=n - o, resynced=False)
        )
        self.o = self.end = n
        return False

    # ---- many records at once --------------------------------------------------------
    def _recent(self, m: int) -> np.ndarray:
        """The lengths of the last (up to) m records framed."""
        parts: list[np.ndarray] = []
        have = 0
        if self.seq_l:
            tail = self.seq_l[-m:]
            parts.append(np.asarray(tail, dtype=np.int64))
            have = len(tail)
        for chunk in reversed(self.chunks_l):
            if have >= m:
                break
            take = chunk[-(m - have) :]
            parts.append(take)
            have += len(take)
        if not parts:
            return np.empty(0, dtype=np.int64)
        return np.concatenate(parts[::-1])

    def _detect(self) -> int | None:
        """The period that explains the longest stretch of recent lengths (it must cover
        at least two full cycles); the shortest such period on ties."""
        a = self._recent(2 * MAX_PERIOD)
        if len(a) < 4:
            return None
        cands = np.flatnonzero(a[-2::-1] == a[-1])[:256] + 1
        best, best_run = None, 0
        for p in cands.tolist():
            if 2 * p > len(a):
                break
            bad = np.flatnonzero(a[p:] != a[:-p])
            run = len(a) - p - (int(bad[-1]) + 1 if len(bad) else 0)
            if run >= p and run > best_run:
                best, best_run = p, run
        return best

    def _speculate(self, plan: _Plan, phase: int, count: int) -> int:
        """Check the next ``count`` records predicted by ``plan`` from ``phase``; returns
        how many were confirmed (their length fields and length checksums all match)."""
        lens = plan.lens[phase : phase + count]
        pos = plan.offsets[phase : phase + count] + (self.o - int(plan.offsets[phase]))
        if int(pos[-1]) + OVERHEAD + int(lens[-1]) > self.n:
            lim = int(np.searchsorted(pos + OVERHEAD + lens, self.n, side="right"))
            if lim == 0:
                return 0
            pos, lens = pos[:lim], lens[:lim]
        good = self.buf.u64[pos] == lens.view(np.uint64)
        good &= self.buf.u32[pos + 8] == plan.crcs[phase : phase + len(pos)]
        k = len(pos) if bool(good.all()) else int(np.argmin(good))
        if k == 0:
            return 0
        self._flush()
        self.chunks_s.append(pos[:k])
        self.chunks_l.append(lens[:k])
        self.count += k
        self.period_use[plan.period] = self.period_use.get(plan.period, 0) + k
        self.o = self.end = int(pos[k - 1]) + OVERHEAD + int(lens[k - 1])
        return k

    def run(self) -> Framing:
        plan: _Plan | None = None
        phase = count = since_detect = misses = partials = 0
        backoff = patience = 8
        while True:
            if self.speculate and plan is not None and self.o + HEADER <= self.n:
                if _HDR.unpack_from(self.buf.mv, self.o)[0] == int(plan.lens[phase]):
                    k = self._speculate(plan, phase, count)
                    if k:
                        phase = (phase + k) % plan.period
                        misses = 0
                        if k == count:
                            count = min(count * 2, plan.max_count)
                            continue
                        count = plan.start_count
                        partials += 1
                        if partials >= patience:
                            # the pattern keeps breaking: look for a longer one that
                            # includes the breaks (e.g. an eval every N steps)
                            partials = 0
                            better = self._detect()
                            if better is not None and better != plan.period:
                                plan = _Plan(self._recent(better).tolist())
                                phase, count, patience = 0, plan.start_count, 8
                            else:
                                patience = min(2 * patience, 1 << 12)
                        continue
                misses += 1
                if misses > 2 * plan.period + 16:
                    plan, misses, since_detect = None, 0, 0
            elif self.speculate and plan is None and since_detect >= backoff:
                since_detect = 0
                period = self._detect()
                if period is not None:
                    plan = _Plan(self._recent(period).tolist())
                    phase, count, misses, partials, backoff = 0, plan.start_count, 0, 0, 8
                    patience = 8
                    continue
                backoff = min(backoff * 2, 4096)
            if not self.step():
                break
            since_detect += 1
        self._flush()
        if self.chunks_s:
            starts = np.concatenate(self.chunks_s)
            lens = np.concatenate(self.chunks_l)
        else:
            starts = np.empty(0, dtype=np.int64)
            lens = np.empty(0, dtype=np.int64)
        periods = sorted(self.period_use, key=lambda p: -self.period_use[p])
        return Framing(starts, lens, self.end, self.problems, self.sequential, periods)


class _Plan:
    """A repeating pattern of record lengths, unrolled so that any phase and any count up
    to max_count is a slice."""

    MAX_RECORDS = 1 << 15

    def __init__(self, cycle: list[int]) -> None:
        self.period = p = len(cycle)
        self.start_count = max(p, 1024 // p * p)
        self.max_count = max(p, self.MAX_RECORDS // p * p)
        reps = self.max_count // p + 2
        c = np.asarray(cycle, dtype=np.int64)
        self.lens = np.tile(c, reps)
        size = self.lens + OVERHEAD
        self.offsets = np.cumsum(size) - size
        crcs = np.array([crc.length_crc(int(x)) for x in cycle], dtype=np.uint32)
        self.crcs = np.tile(crcs, reps)


def frame_records(buf: Buffer, *, speculate: bool = True) -> Framing:
    """Find every complete record in ``buf``: header offsets, data lengths, problems."""
    return _Framer(buf, speculate=speculate).run()


def verify_records(buf: Buffer, starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """True for each record whose data checksum matches.

    With the C CRC available this costs one vectorized rewrite per record and one CRC call
    per contiguous stretch of records, on a copy of the records' bytes (the buffer itself
    is left alone): each record's stored checksum is replaced by
    ``unmask(stored) ^ crc32c(zeros(L)) ^ raw(header + zeros(L))``; by the linearity of
    CRC over GF(2) the raw CRC register (initial value 0, no final xor) of
    ``header + data + replaced checksum`` is then 0 exactly when the data matches its
    checksum, and the raw register of a stretch of such records is 0 when all of them do.
    A stretch that is not 0 is checked record by record. Without the C CRC, the data
    checksums are computed with numpy tables (:func:`data_crcs`).
    """
    n = len(starts)
    if n == 0:
        return np.empty(0, dtype=bool)
    ends = starts + OVERHEAD + lens
    fast = crc.fast_crc32c
    if fast is None:
        data = starts + HEADER
        return crc.mask_array(crc.data_crcs(buf.arr, data, lens)) == buf.u32[data + lens]
    lo_b, hi_b = int(starts[0]), int(ends[-1])
    copy = buf.scratch(hi_b - lo_b)
    copy[:] = buf.arr[lo_b:hi_b]
    u32 = np.ndarray((len(copy) - 3,), dtype="<u4", buffer=copy, strides=(1,))
    at = starts + (HEADER - lo_b) + lens
    u32[at] = crc.unmask_array(u32[at]) ^ crc.RESIDUES.lookup(lens)
    s_rel, e_rel = starts - lo_b, ends - lo_b
    ok = np.ones(n, dtype=bool)
    gaps = np.flatnonzero(starts[1:] != ends[:-1]) + 1
    bounds = [0, *gaps.tolist(), n]
    mv = copy.data
    for lo, hi in itertools.pairwise(bounds):
        if fast(mv[int(s_rel[lo]) : int(e_rel[hi - 1])], 0xFFFFFFFF) == 0xFFFFFFFF:
            continue
        for i in range(lo, hi):
            ok[i] = fast(mv[int(s_rel[i]) : int(e_rel[i])], 0xFFFFFFFF) == 0xFFFFFFFF
    return ok


def verify_records_slow(buf: Buffer, starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Reference check, one CRC call per record on the untouched buffer (the general path)."""
    out = np.empty(len(starts), dtype=bool)
    u32 = buf.u32
    for i, (s, n) in enumerate(zip(starts.tolist(), lens.tolist(), strict=True)):
        data = buf.mv[s + HEADER : s + HEADER + n]
        out[i] = masked_crc(crc.crc32c(data)) == int(u32[s + HEADER + n])
    return out
