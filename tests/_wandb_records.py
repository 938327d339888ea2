"""W&B transaction logs taken apart and put back together, for hostile cases: the records
of a log the real SDK wrote (W&B's own protobuf classes decode and encode them), one of
them changed, framed again as W&B frames them (LevelDB's log format: 32 KiB blocks of
``crc | length | type | data`` chunks, the CRC-32 of the type byte then the data)."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from typing import Any

MAGIC = b":W&B" + struct.pack("<HB", 0xBEE1, 0)
BLOCK = 32768
HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(data: bytes, at: list[int] | None = None) -> list[bytes]:
    """Each record of a sound log, in order; ``at`` gets the offset of each whole (FULL)
    record's data, -1 for one split over chunks."""
    assert data.startswith(MAGIC)
    pos, out, parts = len(MAGIC), [], b""
    at = [] if at is None else at
    while pos + HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        if left < HEADER:
            pos += left
            continue
        crc, length, kind = struct.unpack_from("<IHB", data, pos)
        if kind == 0:
            pos += left
            continue
        chunk = data[pos + HEADER : pos + HEADER + length]
        assert zlib.crc32(bytes([kind]) + chunk) == crc
        pos += HEADER + length
        if kind == FULL:
            out.append(chunk)
            at.append(pos - length)
        elif kind == FIRST:
            parts = chunk
        else:
            parts += chunk
            if kind == LAST:
                out.append(parts)
                at.append(-1)
    return out


def _chunk(kind: int, data: bytes) -> bytes:
    crc = zlib.crc32(bytes([kind]) + data)
    return struct.pack("<IHB", crc, len(data), kind) + data


def frame(recs: list[bytes]) -> bytes:
    """The log of ``recs``, framed as W&B's datastore does."""
    out = bytearray(MAGIC)
    for rec in recs:
        first = True
        while True:
            left = BLOCK - len(out) % BLOCK
            if left < HEADER:
                out += bytes(left)  # a block's tail too short for a header: zeros
                continue
            room = left - HEADER
            part, rec = rec[:room], rec[room:]
            if first and not rec:
                kind = FULL
            elif first:
                kind = FIRST
            else:
                kind = LAST if not rec else MIDDLE
            out += _chunk(kind, part)
            first = False
            if not rec:
                break
    return bytes(out)


def history_rows(data: bytes) -> list[dict[str, str]]:
    """Each history record's items, key -> value_json (W&B's own decoding)."""
    from wandb.proto import wandb_internal_pb2 as pb

    rows = []
    for raw in records(data):
        rec = pb.Record.FromString(raw)
        if rec.WhichOneof("record_type") == "history":
            rows.append({".".join(i.nested_key) or i.key: i.value_json for i in rec.history.item})
    return rows


def patch_history(data: bytes, change: Callable[[int, Any], bool]) -> bytes:
    """The log with ``change(n, history)`` applied to its n-th history record (W&B's
    protobuf message, changed in place; return False to drop the record)."""
    from wandb.proto import wandb_internal_pb2 as pb

    out, n = [], 0
    for raw in records(data):
        rec = pb.Record.FromString(raw)
        if rec.WhichOneof("record_type") == "history":
            keep = change(n, rec.history)
            n += 1
            if not keep:
                continue
            raw = rec.SerializeToString()
        out.append(raw)
    return frame(out)


def set_item(history: Any, key: str, value_json: str) -> None:
    """Set (or add) the item ``key`` of a history message to ``value_json``."""
    for item in history.item:
        if (".".join(item.nested_key) or item.key) == key:
            item.value_json = value_json
            return
    item = history.item.add()
    item.nested_key.append(key)
    item.value_json = value_json
