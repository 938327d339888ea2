"""The numpy TensorBoard reader on valid files it used to crash on, and on values whose
bytes protobuf reads differently than a naive decoder: files written by torch's
SummaryWriter (and tensorboard's own protobufs), read as the numpy reader reads them
(the compiled lane switched off), and by the compiled lane where it is built."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from tests._events import event_files, frame_all, split_records
from trainlens.core.run import Run
from trainlens.readers import tensorboard as tb
from trainlens.readers.base import ReadOptions

torch_tb = pytest.importorskip("torch.utils.tensorboard")
from tensorboard.compat.proto import event_pb2, summary_pb2  # noqa: E402


def _read(path: Path, monkeypatch: pytest.MonkeyPatch, *, lane: bool = False) -> list[Run]:
    with monkeypatch.context() as m:
        if not lane:
            m.setattr(tb, "_tbscan", None)
        return tb.read(path, ReadOptions())


def _values(run: Run, metric: str) -> list[tuple[int, float]]:
    got = run.frame.filter(pl.col("metric") == metric).select("step", "value")
    return [(int(s), float(v)) for s, v in got.iter_rows()]


def _write(
    d: Path, tags: list[str], n: int, *, new_style: bool = False, histogram: bool = False
) -> Path:
    w = torch_tb.SummaryWriter(str(d))
    for s in range(n):
        for i, tag in enumerate(tags):
            w.add_scalar(tag, float(s * 10 + i), s, walltime=1.7e9 + s, new_style=new_style)
        if histogram and s % 10 == 0:
            w.add_histogram("weights", np.arange(8.0), s)
    w.close()
    [path] = event_files(d)
    return path


@pytest.mark.parametrize("long_tag", [64, 70, 127, 128, 200])
@pytest.mark.parametrize("histogram", [False, True])
def test_a_long_tag_beside_short_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, long_tag: int, histogram: bool
) -> None:
    # the short tags last: the records nearest the end of the file are short ones
    tags = ["t" * long_tag, "lr", "loss", "a", "b"]
    path = _write(tmp_path, tags, 40, histogram=histogram)
    [run] = _read(path, monkeypatch)
    for i, tag in enumerate(tags):
        assert _values(run, tag if tag != "loss" else "train/loss") == [
            (s, float(s * 10 + i)) for s in range(40)
        ]


@pytest.mark.parametrize("new_style", [False, True])
@pytest.mark.parametrize("long_tag", [0, 130])
def test_every_cut_of_the_last_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, new_style: bool, long_tag: int
) -> None:
    # torch's new_style scalars are tensors with the scalars plugin's metadata, as TF2
    # and Keras write them; a file still being written ends inside a record
    tags = ["loss"] + (["x" * long_tag] if long_tag else []) + ["lr"]
    path = _write(tmp_path, tags, 40, new_style=new_style, histogram=True)
    raw = path.read_bytes()
    payloads, rest = split_records(raw)
    assert rest == b""
    last = len(raw) - len(payloads[-1]) - 16
    complete = 40 * len(tags) - 1  # (the last record is a scalar: histograms every 10)
    for cut in range(1, len(raw) - last):
        path.write_bytes(raw[: len(raw) - cut])
        [run] = _read(path, monkeypatch)
        assert run.frame.height == complete, cut
        assert [i.kind for i in run.data_quality if i.severity == "warning"] == [
            "truncated-record"
        ], cut


def _with_step_bytes(payload: bytes, step_bytes: bytes) -> bytes:
    assert payload[9] == 0x10  # wall_time (9 bytes), then the step's key
    end = 10
    while payload[end] & 0x80:
        end += 1
    return payload[:10] + step_bytes + payload[end + 1 :]


def test_a_ten_byte_step_varint_reads_as_protobuf_reads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _write(tmp_path, ["loss"], 20)
    payloads, _ = split_records(path.read_bytes())
    # ten bytes whose last carries bits past 64: protobuf keeps the low 64, i.e. -1
    payloads[5] = _with_step_bytes(payloads[5], b"\xff" * 9 + b"\x7f")
    assert event_pb2.Event.FromString(payloads[5]).step == -1
    path.write_bytes(frame_all(payloads))
    want_steps = [s if s != 4 else -1 for s in range(20)]  # record 0 is the file version
    [run] = _read(path, monkeypatch)
    assert [s for s, _ in _values(run, "train/loss")] == want_steps
    if tb._tbscan is not None:
        [by_lane] = _read(path, monkeypatch, lane=True)
        assert [s for s, _ in _values(by_lane, "train/loss")] == want_steps


def test_a_histogram_after_a_simple_value_is_a_histogram(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # simple_value and histo are one protobuf oneof: the last in the bytes is the value
    path = _write(tmp_path, ["loss"], 10)
    payloads, _ = split_records(path.read_bytes())
    value = summary_pb2.Summary.Value(tag="loss", simple_value=123.0).SerializeToString()
    value += summary_pb2.Summary.Value(
        histo=summary_pb2.HistogramProto(min=0.0, max=1.0, num=2.0)
    ).SerializeToString()
    assert summary_pb2.Summary.Value.FromString(value).WhichOneof("value") == "histo"
    summary = b"\x0a" + bytes([len(value)]) + value
    event = b"\x09" + struct.pack("<d", 1.7e9) + b"\x10\x07" + b"\x2a" + bytes([len(summary)])
    payloads.insert(8, event + summary)
    path.write_bytes(frame_all(payloads))
    for lane in (False, True) if tb._tbscan is not None else (False,):
        [run] = _read(path, monkeypatch, lane=lane)
        assert 123.0 not in run.frame.get_column("value").to_list()
        assert _values(run, "train/loss") == [(s, float(s * 10)) for s in range(10)]


def test_a_tag_that_is_not_utf8_is_read_and_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _write(tmp_path, ["loss", "lr"], 10)
    payloads, _ = split_records(path.read_bytes())
    at = payloads[6].index(b"lr")  # record 0 is the file version; 6: step 2, "lr"
    payloads[6] = payloads[6][:at] + b"l\xff" + payloads[6][at + 2 :]
    path.write_bytes(frame_all(payloads))
    for lane in (False, True) if tb._tbscan is not None else (False,):
        [run] = _read(path, monkeypatch, lane=lane)
        assert _values(run, "l\ufffd") == [(2, 21.0)]
        [note] = [i for i in run.data_quality if i.kind == "encoding"]
        assert "not valid UTF-8" in note.message and "'l\ufffd'" in note.message


def test_a_field_number_zero_makes_the_record_bad(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # protobuf refuses field number 0 ("wire format was corrupt"): so does trainlens
    path = _write(tmp_path, ["loss"], 10)
    payloads, _ = split_records(path.read_bytes())
    payloads[4] += b"\x05\x00\x00\x00\x00"  # field 0, fixed32
    with pytest.raises(Exception, match="corrupt"):
        event_pb2.Event.FromString(payloads[4])
    path.write_bytes(frame_all(payloads))
    for lane in (False, True) if tb._tbscan is not None else (False,):
        [run] = _read(path, monkeypatch, lane=lane)
        assert [s for s, _ in _values(run, "train/loss")] == [s for s in range(10) if s != 3]
        [bad] = [i for i in run.data_quality if i.kind == "bad-record"]
        assert bad.severity == "warning"
