"""The layout of a W&B transaction log (``run-<id>.wandb``) and an exact protobuf field
reader, private to the W&B run reader (the lanes that frame a file in bulk are
:mod:`trainlens.readers._wandb_fast` and the compiled ``_wbscan``).

Layout (W&B's "datastore", LevelDB's log format with its own file header)::

    file header: ":W&B" | uint16 0xBEE1 | uint8 version 0            (7 bytes)
    then 32 KiB blocks of chunks:
        uint32 crc | uint16 length | uint8 type | data[length]     (little-endian)

``type`` is FULL (1), or FIRST (2) / MIDDLE (3) / LAST (4) for a record split over
blocks; ``crc`` is zlib's CRC-32 (IEEE, not CRC-32C: measured on wandb 0.31's files) of
the type byte followed by the data. A block whose tail is too short for a chunk header
is padded with zeros. Each record is a ``wandb_internal.Record`` protobuf.

Damage is reported per block (:class:`Damage`) and reading goes on: a chunk whose
checksum fails is dropped (with the record it belongs to), its length is trusted to
reach the next chunk; a header that cannot be (a length past the block, an unknown type)
drops the rest of its block; a file cut short drops its last, partial record. (The
numpy lane implements this; the compiled lane hands any damaged file to it.)
"""

from __future__ import annotations

import struct
import zlib

from trainlens.core.dataclass import dataclass

MAGIC = b":W&B" + struct.pack("<HB", 0xBEE1, 0)
FILE_HEADER = 7
BLOCK = 32 * 1024
CHUNK_HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4
# the CRC register after the type byte: each chunk's checksum starts from one of these
TYPE_SEED = [zlib.crc32(bytes([t])) for t in range(5)]


@dataclass
class Damage:
    """One damaged stretch: where (block, byte offset), why, and how many records it cost."""

    block: int
    offset: int
    why: str
    records: int = 0


def text(raw: bytes) -> str:
    """A protobuf string as text: bytes that are no UTF-8 (a lone surrogate's, say) become
    ``\\xNN`` escapes. Every lane names keys so; "replace" made two keys that differ
    only in such bytes one name, and the read failed on it (two metrics of one name)."""
    return raw.decode("utf-8", "backslashreplace")


def unique_names(names: list[str]) -> list[str]:
    """``names`` with a repeat (a key whose escaped text is another key's literal text)
    made ``name#2``, ``name#3``…: each decoded key stays its own metric."""
    if len(set(names)) == len(names):
        return names
    seen: set[str] = set()
    out = []
    for name in names:
        new, k = name, 2
        while new in seen:
            new, k = f"{name}#{k}", k + 1
        seen.add(new)
        out.append(new)
    return out


def has_magic(head: bytes) -> bool:
    return head[: len(MAGIC)] == MAGIC


# ---- protobuf ------------------------------------------------------------------------------


def varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """The varint at ``pos`` and the offset after it (ValueError past the end)."""
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def fields(buf: bytes | memoryview, pos: int, end: int) -> list[tuple[int, int, int, int]]:
    """The fields of the message in ``buf[pos:end]``: (number, wire type, a, b) where
    (a, b) is the byte range of a length-delimited value, (value, 0) for a varint and
    the range of the 8 or 4 bytes of a fixed one. ValueError when malformed."""
    out = []
    while pos < end:
        tag, pos = varint(buf, pos)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            value, pos = varint(buf, pos)
            out.append((number, 0, value, 0))
        elif wire == 2:
            length, pos = varint(buf, pos)
            if pos + length > end:
                raise ValueError("field past the end of its message")
            out.append((number, 2, pos, pos + length))
            pos += length
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            out.append((number, wire, pos, pos + size))
            pos += size
        else:
            raise ValueError(f"wire type {wire}")
    if pos != end:
        raise ValueError("field past the end of its message")
    return out
