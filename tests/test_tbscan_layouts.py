"""The compiled TensorBoard lane's shortcut for the usual scalar Event (one value, every
length one byte, located at the places its layout puts them) against protobuf's decoding,
on the layouts at its edges: steps of every varint length (one to ten bytes, none when
the step is 0), tags of 1 to 130 bytes (the summary's length crossing one byte at 0x80),
several values in one Event, and lengths written as two-byte varints (valid protobuf that
the shortcut leaves to the field-by-field parse). Each file is read as it was written.
"""

from __future__ import annotations

import itertools
import struct

import polars as pl
import pytest

from tests._events import frame_all, varint

_tbscan = pytest.importorskip("trainlens.readers._tbscan")
pytest.importorskip("tensorboard")
from tensorboard.compat.proto import event_pb2, summary_pb2  # noqa: E402

STEPS = (0, 1, 127, 128, 16_383, 16_384, 2**21 - 1, 2**21, 2**28, 2**35, 2**56, 2**63 - 1)
TAG_LENGTHS = (1, 2, 7, 8, 9, 15, 16, 17, 24, 100, 116, 117, 118, 119, 127, 128, 130)
Row = tuple[bytes, int, float, float]  # tag, step, wall time, value


def event(step: int, wall: float, values: list[tuple[bytes, float]]) -> bytes:
    summary = summary_pb2.Summary(
        value=[summary_pb2.Summary.Value(tag=t.decode(), simple_value=v) for t, v in values]
    )
    return event_pb2.Event(wall_time=wall, step=step, summary=summary).SerializeToString()


def long_lengths(step: int, wall: float, tag: bytes, value: float) -> bytes:
    """One value's Event with the summary's, the value's and the tag's lengths each written
    in two bytes (``0x80 | n, 0``): what protobuf reads as the same Event."""
    two = lambda n: bytes([0x80 | n, 0])  # noqa: E731  (n < 128 here)
    body = b"\x0a" + two(len(tag)) + tag + b"\x15" + struct.pack("<f", value)
    val = b"\x0a" + two(len(body)) + body
    return (
        b"\x09" + struct.pack("<d", wall) + b"\x10" + varint(step) + b"\x2a" + two(len(val)) + val
    )


def decoded(payloads: list[bytes]) -> list[Row]:
    rows = []
    for p in payloads:
        ev = event_pb2.Event.FromString(p)
        rows += [(v.tag.encode(), ev.step, ev.wall_time, v.simple_value) for v in ev.summary.value]
    return rows


def scanned(payloads: list[bytes]) -> list[Row]:
    got = _tbscan.scan(frame_all(payloads))
    assert not isinstance(got, str), got
    assert got.records == len(payloads)
    steps, walls, values = (pl.Series(c).to_list() for c in (got.step, got.wall, got.value))
    if got.grouped:
        codes = [t for t, c in enumerate(got.counts) for _ in range(c)]
    else:
        codes = pl.Series(got.code).to_list()
    rows = [(got.tags[c], s, w, v) for c, s, w, v in zip(codes, steps, walls, values, strict=True)]
    return rows


def in_blocks(rows: list[Row]) -> list[Row]:
    """``rows`` one block per tag, tags in order of first appearance (as ``scan`` groups)."""
    order = {t: i for i, t in reversed(list(enumerate(r[0] for r in rows)))}
    return sorted(rows, key=lambda r: order[r[0]])  # (a stable sort)


def test_each_step_length_and_tag_length() -> None:
    payloads = [
        event(step, 1.7e9 + i, [(b"t" * n, 0.25 * i)])
        for i, (n, step) in enumerate(itertools.product(TAG_LENGTHS, STEPS))
    ]
    want = decoded(payloads)
    assert {len(r[0]) for r in want} == set(TAG_LENGTHS)
    assert {r[1] for r in want} == set(STEPS)
    assert scanned(payloads) == in_blocks(want)


def test_several_values_in_an_event_and_no_step() -> None:
    payloads = [
        event(s, 100.0 + s, [(b"a", s + 0.5), (b"bb" * 9, -s), (b"c" * 120, 3.0)]) for s in range(5)
    ]
    payloads.insert(0, event(0, 99.0, [(b"solo", 1.0)]))  # step 0: no step field at all
    assert scanned(payloads) == in_blocks(decoded(payloads))


def test_two_byte_lengths_read_as_protobuf_reads_them() -> None:
    payloads = [long_lengths(s, 5.0 + s, b"loss", 1.0 / (s + 1)) for s in range(4)]
    payloads += [event(s, 9.0 + s, [(b"loss", 2.0)]) for s in range(4, 8)]
    want = decoded(payloads)
    assert [r[1] for r in want] == list(range(8))
    assert scanned(payloads) == want


def test_steps_out_of_order_in_file_order() -> None:
    payloads = [event(s, 1.0 + k, [(b"x" * 16, float(k))]) for k, s in enumerate((5, 3, 9))]
    payloads.append(event(1, 4.0, [(b"y", 1.0)]))
    got = _tbscan.scan(frame_all(payloads))
    assert not isinstance(got, str) and not got.grouped
    assert scanned(payloads) == decoded(payloads)
