"""The vectorized lane of the TensorBoard reader: the usual Event layout, many records at once.

Every scalar writer lays out a one-value Event the same way (wall time, step, one
Summary.Value of tag and simple_value or scalar tensor). :func:`layout` locates those fields
for many records with byte gathers at computed offsets, :func:`decode_each` reads them.
Records outside that layout are left to the general decoder (:mod:`trainlens.readers._tbproto`).
"""

from __future__ import annotations

import numpy as np

from trainlens.core.dataclass import dataclass
from trainlens.readers import _tfrecord as tfr
from trainlens.readers._tbproto import DT_BFLOAT16, DT_DOUBLE, DT_FLOAT, DT_HALF, DT_INT32, DT_INT64
from trainlens.readers._tbrows import Rows
from trainlens.readers._tbtags import BYTE_MASKS, MAX_FAST_TAG, Tags

_CONT = np.uint64(0x8080808080808080)
_LOW7 = np.uint64(0x7F7F7F7F7F7F7F7F)
_ONE = np.uint64(1)


def _varints(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Decode the varint starting in each little-endian 8-byte word: (value, width);
    width is 0 when the varint is longer than 8 bytes."""
    stop = ~w & _CONT
    low = stop & (~stop + _ONE)  # lowest stop bit: bit 7 of the varint's last byte
    keep = (low << _ONE) - _ONE  # every bit up to that byte (wraps to all ones at byte 8)
    v = w & keep & _LOW7
    if hasattr(np, "bitwise_count"):
        width = np.bitwise_count(keep).astype(np.int64) >> 3
    else:  # numpy < 2: low is a power of two, so its log2 is exact
        width = (np.log2(np.maximum(low, _ONE).astype(np.float64)).astype(np.int64) + 1) >> 3
    width[stop == 0] = 0
    return pack7(v, int(width.max(initial=1))), width


def pack7(v: np.ndarray, nbytes: int) -> np.ndarray:
    """The value of varints whose bytes' 7 value bits (continuation bits cleared) are in
    ``v``, little-endian, at most ``nbytes`` bytes long."""
    val = v & np.uint64(0x7F)
    for k in range(1, nbytes):
        val |= (v >> np.uint64(k)) & np.uint64(0x7F << (7 * k))
    return val.view(np.int64)


def _small_varints(buf: tfr.Buffer, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Like _varints(buf.u64[pos]), quicker when (as for lengths) most are one byte."""
    b = buf.arr[pos]
    if (b < 0x80).all():
        return b.astype(np.int64), np.ones(len(pos), dtype=np.int64)
    return _varints(buf.words(pos))


# codecs of the fast path's value
C_F32, C_F64, C_F16, C_BF16, C_I32, C_I64 = range(6)
_ITEMSIZE = np.zeros(256, dtype=np.int64)
_CODEC = np.full(256, -1, dtype=np.int64)
VALUE_SIZE = np.zeros(6, dtype=np.int64)  # bytes of a value, by codec
for _dt, _size, _codec in (
    (DT_FLOAT, 4, C_F32),
    (DT_DOUBLE, 8, C_F64),
    (DT_HALF, 2, C_F16),
    (DT_BFLOAT16, 2, C_BF16),
    (DT_INT32, 4, C_I32),
    (DT_INT64, 8, C_I64),
):
    _ITEMSIZE[_dt] = _size
    _CODEC[_dt] = _codec
    VALUE_SIZE[_codec] = _size

# SummaryMetadata of a scalar, as torch/tensorboardX (plugin name only) and TensorFlow 2
# (plus data_class = DATA_CLASS_SCALAR) write it
_SCALAR_METADATA = (
    b"\x0a\x09\x0a\x07scalars",
    b"\x0a\x09\x0a\x07scalars\x20\x01",
)


def _words_match(buf: tfr.Buffer, pos: np.ndarray, blob: bytes) -> np.ndarray:
    ok = np.ones(len(pos), dtype=bool)
    for k in range(0, len(blob), 8):
        part = blob[k : k + 8]
        want = np.uint64(int.from_bytes(part, "little"))
        ok &= (buf.words(pos + k) & BYTE_MASKS[len(part)]) == want
    return ok


@dataclass
class Layout:
    """Where the fields of each record's Event lie, for records in the fast path's layout."""

    ok: np.ndarray  # bool: one Summary.Value with a tag and a scalar, decodable here
    has_step: np.ndarray  # bool
    step: np.ndarray  # int64, 0 where the Event has no step
    step_w: np.ndarray  # int64 width of the step's varint
    tag_pos: np.ndarray
    tag_len: np.ndarray
    vpos: np.ndarray  # offset of the value's bytes
    codec: np.ndarray  # how to read them (C_*)


def layout(buf: tfr.Buffer, s: np.ndarray, length: np.ndarray) -> Layout:
    """Parse the Events at data offsets ``s`` (lengths ``length``) as far as the fast path
    needs: the wall time sits at s + 1, the rest is located here."""
    a = buf.arr
    end = s + length
    ok = (length >= 20) & (a[s] == 0x09)
    p = s + 9
    has_step = a[p] == 0x10
    step_v, step_w = _varints(buf.words(p + 1))
    ok &= ~has_step | (step_w > 0)
    step = np.where(has_step, step_v, 0)
    p = np.minimum(np.where(has_step, p + 1 + step_w, p), end)
    # Event.summary (5) and Summary.value (1) each run to the end of the record
    for key in (0x2A, 0x0A):
        ok &= a[p] == key
        n, w = _small_varints(buf, p + 1)
        p = np.minimum(p + 1 + w, end)
        ok &= (w > 0) & (p + n == end)
    # Value.tag (1)
    ok &= a[p] == 0x0A
    n, w = _small_varints(buf, p + 1)
    tag_pos = np.minimum(p + 1 + w, end)
    tag_len = n
    ok &= (w > 0) & (tag_len >= 0) & (tag_len <= MAX_FAST_TAG) & (tag_pos + tag_len < end)
    tag_len = np.clip(tag_len, 0, MAX_FAST_TAG)
    tag_end = np.minimum(tag_pos + tag_len, end)
    kind = a[tag_end]
    codec = np.full(len(s), C_F32, dtype=np.int64)
    vpos = tag_end + 1
    simple = ok & (kind == 0x15) & (tag_end + 5 == end)

    # Value.tensor (8): dtype, optional empty shape, one value, then optional metadata
    tensor = ok & (kind == 0x42)
    if tensor.any():
        tn, tw = _small_varints(buf, tag_end + 1)
        tp = np.minimum(tag_end + 1 + tw, end)
        tensor &= (tw > 0) & (tp + tn <= end) & (tn > 0) & (a[tp] == 0x08)
        t_end = np.minimum(tp + tn, end)
        dt = a[tp + 1].astype(np.intp)
        tensor &= dt < 0x80
        q = tp + 2
        q = np.where((a[q] == 0x12) & (a[q + 1] == 0), q + 2, q)
        c0, c1 = a[q], a[q + 1].astype(np.int64)
        size = _ITEMSIZE[dt]
        content = (c0 == 0x22) & (size > 0) & (c1 == size) & (q + 2 + size == t_end)
        f_packed = (c0 == 0x2A) & (c1 == 4) & (dt == DT_FLOAT) & (q + 6 == t_end)
        f_single = (c0 == 0x2D) & (dt == DT_FLOAT) & (q + 5 == t_end)
        d_packed = (c0 == 0x32) & (c1 == 8) & (dt == DT_DOUBLE) & (q + 10 == t_end)
        d_single = (c0 == 0x31) & (dt == DT_DOUBLE) & (q + 9 == t_end)
        tensor &= content | f_packed | f_single | d_packed | d_single
        meta = t_end < end
        if (tensor & meta).any():
            m_ok = (a[t_end] == 0x4A) & (a[t_end + 1] < 0x80)
            m_len = a[t_end + 1].astype(np.int64)
            m_ok &= t_end + 2 + m_len == end
            known = np.zeros(len(s), dtype=bool)
            for blob in _SCALAR_METADATA:
                known |= (m_len == len(blob)) & _words_match(buf, t_end + 2, blob)
            tensor &= ~meta | (m_ok & known)
        vpos = np.where(tensor, np.where(f_single | d_single, q + 1, q + 2), vpos)
        codec = np.where(
            tensor,
            np.where(content, _CODEC[dt], np.where(f_packed | f_single, C_F32, C_F64)),
            codec,
        )

    return Layout(simple | tensor, has_step, step, step_w, tag_pos, tag_len, vpos, codec)


AR8 = np.arange(8, dtype=np.int64)
# VARINT_KEEP[w]: the 7 value bits of each of a varint's w bytes, in an 8-byte word
VARINT_KEEP = BYTE_MASKS & _LOW7


def decode_each(
    buf: tfr.Buffer, rec: np.ndarray, s: np.ndarray, length: np.ndarray, tags: Tags
) -> tuple[Rows, np.ndarray]:
    """The fast path record by record (vectorized over records, each parsed on its own)."""
    lay = layout(buf, s, length)
    good = lay.ok
    if good.all():
        ids = tags.lookup(buf, lay.tag_pos, lay.tag_len)
        good = ids >= 0
    else:
        idx = np.flatnonzero(good)
        ids = np.full(len(s), -1, dtype=np.int64)
        ids[idx] = tags.lookup(buf, lay.tag_pos[idx], lay.tag_len[idx])
        good = ids >= 0
    if good.all():
        rec_, s_, step_, vp, cd = rec, s, lay.step, lay.vpos, lay.codec
    else:
        idx = np.flatnonzero(good)
        ids = ids[idx]
        rec_, s_, step_ = rec[idx], s[idx], lay.step[idx]
        vp, cd = lay.vpos[idx], lay.codec[idx]
    with np.errstate(invalid="ignore"):  # signalling NaNs become quiet NaNs
        value = decode_values(buf, vp, cd)
    return Rows(rec_, step_, buf.f64[s_ + 1], ids, value), good


def decode_values(buf: tfr.Buffer, vp: np.ndarray, cd: np.ndarray) -> np.ndarray:
    value = buf.f32[vp].astype(np.float64)
    if (cd != C_F32).any():
        for c, view in (
            (C_F64, buf.f64),
            (C_I32, buf.i32),
            (C_I64, buf.i64),
        ):
            m = cd == c
            if m.any():
                value[m] = view[vp[m]].astype(np.float64)
        m = cd == C_F16
        if m.any():
            value[m] = buf.u16[vp[m]].view(np.float16).astype(np.float64)
        m = cd == C_BF16
        if m.any():
            bits = buf.u16[vp[m]].astype(np.uint32) << np.uint32(16)
            value[m] = bits.view(np.float32).astype(np.float64)
    return value
