"""The numpy reader of TensorBoard event files: every record shape, every fault.

The record stream is framed and checksummed with numpy (``_tfrecord``), and the
Event → Summary → Value layout that every scalar writer produces is decoded for many records
at once with byte gathers at computed offsets; records that do not fit that layout go
through a small general protobuf decoder. Both paths produce the same values (a test checks
this value for value). Corrupt, truncated and unknown records are skipped and reported with
their record number and byte offset.

:mod:`trainlens.readers.tensorboard` (the reader) tries its compiled lane first and comes
here for the files that lane leaves (see its docstring) and for directories of several
event files.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from trainlens.core.errors import UnreadableInputError
from trainlens.core.run import DataIssue
from trainlens.readers import _tfrecord as tfr
from trainlens.readers._wide import enum_runs
from trainlens.readers.tensorboard import FileInfo

if TYPE_CHECKING:
    from trainlens.readers.tensorboard import _RunParts

CHUNK_RECORDS = 1 << 15  # records decoded together (keeps their bytes in cache)
MAX_LISTED_ISSUES = 20  # corrupt records reported one by one before being pooled
MAX_FAST_TAG = 128  # longer tags go through the general decoder

# plugins whose summaries are never scalars, even when a tensor happens to hold one number
NON_SCALAR_PLUGINS = frozenset(
    {
        "histograms",
        "distributions",
        "images",
        "audio",
        "text",
        "pr_curves",
        "mesh",
        "hparams",
        "custom_scalars",
        "graphs",
        "projector",
        "embedding",
    }
)

# TensorProto dtypes (tensorflow/core/framework/types.proto)
DT_FLOAT, DT_DOUBLE, DT_INT32, DT_UINT8, DT_INT16, DT_INT8 = 1, 2, 3, 4, 5, 6
DT_STRING, DT_INT64, DT_BOOL, DT_BFLOAT16, DT_UINT16, DT_HALF = 7, 9, 10, 14, 17, 19
DT_UINT32, DT_UINT64 = 22, 23
_CONTENT_DTYPES: dict[int, str] = {
    DT_FLOAT: "<f4",
    DT_DOUBLE: "<f8",
    DT_INT32: "<i4",
    DT_UINT8: "u1",
    DT_INT16: "<i2",
    DT_INT8: "i1",
    DT_INT64: "<i8",
    DT_BOOL: "u1",
    DT_BFLOAT16: "bf16",
    DT_UINT16: "<u2",
    DT_HALF: "<f2",
    DT_UINT32: "<u4",
    DT_UINT64: "<u8",
}

# ---- general decoder: protobuf wire format ---------------------------------------------

_F32 = struct.Struct("<f")
_F64 = struct.Struct("<d")


class _Malformed(Exception):
    """The bytes are not the protobuf message they should be."""


def _varint(b: bytes, i: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if i >= len(b) or shift > 63:
            raise _Malformed("varint runs past the end")
        c = b[i]
        i += 1
        result |= (c & 0x7F) << shift
        if c < 0x80:
            # a 10-byte varint carries bits past 64: protobuf (and the compiled lane) drop
            # them, so a step written as -1 reads as -1 (not an OverflowError later)
            return result & 0xFFFF_FFFF_FFFF_FFFF, i
        shift += 7


def _fields(b: bytes, i: int, end: int) -> Iterator[tuple[int, int, int, int]]:
    """(field number, wire type, value or start, end) for each field in b[i:end].

    For varints the value is in the third slot; for fixed64/fixed32/length-delimited fields
    the third and fourth slots delimit the payload."""
    while i < end:
        key, i = _varint(b, i)
        num, wt = key >> 3, key & 7
        if num == 0:  # protobuf refuses it: the bytes are not a message
            raise _Malformed("field number 0")
        if wt == 0:
            v, i = _varint(b, i)
            yield num, wt, v, i
        elif wt == 1:
            if i + 8 > end:
                raise _Malformed("fixed64 runs past the end")
            yield num, wt, i, i + 8
            i += 8
        elif wt == 2:
            n, i = _varint(b, i)
            if i + n > end:
                raise _Malformed("length-delimited field runs past the end")
            yield num, wt, i, i + n
            i += n
        elif wt == 5:
            if i + 4 > end:
                raise _Malformed("fixed32 runs past the end")
            yield num, wt, i, i + 4
            i += 4
        else:
            raise _Malformed(f"unsupported wire type {wt}")
    if i != end:
        raise _Malformed("message runs past its end")


def _signed64(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def _signed32(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >= 1 << 31 else v


def _packed_varints(b: bytes, s: int, e: int) -> list[int]:
    out = []
    while s < e:
        v, s = _varint(b, s)
        out.append(v)
    return out


def _half_bits(bits: int, dtype: int) -> float:
    bits &= 0xFFFF
    if dtype == DT_BFLOAT16:
        return float(np.array([bits << 16], dtype=np.uint32).view(np.float32)[0])
    return float(np.array([bits], dtype=np.uint16).view(np.float16)[0])


@dataclass
class _Tensor:
    value: float | None
    reason: str  # why value is None: "non-scalar", "string", "empty", ...


def _decode_tensor(b: bytes, s: int, e: int) -> _Tensor:
    dtype = 0
    dims: list[int] | None = None
    content: bytes | None = None
    vals: dict[int, list[Any]] = {}
    for num, wt, x, y in _fields(b, s, e):
        if num == 1 and wt == 0:
            dtype = x
        elif num == 2 and wt == 2:
            dims = []
            for dnum, dwt, ds, de in _fields(b, x, y):
                if dnum == 2 and dwt == 2:
                    size = 0
                    for snum, swt, sv, _ in _fields(b, ds, de):
                        if snum == 1 and swt == 0:
                            size = _signed64(sv)
                    dims.append(size)
        elif num == 4 and wt == 2:
            content = b[x:y]
        elif num == 8:
            vals.setdefault(8, []).append(b"")
        elif num in (5, 6):
            size = 4 if num == 5 else 8
            unpack = _F32 if num == 5 else _F64
            lst = vals.setdefault(num, [])
            if wt == 2:
                if (y - x) % size:
                    raise _Malformed("packed floats of a partial length")
                lst.extend(v[0] for v in unpack.iter_unpack(b[x:y]))
            elif wt in (5, 1) and y - x == size:
                lst.append(unpack.unpack_from(b, x)[0])
        elif num in (7, 10, 11, 13, 16, 17):
            lst = vals.setdefault(num, [])
            if wt == 2:
                lst.extend(_packed_varints(b, x, y))
            elif wt == 0:
                lst.append(x)
    if dtype == DT_STRING or 8 in vals:
        return _Tensor(None, "string")
    n_elements = math.prod(dims) if dims is not None else None
    if n_elements is not None and n_elements != 1:
        return _Tensor(None, "non-scalar")
    values: list[float]
    if content:
        code = _CONTENT_DTYPES.get(dtype)
        if code is None:
            return _Tensor(None, f"dtype {dtype}")
        if code == "bf16":
            u16 = np.frombuffer(content, dtype="<u2").astype(np.uint32) << np.uint32(16)
            arr = u16.view(np.float32)
        else:
            itemsize = np.dtype(code).itemsize
            if len(content) % itemsize:
                return _Tensor(None, "malformed")
            arr = np.frombuffer(content, dtype=code)
        values = [float(v) for v in arr.tolist()]
    elif dtype in (DT_HALF, DT_BFLOAT16):
        values = [_half_bits(v, dtype) for v in vals.get(13, [])]
    elif dtype == DT_FLOAT or (dtype == 0 and 5 in vals):
        values = [float(v) for v in vals.get(5, [])]
    elif dtype == DT_DOUBLE or (dtype == 0 and 6 in vals):
        values = [float(v) for v in vals.get(6, [])]
    elif dtype in (DT_INT32, DT_INT16, DT_INT8, DT_UINT8, DT_UINT16):
        values = [float(_signed32(v)) for v in vals.get(7, [])]
    elif dtype == DT_INT64:
        values = [float(_signed64(v)) for v in vals.get(10, [])]
    elif dtype == DT_BOOL:
        values = [float(bool(v)) for v in vals.get(11, [])]
    elif dtype == DT_UINT32:
        values = [float(v & 0xFFFFFFFF) for v in vals.get(16, [])]
    elif dtype == DT_UINT64:
        values = [float(v) for v in vals.get(17, [])]
    else:
        return _Tensor(None, f"dtype {dtype}")
    if len(values) == 1:
        return _Tensor(values[0], "")
    if not values and n_elements == 1:
        return _Tensor(0.0, "")  # TensorFlow reads a scalar with no values as zero
    return _Tensor(None, "non-scalar" if values else "empty")


def _plugin_name(b: bytes, s: int, e: int) -> str | None:
    for num, wt, x, y in _fields(b, s, e):
        if num == 1 and wt == 2:
            for pnum, pwt, ps, pe in _fields(b, x, y):
                if pnum == 1 and pwt == 2:
                    return b[ps:pe].decode("utf-8", "replace")
    return None


@dataclass
class _Value:
    tag: bytes
    value: float | None
    plugin: str | None
    skip: str  # what kind of summary was skipped when value is None


def _decode_value(b: bytes, s: int, e: int) -> _Value:
    tag = b""
    value: float | None = None
    plugin: str | None = None
    skip = "empty"
    for num, wt, x, y in _fields(b, s, e):
        if num == 1 and wt == 2:
            tag = b[x:y]
        # simple_value, the histograms, image, audio and tensor are one protobuf oneof:
        # the last one in the bytes is the value (a histogram after a simple_value is a
        # histogram, as protobuf reads it)
        elif num == 2 and wt == 5:
            value = _F32.unpack_from(b, x)[0]
            skip = ""
        elif num in (3, 5) and wt == 2:
            value, skip = None, "histograms"
        elif num == 4 and wt == 2:
            value, skip = None, "images"
        elif num == 6 and wt == 2:
            value, skip = None, "audio"
        elif num == 8 and wt == 2:
            t = _decode_tensor(b, x, y)
            value, skip = t.value, ("" if t.value is not None else f"tensor ({t.reason})")
        elif num == 9 and wt == 2:
            plugin = _plugin_name(b, x, y)
    if value is not None and plugin in NON_SCALAR_PLUGINS:
        value, skip = None, plugin or skip
    elif value is None and plugin:
        skip = plugin
    return _Value(tag, value, plugin, skip)


@dataclass
class _Event:
    wall_time: float
    step: int
    values: list[_Value]
    file_version: str | None = None


def decode_event(b: bytes) -> _Event:
    """Decode one Event message (the general path)."""
    wall = math.nan
    step = 0
    values: list[_Value] = []
    version: str | None = None
    for num, wt, x, y in _fields(b, 0, len(b)):
        if num == 1 and wt == 1:
            wall = _F64.unpack_from(b, x)[0]
        elif num == 2 and wt == 0:
            step = _signed64(x)
        elif num == 3 and wt == 2:
            version = b[x:y].decode("utf-8", "replace")
        elif num == 5 and wt == 2:
            for snum, swt, vs, ve in _fields(b, x, y):
                if snum == 1 and swt == 2:
                    values.append(_decode_value(b, vs, ve))
    return _Event(wall, step, values, version)


# ---- fast path: the fixed layout of one-scalar events, many records at once ---------------

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
    return _pack7(v, int(width.max(initial=1))), width


def _pack7(v: np.ndarray, nbytes: int) -> np.ndarray:
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
_C_F32, _C_F64, _C_F16, _C_BF16, _C_I32, _C_I64 = range(6)
_ITEMSIZE = np.zeros(256, dtype=np.int64)
_CODEC = np.full(256, -1, dtype=np.int64)
_VALUE_SIZE = np.zeros(6, dtype=np.int64)  # bytes of a value, by codec
for _dt, _size, _codec in (
    (DT_FLOAT, 4, _C_F32),
    (DT_DOUBLE, 8, _C_F64),
    (DT_HALF, 2, _C_F16),
    (DT_BFLOAT16, 2, _C_BF16),
    (DT_INT32, 4, _C_I32),
    (DT_INT64, 8, _C_I64),
):
    _ITEMSIZE[_dt] = _size
    _CODEC[_dt] = _codec
    _VALUE_SIZE[_codec] = _size

# SummaryMetadata of a scalar, as torch/tensorboardX (plugin name only) and TensorFlow 2
# (plus data_class = DATA_CLASS_SCALAR) write it
_SCALAR_METADATA = (
    b"\x0a\x09\x0a\x07scalars",
    b"\x0a\x09\x0a\x07scalars\x20\x01",
)
_BYTE_MASKS = np.array([(1 << (8 * k)) - 1 for k in range(8)] + [2**64 - 1], dtype=np.uint64)
# _WORD_MASKS[k][n]: which bytes of the k-th 8-byte word of an n-byte tag belong to the tag
_WORD_MASKS = _BYTE_MASKS[
    np.clip(np.arange(MAX_FAST_TAG + 1)[None, :] - 8 * np.arange(MAX_FAST_TAG // 8)[:, None], 0, 8)
]


def _words_match(buf: tfr.Buffer, pos: np.ndarray, blob: bytes) -> np.ndarray:
    ok = np.ones(len(pos), dtype=bool)
    for k in range(0, len(blob), 8):
        part = blob[k : k + 8]
        want = np.uint64(int.from_bytes(part, "little"))
        ok &= (buf.words(pos + k) & _BYTE_MASKS[len(part)]) == want
    return ok


class _Tags:
    """Tag registry shared by every file of a read: bytes -> id, plus a hashed slot table
    that maps a record's tag bytes to its id without a Python call per record."""

    MAX_WORDS = MAX_FAST_TAG // 8

    def __init__(self, slot_bits: int = 20) -> None:  # fewer bits: a look at a few tags
        self.names: list[bytes] = []
        self.ids: dict[bytes, int] = {}
        self.slot_bits = slot_bits
        self.slot = np.full(1 << slot_bits, -1, dtype=np.int32)
        self.rep_words = np.zeros((self.MAX_WORDS, 0), dtype=np.uint64)
        self.rep_len = np.zeros(0, dtype=np.int64)

    def id_for(self, tag: bytes) -> int:
        i = self.ids.get(tag)
        if i is None:
            i = self.ids[tag] = len(self.names)
            self.names.append(tag)
            if i >= self.rep_len.shape[0]:
                grow = max(64, 2 * i)
                self.rep_words = np.concatenate(
                    [self.rep_words, np.zeros((self.MAX_WORDS, grow), dtype=np.uint64)], axis=1
                )
                self.rep_len = np.concatenate([self.rep_len, np.full(grow, -1, dtype=np.int64)])
            padded = tag + bytes(-len(tag) % 8)
            for k in range(min(len(padded) // 8, self.MAX_WORDS)):
                self.rep_words[k, i] = int.from_bytes(padded[8 * k : 8 * k + 8], "little")
            self.rep_len[i] = len(tag)
        return i

    def lookup(self, buf: tfr.Buffer, pos: np.ndarray, tlen: np.ndarray) -> np.ndarray:
        """Tag id of each record's tag bytes buf[pos:pos+tlen]; -1 where unresolved."""
        n = len(pos)
        if n == 0:
            return np.empty(0, dtype=np.int64)
        nwords = (int(tlen.max()) + 7) // 8
        whole = int(tlen.min()) // 8  # words that lie inside every tag need no mask
        words = np.empty((nwords, n), dtype=np.uint64)
        h = tlen.astype(np.uint64)
        for k in range(nwords):
            w = buf.words(pos + 8 * k)
            if k >= whole:
                w &= _WORD_MASKS[k][tlen]
            words[k] = w
            h *= np.uint64(0x9E3779B97F4A7C15)
            h += w
        h ^= h >> np.uint64(29)
        h *= np.uint64(0xBF58476D1CE4E5B9)
        h ^= h >> np.uint64(32)
        slot = (h >> np.uint64(64 - self.slot_bits)).astype(np.intp)
        ids = self.slot[slot].astype(np.int64)
        new = np.flatnonzero(ids < 0)
        if len(new):
            _, first = np.unique(slot[new], return_index=True)
            arr = buf.arr
            for i in np.sort(new[first]).tolist():  # ids in order of first appearance
                p, ln = int(pos[i]), int(tlen[i])
                self.slot[slot[i]] = self.id_for(arr[p : p + ln].tobytes())
            ids = self.slot[slot].astype(np.int64)
        ok = self.rep_len[ids] == tlen
        for k in range(nwords):
            ok &= self.rep_words[k][ids] == words[k]
        ids[~ok] = -1
        return ids


@dataclass
class _Rows:
    """Decoded values of some records: one row per value, in record order."""

    record: np.ndarray  # int64 record index within the file
    step: np.ndarray
    wall: np.ndarray
    tag: np.ndarray  # tag id
    value: np.ndarray

    @classmethod
    def empty(cls) -> _Rows:
        e_i, e_f = np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64)
        return cls(e_i, e_i, e_f, e_i, e_f)

    @classmethod
    def concat(cls, parts: list[_Rows]) -> _Rows:
        parts = [p for p in parts if len(p.record)]
        if not parts:
            return cls.empty()
        if len(parts) == 1:
            return parts[0]
        return cls(
            *(
                np.concatenate([getattr(p, f) for p in parts])
                for f in ("record", "step", "wall", "tag", "value")
            )
        )

    def take(self, idx: np.ndarray) -> _Rows:
        return _Rows(
            self.record[idx], self.step[idx], self.wall[idx], self.tag[idx], self.value[idx]
        )


class _RowBuffer:
    """Rows appended chunk by chunk into arrays allocated once (one value per record is
    the usual case; several values per event make it grow)."""

    FIELDS = ("record", "step", "wall", "tag", "value")

    def __init__(self, capacity: int) -> None:
        self.n = 0
        cap = max(capacity, 16)
        self.cols = {
            f: np.empty(cap, dtype=np.float64 if f in ("wall", "value") else np.int64)
            for f in self.FIELDS
        }

    def append(self, rows: _Rows) -> None:
        k = len(rows.record)
        if not k:
            return
        cap = len(self.cols["record"])
        if self.n + k > cap:
            new = max(2 * cap, self.n + k)
            for f, col in self.cols.items():
                grown = np.empty(new, dtype=col.dtype)
                grown[: self.n] = col[: self.n]
                self.cols[f] = grown
        for f, col in self.cols.items():
            col[self.n : self.n + k] = getattr(rows, f)
        self.n += k

    def rows(self) -> _Rows:
        return _Rows(*(self.cols[f][: self.n] for f in self.FIELDS))


@dataclass
class _Layout:
    """Where the fields of each record's Event lie, for records in the fast path's layout."""

    ok: np.ndarray  # bool: one Summary.Value with a tag and a scalar, decodable here
    has_step: np.ndarray  # bool
    step: np.ndarray  # int64, 0 where the Event has no step
    step_w: np.ndarray  # int64 width of the step's varint
    tag_pos: np.ndarray
    tag_len: np.ndarray
    vpos: np.ndarray  # offset of the value's bytes
    codec: np.ndarray  # how to read them (_C_*)


def _layout(buf: tfr.Buffer, s: np.ndarray, length: np.ndarray) -> _Layout:
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
    codec = np.full(len(s), _C_F32, dtype=np.int64)
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
            np.where(content, _CODEC[dt], np.where(f_packed | f_single, _C_F32, _C_F64)),
            codec,
        )

    return _Layout(simple | tensor, has_step, step, step_w, tag_pos, tag_len, vpos, codec)


_AR8 = np.arange(8, dtype=np.int64)
# _VARINT_KEEP[w]: the 7 value bits of each of a varint's w bytes, in an 8-byte word
_VARINT_KEEP = _BYTE_MASKS & _LOW7


def _fast_decode(
    buf: tfr.Buffer,
    rec: np.ndarray,
    s: np.ndarray,
    length: np.ndarray,
    tags: _Tags,
    period: int = 0,
    tries: int = 6,
) -> tuple[_Rows, np.ndarray, int]:
    """Decode the records whose Event holds exactly one Summary.Value with a tag and a
    scalar (simple_value, or a scalar tensor with an optional scalars-plugin metadata).

    ``rec`` are record indices, ``s`` the data offsets, ``length`` the data lengths;
    ``period`` the period to decode cycles with, if any (see :func:`_cycles`), tried
    again after up to ``tries`` misses in a row. Returns the rows, a mask of the records
    decoded (the others go to the general decoder) and how many of them were decoded a
    cycle at a time."""
    n = len(s)
    if not period or n < 2 * period:
        rows, good = _decode_each(buf, rec, s, length, tags)
        return rows, good, 0
    parts: list[_Rows] = []
    goods: list[np.ndarray] = []
    i = by_cycle = misses = 0
    skip = 1  # cycles decoded one by one after a miss; doubles while misses go on
    while i < n:
        got = _cycles(buf, rec[i:], s[i:], length[i:], tags, period) if misses < tries else None
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
            rows, good = _decode_each(buf, rec[i:j], s[i:j], length[i:j], tags)
            skip, misses = 2 * skip, misses + 1
        parts.append(rows)
        goods.append(good)
        i = j
    return _Rows.concat(parts), np.concatenate(goods), by_cycle


def _byte_period(
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
    probe = _Tags(slot_bits=10)
    for where in (0.5, 0.25):
        for m in (1, 2, 3, 4, 6, 8):
            p = m * periods[0]
            if p > CHUNK_RECORDS // 4 or 8 * p > n:
                break
            lo = int((n - 8 * p) * where)
            rec = np.arange(lo, lo + 8 * p)
            got = _cycles(buf, rec, starts[rec] + tfr.HEADER, lens[rec], probe, p)
            if got is not None and len(got[1]) >= 4 * p:
                return p, True
    return periods[0], False


def _decode_each(
    buf: tfr.Buffer, rec: np.ndarray, s: np.ndarray, length: np.ndarray, tags: _Tags
) -> tuple[_Rows, np.ndarray]:
    """The fast path record by record (vectorized over records, each parsed on its own)."""
    lay = _layout(buf, s, length)
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
        value = _decode_values(buf, vp, cd)
    return _Rows(rec_, step_, buf.f64[s_ + 1], ids, value), good


def _cycles(
    buf: tfr.Buffer,
    rec: np.ndarray,
    s: np.ndarray,
    length: np.ndarray,
    tags: _Tags,
    period: int,
) -> tuple[_Rows, np.ndarray] | None:
    """Decode the records at the start of ``s`` that repeat a cycle of ``period`` records:
    a training loop logs the same tags in the same order, so cycle after cycle the bytes
    are the same except for the wall time, the step, the value and the checksum.

    The first cycle is parsed record by record (:func:`_layout`); every later cycle is
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
    base = int(s0[0]) - tfr.HEADER  # the first record's header
    rel = s0 - base  # data offsets within the cycle
    size = l0 + tfr.OVERHEAD
    B = int(size.sum())
    K = min(len(s) // P, (len(buf.arr) - base) // B)
    if K < 2 or not np.array_equal(rel, np.cumsum(size) - size + tfr.HEADER):
        return None  # not a whole cycle, or a corrupt record in between
    lay = _layout(buf, s0, l0)
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
        lay = _Layout(*(getattr(lay, f.name)[fast] for f in fields(_Layout)))
    mask[(rel[:, None] + 1 + _AR8).ravel()] = 0  # wall time
    mask[((rel + l0)[:, None] + _AR8[:4]).ravel()] = 0  # data checksum
    vrel = (lay.vpos - s0 + rel)[:, None] + _AR8
    mask[vrel[_VALUE_SIZE[lay.codec][:, None] > _AR8]] = 0  # value
    srel = (rel + 10)[:, None] + _AR8  # the step's varint follows 0x09, wall, 0x10
    step_w = np.where(lay.has_step, lay.step_w, 0)
    mask[srel[step_w[:, None] > _AR8]] = 0x80  # step: the continuation bits stay
    # the records given are the ones there: each cycle's first and last where predicted
    # (the bytes between hold P records, headers included, so none is missing)
    shift = np.arange(K, dtype=np.int64) * B
    placed = (s[0 : K * P : P] - s[0] == shift) & (s[P - 1 : K * P : P] - s[P - 1] == shift)
    if not placed.all():
        K = int(np.argmin(placed))  # the first cycle is where it is: K >= 1
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
            K = int(np.argmax(diff != 0)) // B + 1  # the cycles before the first that differs
            break
    k = K * P
    if fast.all():
        sk, rk = s[:k], rec[:k]
    else:
        pick = np.tile(fast, K)
        sk, rk = s[:k][pick], rec[:k][pick]
    if lay.has_step.any():
        step = _pack7(buf.u64[sk + 10] & np.tile(_VARINT_KEEP[step_w], K), int(step_w.max()))
    else:
        step = np.zeros(len(sk), dtype=np.int64)
    vp = sk + np.tile(lay.vpos - s0, K)
    if (lay.codec == _C_F32).all():
        value = buf.f32[vp].astype(np.float64)
    else:
        with np.errstate(invalid="ignore"):  # signalling NaNs become quiet NaNs
            value = _decode_values(buf, vp, np.tile(lay.codec, K))
    return _Rows(rk, step, buf.f64[sk + 1], np.tile(ids, K), value), np.tile(fast, K)


def _decode_values(buf: tfr.Buffer, vp: np.ndarray, cd: np.ndarray) -> np.ndarray:
    value = buf.f32[vp].astype(np.float64)
    if (cd != _C_F32).any():
        for c, view in (
            (_C_F64, buf.f64),
            (_C_I32, buf.i32),
            (_C_I64, buf.i64),
        ):
            m = cd == c
            if m.any():
                value[m] = view[vp[m]].astype(np.float64)
        m = cd == _C_F16
        if m.any():
            value[m] = buf.u16[vp[m]].view(np.float16).astype(np.float64)
        m = cd == _C_BF16
        if m.any():
            bits = buf.u16[vp[m]].astype(np.uint32) << np.uint32(16)
            value[m] = bits.view(np.float32).astype(np.float64)
    return value


# ---- one file ----------------------------------------------------------------------------


@dataclass
class FileData(FileInfo):
    """What one events file yielded, its values included."""

    rows: _Rows = field(default_factory=_Rows.empty)
    tag_plugins: dict[int, str] = field(default_factory=dict)
    fast_records: int = 0
    cycle_records: int = 0  # of those, decoded a cycle at a time


def _where(record: int, offset: int) -> str:
    return f"record {record + 1} (byte offset {offset})"


def _framing_issues(fr: tfr.Framing, source: str, start: int) -> list[DataIssue]:
    out: list[DataIssue] = []
    for pr in fr.problems:
        at = start + pr.offset
        if pr.kind == "truncated":
            out.append(
                DataIssue(
                    kind="truncated-record",
                    source=source,
                    location=_where(pr.record, at),
                    message=(
                        f"the last record is incomplete ({pr.detail}); the file may still be "
                        f"being written — the {pr.record} complete records before it were read"
                    ),
                    details={"offset": at, "records_before": pr.record},
                )
            )
        else:
            message = (
                "record header is corrupt (length checksum mismatch); skipped "
                f"{pr.skipped} bytes to the next valid record at byte offset "
                f"{at + pr.skipped}"
                if pr.resynced
                else "record header is corrupt (length checksum mismatch) and no valid "
                f"record follows; the last {pr.skipped} bytes were skipped"
            )
            out.append(
                DataIssue(
                    kind="corrupt-record",
                    source=source,
                    location=_where(pr.record, at),
                    message=message,
                    details={"offset": at, "skipped_bytes": pr.skipped},
                )
            )
    return out


def _record_issues(
    kind: str, what: str, records: list[int], offsets: list[int], source: str
) -> list[DataIssue]:
    out = [
        DataIssue(kind=kind, source=source, location=_where(r, o), message=what)
        for r, o in zip(records[:MAX_LISTED_ISSUES], offsets[:MAX_LISTED_ISSUES], strict=True)
    ]
    rest = len(records) - MAX_LISTED_ISSUES
    if rest > 0:
        out.append(
            DataIssue(
                kind=kind,
                source=source,
                location=f"records {records[MAX_LISTED_ISSUES] + 1}..{records[-1] + 1}",
                message=f"{rest} more records: {what}",
                count=rest,
            )
        )
    return out


def read_events_file(
    path: Path, tags: _Tags, *, start_offset: int = 0, fast: bool = True
) -> FileData:
    """Read one events file from ``start_offset``. ``fast=False`` walks, checks and decodes
    one record at a time (the reference the fast path is tested against)."""
    source = str(path)
    size = path.stat().st_size
    if start_offset > size:
        raise UnreadableInputError(
            f"{path}: start offset {start_offset} is past the end of the file ({size} bytes)"
        )
    buf = tfr.Buffer.from_file(source, start_offset)
    fr = tfr.frame_records(buf, speculate=fast)
    data = FileData(path, start_offset, start_offset + fr.end, size, len(fr.starts))
    data.issues.extend(_framing_issues(fr, source, start_offset))
    starts, lens = fr.starts, fr.lens
    out = _RowBuffer(len(starts))
    bad_crc: list[int] = []
    bad_msg: list[int] = []
    raw = buf.raw
    # whole cycles per chunk, when the records repeat (see _cycles)
    period, seen = _byte_period(buf, starts, lens, fr.periods) if fast else (0, False)
    chunk = CHUNK_RECORDS - CHUNK_RECORDS % period if period else CHUNK_RECORDS
    tries = 6 if seen else 2  # fewer where the probe found no cycles
    for lo in range(0, len(starts), chunk):
        hi = min(lo + chunk, len(starts))
        st, ln = starts[lo:hi], lens[lo:hi]
        verify = tfr.verify_records if fast else tfr.verify_records_slow
        ok = verify(buf, st, ln)
        if not ok.all():
            bad_crc.extend((np.flatnonzero(~ok) + lo).tolist())
        rec = np.flatnonzero(ok) + lo
        rest = rec
        chunk_parts: list[_Rows] = []
        if fast and len(rec):
            data_at = starts[rec] + tfr.HEADER
            near = data_at + lens[rec] > buf.safe_end  # the last record or two of a mapping
            tail = rec[near] if near[-1] else rec[:0]
            if len(tail):
                rec, data_at = rec[~near], data_at[~near]
            rows, decoded, cyc = _fast_decode(buf, rec, data_at, lens[rec], tags, period, tries)
            data.fast_records += len(rows.record)
            data.cycle_records += cyc
            chunk_parts.append(rows)
            rest = np.concatenate([rec[~decoded], tail]) if len(tail) else rec[~decoded]
        if len(rest):
            g_rec: list[int] = []
            g_step: list[int] = []
            g_wall: list[float] = []
            g_tag: list[int] = []
            g_val: list[float] = []
            for r in rest.tolist():
                s = int(starts[r]) + tfr.HEADER
                try:
                    ev = decode_event(bytes(raw[s : s + int(lens[r])]))
                except (_Malformed, struct.error, ValueError):
                    bad_msg.append(r)
                    continue
                if ev.file_version is not None and data.file_version is None:
                    data.file_version = ev.file_version
                for v in ev.values:
                    tid = tags.id_for(v.tag)
                    if v.plugin:
                        data.plugins.add(v.plugin)
                        data.tag_plugins.setdefault(tid, v.plugin)
                    if v.value is None:
                        data.skipped[v.skip] += 1
                        continue
                    g_rec.append(r)
                    g_step.append(ev.step)
                    g_wall.append(ev.wall_time)
                    g_tag.append(tid)
                    g_val.append(v.value)
            if g_rec:
                chunk_parts.append(
                    _Rows(
                        np.array(g_rec, dtype=np.int64),
                        np.array(g_step, dtype=np.int64),
                        np.array(g_wall, dtype=np.float64),
                        np.array(g_tag, dtype=np.int64),
                        np.array(g_val, dtype=np.float64),
                    )
                )
        if len(chunk_parts) > 1:
            both = _Rows.concat(chunk_parts)
            chunk_parts = [both.take(np.argsort(both.record, kind="stable"))]
        for part in chunk_parts:
            out.append(part)
        buf.release(int(starts[hi]) if hi < len(starts) else buf.n)
    rows = out.rows()
    if len(rows.record):
        data.plugins.add("scalars")  # TensorBoard files simple values under this plugin too
    # a tag that some record declared as a non-scalar plugin is not a metric anywhere
    drop = [t for t, plugin in data.tag_plugins.items() if plugin in NON_SCALAR_PLUGINS]
    if drop and len(rows.record):
        gone = np.isin(rows.tag, drop)
        if gone.any():
            for t, c in zip(*np.unique(rows.tag[gone], return_counts=True), strict=True):
                data.skipped[data.tag_plugins[int(t)]] += int(c)
            rows = rows.take(np.flatnonzero(~gone))
    data.rows = rows
    if bad_crc:
        data.issues.extend(
            _record_issues(
                "corrupt-record",
                "data checksum mismatch; record skipped",
                bad_crc,
                [start_offset + int(starts[r]) for r in bad_crc],
                source,
            )
        )
    if bad_msg:
        data.issues.extend(
            _record_issues(
                "bad-record",
                "checksum is right but the bytes are not a TensorBoard Event; record skipped",
                bad_msg,
                [start_offset + int(starts[r]) for r in bad_msg],
                source,
            )
        )
    return data


def tag_issues(frame: pl.DataFrame, tags: _Tags, source: str) -> list[DataIssue]:
    """A note for the run's tags that are not UTF-8 (read with U+FFFD in their place):
    protobuf refuses such a record; trainlens keeps its value, but says so."""
    used = set(frame.schema["metric"].categories.to_list())  # type: ignore[attr-defined]
    bad = []
    for raw in tags.names:
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            name = raw.decode("utf-8", "replace")
            if name in used:
                bad.append(name)
    if not bad:
        return []
    return [
        DataIssue(
            kind="encoding",
            source=source,
            message=(
                f"{len(bad)} tag(s) are not valid UTF-8 (a damaged record?); read with "
                f"U+FFFD for the bad bytes: {', '.join(map(repr, bad[:3]))}"
                + ("…" if len(bad) > 3 else "")
            ),
            count=len(bad),
            details={"tags": bad[:100]},
        )
    ]


def _frame_of(parts: _RunParts, tags: _Tags) -> tuple[pl.DataFrame, list[int] | None]:
    """The run's long frame with ``metric`` an Enum (no string per row).

    When every metric's steps strictly increase (the usual run: no restart, no step
    logged twice) the rows are regrouped into one block per metric, file order kept
    within each; :func:`build_run` then needs no grouping and every per-metric view is a
    slice. Otherwise the rows stay in file order, which is what tells a restart apart.
    Returns the frame and, when grouped, each metric's row count. The files' rows are
    handed over (``fd.rows`` is emptied) so that each column is freed once regrouped."""
    names = [t.decode("utf-8", "replace") for t in tags.names]
    metrics: dict[str, int] = {}  # metric name -> code, in order of first appearance
    codes, steps, walls, values = [], [], [], []
    small = len(tags.names) <= 1 << 16  # numpy sorts 16-bit keys by radix
    r = _Rows.empty()
    for fd, rename in zip(parts.files, parts.renames, strict=True):
        r = fd.rows
        if not len(r.record):
            continue
        to_code = np.zeros(len(names), dtype=np.uint16 if small else np.int64)
        present = np.flatnonzero(np.bincount(r.tag, minlength=len(names)))
        for t in present.tolist():  # tag ids come in order of first appearance
            label = names[t] if rename is None else rename.get(t, names[t])
            to_code[t] = metrics.setdefault(label, len(metrics))
        codes.append(to_code[r.tag])
        steps.append(r.step)
        walls.append(r.wall)
        values.append(r.value)
        fd.rows = _Rows.empty()
    del r
    order = list(metrics)
    dtype = pl.Enum(order)
    if not codes:
        schema: dict[str, pl.DataType] = {
            "step": pl.Int64(),
            "metric": dtype,
            "value": pl.Float64(),
            "wall_time": pl.Float64(),
        }
        return pl.DataFrame(schema=schema), None
    code, step, wall, value = (
        np.concatenate(x) if len(x) > 1 else x[0] for x in (codes, steps, walls, values)
    )
    del codes, steps, walls, values  # one reference each: regrouping frees the old column
    counts = np.bincount(code, minlength=len(order))
    if len(order) > 1:
        idx = np.argsort(code, kind="stable")
        grouped = step[idx]
    else:
        idx, grouped = None, step
    rises = np.diff(grouped) > 0
    bounds = np.cumsum(counts)[:-1]
    rises[bounds - 1] = True  # block edges (every count is at least 1)
    if bool(rises.all()):
        if idx is not None:
            step, wall, value = grouped, wall[idx], value[idx]
            del idx
        blocks: list[int] | None = counts.tolist()
        metric = enum_runs(order, counts.tolist())
    else:
        blocks = None
        metric = pl.Series("metric", order, dtype=dtype).gather(code)
    frame = pl.DataFrame(
        [
            pl.Series("step", step),
            metric.alias("metric"),
            pl.Series("value", value),
            pl.Series("wall_time", wall),
        ]
    )
    return frame, blocks
