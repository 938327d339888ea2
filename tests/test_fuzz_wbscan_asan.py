"""The compiled W&B lane (`_wbscan`) built once with AddressSanitizer and run over mutated
real `.wandb` logs (written by the wandb SDK offline): no read or write outside its
buffers on any of them; and, in this process, the compiled and numpy lanes agree on every
mutant the compiled lane accepts. Skipped where there is no C compiler, no
AddressSanitizer, or no wandb."""

from __future__ import annotations

import mmap
import random
from pathlib import Path

import pytest

from tests.conftest import REPO, run_wandb_offline
from tests.test_fuzz_tbscan_asan import GUARD_PAGE, _build_asan, _compiler, run_under_asan

pytest.importorskip("wandb")

SOURCE = REPO / "trainlens" / "readers" / "_wbscan.c"
WRITER = Path(__file__).with_name("_wandb_writer.py")
MUTANTS = 150

_CHILD = (
    GUARD_PAGE
    + """
import sys
sys.path.insert(0, sys.argv[1])
import _wbscan
n = 0
for name in sys.argv[2:]:
    with open(name, "rb") as fh:
        data = fh.read()
    _wbscan.scan(data)
    _wbscan.scan(data, threads=5)  # (ranges of a few blocks, read side by side)
    if data:
        with open(name, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as m:
            _wbscan.scan(m)
    if data and len(data) % PAGE == 0:  # the byte after the end faults
        _wbscan.scan(at_guard_page(name))
        _wbscan.scan(at_guard_page(name), threads=3)
    n += 1
print(n)
"""
)


def _log(tmp: Path) -> bytes:
    run_wandb_offline(WRITER, tmp, "run=lr_shock_recover")
    [log] = list(tmp.rglob("*.wandb"))
    return log.read_bytes()


def _mutants(raw: bytes, rnd: random.Random) -> list[bytes]:
    out = []
    for i in range(MUTANTS):
        b = bytearray(raw)
        kind = i % 3
        if kind == 0:  # bit flips anywhere (headers, lengths, payloads, CRCs)
            for _ in range(rnd.randint(1, 8)):
                b[rnd.randrange(len(b))] ^= 1 << rnd.randrange(8)
        elif kind == 1:  # cut anywhere
            b = b[: rnd.randrange(len(b))]
        else:  # a run of garbage bytes
            at = rnd.randrange(len(b))
            b[at : at + 64] = bytes(rnd.randrange(256) for _ in range(64))
        out.append(bytes(b))
    return out


@pytest.mark.slow
def test_the_wandb_lane_under_address_sanitizer(tmp_path: Path) -> None:
    cc = _compiler()
    build = tmp_path / "build"
    build.mkdir()
    libasan = _build_asan(cc, build, SOURCE)
    raw = _log(tmp_path / "written")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    names = []
    # logs that end exactly at a page end: cut at each 32 KiB block (a sound prefix of
    # whole blocks) and at pages inside blocks
    page = mmap.PAGESIZE
    cuts = [raw[:k] for k in range(page, len(raw), page)]
    assert len(cuts) >= 8
    for i, data in enumerate([raw, *cuts, *_mutants(raw, random.Random(7))]):
        (corpus / f"m{i}").write_bytes(data)
        names.append(str(corpus / f"m{i}"))
    run_under_asan(_CHILD, build, names, libasan)


@pytest.mark.slow
def test_mutated_logs_read_alike_in_both_lanes_or_are_said_unreadable(tmp_path: Path) -> None:
    """Every mutant reads without a traceback: a frame (good records kept, damage noted)
    or one sentence; where the compiled lane takes a file, the numpy lane gives the same
    frame."""
    import trainlens.readers.wandb_run as wr
    from trainlens.core.errors import TrainlensError
    from trainlens.readers import ReadOptions

    raw = _log(tmp_path / "written")
    frames = 0
    for i, data in enumerate(_mutants(raw, random.Random(11))[:60]):
        path = tmp_path / f"m{i}.wandb"
        path.write_bytes(data)
        try:
            fast = wr.read(path, ReadOptions())
        except TrainlensError as exc:
            assert str(exc) and "\n" not in str(exc)
            continue
        saved = wr._wbscan
        try:
            wr._wbscan = None
            slow = wr.read(path, ReadOptions())
        finally:
            wr._wbscan = saved
        assert [
            r.frame.sort("metric", "step").equals(s.frame.sort("metric", "step"))
            for r, s in zip(fast, slow, strict=True)
        ] == [True] * len(fast)
        frames += 1
    assert frames > 10  # most mutants keep good records


def _chunks(data: bytes) -> list[tuple[int, int, int]]:
    """(offset, kind, length) of each chunk of a sound log (LevelDB's log framing)."""
    out, pos, block = [], 7, 32768
    while pos + 7 <= len(data):
        end = (pos // block + 1) * block
        if end - pos < 7:
            pos = end
            continue
        n, kind = int.from_bytes(data[pos + 4 : pos + 6], "little"), data[pos + 6]
        if kind == 0:
            pos = end
            continue
        out.append((pos, kind, n))
        pos += 7 + n
    return out


@pytest.mark.slow
def test_mutants_scan_alike_in_one_range_and_in_many(tmp_path: Path) -> None:
    """Damage is refused, and a sound prefix read, the same way whether the compiled lane
    reads a file in one range or in ranges side by side. The sharpest case: a record's
    first chunk blanked, so the block after starts with chunks whose record start is lost
    (a range starting there must not take them for the range before's)."""
    from tests.test_reader_wandb_run import scanned_as_lists
    from trainlens.readers import wandb_run

    if wandb_run._wbscan is None:
        pytest.skip("the compiled lane is not built")
    raw = _log(tmp_path / "written")
    chunks = _chunks(raw)
    mutants = _mutants(raw, random.Random(13))[:60]
    rnd = random.Random(1)
    mutants += [raw[: at + 7 + n] for at, _, n in rnd.sample(chunks, 20)]  # cut after a chunk
    orphans = 0
    for at, kind, _ in chunks:
        if kind == 2:  # a FIRST chunk: blanked (a zero header reads as the block's padding)
            orphans += 1
            mutants.append(raw[:at] + bytes(7) + raw[at + 7 :])
    assert orphans > 10
    accepted = 0
    for data in mutants:
        one = scanned_as_lists(wandb_run._wbscan.scan(data))
        accepted += not isinstance(one, str)
        for threads in (2, 6, 16):
            many = scanned_as_lists(wandb_run._wbscan.scan(data, threads=threads))
            assert isinstance(many, str) == isinstance(one, str)
            assert isinstance(many, str) or many == one
    assert accepted >= 10
