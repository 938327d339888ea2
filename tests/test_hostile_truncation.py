"""A file cut short while it is read never kills the process.

The readers map files (the compiled lanes, the numpy TensorBoard reader, polars reading
from a path); a page cut from under a mapping raised SIGBUS, and the process died with no
message. Now the read is made again from a copy of what is left, with the note "file
shrank while read; read up to byte N", and every value before the cut is kept.

Deterministic tests cut each reader's file right under its mapped read (a wrapper around
a function that reads the mapping truncates the file first, so the real code then touches
the cut pages); the race tests truncate a 10-25 MB file from this process while
``trainlens analyze`` (and ``watch --once``) reads it in a subprocess, the moment the file
shows in the child's memory maps.
"""

from __future__ import annotations

import json
import mmap
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tests.conftest import BENCH, REPO, run_wandb_offline
from trainlens.core.run import Run
from trainlens.readers import ReadOptions, _shrink, read_runs

pytestmark = pytest.mark.skipif(not _shrink.GUARDED, reason="the mapped-read guard is not built")

STEPS = 12_000


def _shrank(run: Run) -> list[Any]:
    return [i for i in run.data_quality if i.kind == _shrink.KIND]


def _plain(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.select("step", pl.col("metric").cast(pl.String), "value").sort("metric", "step")


def _cutting(path: Path, keep: int, real: Callable[..., Any]) -> Callable[..., Any]:
    """``real``, made to cut ``path`` to ``keep`` bytes the first time it is called (it is
    called on the mapped bytes, so it then reads pages that are gone)."""
    calls = []

    def cut_then_read(*args: Any, **kwargs: Any) -> Any:
        if not calls:
            os.truncate(path, keep)
        calls.append(1)
        return real(*args, **kwargs)

    return cut_then_read


def _check(run: Run, path: Path, keep: int, prefix: Path) -> None:
    """One note naming the file and where the read stopped (at most ``keep``), and the
    values those bytes hold (``prefix`` is a copy of them, read on its own)."""
    [note] = _shrank(run)
    assert note.source == str(path)
    upto = note.details["read_to"]
    assert 0 < upto <= keep
    assert note.message.startswith(f"file shrank while read; read up to byte {upto}")
    (alone,) = read_runs(prefix)
    assert _plain(run.frame).equals(_plain(alone.frame))
    assert run.frame.height > 300


def _prefix(path: Path, keep: int, tmp: Path) -> Path:
    out = tmp / "prefix" / path.name
    out.parent.mkdir(exist_ok=True)
    out.write_bytes(path.read_bytes()[:keep])
    return out


# ---- the guard itself ----------------------------------------------------------------------

_CUT_UNDER_A_MAP = """
import mmap, os, sys
sys.path.insert(0, sys.argv[1])
from trainlens.readers import _shrink
path, mode = sys.argv[2], sys.argv[3]
page = mmap.PAGESIZE
with open(path, "wb") as fh:
    fh.write(b"x" * 5 * page)
with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as m:
    if mode == "guarded":
        with _shrink.guard(path) as g:
            os.truncate(path, page + 10)
            data = m[:]
    else:
        if mode == "after":  # a guard held and given back before: it must not linger
            with _shrink.guard(path):
                pass
        os.truncate(path, page + 10)
        data = m[:]
assert data[: page + 10] == b"x" * (page + 10), "the bytes before the cut"
assert data[page + 10 :] == bytes(4 * page - 10), "zeros after it"
print(g.cut)
"""


@pytest.mark.parametrize("mode", ["guarded", "none", "after"])
def test_a_page_cut_from_under_a_map_is_zeros_under_the_guard_and_death_without(
    tmp_path: Path, mode: str
) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _CUT_UNDER_A_MAP, str(REPO), str(tmp_path / "f"), mode],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if mode == "guarded":
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == "True"  # (the Guard says so: the read is made again)
    else:  # what every mapped read did before the guard, and does outside it
        assert proc.returncode == -signal.SIGBUS, proc.stderr


def test_the_guard_nests(tmp_path: Path) -> None:
    import faulthandler

    path = tmp_path / "f"
    path.write_bytes(b"y" * 3 * mmap.PAGESIZE)
    was = faulthandler.is_enabled()
    faulthandler.enable()
    try:
        with _shrink.guard(path) as outer:
            with _shrink.guard(path) as inner, open(path, "rb") as fh:
                m = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
                os.truncate(path, 10)
                assert m[mmap.PAGESIZE :] == bytes(2 * mmap.PAGESIZE)
                m.close()
            assert inner.cut
            with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as m:
                path.write_bytes(b"")  # (cut again, still under the outer guard)
                assert m[:] == bytes(10)
        assert outer.cut
        assert faulthandler.is_enabled()
    finally:
        if not was:
            faulthandler.disable()


# ---- each reader that maps, its file cut under the mapped read -----------------------------


@pytest.fixture(scope="module")
def events_file(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    tbx = pytest.importorskip("tensorboardX")
    d = tmp_path_factory.mktemp("tb")
    w = tbx.SummaryWriter(str(d))
    for s in range(1000):  # (~84 KB: 20 pages)
        w.add_scalar("loss", 1.0 / (s + 1), s)
        w.add_scalar("lr", 1e-3, s)
    w.close()
    [path] = list(d.glob("events.out.tfevents.*"))
    return path.read_bytes()


def _events(tmp: Path, raw: bytes) -> Path:
    path = tmp / "run" / "events.out.tfevents.1700000000.host"
    path.parent.mkdir()
    path.write_bytes(raw)
    return path


def test_tensorboard_compiled_lane(
    tmp_path: Path, events_file: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trainlens.readers import tensorboard

    if tensorboard._tbscan is None:
        pytest.skip("the compiled TensorBoard lane is not built")
    path = _events(tmp_path, events_file)
    keep = len(events_file) // 2
    prefix = _prefix(path, keep, tmp_path)
    real = tensorboard._tbscan
    monkeypatch.setattr(tensorboard, "_tbscan", _Module(real, "scan", path, keep))
    (run,) = read_runs(path)
    _check(run, path, keep, prefix)


class _Module:
    """A C module with one function cutting the file first (C modules' functions cannot
    be patched in place by monkeypatch on every Python)."""

    def __init__(self, real: Any, name: str, path: Path, keep: int) -> None:
        self._real = real
        setattr(self, name, _cutting(path, keep, getattr(real, name)))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def test_tensorboard_numpy_reader(
    tmp_path: Path, events_file: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trainlens.readers import _tbdecode, tensorboard

    monkeypatch.setattr(tensorboard, "_tbscan", None)  # every file to the numpy reader
    path = _events(tmp_path, events_file)
    keep = len(events_file) // 3
    prefix = _prefix(path, keep, tmp_path)
    real = _tbdecode.tfr.frame_records
    monkeypatch.setattr(_tbdecode.tfr, "frame_records", _cutting(path, keep, real))
    (run,) = read_runs(path)
    _check(run, path, keep, prefix)


def test_tensorboard_numpy_reader_from_an_offset_as_watch_reads(
    tmp_path: Path, events_file: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trainlens.readers import _tbdecode

    path = _events(tmp_path, events_file)
    (first,) = read_runs(_prefix(path, len(events_file) // 4, tmp_path))
    start = next(iter(first.cursor.values()))
    keep = len(events_file) // 2
    (half,) = read_runs(_prefix(path, keep, tmp_path))
    real = _tbdecode.tfr.frame_records
    monkeypatch.setattr(_tbdecode.tfr, "frame_records", _cutting(path, keep, real))
    (run,) = read_runs(path, options=ReadOptions(start_offset=start))
    [note] = _shrank(run)
    assert start < note.details["read_to"] <= keep
    # the values between the offset and the cut, each once
    both = pl.concat([_plain(first.frame), _plain(run.frame)])
    assert _plain(both).equals(_plain(half.frame)) and run.frame.height > 300


def _jsonl(tmp: Path) -> Path:
    path = tmp / "run.jsonl"
    with path.open("w") as fh:  # (as a training loop writes it: json.dumps per line)
        for s in range(STEPS):
            fh.write(json.dumps({"step": s, "loss": 2.0 / (s + 1), "lr": 3e-4 * s}) + "\n")
    assert path.stat().st_size > 1 << 19
    return path


@pytest.mark.parametrize("lane", ["compiled", "polars"])
def test_jsonl(lane: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    from trainlens.readers import _jsonl_compiled, jsonl

    monkeypatch.setattr(jsonl, "FAST_MIN_BYTES", 1 << 16)  # (the mapped fast path)
    path = _jsonl(tmp_path)
    keep = path.stat().st_size // 2
    prefix = _prefix(path, keep, tmp_path)
    compiled = _jsonl_compiled._jlscan
    if lane == "compiled":  # cut as the lane begins: it reads pages that are gone
        if compiled is None:
            pytest.skip("the compiled JSONL lane is not built")
        shim = types.SimpleNamespace(scan=_cutting(path, keep, compiled.scan))
        monkeypatch.setattr(_jsonl_compiled, "_jlscan", shim)
    else:
        monkeypatch.setattr(_jsonl_compiled, "_jlscan", None)
        monkeypatch.setattr(jsonl, "_scan", _cutting(path, keep, jsonl._scan))
    (run,) = read_runs(path)
    [note] = _shrank(run)
    assert note.details["read_to"] == keep  # (the cut line is then left out, and said)
    assert any(i.kind == "truncated-line" for i in run.data_quality)
    (alone,) = read_runs(prefix)
    assert _plain(run.frame).equals(_plain(alone.frame))


def test_csv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from trainlens.readers import csv

    monkeypatch.setattr(csv, "FAST_MIN_BYTES", 1 << 16)
    path = tmp_path / "metrics.csv"
    pl.DataFrame({"step": range(STEPS), "loss": [2.0 / (s + 1) for s in range(STEPS)]}).write_csv(
        path
    )
    keep = path.stat().st_size // 2
    data = path.read_bytes()
    whole_lines = data[:keep].rfind(b"\n") + 1  # (a cut row may end inside a number)
    prefix = _prefix(path, whole_lines, tmp_path)
    monkeypatch.setattr(csv, "_is_ascii", _cutting(path, keep, csv._is_ascii))
    (run,) = read_runs(path)
    _check(run, path, keep, prefix)
    assert _shrank(run)[0].details["read_to"] == whole_lines


def test_parquet_cut_is_one_sentence_that_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trainlens.core.errors import UnreadableInputError
    from trainlens.readers import parquet

    path = tmp_path / "history.parquet"
    pl.DataFrame({"_step": range(STEPS), "loss": [1.0] * STEPS}).write_parquet(path)
    size = path.stat().st_size
    real = pl.read_parquet

    def cut_under_polars(source: Any, *args: Any, **kwargs: Any) -> pl.DataFrame:
        if isinstance(source, Path):  # the mapped read: its pages are cut while it reads
            with open(source, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as m:
                os.truncate(source, size // 2)
                m[:]  # (touches the cut pages, as polars' threads would)
        return real(source, *args, **kwargs)

    monkeypatch.setattr(parquet.pl, "read_parquet", cut_under_polars)
    with pytest.raises(UnreadableInputError) as err:
        read_runs(path)
    msg = str(err.value)
    assert str(path) in msg and f"file shrank while read; read up to byte {size // 2}" in msg
    assert "\n" not in msg


def test_parquet_cut_and_written_again_is_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file cut while read and written again meanwhile: read again, whole, no note."""
    from trainlens.readers import parquet

    path = tmp_path / "history.parquet"
    pl.DataFrame({"_step": range(STEPS), "loss": [1.0] * STEPS}).write_parquet(path)
    raw = path.read_bytes()
    real = pl.read_parquet

    def cut_and_rewrite(source: Any, *args: Any, **kwargs: Any) -> pl.DataFrame:
        if isinstance(source, Path):
            with open(source, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as m:
                os.truncate(source, 100)
                m[:]
            source.write_bytes(raw)
        return real(source, *args, **kwargs)

    monkeypatch.setattr(parquet.pl, "read_parquet", cut_and_rewrite)
    (run,) = read_runs(path)
    assert run.frame.height == STEPS and not _shrank(run)


@pytest.fixture(scope="module")
def wandb_log(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    pytest.importorskip("wandb")
    root = tmp_path_factory.mktemp("wandb")
    run_wandb_offline(Path(__file__).with_name("_wandb_writer.py"), root, "run=healthy_cosine")
    [log] = list(root.rglob("*.wandb"))
    return log.read_bytes()


def test_wandb_compiled_lane(
    tmp_path: Path, wandb_log: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trainlens.readers import wandb_run

    if wandb_run._wbscan is None:
        pytest.skip("the compiled W&B lane is not built")
    path = tmp_path / "run-abc.wandb"
    path.write_bytes(wandb_log)
    keep = len(wandb_log) // 2 + 123  # (inside a record)
    prefix = _prefix(path, keep, tmp_path)
    # (_threads is called with the mapping's size right before the scan reads it)
    monkeypatch.setattr(wandb_run, "_threads", _cutting(path, keep, wandb_run._threads))
    (run,) = read_runs(path)
    [note] = _shrank(run)
    assert note.source == str(path) and note.details["read_to"] == keep
    (alone,) = read_runs(prefix)
    assert _plain(run.frame).equals(_plain(alone.frame)) and run.frame.height > 100


def test_a_file_that_grows_while_read_is_read_to_its_size_at_open(
    tmp_path: Path, events_file: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Records appended while the file is read are left for the next read (watch)."""
    from tests._events import frame, split_records
    from trainlens.readers import tensorboard

    path = _events(tmp_path, events_file)
    (before,) = read_runs(path)
    payloads, _ = split_records(events_file)
    more = frame(payloads[-1]) * 10  # (tensorboardX's last record, written again)

    def append_then(real: Callable[..., Any]) -> Callable[..., Any]:
        def grow(*args: Any, **kwargs: Any) -> Any:
            with path.open("ab") as fh:
                fh.write(more)
            return real(*args, **kwargs)

        return grow

    if tensorboard._tbscan is not None:
        lane = _Module(tensorboard._tbscan, "scan", path, len(events_file))
        lane.scan = append_then(tensorboard._tbscan.scan)
        monkeypatch.setattr(tensorboard, "_tbscan", lane)
    else:
        real = tensorboard._tbdecode.tfr.frame_records  # type: ignore[attr-defined]
        monkeypatch.setattr(tensorboard._tbdecode.tfr, "frame_records", append_then(real))  # type: ignore[attr-defined]
    (run,) = read_runs(path)
    assert not _shrank(run)
    assert run.cursor == {str(path): len(events_file)}
    assert _plain(run.frame).equals(_plain(before.frame))
    assert path.stat().st_size == len(events_file) + len(more)


# ---- the race: cut while `trainlens analyze` reads, in another process ----------------------


@pytest.fixture(scope="module")
def bench_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A 40k-step run from the bench's generator (its TensorBoard bytes are tensorboardX's,
    checked in test_fast_paths): events 22 MB, JSONL 17 MB, CSV 9 MB."""
    sys.path.insert(0, str(BENCH))
    try:
        import generate  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(BENCH))
    out = tmp_path_factory.mktemp("bench")
    paths = generate.generate(generate.Plan(40_000), out, ("jsonl", "csv", "tensorboard"))
    [events] = list(paths["tensorboard"].glob("events.out.tfevents.*"))
    return {"jsonl": paths["jsonl"], "csv": paths["csv"], "tensorboard": events}


def _maps(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return None


def _race(src: Path, work: Path, command: list[str], rnd: random.Random) -> tuple[int, bool, str]:
    """Run ``command`` over a copy of ``src`` and truncate it to a tenth once the child
    maps it (or, where /proc is not there, after a random wait); returns the child's exit
    code, whether the cut came while the file was mapped, and its output."""
    shutil.copyfile(src, work)
    size = work.stat().st_size
    child = subprocess.Popen(
        [sys.executable, "-m", "trainlens", *command, str(work)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    mapped = False
    deadline = time.monotonic() + 30
    if _maps(child.pid) is None:
        time.sleep(rnd.uniform(0.2, 1.0))
    else:
        while child.poll() is None and time.monotonic() < deadline:
            maps = _maps(child.pid)
            if maps is not None and str(work) in maps:
                mapped = True
                break
    os.truncate(work, size // 10)
    out, err = child.communicate(timeout=120)
    return child.returncode, mapped, (out + err).decode("utf-8", "replace")


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["tensorboard", "jsonl", "csv"])
def test_analyze_survives_a_cut_while_it_reads(
    bench_files: dict[str, Path], tmp_path: Path, fmt: str
) -> None:
    src = bench_files[fmt]
    rnd = random.Random(5)
    cut_while_mapped = 0
    for _ in range(2):
        rc, mapped, out = _race(src, tmp_path / src.name, ["analyze", "--json"], rnd)
        assert rc >= 0, f"killed by signal {-rc}"
        assert rc in (0, 1), out[-2000:]  # (read: values are left; findings or none)
        if mapped:
            cut_while_mapped += 1
            [run] = json.loads(out)["runs"] if out.lstrip().startswith("{") else [None]
            assert run is not None, out[-2000:]
            kinds = {d["kind"] for d in run["data_quality"]}
            notes = [d for d in run["data_quality"] if d["kind"] == _shrink.KIND]
            # the cut came under the read (a note), or after it had read every page
            assert notes or _shrink.KIND not in kinds
            for n in notes:
                assert n["source"] == str(tmp_path / src.name)
                assert n["message"].startswith("file shrank while read; read up to byte ")
    if _maps(os.getpid()) is not None:
        assert cut_while_mapped >= 1  # (on Linux the cut is timed to the read)


@pytest.mark.slow
def test_watch_once_survives_a_cut_while_it_reads(
    bench_files: dict[str, Path], tmp_path: Path
) -> None:
    src = bench_files["jsonl"]
    rnd = random.Random(9)
    for _ in range(2):
        rc, _mapped, out = _race(src, tmp_path / src.name, ["watch", "--once"], rnd)
        assert rc >= 0, f"killed by signal {-rc}"
        assert rc in (0, 1), out[-2000:]
        assert "Traceback" not in out
