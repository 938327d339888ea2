"""A safetensors file checked against the format, never trusted.

The rules are the reference implementation's (``safetensors/src/tensor.rs``,
``SafeTensors::read_metadata`` and ``Metadata::validate``): an 8-byte little-endian
header length of at most 100 MB that fits in the file; a UTF-8 JSON object; each tensor
a known ``dtype``, a ``shape`` of non-negative integers and two non-negative integer
``data_offsets`` whose difference is exactly ``prod(shape) × bits / 8`` (no overflow of
64 bits, whole bytes); sorted by offset, the tensors tile the data from byte 0 with no
hole and no overlap; the file ends where the last tensor does; ``__metadata__`` maps
strings to strings. Any break is one problem naming the tensor, never a crash.

Bounded cost, measured on a 92 MB header of 865,000 one-element tensors (the largest a
reader accepts is 100 MB): before this check 8.9 s and 754 MB peak RSS (8.2× the
header: a dict, two lists and their ints per tensor); now each tensor entry is folded
into one small tuple as it is parsed (``object_pairs_hook``, :func:`_entry`): 405 MB
(4.4×), against 693 MB for a bare ``json.loads`` of the same header in the same run,
at 1.4× its time (``bench/safetensors_header.py``; a loaded 2-core box, 24 s vs 17 s).
A header nested deeper than the format's three levels (``{name: {"shape": [...]}}``)
is refused before :mod:`json` sees it: 200,000 levels would be a RecursionError.
"""

from __future__ import annotations

import json
import struct
from operator import itemgetter
from typing import BinaryIO, cast

#: the reference implementation's limit (``MAX_HEADER_SIZE``)
HEADER_MAX = 100_000_000
#: {name: {"shape": [..]}}: the deepest a valid header nests
MAX_DEPTH = 3
_U64 = 2**64

#: bits per element of each dtype the reference implementation knows (its ``Dtype``)
DTYPE_BITS = {
    "BOOL": 8,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E8M0": 8,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "I64": 64,
    "U64": 64,
    "F64": 64,
    "C64": 64,
}
#: every byte but the quote and the four brackets: deleted to see the structure alone
_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'"[]{}')


class Bad(Exception):
    """The file breaks the format: ``status`` (``truncated`` / ``corrupt``) and one
    sentence."""

    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class _Span(tuple[int, int]):
    """A well-formed tensor entry as parsed: its (begin, end) in the data."""

    __slots__ = ()


class _Wrong(str):
    """A tensor entry as parsed that breaks the format: what is wrong with it."""

    __slots__ = ()


class _Object(list[tuple[str, object]]):
    """Any other JSON object as parsed (the header, ``__metadata__``): its pairs."""

    __slots__ = ()


def read_header(fh: BinaryIO, size: int) -> tuple[int, int, dict[str, int]]:
    """(header length, bytes of data it covers, tensor name -> its bytes) of the file open at
    ``fh`` (position 0) that is ``size`` bytes long; :class:`Bad` when it breaks the
    format."""
    raw = fh.read(8)
    if len(raw) < 8:
        raise Bad("truncated", f"{size} B, shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", raw)
    if n > HEADER_MAX:
        raise Bad("corrupt", f"header length {n:,} B is not plausible (max 100 MB)")
    if 8 + n > size:
        raise Bad("truncated", f"{size:,} B, shorter than its {n:,} B header")
    blob = fh.read(n)
    if len(blob) < n:
        raise Bad("truncated", f"the file ended inside its {n:,} B header while read")
    try:
        text = blob.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Bad("corrupt", f"header is not UTF-8 (byte {8 + exc.start})") from None
    if not _shallow(blob):
        raise Bad(
            "corrupt",
            f"header nests deeper than the {MAX_DEPTH} levels a safetensors header has, "
            "or its brackets do not match",
        )
    del blob  # the text and the parsed entries are what the parse holds at its peak
    try:
        header = json.loads(text, object_pairs_hook=_entry)
    except (ValueError, RecursionError) as exc:
        raise Bad("corrupt", f"header is not valid JSON ({exc})") from None
    del text
    if not isinstance(header, _Object):
        raise Bad("corrupt", "header is not a JSON object of tensors")
    return (n, *_layout(header))


def _shallow(blob: bytes) -> bool:
    """Whether ``blob`` nests at most :data:`MAX_DEPTH` deep, without recursion.

    The usual header holds no backslash and no bracket inside a string: its quotes and
    brackets alone (one :meth:`bytes.translate`), with every ``""`` pair removed, are
    its structure, and three rounds of removing ``[]`` and ``{}`` empty a valid one
    (under 0.2 s for 92 MB). Otherwise the exact count (strings and escapes honoured)
    of :func:`trainlens.readers._nesting.max_depth`."""
    if b"\\" not in blob:
        marks = blob.translate(None, _NOT_STRUCTURE).replace(b'""', b"")
        if b'"' not in marks:
            for _ in range(MAX_DEPTH):
                marks = marks.replace(b"[]", b"").replace(b"{}", b"")
            return not marks
    from trainlens.readers._nesting import max_depth

    return max_depth(blob) <= MAX_DEPTH


def _entry(pairs: list[tuple[str, object]]) -> object:
    """Each JSON object as it is parsed, innermost first. A tensor entry (its
    ``data_offsets`` a list) is checked and folded into a :class:`_Span` (or a
    :class:`_Wrong`): its shape list, offsets list and dict are dropped at once, which
    is what bounds the parse's memory; any other object stays its list of pairs."""
    if len(pairs) <= 3 and any(k == "data_offsets" and type(v) is list for k, v in pairs):
        d = dict(pairs)
        return _check_tensor(d.get("dtype"), d.get("shape"), cast(list[object], d["data_offsets"]))
    return _Object(pairs)


def _is_u64(x: object) -> bool:
    return type(x) is int and 0 <= x < _U64


def _check_tensor(dtype: object, shape: object, offsets: list[object]) -> _Span | _Wrong:
    if len(offsets) != 2 or not all(_is_u64(x) for x in offsets):
        return _Wrong(f"data_offsets {_short(offsets)} are not two byte offsets")
    begin, end = cast(list[int], offsets)
    bits = DTYPE_BITS.get(dtype) if isinstance(dtype, str) else None
    if bits is None:
        return _Wrong(f"dtype {_short(dtype)} is not one safetensors knows")
    if not isinstance(shape, list) or not all(_is_u64(d) for d in shape):
        return _Wrong(f"shape {_short(shape)} is not a list of non-negative integers")
    count = 1
    for d in shape:
        count *= d
        if count * bits >= _U64:
            return _Wrong(f"shape {_short(shape)} overflows 64 bits")
    if end < begin:
        return _Wrong(f"ends at {end} before it begins at {begin}")
    if count * bits % 8:
        return _Wrong(f"{dtype} {_short(shape)} does not fill whole bytes")
    want = count * bits // 8
    if end - begin != want:
        return _Wrong(f"{end - begin:,} B for {dtype} {_short(shape)} ({want:,} B)")
    return _Span((begin, end))


def _short(x: object, limit: int = 60) -> str:
    """A value from the header as a message shows it: JSON, cut at ``limit`` characters."""
    try:
        text = json.dumps(x)
    except (TypeError, ValueError):
        text = repr(x)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _layout(header: _Object) -> tuple[int, dict[str, int]]:
    """Every entry well-formed, each name once, and the tensors tiling the data from
    byte 0 in offset order (the reference sorts by offsets too: any order on disk)."""
    tensors: dict[str, int] = {}
    for name, value in header:
        if name == "__metadata__":
            _check_metadata(value)
            continue
        if isinstance(value, _Wrong):
            raise Bad("corrupt", f"tensor {_short(name)}: {value}")
        if not isinstance(value, _Span):
            raise Bad("corrupt", f"tensor {_short(name)}: header entry is malformed")
        if name in tensors:
            raise Bad("corrupt", f"tensor {_short(name)}: named twice in the header")
        tensors[name] = value[1] - value[0]
    spans = [p for p in header if p[0] != "__metadata__"]
    spans.sort(key=itemgetter(1))  # (begin, end) tuples compared in C: no key objects
    at = 0
    for name, span in spans:
        begin, end = cast(_Span, span)
        if begin != at:
            where = "inside the tensor before it" if begin < at else "a gap before it"
            raise Bad(
                "corrupt", f"tensor {_short(name)}: starts at {begin:,}, expected {at:,} ({where})"
            )
        at = end
    return at, tensors


def _check_metadata(value: object) -> None:
    if value is None:  # the reference reads it as an optional map: null is none
        return
    if not isinstance(value, _Object) or not all(isinstance(v, str) for _k, v in value):
        raise Bad("corrupt", "__metadata__ is not a map of strings to strings")
