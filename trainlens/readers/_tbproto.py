"""The general decoder of TensorBoard events: protobuf's wire format, one record at a time.

Reads every Event shape (several values, tensors of any scalar dtype, plugin metadata,
histograms and images to skip) with a small protobuf decoder of its own: TensorFlow is not
needed. The vectorized lane (:mod:`trainlens.readers._tbfast`) leaves it the records outside
the usual layout; the reference read (``read_events_file(fast=False)``) sends it every
record, and the tests hold the fast lanes to its results value for value.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterator
from typing import Any

import numpy as np

from trainlens.core.dataclass import dataclass
from trainlens.readers._tbrows import FileData, Rows
from trainlens.readers._tbtags import Tags
from trainlens.readers._tfrecord_format import HEADER

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


#: the largest field number protobuf has (2**29 - 1: a tag is a 32-bit varint); a larger
#: one is no message (protobuf's "Wire format was corrupt"), not an unknown field to skip
_MAX_FIELD = (1 << 29) - 1


class Malformed(Exception):
    """The bytes are not the protobuf message they should be."""


def _varint(b: bytes, i: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if i >= len(b) or shift > 63:
            raise Malformed("varint runs past the end")
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
        if num == 0 or num > _MAX_FIELD:  # protobuf refuses both: the bytes are not a message
            raise Malformed(f"field number {num}")
        if wt == 0:
            v, i = _varint(b, i)
            yield num, wt, v, i
        elif wt == 1:
            if i + 8 > end:
                raise Malformed("fixed64 runs past the end")
            yield num, wt, i, i + 8
            i += 8
        elif wt == 2:
            n, i = _varint(b, i)
            if i + n > end:
                raise Malformed("length-delimited field runs past the end")
            yield num, wt, i, i + n
            i += n
        elif wt == 5:
            if i + 4 > end:
                raise Malformed("fixed32 runs past the end")
            yield num, wt, i, i + 4
            i += 4
        else:
            raise Malformed(f"unsupported wire type {wt}")
    if i != end:
        raise Malformed("message runs past its end")


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
                    raise Malformed("packed floats of a partial length")
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
        elif num == 7 and wt == 2:
            _check_session_log(b, x, y)
    return _Event(wall, step, values, version)


def _check_session_log(b: bytes, s: int, e: int) -> None:
    """A SessionLog holds nothing to read, but one that is not a SessionLog (a summary
    whose field number a flipped bit turned into 7, behind a valid checksum) is damage
    protobuf refuses: raise, so it is reported rather than lost in silence."""
    for num, wt, x, y in _fields(b, s, e):
        if (num == 1 and wt != 0) or (num in (2, 3) and wt != 2):
            raise Malformed("a SessionLog field of the wrong wire type")
        if num in (2, 3):
            b[x:y].decode("utf-8")  # UnicodeDecodeError is a ValueError: malformed


def decode_records(
    raw: memoryview,
    starts: np.ndarray,
    lens: np.ndarray,
    rec: np.ndarray,
    tags: Tags,
    data: FileData,
) -> tuple[Rows, list[int]]:
    """Decode the records ``rec`` (whose checksums hold) one at a time: their rows, and the
    records that are not an Event. Plugins, skipped summaries and the file version go to
    ``data``."""
    g_rec: list[int] = []
    g_step: list[int] = []
    g_wall: list[float] = []
    g_tag: list[int] = []
    g_val: list[float] = []
    malformed: list[int] = []
    for r in rec.tolist():
        s = int(starts[r]) + HEADER
        try:
            ev = decode_event(bytes(raw[s : s + int(lens[r])]))
        except (Malformed, struct.error, ValueError):
            malformed.append(r)
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
    rows = Rows(
        np.array(g_rec, dtype=np.int64),
        np.array(g_step, dtype=np.int64),
        np.array(g_wall, dtype=np.float64),
        np.array(g_tag, dtype=np.int64),
        np.array(g_val, dtype=np.float64),
    )
    return rows, malformed
