"""TensorBoard reader: files written by torch, tensorboardX and tensorboard's own writer."""

from __future__ import annotations

import math
import random
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from trainlens.core.errors import UnreadableInputError
from trainlens.core.run import Run
from trainlens.readers import _tbcycles as tbcycles
from trainlens.readers import _tbdecode as dec
from trainlens.readers import _tfrecord as tfr
from trainlens.readers import _tfrecord_crc as tfcrc
from trainlens.readers import tensorboard as tb
from trainlens.readers._tbrows import FileData
from trainlens.readers._tbtags import Tags
from trainlens.readers.base import ReadOptions, read_head

torch_tb = pytest.importorskip("torch.utils.tensorboard")
tensorboardX = pytest.importorskip("tensorboardX")
pytest.importorskip("tensorboard")

from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, types_pb2  # noqa: E402
from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto  # noqa: E402
from tensorboard.summary.writer.event_file_writer import EventFileWriter  # noqa: E402

SPECIAL = [math.nan, math.inf, -math.inf, 0.0, -0.0, 1e-45, 3.4e38]


def _one_file(d: Path) -> Path:
    files = sorted(d.glob("events.out.tfevents.*"))
    assert len(files) == 1, files
    return files[0]


def _read(path: Path, start_offset: int = 0) -> list[Run]:
    return tb.read(path, ReadOptions(start_offset=start_offset))


def _series(run: Run, metric: str) -> pl.DataFrame:
    return run.frame.filter(pl.col("metric") == metric)


def _record_offsets(path: Path) -> list[tuple[int, int]]:
    """(header offset, data length) of every record, walked the plain way."""
    raw = path.read_bytes()
    out, o = [], 0
    while o + 12 <= len(raw):
        (n,) = struct.unpack_from("<Q", raw, o)
        if o + 16 + n > len(raw):
            break
        out.append((o, n))
        o += 16 + n
    return out


def _torch_file(d: Path, n: int = 50, **kw: object) -> tuple[Path, dict[str, list]]:
    """A torch SummaryWriter file with train/loss, lr every step and Loss/val every 5."""
    rng = np.random.default_rng(1)
    logged: dict[str, list] = {"train/loss": [], "lr": [], "Loss/val": []}
    w = torch_tb.SummaryWriter(str(d))
    for s in range(n):
        for tag in ("train/loss", "lr") + (("Loss/val",) if s % 5 == 0 else ()):
            v = float(rng.normal())
            wall = 1_700_000_000.0 + s + 0.125
            w.add_scalar(tag, v, s, walltime=wall, **kw)
            logged[tag].append((s, v, wall))
    w.close()
    return _one_file(d), logged


# ---- torch -------------------------------------------------------------------------------


@pytest.mark.parametrize("new_style", [False, True])
def test_torch_scalars_round_trip(tmp_path: Path, new_style: bool) -> None:
    w = torch_tb.SummaryWriter(str(tmp_path))
    rng = np.random.default_rng(0)
    values = [*SPECIAL, *rng.normal(size=300).tolist()]
    for i, v in enumerate(values):
        w.add_scalar("train/loss", v, 10 * i, walltime=1.7e9 + i / 8, new_style=new_style)
        w.add_scalar("lr", 1e-3 * (i + 1), 10 * i, walltime=1.7e9 + i / 8, new_style=new_style)
    w.close()
    (run,) = _read(tmp_path)
    assert run.format == "tensorboard"
    assert run.name == tmp_path.name
    loss = _series(run, "train/loss")
    want = np.array(values, dtype=np.float32).astype(np.float64)
    got = loss["value"].to_numpy()
    assert np.array_equal(got, want, equal_nan=True)
    assert np.isnan(got[0]) and got[1] == math.inf and got[2] == -math.inf
    assert loss["step"].to_list() == [10 * i for i in range(len(values))]
    assert loss["wall_time"].to_list() == [1.7e9 + i / 8 for i in range(len(values))]
    lr = _series(run, "lr")["value"].to_numpy()
    assert np.array_equal(lr, np.float32(1e-3 * np.arange(1, len(values) + 1)).astype(np.float64))
    plugins = run.metadata["plugins"]
    assert "scalars" in plugins
    assert run.metadata["records"][_one_file(tmp_path).name] == 2 * len(values) + 1
    assert run.cursor == {str(_one_file(tmp_path)): _one_file(tmp_path).stat().st_size}
    assert not [i for i in run.data_quality if i.severity != "info"]


def test_torch_double_precision_tensor(tmp_path: Path) -> None:
    w = torch_tb.SummaryWriter(str(tmp_path))
    values = [1 / 3, math.pi * 1e10, math.nan, -math.inf, 1e-300]
    for i, v in enumerate(values):
        w.add_scalar("grad_norm", v, i, new_style=True, double_precision=True)
    w.close()
    (run,) = _read(tmp_path)
    got = _series(run, "grad_norm")["value"].to_numpy()
    assert np.array_equal(got, np.array(values), equal_nan=True)


def test_non_scalar_summaries_are_counted(tmp_path: Path) -> None:
    w = torch_tb.SummaryWriter(str(tmp_path))
    for s in range(4):
        w.add_scalar("train/loss", 1.0 / (s + 1), s)
        w.add_histogram("weights", np.random.default_rng(s).normal(size=100), s)
    w.add_image("img", np.zeros((3, 4, 4), dtype=np.float32), 0)
    w.add_text("note", "hello", 0)
    w.close()
    (run,) = _read(tmp_path)
    assert run.metrics == ["train/loss"]
    assert _series(run, "train/loss")["value"].to_list() == [1.0, 0.5, np.float32(1 / 3), 0.25]
    (issue,) = [i for i in run.data_quality if i.kind == "non-scalar"]
    assert issue.severity == "info"
    assert issue.count == 6
    assert issue.message.startswith("6 non-scalar summaries skipped")
    assert issue.details == {"histograms": 4, "images": 1, "text": 1}
    assert {"scalars", "text"} <= set(run.metadata["plugins"])


# ---- tensorboardX ------------------------------------------------------------------------


def test_tensorboardx_add_scalar_and_add_scalars(tmp_path: Path) -> None:
    logdir = tmp_path / "exp"
    w = tensorboardX.SummaryWriter(str(logdir))
    for s in range(20):
        w.add_scalar("lr", 0.1 / (s + 1), s)
        w.add_scalars("loss", {"train": 2.0 - s / 10, "val": 3.0 - s / 10}, s)
        w.add_scalars("acc/top", {"k1": s / 20}, s)
    w.close()
    runs = _read(tmp_path)
    assert [r.name for r in runs] == ["exp"]
    (run,) = runs
    assert run.metrics == ["acc/top/k1", "lr", "train/loss", "val/loss"]
    assert run.raw_names["train/loss"] == "loss/train"
    assert run.raw_names["val/loss"] == "loss/val"
    for metric, fn in (
        ("train/loss", lambda s: 2.0 - s / 10),
        ("val/loss", lambda s: 3.0 - s / 10),
        ("acc/top/k1", lambda s: s / 20),
        ("lr", lambda s: 0.1 / (s + 1)),
    ):
        ser = _series(run, metric)
        assert ser["step"].to_list() == list(range(20))
        assert ser["value"].to_list() == [float(np.float32(fn(s))) for s in range(20)]
    assert len(run.cursor) == 4  # the run's own file and three add_scalars files
    assert not run.data_quality


def test_torch_add_scalars_directories_fold_back(tmp_path: Path) -> None:
    w = torch_tb.SummaryWriter(str(tmp_path / "run"))
    for s in range(5):
        w.add_scalars("Loss", {"train": 1.0 + s, "val": 2.0 + s}, s)
        w.add_scalars("a/b", {"c": float(s)}, s)
    w.close()
    assert (tmp_path / "run" / "Loss_train").is_dir()
    assert (tmp_path / "run" / "a_b_c").is_dir()
    (run,) = _read(tmp_path / "run")
    assert run.name == "run"
    assert run.metrics == ["a/b/c", "train/loss", "val/loss"]
    assert _series(run, "val/loss")["value"].to_list() == [2.0, 3.0, 4.0, 5.0, 6.0]


# ---- tensorboard's own writer: TF2-style tensors -----------------------------------------


def _tensor_event(tag: str, step: int, tensor: tensor_pb2.TensorProto, meta: bool) -> object:
    from tensorboard.plugins.scalar import metadata as scalar_metadata

    value = summary_pb2.Summary.Value(tag=tag, tensor=tensor)
    if meta:
        value.metadata.CopyFrom(scalar_metadata.create_summary_metadata(None, None))
        value.metadata.data_class = summary_pb2.DATA_CLASS_SCALAR
    return event_pb2.Event(
        wall_time=1.7e9 + step, step=step, summary=summary_pb2.Summary(value=[value])
    )


def _bf16_bytes(x: np.ndarray) -> bytes:
    bits = np.asarray(x, dtype=np.float32).view(np.uint32) >> np.uint32(16)
    return bits.astype("<u2").tobytes()


def _tf2_file(d: Path) -> dict[str, np.ndarray]:
    """Scalars as TF2 writes them (tensor_content, empty shape), one tag per dtype, plus
    half_val / int tensors and a histogram-like non-scalar tensor."""
    rng = np.random.default_rng(3)
    base = np.concatenate([[np.nan, np.inf, -np.inf, 0.0, -2.5], rng.normal(size=40)])
    # values exactly representable in each dtype
    want = {
        "f32": base.astype(np.float32).astype(np.float64),
        "f64": base,
        "f16": base.astype(np.float16).astype(np.float64),
        "bf16": (
            (base.astype(np.float32).view(np.uint32) & np.uint32(0xFFFF0000))
            .view(np.float32)
            .astype(np.float64)
        ),
        "half_val": base.astype(np.float16).astype(np.float64),
        "bf16_half_val": (
            (base.astype(np.float32).view(np.uint32) & np.uint32(0xFFFF0000))
            .view(np.float32)
            .astype(np.float64)
        ),
        "int64": np.arange(len(base), dtype=np.float64) * 1e6 - 7,
    }
    w = EventFileWriter(str(d))
    shape = TensorShapeProto()
    for i in range(len(base)):
        x = base[i]
        tensors = {
            "f32": tensor_pb2.TensorProto(
                dtype=types_pb2.DT_FLOAT,
                tensor_shape=shape,
                tensor_content=np.float32(x).tobytes(),
            ),
            "f64": tensor_pb2.TensorProto(
                dtype=types_pb2.DT_DOUBLE,
                tensor_shape=shape,
                tensor_content=np.float64(x).tobytes(),
            ),
            "f16": tensor_pb2.TensorProto(
                dtype=types_pb2.DT_HALF,
                tensor_shape=shape,
                tensor_content=np.float16(x).tobytes(),
            ),
            "bf16": tensor_pb2.TensorProto(
                dtype=types_pb2.DT_BFLOAT16,
                tensor_shape=shape,
                tensor_content=_bf16_bytes(np.array([x])),
            ),
            "half_val": tensor_pb2.TensorProto(
                dtype=types_pb2.DT_HALF,
                tensor_shape=shape,
                half_val=[int(np.float16(x).view(np.uint16))],
            ),
            "bf16_half_val": tensor_pb2.TensorProto(
                dtype=types_pb2.DT_BFLOAT16,
                tensor_shape=shape,
                half_val=[int(np.float32(x).view(np.uint32) >> np.uint32(16))],
            ),
            "int64": tensor_pb2.TensorProto(
                dtype=types_pb2.DT_INT64,
                tensor_shape=shape,
                int64_val=[int(want["int64"][i])],
            ),
        }
        for tag, t in tensors.items():
            w.add_event(_tensor_event(tag, i, t, meta=(i % 2 == 0)))
        hist = tensor_pb2.TensorProto(
            dtype=types_pb2.DT_DOUBLE,
            tensor_shape=TensorShapeProto(
                dim=[TensorShapeProto.Dim(size=2), TensorShapeProto.Dim(size=3)]
            ),
            tensor_content=np.arange(6, dtype=np.float64).tobytes(),
        )
        w.add_event(_tensor_event("hist", i, hist, meta=False))
    w.close()
    return want


def test_tf2_tensor_scalars_exact(tmp_path: Path) -> None:
    want = _tf2_file(tmp_path)
    (run,) = _read(tmp_path)
    for tag, values in want.items():
        ser = _series(run, tag)
        assert ser["step"].to_list() == list(range(len(values))), tag
        assert np.array_equal(ser["value"].to_numpy(), values, equal_nan=True), tag
        assert ser["wall_time"].to_list() == [1.7e9 + i for i in range(len(values))]
    (issue,) = [i for i in run.data_quality if i.kind == "non-scalar"]
    assert issue.count == len(want["f32"])  # the 2x3 tensor, once per step


# ---- fast path == general path -------------------------------------------------------------


def _mixed_file(d: Path) -> Path:
    """Irregular record lengths (eval every 7 steps, growing step varints), NaN/inf, new and
    old style, doubles, histograms, one TF2 tensor tag."""
    w = torch_tb.SummaryWriter(str(d))
    rng = np.random.default_rng(5)
    for i in range(700):
        s = i * 37  # crosses the 1-, 2- and 3-byte varint boundaries
        v = SPECIAL[i % len(SPECIAL)] if i % 11 == 0 else float(rng.normal())
        w.add_scalar("train/loss", v, s)
        w.add_scalar("lr", 1e-4 * i, s, new_style=True)
        w.add_scalar("grad_norm", abs(v), s, new_style=True, double_precision=True)
        if i % 7 == 0:
            w.add_scalar("val/loss", v / 2, s)
        if i % 97 == 0:
            w.add_histogram("w", rng.normal(size=50), s)
    w.close()
    path = _one_file(d)
    # one flipped byte inside record 300's data
    o, n = _record_offsets(path)[300]
    raw = bytearray(path.read_bytes())
    raw[o + 12 + n // 2] ^= 0x40
    path.write_bytes(bytes(raw))
    return path


def _same(a: FileData, b: FileData, ta: Tags, tb_: Tags) -> None:
    assert a.records == b.records
    assert np.array_equal(a.rows.record, b.rows.record)
    assert np.array_equal(a.rows.step, b.rows.step)
    assert np.array_equal(a.rows.wall, b.rows.wall, equal_nan=True)
    assert np.array_equal(a.rows.value, b.rows.value, equal_nan=True)
    names_a = [ta.names[i] for i in a.rows.tag]
    names_b = [tb_.names[i] for i in b.rows.tag]
    assert names_a == names_b
    assert [(i.kind, i.location, i.message) for i in a.issues] == [
        (i.kind, i.location, i.message) for i in b.issues
    ]
    assert a.skipped == b.skipped
    assert a.end == b.end


def test_fast_path_equals_general_path(tmp_path: Path) -> None:
    path = _mixed_file(tmp_path / "mixed")
    tags_fast, tags_slow = Tags(), Tags()
    fast = dec.read_events_file(path, tags_fast, fast=True)
    slow = dec.read_events_file(path, tags_slow, fast=False)
    assert fast.fast_records > 0.9 * len(fast.rows.record)  # the fast path did the work
    assert fast.cycle_records > 0.8 * fast.fast_records  # most of it a cycle at a time
    assert slow.fast_records == 0
    _same(fast, slow, tags_fast, tags_slow)
    (bad,) = [i for i in fast.issues if i.kind == "corrupt-record"]
    assert bad.location == f"record 301 (byte offset {_record_offsets(path)[300][0]})"

    want = _tf2_file(tmp_path / "tf2")
    path2 = _one_file(tmp_path / "tf2")
    tf, ts = Tags(), Tags()
    f2 = dec.read_events_file(path2, tf, fast=True)
    s2 = dec.read_events_file(path2, ts, fast=False)
    assert f2.fast_records >= 4 * len(want["f32"])  # content tensors take the fast path
    _same(f2, s2, tf, ts)


def test_cycles_notice_whatever_changes_between_them(tmp_path: Path) -> None:
    # three tags every step (two of the same length), so that each cycle of records looks
    # like the last one's except where something changed: the order of the two (step
    # 300: the lengths stay, only the bytes differ), a tag written as a tensor (step 400),
    # a varint one byte wider (step 128), two flipped bytes (steps 450 and 460), an
    # extra tag (step 500)
    w = torch_tb.SummaryWriter(str(tmp_path))
    for i in range(600):
        logged = [("loss/a", i + 0.25), ("loss/b", -i - 0.5), ("lr", i + 0.125)]
        if i == 300:
            logged[:2] = logged[1::-1]
        for tag, v in logged:
            w.add_scalar(tag, v, i, new_style=(i == 400 and tag == "loss/a"))
        if i == 500:
            w.add_scalar("loss/c", 7.0, i)
    w.close()
    path = _one_file(tmp_path)
    raw = bytearray(path.read_bytes())
    # inside the value (a byte the cycles mask out): the data checksum no longer matches;
    # two tags, so that one of them is not the first record of its cycle
    for r in (1353, 1382):  # step 450 lr, step 460 loss/b (record 0: the file version)
        o, n = _record_offsets(path)[r]
        raw[o + 12 + n - 3] ^= 0x01
    path.write_bytes(bytes(raw))

    tags_fast, tags_slow = Tags(), Tags()
    fast = dec.read_events_file(path, tags_fast)
    slow = dec.read_events_file(path, tags_slow, fast=False)
    _same(fast, slow, tags_fast, tags_slow)
    assert fast.cycle_records > 1200  # the cycles were used, around every change
    names = np.array([tags_fast.names[t].decode() for t in fast.rows.tag])
    step, value = fast.rows.step, fast.rows.value
    a, b, lr = names == "loss/a", names == "loss/b", names == "lr"
    assert np.array_equal(value[a], step[a] + 0.25)
    assert np.array_equal(value[b], -step[b] - 0.5)
    assert np.array_equal(value[lr], step[lr] + 0.125)
    assert np.array_equal(step[a], np.arange(600))
    assert sorted(set(range(600)) - set(step[b].tolist())) == [460]  # the flipped records
    assert sorted(set(range(600)) - set(step[lr].tolist())) == [450]
    assert step[names == "loss/c"].tolist() == [500]
    assert names[(step == 300)].tolist() == ["loss/b", "loss/a", "lr"]  # in file order


def test_tags_of_one_length_taking_turns_are_decoded_by_cycle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # their lengths repeat every record, their bytes every other: cycles of one record
    # would each end after itself (once a read of 20k steps took 30 s, one call a record)
    w = torch_tb.SummaryWriter(str(tmp_path))
    for i in range(5000):
        w.add_scalar("loss/a", i + 0.25, i)
        w.add_scalar("loss/b", -i - 0.5, i)
    w.close()
    path = _one_file(tmp_path)
    calls: list[int] = []
    cycles = tbcycles.cycles

    def counted(*args: Any) -> Any:
        calls.append(args[-1])
        return cycles(*args)

    monkeypatch.setattr(tbcycles, "cycles", counted)
    tags_fast, tags_slow = Tags(), Tags()
    fast = dec.read_events_file(path, tags_fast)
    assert len(calls) < 30
    assert fast.cycle_records > 0.95 * fast.fast_records
    _same(fast, dec.read_events_file(path, tags_slow, fast=False), tags_fast, tags_slow)


@pytest.mark.parametrize("seed", range(12))
def test_fast_path_equals_general_path_on_random_runs(tmp_path: Path, seed: int) -> None:
    # random logging schedules as a training loop makes them: tags every k steps, steps
    # jumping and going back, tag order changing, new style and double scalars, NaN and
    # inf, histograms and text between, then a few flipped bits anywhere in the file
    rng = random.Random(seed)
    w = torch_tb.SummaryWriter(str(tmp_path))
    n_tags = rng.randrange(1, 6)
    tags = [f"t{rng.randrange(100)}/" + "x" * rng.randrange(1, 12) for _ in range(n_tags)]
    every = {tag: rng.choice([1, 1, 1, 2, 3, 7]) for tag in tags}
    step = rng.randrange(0, 200)
    for i in range(rng.randrange(200, 1200)):
        step += rng.choice([1, 1, 1, 2, 50]) if rng.random() < 0.99 else -rng.randrange(1, 50)
        order = tags if rng.random() < 0.98 else rng.sample(tags, len(tags))
        for tag in order:
            if i % every[tag] == 0:
                v = rng.choice(SPECIAL) if rng.random() < 0.01 else rng.gauss(0, 1)
                new_style, double = rng.random() < 0.02, rng.random() < 0.01
                w.add_scalar(tag, v, step, new_style=new_style, double_precision=double)
        if rng.random() < 0.01:
            w.add_histogram("h", np.random.default_rng(i).normal(size=20), step)
        if rng.random() < 0.005:
            w.add_text("note", "hello " * rng.randrange(1, 5), step)
    w.close()
    path = _one_file(tmp_path)
    raw = bytearray(path.read_bytes())
    for _ in range(rng.randrange(0, 4)):
        raw[rng.randrange(len(raw))] ^= 1 << rng.randrange(8)
    path.write_bytes(bytes(raw))
    tags_fast, tags_slow = Tags(), Tags()
    fast = dec.read_events_file(path, tags_fast)
    slow = dec.read_events_file(path, tags_slow, fast=False)
    _same(fast, slow, tags_fast, tags_slow)
    assert fast.fast_records > 0.5 * fast.records


@pytest.mark.parametrize("start", [0, 5000, 6371])
def test_mapped_file_and_copy_read_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, start: int
) -> None:
    # the file is mapped where the platform allows (no zero padding after the last record)
    # and read into a padded copy elsewhere (Windows); both must give the same rows
    path = _mixed_file(tmp_path)
    offsets = [o for o, _ in _record_offsets(path)]
    start = min(o for o in offsets if o >= start)  # a record's offset, not page aligned
    mapped_buf = tfr.Buffer.from_file(str(path), start)
    assert mapped_buf.pad == 0 and mapped_buf.n == path.stat().st_size - start
    t1, t2 = Tags(), Tags()
    mapped = dec.read_events_file(path, t1, start_offset=start)
    monkeypatch.setattr(tfr, "_CAN_MAP", False)
    copy_buf = tfr.Buffer.from_file(str(path), start)
    assert copy_buf.pad > 0 and copy_buf.arr[: copy_buf.n].tobytes() == path.read_bytes()[start:]
    copied = dec.read_events_file(path, t2, start_offset=start)
    _same(mapped, copied, t1, t2)
    assert mapped.fast_records >= copied.fast_records - 2  # only the last records differ
    assert len(mapped.rows.record) > 0.5 * 700 * 3


def test_fallback_crc_without_the_c_extension(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _mixed_file(tmp_path)
    t1, t2 = Tags(), Tags()
    with_c = dec.read_events_file(path, t1)
    monkeypatch.setattr(tfcrc, "fast_crc32c", None)
    assert tfcrc.crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    without = dec.read_events_file(path, t2)
    _same(with_c, without, t1, t2)


def test_speculative_framing_matches_plain_walk(tmp_path: Path) -> None:
    path = _mixed_file(tmp_path)
    buf = tfr.Buffer.from_file(str(path))
    fast = tfr.frame_records(buf)
    slow = tfr.frame_records(buf, speculate=False)
    assert fast.sequential < len(fast.starts) // 4
    assert np.array_equal(fast.starts, slow.starts)
    assert np.array_equal(fast.lens, slow.lens)
    assert [(o, n) for o, n in zip(fast.starts.tolist(), fast.lens.tolist(), strict=True)] == (
        _record_offsets(path)
    )


# ---- corrupt, truncated, empty -------------------------------------------------------------


def test_flipped_byte_skips_only_that_record(tmp_path: Path) -> None:
    path, logged = _torch_file(tmp_path, n=60)
    total = sum(len(v) for v in logged.values())
    recs = _record_offsets(path)
    o, n = recs[25]
    raw = bytearray(path.read_bytes())
    raw[o + 12 + n - 3] ^= 0x01  # inside the value
    path.write_bytes(bytes(raw))
    (run,) = _read(path)
    assert run.frame.height == total - 1
    (issue,) = [i for i in run.data_quality if i.kind == "corrupt-record"]
    assert issue.location == f"record 26 (byte offset {o})"
    assert "checksum" in issue.message
    assert issue.source == str(path)


def test_corrupt_header_resynchronises(tmp_path: Path) -> None:
    path, logged = _torch_file(tmp_path, n=60)
    total = sum(len(v) for v in logged.values())
    recs = _record_offsets(path)
    o, n = recs[40]
    raw = bytearray(path.read_bytes())
    raw[o] ^= 0x10  # the length field: its checksum no longer matches
    path.write_bytes(bytes(raw))
    (run,) = _read(path)
    assert run.frame.height == total - 1
    (issue,) = [i for i in run.data_quality if i.kind == "corrupt-record"]
    assert issue.location == f"record 41 (byte offset {o})"
    assert f"skipped {16 + n} bytes" in issue.message


def test_truncated_last_record_keeps_the_rest(tmp_path: Path) -> None:
    path, logged = _torch_file(tmp_path, n=30)
    total = sum(len(v) for v in logged.values())
    o, _ = _record_offsets(path)[-1]
    size = path.stat().st_size
    with path.open("r+b") as fh:
        fh.truncate(size - 7)
    (run,) = _read(path)
    assert run.frame.height == total - 1
    (issue,) = [i for i in run.data_quality if i.kind == "truncated-record"]
    assert issue.severity == "warning"
    assert issue.location == f"record {len(_record_offsets(path)) + 1} (byte offset {o})"
    assert run.cursor[str(path)] == o


def test_empty_file_is_unreadable(tmp_path: Path) -> None:
    path = tmp_path / "events.out.tfevents.123.host"
    path.write_bytes(b"")
    with pytest.raises(UnreadableInputError, match="empty") as err:
        _read(path)
    assert str(path) in str(err.value)


def test_garbage_is_unreadable(tmp_path: Path) -> None:
    path = tmp_path / "events.out.tfevents.123.host"
    path.write_bytes(np.random.default_rng(0).integers(0, 256, 5000, dtype=np.uint8).tobytes())
    with pytest.raises(UnreadableInputError, match="not a TensorBoard event file") as err:
        _read(path)
    assert str(path) in str(err.value)


def test_file_without_scalars_is_unreadable(tmp_path: Path) -> None:
    w = torch_tb.SummaryWriter(str(tmp_path))
    w.add_histogram("w", np.arange(10.0), 0)
    w.close()
    with pytest.raises(UnreadableInputError, match="no scalar summaries"):
        _read(_one_file(tmp_path))


# ---- directories, resumes, names, cursors ----------------------------------------------------


def test_directory_with_two_runs(tmp_path: Path) -> None:
    _torch_file(tmp_path / "runs" / "a", n=10)
    _torch_file(tmp_path / "runs" / "b" / "seed1", n=12)
    runs = _read(tmp_path / "runs")
    assert sorted(r.name for r in runs) == ["a", "b/seed1"]
    by = {r.name: r for r in runs}
    assert _series(by["a"], "train/loss").height == 10
    assert _series(by["b/seed1"], "train/loss").height == 12
    assert by["b/seed1"].source == str(tmp_path / "runs" / "b" / "seed1")


def test_resume_writes_second_file_and_restarts(tmp_path: Path) -> None:
    w = torch_tb.SummaryWriter(str(tmp_path), filename_suffix=".first")
    for s in range(10):
        w.add_scalar("train/loss", 10.0 - s, s, walltime=1e9 + s)
    w.close()
    first = _one_file(tmp_path)
    # a resumed job starts a new file (a later timestamp in its name) from a checkpoint
    second = first.with_name(
        first.name.replace(first.name.split(".")[3], str(int(first.name.split(".")[3]) + 60))
    )
    w = torch_tb.SummaryWriter(str(tmp_path / "tmp"))
    for s in range(6, 15):
        w.add_scalar("train/loss", 100.0 + s, s, walltime=2e9 + s)
    w.close()
    shutil.move(_one_file(tmp_path / "tmp"), second)
    shutil.rmtree(tmp_path / "tmp")
    (run,) = _read(tmp_path)
    assert run.metadata["files"] == [first.name, second.name]
    (restart,) = [i for i in run.data_quality if i.kind == "restart"]
    assert restart.details["from_step"] == 9 and restart.details["to_step"] == 6
    steps, values = run.series("train/loss")
    assert steps.tolist() == list(range(15))
    assert values.tolist() == [10.0 - s for s in range(6)] + [100.0 + s for s in range(6, 15)]


def test_canonical_names(tmp_path: Path) -> None:
    w = torch_tb.SummaryWriter(str(tmp_path / "a"))
    w.add_scalar("Loss/train", 1.0, 0)
    w.add_scalar("lr", 0.1, 0)
    w.close()
    w = torch_tb.SummaryWriter(str(tmp_path / "b"))
    w.add_scalar("train/loss", 2.0, 0)
    w.close()
    runs = {r.name: r for r in _read(tmp_path)}
    assert runs["a"].metrics == ["lr", "train/loss"]
    assert runs["a"].raw_names["train/loss"] == "Loss/train"
    assert runs["b"].metrics == ["train/loss"]


def test_cursor_and_start_offset_tail_a_growing_file(tmp_path: Path) -> None:
    src, logged = _torch_file(tmp_path / "src", n=40)
    total = sum(len(v) for v in logged.values())
    recs = _record_offsets(src)
    raw = src.read_bytes()
    live = tmp_path / "live" / src.name
    live.parent.mkdir()
    # the writer has flushed 70 records and is half-way through the 71st
    cut = recs[70][0] + 9
    live.write_bytes(raw[:cut])
    (run,) = _read(live)
    assert run.frame.height == 69  # 70 records minus the file_version event
    offset = run.cursor[str(live)]
    assert offset == recs[70][0]
    live.write_bytes(raw)  # the rest arrives
    (more,) = _read(live, start_offset=offset)
    assert more.frame.height == total - 69
    assert more.cursor[str(live)] == len(raw)
    assert not [i for i in more.data_quality if i.severity != "info"]
    (nothing,) = _read(live, start_offset=len(raw))
    assert nothing.frame.height == 0
    with pytest.raises(UnreadableInputError, match="past the end"):
        _read(live, start_offset=len(raw) + 1)


def test_sniff(tmp_path: Path) -> None:
    path, _ = _torch_file(tmp_path / "d", n=3)
    plain = tmp_path / "renamed.bin"
    shutil.copy(path, plain)
    other = tmp_path / "x.csv"
    other.write_text("step,loss\n1,2\n")
    assert tb.sniff(path, read_head(path))
    assert tb.sniff(plain, read_head(plain))
    assert tb.sniff(tmp_path, b"")
    assert not tb.sniff(other, read_head(other))
    empty_dir = tmp_path / "empty"
    empty_dir.mkdir()
    assert not tb.sniff(empty_dir, b"")
    (run,) = _read(plain)
    assert run.name == "renamed"
    assert run.frame.height == 7


def _several_values(d: Path, histogram: bool) -> None:
    # TF1's merged summaries put several values into one Event
    w = EventFileWriter(str(d))
    for s in range(1, 4):
        values = [
            summary_pb2.Summary.Value(tag="loss", simple_value=1.0 / s),
            summary_pb2.Summary.Value(tag="learning_rate", simple_value=0.5 * s),
        ]
        if histogram:
            values.append(
                summary_pb2.Summary.Value(
                    tag="hist", histo=summary_pb2.HistogramProto(min=0, max=1, num=2)
                )
            )
        summary = summary_pb2.Summary(value=values)
        w.add_event(event_pb2.Event(wall_time=100.0 + s, step=s, summary=summary))
    w.close()


def test_event_with_several_values(tmp_path: Path) -> None:
    _several_values(tmp_path, histogram=True)
    (run,) = _read(tmp_path)
    # one block per metric, file order within each (the frame's layout when no step
    # goes back)
    assert run.frame.select("step", "metric", "value").rows() == [
        (1, "train/loss", 1.0),
        (2, "train/loss", 0.5),
        (3, "train/loss", float(np.float32(1 / 3))),
        (1, "lr", 0.5),
        (2, "lr", 1.0),
        (3, "lr", 1.5),
    ]
    (issue,) = [i for i in run.data_quality if i.kind == "non-scalar"]
    assert issue.details == {"histograms": 3}


def _resident_kb(arr: np.ndarray) -> int:
    """Resident size of the mapping that holds ``arr`` (Linux /proc/self/smaps)."""
    addr = arr.__array_interface__["data"][0]
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0]
        if "-" in head and not head.endswith(":"):
            lo, hi = (int(x, 16) for x in head.split("-"))
            inside = lo <= addr < hi
        elif inside and head == "Rss:":
            return int(line.split()[1])
    raise AssertionError("mapping not found")


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="needs Linux /proc")
def test_buffer_release_drops_only_whole_pages_before_the_mark(tmp_path: Path) -> None:
    import mmap

    path, _ = _torch_file(tmp_path, n=3000)
    raw = path.read_bytes()
    assert len(raw) > 4 * mmap.PAGESIZE
    buf = tfr.Buffer.from_file(str(path))
    assert buf.arr.tobytes()[: buf.n] == raw  # all of it resident now
    page_kb = mmap.PAGESIZE // 1024
    full = _resident_kb(buf.arr)
    assert full >= len(raw) // 1024
    mark = 2 * mmap.PAGESIZE + 100  # mid-page: that page must stay
    buf.release(mark)
    assert _resident_kb(buf.arr) == full - 2 * page_kb
    buf.release(mark - mmap.PAGESIZE)  # going back releases nothing more
    assert _resident_kb(buf.arr) == full - 2 * page_kb
    buf.release(buf.n)
    assert _resident_kb(buf.arr) <= page_kb  # the last, partial page stays
    assert buf.arr[: buf.n].tobytes() == raw  # released bytes read back from the file


# ---- the compiled lane ---------------------------------------------------------------------

lane = pytest.mark.skipif(tb._tbscan is None, reason="the compiled lane is not built")


def test_compiled_lane_is_built_where_a_compiler_is() -> None:
    # the extension is optional at install; where a C compiler exists it must have built
    # (`pip install -e .` puts it beside the sources), or every lane test below would skip
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler on this machine")
    assert tb._tbscan is not None, "run `pip install -e .` to build trainlens.readers._tbscan"


def _numpy_read(path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Run]:
    with monkeypatch.context() as m:
        m.setattr(tb, "_tbscan", None)
        return _read(path)


def _same_runs(a: list[Run], b: list[Run]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert_frame_equal(x.frame, y.frame, check_exact=True)
        assert (x.name, x.source, x.format) == (y.name, y.source, y.format)
        # (the numpy reader notes why it read a file the compiled lane was offered)
        assert {k: v for k, v in x.metadata.items() if k != tb.NOTE_KEY} == {
            k: v for k, v in y.metadata.items() if k != tb.NOTE_KEY
        }
        assert x.cursor == y.cursor
        assert [(i.kind, i.location, i.message) for i in x.data_quality] == [
            (i.kind, i.location, i.message) for i in y.data_quality
        ]


@lane
@pytest.mark.parametrize("writer", ["torch", "tensorboardX"])
def test_compiled_lane_equals_numpy_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, writer: str
) -> None:
    # steps whose varints take 1 to 10 bytes (a negative step takes 10), special values,
    # a tag in Unicode, tags that start late, and a step logged twice
    mod = torch_tb if writer == "torch" else tensorboardX
    w = mod.SummaryWriter(str(tmp_path))
    steps = [0, 1, 127, 128, 16_383, 16_384, 2**21, 2**28, 2**35, 2**49, 2**56, 2**62]
    for i, s in enumerate(steps):
        w.add_scalar("train/loss", SPECIAL[i % len(SPECIAL)], s, walltime=1e9 + i)
        w.add_scalar("损失/λ", 1.0 / (i + 1), s, walltime=1e9 + i)
        if i > 5:
            w.add_scalar("late", float(i), s, walltime=1e9 + i)
    w.add_scalar("neg", 2.0, -7)
    w.close()
    path = _one_file(tmp_path)
    assert not isinstance(tb._scan(path)[0], str)  # the lane takes this file
    for p in (path, tmp_path):  # a file, and the directory holding it
        got = _read(p)
        _same_runs(got, _numpy_read(p, monkeypatch))
    (run,) = got
    assert run.frame.filter(pl.col("metric") == "neg")["step"].to_list() == [-7]
    assert _series(run, "损失/λ")["step"].to_list() == steps
    assert run.metadata["file_version"] == "brain.Event:2"


@lane
def test_compiled_lane_keeps_file_order_when_steps_go_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    w = torch_tb.SummaryWriter(str(tmp_path))
    for s in [*range(10), *range(5, 15)]:  # a restart from step 5, in the same file
        w.add_scalar("loss", 10.0 - s, s)
        w.add_scalar("lr", 0.1, s)
    w.close()
    assert not isinstance(tb._scan(_one_file(tmp_path))[0], str)
    got = _read(tmp_path)
    _same_runs(got, _numpy_read(tmp_path, monkeypatch))
    (run,) = got
    assert [i.kind for i in run.data_quality] == ["restart"]
    assert run.standing().filter(pl.col("metric") == "train/loss")["step"].to_list() == list(
        range(15)
    )


@lane
def test_compiled_lane_reads_events_with_several_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _several_values(tmp_path, histogram=False)
    assert not isinstance(tb._scan(_one_file(tmp_path))[0], str)
    got = _read(tmp_path)
    _same_runs(got, _numpy_read(tmp_path, monkeypatch))
    assert got[0].frame.height == 6


def _many_values(d: Path, steps: list[int], tags: int) -> Path:
    # events of ``tags`` values each under one-byte tags: ~10 bytes a row, past the lane's
    # first guess of its columns' size (a row per 37 bytes, one value per record), so the
    # columns grow while the file is read
    w = EventFileWriter(str(d))
    for i, s in enumerate(steps):
        values = [
            summary_pb2.Summary.Value(tag=chr(97 + t), simple_value=float(i * tags + t))
            for t in range(tags)
        ]
        summary = summary_pb2.Summary(value=values)
        w.add_event(event_pb2.Event(wall_time=100.0 + i, step=s, summary=summary))
    w.close()
    return _one_file(d)


@lane
@pytest.mark.parametrize("restart", [False, True])
def test_compiled_lane_grows_past_its_first_guess(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, restart: bool
) -> None:
    steps = [*range(3000), *range(2000, 2500)] if restart else list(range(3000))
    path = _many_values(tmp_path, steps, tags=20)
    got = tb._scan(path)[0]
    assert not isinstance(got, str)
    assert len(got.step) == 20 * len(steps) > 2 * (path.stat().st_size // 37 + 16)  # grown twice
    assert got.grouped is not restart
    runs = _read(tmp_path)
    _same_runs(runs, _numpy_read(tmp_path, monkeypatch))
    frame = runs[0].frame
    assert frame.filter(pl.col("metric") == "c")["value"].to_list()[:3] == [2.0, 22.0, 42.0]


@lane
def test_compiled_lane_rows_already_in_blocks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # every value of one tag, then the next: the rows are moved nowhere
    w = tensorboardX.SummaryWriter(str(tmp_path))
    for t in ("loss", "lr", "grad_norm"):
        for s in range(50):
            w.add_scalar(t, float(s) * len(t), s, walltime=1e9 + s)
    w.close()
    got = tb._scan(_one_file(tmp_path))[0]
    assert not isinstance(got, str) and got.grouped and got.counts == [50, 50, 50]
    runs = _read(tmp_path)
    _same_runs(runs, _numpy_read(tmp_path, monkeypatch))
    assert _series(runs[0], "lr")["value"].to_list() == [2.0 * s for s in range(50)]


def _lane_file(d: Path) -> Path:
    w = torch_tb.SummaryWriter(str(d))
    for s in range(40):
        w.add_scalar("loss", 1.0 / (s + 1), s)
        w.add_scalar("lr", 0.01, s)
    w.close()
    return _one_file(d)


@lane
@pytest.mark.parametrize(
    ("fault", "why"),
    [
        ("histogram", "a value that is not a simple_value"),
        ("tensor", "a value that is not a simple_value"),
        ("flipped byte", "a corrupt record"),
        ("flipped length", "a corrupt record header"),
        ("truncated", "a truncated record"),
    ],
)
def test_compiled_lane_leaves_other_files_to_the_numpy_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fault: str, why: str
) -> None:
    path = _lane_file(tmp_path)
    if fault in ("histogram", "tensor"):
        path.unlink()
        w = torch_tb.SummaryWriter(str(tmp_path))
        w.add_scalar("loss", 1.0, 0)
        if fault == "histogram":
            w.add_histogram("h", np.arange(10.0), 0)
        else:
            w.add_scalar("acc", 0.5, 0, new_style=True)
        w.add_scalar("loss", 0.5, 1)
        w.close()
        path = _one_file(tmp_path)
    raw = bytearray(path.read_bytes())
    offsets = _record_offsets(path)
    if fault == "flipped byte":
        o, n = offsets[20]
        raw[o + 12 + n // 2] ^= 0x10
    elif fault == "flipped length":
        raw[offsets[20][0] + 9] ^= 0x01  # the length's checksum
    elif fault == "truncated":
        raw = raw[:-5]
    path.write_bytes(bytes(raw))
    reason = tb._tbscan.scan(bytes(raw))
    assert isinstance(reason, str) and reason.startswith(why)
    assert tb._scan(path) == (f"it met {reason}", len(raw), [])
    got = _read(tmp_path)
    _same_runs(got, _numpy_read(tmp_path, monkeypatch))
    assert got[0].metadata[tb.NOTE_KEY] == (
        f"read by the numpy reader: the compiled lane left it, as it met {reason}"
    )
    if fault.startswith("flipped") or fault == "truncated":
        assert any(i.severity != "info" for i in got[0].data_quality)


@pytest.mark.slow
@lane
def test_analyze_verbose_says_why_the_compiled_lane_left_a_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from trainlens.cli import main

    w = torch_tb.SummaryWriter(str(tmp_path))
    for s in range(50):
        w.add_scalar("train/loss", 2.0 - s / 100, s)
    w.add_histogram("weights", np.arange(10.0), 0)
    w.close()
    path = _one_file(tmp_path)
    assert main(["analyze", str(path), "-v"]) == 0
    why = "a value that is not a simple_value"
    assert (
        f"reader      read by the numpy reader: the compiled lane left it, as it met {why}"
        in capsys.readouterr().out
    )
    assert main(["analyze", str(path)]) == 0  # without -v: not shown
    assert "reader      " not in capsys.readouterr().out
    _lane_file(tmp_path / "plain")  # a file the lane takes: nothing to say
    assert main(["analyze", str(tmp_path / "plain"), "-v"]) == 0
    assert "reader      " not in capsys.readouterr().out


@lane
def test_compiled_lane_on_random_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # random schedules of simple values: tag order changing, steps jumping and going back,
    # tags first logged late, special values; whichever lane takes each, the runs agree
    taken = 0
    for seed in range(20):
        rng = random.Random(seed)
        d = tmp_path / str(seed)
        w = torch_tb.SummaryWriter(str(d))
        tags = [f"t{k}/" + "x" * rng.randrange(1, 9) for k in range(rng.randrange(1, 8))]
        step = rng.randrange(0, 1000)
        for i in range(rng.randrange(50, 400)):
            step += rng.choice([1, 1, 2, 100]) if rng.random() < 0.99 else -rng.randrange(1, 9)
            for tag in rng.sample(tags, len(tags)) if rng.random() < 0.05 else tags:
                if rng.random() < 0.9 and (i > 20 or tag != tags[-1]):
                    v = rng.choice(SPECIAL) if rng.random() < 0.02 else rng.gauss(0, 1)
                    w.add_scalar(tag, v, step)
        w.close()
        taken += not isinstance(tb._scan(_one_file(d))[0], str)
        _same_runs(_read(d), _numpy_read(d, monkeypatch))
    assert taken == 20


@lane
def test_compiled_lane_columns_export_once(tmp_path: Path) -> None:
    got = tb._tbscan.scan(_lane_file(tmp_path).read_bytes())
    assert not isinstance(got, str)
    records, version, tags, counts, grouped, step, wall, value, code = got
    assert (records, version, tags, counts, grouped, code) == (
        81,
        b"brain.Event:2",
        [b"loss", b"lr"],
        [40, 40],
        True,
        None,
    )
    assert pl.Series(value).head(2).to_list() == [1.0, 0.5]
    with pytest.raises(ValueError, match="already exported"):
        value.__arrow_c_array__()
    assert pl.Series(step).to_list() == [*range(40), *range(40)]
    assert len(wall) == 80


@lane
@pytest.mark.parametrize("what", ["file", "directory"])
def test_compiled_lane_read_imports_no_numpy(tmp_path: Path, what: str) -> None:
    path = _lane_file(tmp_path)
    target = path if what == "file" else tmp_path
    code = (
        "import sys, trainlens\n"
        f"(run,) = trainlens.read({str(target)!r})\n"
        "print(run.frame.height, 'numpy' in sys.modules)\n"
    )
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root
    )
    assert out.stdout.split() == ["80", "False"]


@lane
def test_compiled_lane_cursor_stops_where_the_scan_did(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a writer appends while the file is read: the cursor must point at the end of what
    # was scanned, so that the next read from it gets the appended values
    path = _lane_file(tmp_path)
    scanned = path.stat().st_size
    real = tb._tbscan

    def scan_then_append(buf: object) -> object:
        got = real.scan(buf)
        w = torch_tb.SummaryWriter(str(tmp_path / "more"))
        w.add_scalar("loss", 123.0, 40)
        w.close()
        more = _one_file(tmp_path / "more")
        second = _record_offsets(more)[1][0]  # its records after the file_version one
        with open(path, "ab") as f:
            f.write(more.read_bytes()[second:])
        return got

    monkeypatch.setattr(tb, "_tbscan", SimpleNamespace(scan=scan_then_append))
    (run,) = _read(path)
    assert path.stat().st_size > scanned
    assert run.cursor == {str(path): scanned}
    assert run.metadata["records"] == {path.name: 81}
    monkeypatch.setattr(tb, "_tbscan", real)
    (tail,) = _read(path, start_offset=scanned)
    assert tail.frame.select("step", "value").rows() == [(40, 123.0)]


# ---- Megatron-LM's tags -----------------------------------------------------------------


@pytest.mark.parametrize("with_histogram", [False, True])  # compiled lane, numpy reader
def test_megatron_vs_samples_tags_stay_off_the_step_axis(
    tmp_path: Path, with_histogram: bool
) -> None:
    w = torch_tb.SummaryWriter(str(tmp_path / "tb"))
    for it in range(1, 51):
        w.add_scalar("lm loss", 8.0 / it, it)
        w.add_scalar("lm loss vs samples", 8.0 / it, it * 512)  # Megatron writes both
        w.add_scalar("learning-rate", 3e-4, it)
        w.add_scalar("learning-rate vs samples", 3e-4, it * 512)
        w.add_scalar("entropy vs tokens", 1.0, it * 4096)  # no step twin: kept
        if with_histogram and it == 1:
            w.add_histogram("weights", np.linspace(-1, 1, 16), it)
    w.close()
    [run] = _read(tmp_path / "tb")
    assert sorted(run.metrics) == ["entropy vs tokens", "lr", "train/loss"]
    assert run.series("train/loss")[0].tolist() == list(range(1, 51))
    [note] = [d for d in run.data_quality if d.kind == "other-axis"]
    assert note.count == 100 and "'lm loss vs samples'" in note.message
