"""Cycles: the vectorized lane of the TensorBoard reader, a training loop's worth at a time.

A training loop logs the same tags in the same order, so cycle after cycle the records'
bytes are the same except for the wall time, the step, the value and the checksum. The
first cycle is parsed record by record (:func:`trainlens.readers._tbfast.layout`); every
later one is checked against it with one byte compare and read at the same offsets.
"""

from __future__ import annotations

from dataclasses import fields

import numpy as np

from trainlens.readers import _tfrecord as tfr
from trainlens.readers._tbfast import (
    AR8,
    C_F32,
    VALUE_SIZE,
    VARINT_KEEP,
    Layout,
    decode_each,
    decode_values,
    layout,
    pack7,
)
from trainlens.readers._tbrows import Rows
from trainlens.readers._tbtags import Tags
from trainlens.readers._tfrecord_format import HEADER, OVERHEAD

CHUNK_RECORDS = 1 << 15  # records decoded together (keeps their bytes in cache)


def fast_decode(
    buf: tfr.Buffer,
    rec: np.ndarray,
    s: np.ndarray,
    length: np.ndarray,
    tags: Tags,
    period: int = 0,
    tries: int = 6,
) -> tuple[Rows, np.ndarray, int]:
    """Decode the records whose Event holds exactly one Summary.Value with a tag and a
    scalar (simple_value, or a scalar tensor with an optional scalars-plugin metadata).

    ``rec`` are record indices, ``s`` the data offsets, ``length`` the data lengths;
    ``period`` the period to decode cycles with, if any (see :func:`cycles`), tried
    again after up to ``tries`` misses in a row. Returns the rows, a mask of the records
    decoded (the others go to the general decoder) and how many of them were decoded a
    cycle at a time."""
    n = len(s)
    if not period or n < 2 * period:
        rows, good = decode_each(buf, rec, s, length, tags)
        return rows, good, 0
    parts: list[Rows] = []
    goods: list[np.ndarray] = []
    i = by_cycle = misses = 0
    skip = 1  # cycles decoded one by one after a miss; doubles while misses go on
    while i < n:
        got = cycles(buf, rec[i:], s[i:], length[i:], tags, period) if misses < tries else None
        if got is not None and len(got[1]) > period:
            rows, good = got
            j = i + len(good)
            by_cycle += len(rows.record)
            # a short run is a miss all the same: tries should pay for themselves
            if len(good) >= max(4 * period, 64):
                skip, misses = 1, 0
            else:
                skip, misses = 2 * skip, misses + 1
        else:  # no cycles start here (or only this one): some one by one, then try again
            j = n if misses >= tries or n - i < (skip + 2) * period else i + skip * period
            rows, good = decode_each(buf, rec[i:j], s[i:j], length[i:j], tags)
            skip, misses = 2 * skip, misses + 1
        parts.append(rows)
        goods.append(good)
        i = j
    return Rows.concat(parts), np.concatenate(goods), by_cycle


def byte_period(
    buf: tfr.Buffer, starts: np.ndarray, lens: np.ndarray, periods: list[int]
) -> tuple[int, bool]:
    """The period (in records) to decode cycles with: the framing's period of lengths, or
    the shortest multiple of it that the bytes repeat with where the lengths' period does
    not (two tags of one length taking turns repeat their lengths every record, their
    bytes every other). Looked for in windows of the file, with a tag registry of its own
    (the read's keeps the order tags appear in). Also whether cycles were seen there; no
    period (0) when the framing found none."""
    if not periods or periods[0] > CHUNK_RECORDS // 4:
        return 0, False
    n = len(starts)
    probe = Tags(slot_bits=10)
    for where in (0.5, 0.25):
        for m in (1, 2, 3, 4, 6, 8):
            p = m * periods[0]
            if p > CHUNK_RECORDS // 4 or 8 * p > n:
                break
            lo = int((n - 8 * p) * where)
            rec = np.arange(lo, lo + 8 * p)
            got = cycles(buf, rec, starts[rec] + HEADER, lens[rec], probe, p)
            if got is not None and len(got[1]) >= 4 * p:
                return p, True
    return periods[0], False


def cycles(
    buf: tfr.Buffer,
    rec: np.ndarray,
    s: np.ndarray,
    length: np.ndarray,
    tags: Tags,
    period: int,
) -> tuple[Rows, np.ndarray] | None:
    """Decode the records at the start of ``s`` that repeat a cycle of ``period`` records:
    a training loop logs the same tags in the same order, so cycle after cycle the bytes
    are the same except for the wall time, the step, the value and the checksum.

    The first cycle is parsed record by record (:func:`layout`); every later cycle is
    compared with the one before it (so, in the end, with the first) over all its bytes,
    those four fields masked out (of the step's varint only the low 7 bits of each byte:
    its width must stay the same), and must lie where the first predicts. A cycle that
    matches has the first cycle's layout exactly, so its fields are read at the same
    offsets with no further checks. Records of the cycle that are not in the fast path's
    layout (histograms, say) are left to the general decoder.
    Returns the rows of the cycles up to the first that does not match and which of
    their records were decoded; None when the first cycle does not lend itself (nothing
    in the fast path's layout, or not contiguous)."""
    P = period
    s0, l0 = s[:P], length[:P]
    base = int(s0[0]) - HEADER  # the first record's header
    rel = s0 - base  # data offsets within the cycle
    size = l0 + OVERHEAD
    B = int(size.sum())
    K = min(len(s) // P, (len(buf.arr) - base) // B)
    if K < 2 or not np.array_equal(rel, np.cumsum(size) - size + HEADER):
        return None  # not a whole cycle, or a corrupt record in between
    lay = layout(buf, s0, l0)
    ids = np.full(P, -1, dtype=np.int64)
    ok = np.flatnonzero(lay.ok)
    ids[ok] = tags.lookup(buf, lay.tag_pos[ok], lay.tag_len[ok])
    fast = ids >= 0
    if not fast.any():
        return None
    # the bytes that may change from cycle to cycle
    mask = np.full(B, 0xFF, dtype=np.uint8)
    if not fast.all():  # any other record: its data and checksum may be anything
        o_at, o_len = rel[~fast], l0[~fast] + 4
        first = np.cumsum(o_len) - o_len
        mask[np.repeat(o_at - first, o_len) + np.arange(int(o_len.sum()))] = 0
        s0, l0, rel, ids = s0[fast], l0[fast], rel[fast], ids[fast]
        lay = Layout(*(getattr(lay, f.name)[fast] for f in fields(Layout)))
    step_w = _mask_fields(mask, rel, l0, s0, lay)
    # the records given are the ones there: each cycle's first and last where predicted
    # (the bytes between hold P records, headers included, so none is missing)
    shift = np.arange(K, dtype=np.int64) * B
    placed = (s[0 : K * P : P] - s[0] == shift) & (s[P - 1 : K * P : P] - s[P - 1] == shift)
    if not placed.all():
        K = int(np.argmin(placed))  # the first cycle is where it is: K >= 1
    K = _same_cycles(buf, base, B, K, mask)
    k = K * P
    if fast.all():
        sk, rk = s[:k], rec[:k]
    else:
        pick = np.tile(fast, K)
        sk, rk = s[:k][pick], rec[:k][pick]
    if lay.has_step.any():
        step = pack7(buf.u64[sk + 10] & np.tile(VARINT_KEEP[step_w], K), int(step_w.max()))
    else:
        step = np.zeros(len(sk), dtype=np.int64)
    vp = sk + np.tile(lay.vpos - s0, K)
    if (lay.codec == C_F32).all():
        value = buf.f32[vp].astype(np.float64)
    else:
        with np.errstate(invalid="ignore"):  # signalling NaNs become quiet NaNs
            value = decode_values(buf, vp, np.tile(lay.codec, K))
    return Rows(rk, step, buf.f64[sk + 1], np.tile(ids, K), value), np.tile(fast, K)


def _mask_fields(
    mask: np.ndarray, rel: np.ndarray, l0: np.ndarray, s0: np.ndarray, lay: Layout
) -> np.ndarray:
    """Clear in ``mask`` (one cycle's bytes) the fields that change from cycle to cycle;
    returns each record's step varint width (0: no step)."""
    mask[(rel[:, None] + 1 + AR8).ravel()] = 0  # wall time
    mask[((rel + l0)[:, None] + AR8[:4]).ravel()] = 0  # data checksum
    vrel = (lay.vpos - s0 + rel)[:, None] + AR8
    mask[vrel[VALUE_SIZE[lay.codec][:, None] > AR8]] = 0  # value
    srel = (rel + 10)[:, None] + AR8  # the step's varint follows 0x09, wall, 0x10
    step_w = np.where(lay.has_step, lay.step_w, 0)
    mask[srel[step_w[:, None] > AR8]] = 0x80  # step: the continuation bits stay
    return step_w


def _same_cycles(buf: tfr.Buffer, base: int, B: int, K: int, mask: np.ndarray) -> int:
    """How many of the ``K`` cycles of ``B`` bytes from ``base`` match the first, the
    bytes outside ``mask`` aside."""
    # each cycle's bytes against the cycle before (flat: cycles may be short rows); the
    # first few cycles alone first, so that a start that does not repeat costs little
    for upto in (min(K, 4), K):
        region = buf.arr[base : base + upto * B]
        diff = buf.scratch((upto - 1) * B)
        np.bitwise_xor(region[B:], region[:-B], out=diff)
        if B >= 1024:  # long rows: the mask broadcast over them
            rows = diff.reshape(upto - 1, B)
            rows &= mask
        else:  # short rows are slow to broadcast over: the mask repeated
            diff &= np.tile(mask, upto - 1)
        if diff.any():
            return int(np.argmax(diff != 0)) // B + 1  # the cycles before the first that differs
    return K
