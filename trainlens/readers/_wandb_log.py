"""The framing of a W&B transaction log (``run-<id>.wandb``), private to the W&B run reader.

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
drops the rest of its block; a file cut short drops its last, partial record.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

MAGIC = b":W&B" + struct.pack("<HB", 0xBEE1, 0)
FILE_HEADER = 7
BLOCK = 32 * 1024
CHUNK_HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4
_HDR = struct.Struct("<IHB")
# the CRC register after the type byte: each chunk's checksum starts from one of these
TYPE_SEED = [zlib.crc32(bytes([t])) for t in range(5)]


@dataclass
class Damage:
    """One damaged stretch: where (block, byte offset), why, and how many records it cost."""

    block: int
    offset: int
    why: str
    records: int = 0


@dataclass
class Framed:
    """The records of a log: ``(start, end)`` byte ranges into ``buf`` for whole (FULL)
    records, and the joined bytes of records split over blocks, in file order."""

    spans: list[tuple[int, int]]  # FULL records: data offsets in the file buffer
    joined: list[tuple[int, bytes]]  # (index in file order, bytes) of split records
    damage: list[Damage]
    end: int  # offset up to which whole records were read


def has_magic(head: bytes) -> bool:
    return head[: len(MAGIC)] == MAGIC


def frame(buf: bytes | memoryview, start: int = FILE_HEADER) -> Framed:
    """Every sound record of the log in ``buf`` (see the module doc for what is dropped)."""
    mv = memoryview(buf)
    n = len(mv)
    spans: list[tuple[int, int]] = []
    joined: list[tuple[int, bytes]] = []
    damage: list[Damage] = []
    parts: list[bytes] | None = None  # a split record being joined
    part_at = 0
    pos = start
    end = start
    count = 0  # records in file order (FULL and joined ones)
    crc32 = zlib.crc32
    seeds = TYPE_SEED
    unpack = _HDR.unpack_from
    while pos < n:
        block_end = (pos // BLOCK + 1) * BLOCK
        if block_end - pos < CHUNK_HEADER:
            pos = block_end  # zero padding at the end of a block
            continue
        if pos + CHUNK_HEADER > n:
            damage.append(Damage(pos // BLOCK, pos, "the file ends inside a chunk header"))
            break
        crc, length, kind = unpack(mv, pos)
        data = pos + CHUNK_HEADER
        if length == 0 and kind == 0:  # (zeros: the writer padded the block)
            pos = block_end
            continue
        known = kind in (FULL, FIRST, MIDDLE, LAST)
        if known and data + length > n and data + length <= block_end:
            damage.append(Damage(pos // BLOCK, pos, "the file ends inside a record"))
            parts = None
            break
        if not known or data + length > block_end:
            damage.append(
                Damage(pos // BLOCK, pos, "a chunk header that cannot be (rest of block left out)")
            )
            parts = None
            pos = block_end
            continue
        if crc32(mv[data : data + length], seeds[kind]) != crc:
            bad = damage[-1] if damage and damage[-1].block == pos // BLOCK else None
            if bad is None or "checksum" not in bad.why:
                damage.append(Damage(pos // BLOCK, pos, "bad checksum"))
            damage[-1].records += 1
            parts = None
            pos = data + length
            continue
        if kind == FULL:
            spans.append((data, data + length))
            count += 1
            end = data + length
        elif kind == FIRST:
            parts, part_at = [bytes(mv[data : data + length])], pos
        elif parts is None:
            damage.append(
                Damage(pos // BLOCK, pos, "the middle or end of a record whose start is lost", 1)
            )
        elif kind == MIDDLE:
            parts.append(bytes(mv[data : data + length]))
        else:
            parts.append(bytes(mv[data : data + length]))
            joined.append((count, b"".join(parts)))
            count += 1
            parts = None
            end = data + length
        pos = data + length
    if parts is not None:
        damage.append(Damage(part_at // BLOCK, part_at, "a record split over blocks, cut short", 1))
    for d in damage:
        if d.why.startswith("the file ends") and not d.records:
            d.records = 1
    return Framed(spans, joined, damage, end)


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
