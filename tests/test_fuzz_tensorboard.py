"""Fuzzing the TensorBoard readers — the compiled lane and the numpy reader — with real
event files (torch's SummaryWriter, scalars and tensor scalars, and tensorboardX)
damaged every way tests/_events.py knows: bit flips, cuts, length fields, CRC-valid
garbage, CRC-valid bit flips and cuts inside a record.

Properties: no exception but trainlens' own errors; the lane (where built) and the numpy
reader agree; every value read is a value written (a record whose checksum fails is
never used) and a damaged record is reported; the values of the undamaged records before
the damage are kept."""

from __future__ import annotations

import contextlib
import functools
import random
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests._events import MUTATIONS, event_files, mutate, split_records
from trainlens.core.errors import TrainlensError
from trainlens.core.run import Run
from trainlens.readers import tensorboard as tb
from trainlens.readers.base import ReadOptions

torch_tb = pytest.importorskip("torch.utils.tensorboard")
tensorboardX = pytest.importorskip("tensorboardX")
from tensorboard.compat.proto import event_pb2  # noqa: E402
from tensorboard.util import tensor_util  # noqa: E402

WRITERS = ("torch", "torch-tensor", "tensorboardX")
TAGS = ("fuzz/a", "fuzz/b", "fuzz/" + "long" * 17)  # one tag of 73 bytes
Row = tuple[int, str, float]


@functools.cache
def _written(writer: str) -> bytes:
    d = Path(tempfile.mkdtemp(prefix=f"fuzz-{writer}-"))
    cls = tensorboardX.SummaryWriter if writer == "tensorboardX" else torch_tb.SummaryWriter
    kw = {"new_style": True} if writer == "torch-tensor" else {}
    rng = np.random.default_rng(7)
    w = cls(str(d))
    for s in range(20):
        for tag in TAGS:
            w.add_scalar(tag, float(np.float32(rng.normal())), s, walltime=1.7e9 + s, **kw)
    w.close()
    [path] = event_files(d)
    return path.read_bytes()


def _record_rows(payload: bytes) -> list[Row]:
    """What protobuf reads in one record: (step, tag, value) of each scalar."""
    event = event_pb2.Event.FromString(payload)
    rows = []
    for v in event.summary.value:
        kind = v.WhichOneof("value")
        if kind == "simple_value":
            rows.append((event.step, v.tag, float(v.simple_value)))
        elif kind == "tensor":
            rows.append((event.step, v.tag, float(tensor_util.make_ndarray(v.tensor))))
    return rows


def _rows(run: Run) -> list[Row]:
    back = run.raw_names
    return [
        (int(s), back.get(m, m), float(v))
        for s, m, v in run.frame.select("step", "metric", "value").iter_rows()
    ]


def _read(path: Path, monkeypatch: pytest.MonkeyPatch, lane: bool) -> list[Row] | str:
    with monkeypatch.context() as m:
        if not lane:
            m.setattr(tb, "_tbscan", None)
        try:
            [run] = tb.read(path, ReadOptions())
        except TrainlensError as exc:
            return str(exc)
    if not run.frame.height:
        return "empty"
    rows = _rows(run)
    written = set(_rows_of(path.read_bytes()))
    lost = any(r not in written for r in rows)
    warned = any(i.severity == "warning" for i in run.data_quality)
    marks = [(-1, "warned", 0.0)] if warned or lost else []
    if run.data_quality:
        marks.append((-1, "noted", 0.0))
    return rows + marks


def _rows_of(raw: bytes) -> list[Row]:
    out = []
    for p in split_records(raw)[0]:
        # protobuf refuses a damaged record (DecodeError, or a tensor it cannot make)
        with contextlib.suppress(Exception):
            out.extend(_record_rows(p))
    return out


@pytest.mark.slow
@settings(
    max_examples=60,
    deadline=3000,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(writer=st.sampled_from(WRITERS), how=st.sampled_from(MUTATIONS), seed=st.integers(0, 2**32))
# a summary whose field number became 7 (session_log) behind a valid checksum: once read
# as a SessionLog with nothing in it, its value lost without a note
@example(writer="torch-tensor", how="crc-valid-flips", seed=3558163)
# 9 random bytes behind a valid checksum that read as one fixed32 field numbered past
# protobuf's largest (2**29 - 1): skipped as an unknown field before, the record's value
# lost without a note; protobuf refuses it, and so does trainlens now (a damaged record)
@example(writer="torch", how="crc-valid-garbage", seed=190)
def test_damaged_real_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, writer: str, how: str, seed: int
) -> None:
    raw = _written(writer)
    payloads, _ = split_records(raw)
    per_record = [_record_rows(p) for p in payloads]
    damaged, touched = mutate(raw, how, random.Random(seed))
    path = tmp_path / "events.out.tfevents.1.fuzz"
    path.write_bytes(damaged)

    got = _read(path, monkeypatch, lane=False)
    if tb._tbscan is not None:
        assert _read(path, monkeypatch, lane=True) == got  # the lane agrees, or declines
    if isinstance(got, str):
        return  # a TrainlensError: one sentence; nothing read
    rows = [r for r in got if r[0] != -1 or r[1] not in ("warned", "noted")]
    warned = (-1, "warned", 0.0) in got
    noted = (-1, "noted", 0.0) in got

    # every value read was written: by the writer, or (CRC-valid damage) in the damaged
    # record as protobuf reads it, never from a record whose checksum fails
    allowed = Counter(r for rec in per_record for r in rec)
    if how.startswith("crc-valid"):
        allowed.update(_rows_of(damaged))
    extra = Counter(rows) - allowed
    if how.startswith("crc-valid"):
        # a record damaged behind a valid checksum is a record like any other; protobuf
        # refuses a tag that is not UTF-8, trainlens reads it with U+FFFD: at most the
        # values that one record held
        (k,) = touched
        assert sum(extra.values()) <= max(len(per_record[k]), 1), extra
    else:
        assert not extra, extra

    # the undamaged records before the first damaged one are all kept
    first = min(touched) if touched else len(payloads)
    if how in ("bit-flips", "truncate"):
        first = _first_damaged_record(raw, damaged, how)
    kept = Counter(rows)
    for rec in per_record[:first]:
        for r in rec:
            assert kept[r] >= 1, (r, how)
    # damage that lost a written value is reported
    lost = sum((Counter(r for rec in per_record for r in rec) - kept).values())
    cut_between_records = how == "truncate" and split_records(damaged)[1] == b""
    if lost and not how.startswith("crc-valid") and not cut_between_records:
        assert warned  # (a file cut between records looks like one still being written)
    if how.startswith("crc-valid") and not _parses(split_records(damaged)[0][min(touched)]):
        # a record protobuf refuses is never lost in silence: it is reported (as damaged,
        # as a tag that is not UTF-8, as the summary it holds), or read as what it now
        # says (protobuf is stricter than the wire format; at most one record's values)
        assert noted or extra or not lost


def _parses(payload: bytes) -> bool:
    try:
        event_pb2.Event.FromString(payload)
    except Exception:
        return False
    return True


def _first_damaged_record(raw: bytes, damaged: bytes, how: str) -> int:
    """The index of the first record whose bytes differ (or are cut off)."""
    offset = 0
    for i, p in enumerate(split_records(raw)[0]):
        end = offset + 16 + len(p)
        if how == "truncate" and end > len(damaged):
            return i
        if how == "bit-flips" and raw[offset:end] != damaged[offset:end]:
            return i
        offset = end
    return len(split_records(raw)[0])


def test_the_fuzz_files_hold_what_was_written() -> None:
    # (the properties above are only as good as the rows they compare with)
    for writer in WRITERS:
        rows = _rows_of(_written(writer))
        assert len(rows) == 20 * len(TAGS)
        assert {t for _, t, _ in rows} == set(TAGS)


@pytest.mark.parametrize("writer", WRITERS)
def test_intact_files_read_every_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, writer: str
) -> None:
    path = tmp_path / "events.out.tfevents.1.fuzz"
    path.write_bytes(_written(writer))
    got = _read(path, monkeypatch, lane=False)
    assert sorted(got) == sorted(_rows_of(_written(writer)))
