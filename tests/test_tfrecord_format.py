"""One TFRecord format, five ways to compute its checksum: they must agree.

The pure-Python CRC-32C (``_tfrecord_format``), the ``crc32c`` package, the numpy tables
(``_tfrecord_crc``) and the compiled lane's C (hardware and table loop) are checked against
each other on random bytes and against the checksums that torch's SummaryWriter and
tensorboardX stored in the records they wrote; the C lane's copy of the format's constants
against the Python module's.
"""

from __future__ import annotations

import random
import struct
from pathlib import Path

import numpy as np
import pytest

from trainlens.readers import _tfrecord as tfr
from trainlens.readers import _tfrecord_crc as tfcrc
from trainlens.readers import _tfrecord_format as fmt
from trainlens.readers import tensorboard as tb

torch_tb = pytest.importorskip("torch.utils.tensorboard")
tensorboardX = pytest.importorskip("tensorboardX")

CHECK_VALUE = 0xE3069283  # CRC-32C of b"123456789" (RFC 3720, B.4)
LENGTHS = [0, 1, 2, 7, 8, 9, 15, 16, 17, 31, 64, 100, 159, 160, 161, 1000, 4099]


def _random_blobs(seed: int = 14) -> list[bytes]:
    rng = random.Random(seed)
    return [bytes(rng.randrange(256) for _ in range(n)) for n in LENGTHS for _ in range(3)]


def _implementations() -> dict[str, object]:
    impls: dict[str, object] = {"pure Python": fmt.crc32c_py}
    if tfcrc.fast_crc32c is not None:
        impls["crc32c package"] = lambda b: int(tfcrc.fast_crc32c(b))  # type: ignore[misc]
    if tb._tbscan is not None:
        impls["C lane"] = tb._tbscan.crc32c
        impls["C lane, table loop"] = lambda b: tb._tbscan.crc32c(b, True)
    return impls


def _numpy_crcs(blobs: list[bytes]) -> list[int]:
    """The numpy tables' CRC of each blob, all at once as the reader computes them."""
    arr = np.frombuffer(b"".join(blobs) + bytes(64), dtype=np.uint8)
    lens = np.array([len(b) for b in blobs], dtype=np.int64)
    starts = np.cumsum(lens) - lens
    return [int(x) for x in tfcrc.data_crcs(arr, starts, lens)]


def test_every_crc32c_gives_the_check_value() -> None:
    for name, crc in _implementations().items():
        assert crc(b"123456789") == CHECK_VALUE, name  # type: ignore[operator]
    assert _numpy_crcs([b"123456789"]) == [CHECK_VALUE]


def test_every_crc32c_agrees_on_random_bytes() -> None:
    blobs = _random_blobs()
    want = [fmt.crc32c_py(b) for b in blobs]
    assert len(set(want)) > len(blobs) // 2  # the blobs differ: agreement means something
    for name, crc in _implementations().items():
        assert [crc(b) for b in blobs] == want, name  # type: ignore[operator]
    assert _numpy_crcs(blobs) == want
    # a CRC continued from an earlier one is the CRC of both parts
    for b in blobs[::5]:
        k = len(b) // 3
        assert tfcrc.crc32c_from(b[k:], fmt.crc32c_py(b[:k])) == fmt.crc32c_py(b)
        assert fmt.crc32c_py(b[k:], fmt.crc32c_py(b[:k])) == fmt.crc32c_py(b)


def test_mask_round_trips_and_matches_the_array_form() -> None:
    values = [0, 1, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, CHECK_VALUE, 0x12345678]
    for v in values:
        assert fmt.unmasked_crc(fmt.masked_crc(v)) == v
    arr = np.array(values, dtype=np.uint32)
    assert tfcrc.mask_array(arr).tolist() == [fmt.masked_crc(v) for v in values]
    assert tfcrc.unmask_array(tfcrc.mask_array(arr)).tolist() == values


def _written(tmp_path: Path, writer: str) -> bytes:
    mod = torch_tb if writer == "torch" else tensorboardX
    w = mod.SummaryWriter(str(tmp_path))
    for s in range(30):
        w.add_scalar("train/loss", 1.0 / (s + 1), s)
        w.add_scalar("a/much/longer/tag/" + "x" * (s % 13), float(s), s)
        if s % 10 == 0:
            w.add_histogram("w", np.linspace(0, 1, 50 + s), s)
    w.close()
    (path,) = tmp_path.glob("events.out.tfevents.*")
    return path.read_bytes()


@pytest.mark.parametrize("writer", ["torch", "tensorboardX"])
def test_every_crc32c_matches_what_real_writers_stored(
    tmp_path: Path, writer: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    raw = _written(tmp_path, writer)
    headers, datas, stored_len, stored_data = [], [], [], []
    o = 0
    while o < len(raw):
        length, lcrc = struct.unpack_from("<QI", raw, o)
        headers.append(raw[o : o + fmt.LENGTH_BYTES])
        data = raw[o + fmt.HEADER : o + fmt.HEADER + length]
        datas.append(data)
        stored_len.append(lcrc)
        stored_data.append(struct.unpack_from("<I", raw, o + fmt.HEADER + length)[0])
        o += fmt.OVERHEAD + length
    assert o == len(raw) and len(datas) > 60  # framed with the format's sizes, to the byte
    for name, crc in _implementations().items():
        assert [fmt.masked_crc(crc(h)) for h in headers] == stored_len, name  # type: ignore[operator]
        assert [fmt.masked_crc(crc(d)) for d in datas] == stored_data, name  # type: ignore[operator]
    assert [fmt.masked_crc(c) for c in _numpy_crcs(datas)] == stored_data
    assert [fmt.masked_length_crc(len(d)) for d in datas] == stored_len
    assert [tfcrc.length_crc(len(d)) for d in datas] == stored_len
    # the windowed header check used to resynchronise after a corrupt header
    arr = np.frombuffer(raw + bytes(64), dtype=np.uint8)
    got = tfcrc.window8_masked_crcs(arr, 0, 1)
    assert int(got[0]) == stored_len[0]
    # and the reader's own check over the whole file, with and without the package
    buf = tfr.Buffer.from_bytes(raw)
    fr = tfr.frame_records(buf)
    assert len(fr.starts) == len(datas) and not fr.problems
    assert tfr.verify_records(buf, fr.starts, fr.lens).all()
    assert tfr.verify_records_slow(buf, fr.starts, fr.lens).all()
    monkeypatch.setattr(tfcrc, "fast_crc32c", None)  # the numpy tables' path
    assert tfr.verify_records(buf, fr.starts, fr.lens).all()


@pytest.mark.skipif(tb._tbscan is None, reason="the compiled lane is not built")
def test_the_c_lane_has_the_formats_constants() -> None:
    lane = tb._tbscan
    assert (lane.CRC32C_POLY, lane.MASK_DELTA, lane.HEADER, lane.OVERHEAD) == (
        fmt.CRC32C_POLY,
        fmt.MASK_DELTA,
        fmt.HEADER,
        fmt.OVERHEAD,
    )
