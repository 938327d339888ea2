"""The TFRecord format's constants and its checksum, in pure Python (no numpy, no C).

A TFRecord file is a sequence of records::

    uint64 length | uint32 masked_crc32c(length) | data[length] | uint32 masked_crc32c(data)

all little-endian, where ``masked(crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8 mod 2**32``
and the CRC is CRC-32C (Castagnoli).

This is the one place those rules are written in Python. Sniffing a file imports only this
module (numpy, and even the ``crc32c`` package, cost a small file's read more than the
sniff itself: ``import crc32c`` pulls in ``importlib.metadata``). The numpy reader
(:mod:`trainlens.readers._tfrecord`) uses the ``crc32c`` package for speed where it is
installed and :func:`crc32c_py` otherwise; the compiled lane (``_tbscan.c``) has its own C
copy, whose constants a test checks against these.
"""

from __future__ import annotations

import functools

MASK_DELTA = 0xA282EAD8
CRC32C_POLY = 0x82F63B78  # CRC-32C (Castagnoli), bit-reflected
LENGTH_BYTES = 8  # uint64 length
CRC_BYTES = 4  # uint32 masked CRC
HEADER = LENGTH_BYTES + CRC_BYTES  # length + its checksum: 12
OVERHEAD = HEADER + CRC_BYTES  # header + the data's checksum: 16
_FULL = 0xFFFFFFFF


@functools.cache
def crc32c_table() -> list[int]:
    """The byte-at-a-time CRC-32C table (the numpy tables start from it). Built on first
    use: importing this module is on every read's path, and a sniff rarely needs it."""
    out = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ (CRC32C_POLY if c & 1 else 0)
        out.append(c)
    return out


def crc32c_py(data: bytes | memoryview, value: int = 0) -> int:
    """CRC-32C of ``data``, continued from the CRC ``value`` of earlier bytes (0 to start),
    one byte at a time (the fallback where the ``crc32c`` package is not installed)."""
    crc = value ^ _FULL
    t = crc32c_table()
    for b in bytes(data):
        crc = t[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ _FULL


def masked_crc(crc: int) -> int:
    """The CRC as a TFRecord stores it."""
    return (((crc >> 15) | (crc << 17)) + MASK_DELTA) & _FULL


def unmasked_crc(masked: int) -> int:
    """The CRC a stored (masked) checksum stands for."""
    r = (masked - MASK_DELTA) & _FULL
    return ((r << 15) | (r >> 17)) & _FULL


def masked_length_crc(length: int) -> int:
    """The masked CRC a record header stores for its 8-byte length field."""
    return masked_crc(crc32c_py(length.to_bytes(LENGTH_BYTES, "little")))
