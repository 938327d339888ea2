"""Helpers for tests that damage real TensorBoard event files: split a file into its
records, and frame payloads again with valid checksums (tensorboardX's own CRC, not
trainlens'), so a mutation can reach the decoder behind the checksum check."""

from __future__ import annotations

import random
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


# ---- mutations of a real file (the fuzz tests and the AddressSanitizer run) -------------

MUTATIONS = (
    "bit-flips",
    "truncate",
    "length-field",
    "crc-valid-garbage",
    "crc-valid-flips",
    "crc-valid-cut",
)


def mutate(raw: bytes, how: str, rnd: random.Random) -> tuple[bytes, set[int]]:
    """``raw`` damaged one way, and the indices of the records whose payload the damage
    reached (their values must not be read as they were written; the other records'
    values may be kept). Reproducible from the state of ``rnd``."""
    payloads, rest = split_records(raw)
    k = rnd.randrange(len(payloads))
    if how == "bit-flips":
        out = bytearray(raw)
        for _ in range(rnd.randint(1, 8)):
            out[rnd.randrange(len(out))] ^= 1 << rnd.randrange(8)
        return bytes(out), set(range(len(payloads)))
    if how == "truncate":
        return raw[: rnd.randrange(len(raw))], set(range(len(payloads)))
    if how == "length-field":
        length = rnd.choice(
            [
                0,
                1,
                len(payloads[k]) - 1,
                len(payloads[k]) + 1,
                rnd.getrandbits(32),
                2**63,
                2**64 - 1,
            ]
        )
        head = struct.pack("<Q", length)
        record = head + struct.pack("<I", masked_crc32c(head)) + payloads[k]
        record += struct.pack("<I", masked_crc32c(payloads[k]))
        before = frame_all(payloads[:k])
        return before + record + frame_all(payloads[k + 1 :]) + rest, set(range(k, len(payloads)))
    if how == "crc-valid-garbage":
        payloads[k] = rnd.randbytes(rnd.choice([0, 1, 9, 20, rnd.randrange(300)]))
    elif how == "crc-valid-flips":
        p = bytearray(payloads[k])
        for _ in range(rnd.randint(1, 4)):
            p[rnd.randrange(len(p))] ^= 1 << rnd.randrange(8)
        payloads[k] = bytes(p)
    elif how == "crc-valid-cut":
        payloads[k] = payloads[k][: rnd.randrange(len(payloads[k]))]
    else:
        raise ValueError(how)
    return frame_all(payloads) + rest, {k}
