"""Helpers for tests that damage real TensorBoard event files: split a file into its
records, and frame payloads again with valid checksums (tensorboardX's own CRC, not
trainlens'), so a mutation can reach the decoder behind the checksum check."""

from __future__ import annotations

import struct
from pathlib import Path

from tensorboardX.record_writer import masked_crc32c


def split_records(raw: bytes) -> tuple[list[bytes], bytes]:
    """The payloads of the whole records in ``raw``, and the bytes after the last one."""
    payloads: list[bytes] = []
    o = 0
    while o + 12 <= len(raw):
        (n,) = struct.unpack_from("<Q", raw, o)
        if o + 16 + n > len(raw):
            break
        payloads.append(raw[o + 12 : o + 12 + n])
        o += 16 + n
    return payloads, raw[o:]


def frame(payload: bytes) -> bytes:
    """One TFRecord: length, its masked CRC, the payload, its masked CRC."""
    head = struct.pack("<Q", len(payload))
    return (
        head
        + struct.pack("<I", masked_crc32c(head))
        + payload
        + struct.pack("<I", masked_crc32c(payload))
    )


def frame_all(payloads: list[bytes]) -> bytes:
    return b"".join(frame(p) for p in payloads)


def event_files(d: Path) -> list[Path]:
    return sorted(d.rglob("events.out.tfevents.*"))


def varint(v: int) -> bytes:
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = v & 0x7F
        v >>= 7
        if v:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)
