"""The compiled JSONL lane on small files (under jsonl.FAST_MIN_BYTES, read as bytes).

There polars reads the file with its schema inferred from every line (jsonl._parse with
the lane off); wherever the lane gives a frame it is that frame: the same columns in the
same order, the same dtypes (Int64 for a key of integer literals only, step or not), the
same doubles bit for bit, the same nulls; and the whole read — runs, notes, cursor — is
the same with the lane on and off. Checked on the fixture runs, bench-generated runs,
hand-made edge files and random lines; and that a small flat file is read without
polars' ndjson reader at all (the point of the lane: its schema inference was most of a
small run's read). Skipped where the lane is not built."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import BENCH, FIXTURES
from tests.test_jsonl_compiled import _BAD, _GOOD, _KEYS, LEFT, TAKEN, _bits, _lines
from trainlens.core.errors import TrainlensError
from trainlens.core.run import Run
from trainlens.readers import ReadOptions, _jsonl_compiled, jsonl

_jlscan = pytest.importorskip("trainlens.readers._jlscan")


def _outcome(path: Path) -> tuple[list[Run], list[int]] | str:
    try:
        runs = jsonl.read(path, ReadOptions())
    except TrainlensError as exc:
        return str(exc)
    return runs, [c for r in runs for c in r.cursor.values()]


def _agree(path: Path, monkeypatch: pytest.MonkeyPatch) -> bool:
    """True when the lane took the small file (and agreed with polars' full read of it);
    False when it left it. Either way the whole read is the same with the lane off."""
    body = path.read_bytes()
    assert len(body) < jsonl.FAST_MIN_BYTES
    # (the body _parse is given: a complete last line, the closing end records left out)
    body = jsonl._run_end.strip_end_lines(body if body.endswith(b"\n") else body + b"\n")
    lane = _jsonl_compiled.read_whole(body)
    if lane is not None:
        frame = jsonl._parse(body, "x", compiled=False)[0]
        assert frame is not None, f"{path}: the lane took a file polars' path would not"
        assert lane.columns == frame.columns
        assert lane.schema == frame.schema
        assert _bits(lane) == _bits(frame)
    monkeypatch.setattr(_jsonl_compiled, "_jlscan", None)
    slow = _outcome(path)
    monkeypatch.setattr(_jsonl_compiled, "_jlscan", _jlscan)
    fast = _outcome(path)
    if isinstance(slow, str) or isinstance(fast, str):
        assert fast == slow
    else:
        (fast_runs, fast_cursor), (slow_runs, slow_cursor) = fast, slow
        assert fast_cursor == slow_cursor
        assert len(fast_runs) == len(slow_runs)
        for r, s in zip(fast_runs, slow_runs, strict=True):
            assert r.frame.equals(s.frame)
            assert r.frame.schema == s.frame.schema
            assert r.data_quality == s.data_quality
            assert r.metadata == s.metadata
    return lane is not None


def _small_fixtures() -> list[Path]:
    files = [
        p for p in sorted(FIXTURES.rglob("*.jsonl")) if p.stat().st_size < jsonl.FAST_MIN_BYTES
    ]
    if len(files) < 5:
        pytest.skip("fixture runs not generated")
    return files


def test_small_fixture_runs_read_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    files = _small_fixtures()
    taken = [f for f in files if _agree(f, monkeypatch)]
    assert len(taken) >= len(files) // 2  # most are flat numeric logs


def test_a_small_flat_file_is_read_without_polars_ndjson_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[object] = []
    real = pl.read_ndjson

    def counted(*args: object, **kwargs: object) -> pl.DataFrame:
        calls.append(args)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(jsonl.pl, "read_ndjson", counted)
    read = 0
    for f in _small_fixtures():
        before = len(calls)
        if _jsonl_compiled.read_whole(f.read_bytes()) is None:
            continue
        runs = jsonl.read(f, ReadOptions())
        assert runs and runs[0].frame.height > 0
        assert len(calls) == before, f"{f}: polars' ndjson reader read a file the lane takes"
        read += 1
    assert read >= 5
    # (and a file the lane leaves still goes to polars)
    text = _small_fixtures()[0].read_bytes().replace(b"{", b'{"phase": "train", ', 1)
    left = tmp_path / "left.jsonl"
    left.write_bytes(text)
    before = len(calls)
    (run,) = jsonl.read(left, ReadOptions())
    assert len(calls) > before and run.frame.height > 0


@pytest.mark.parametrize("noisy", [False, True])
def test_generated_small_runs_read_alike(
    noisy: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    sys.path.insert(0, str(BENCH))
    import bench_gate
    import generate
    import numpy as np

    generate.generate(generate.Plan(steps=1500, noisy=noisy, restart=0.5), tmp_path, ("jsonl",))
    assert _agree(tmp_path / "run.jsonl", monkeypatch)
    # bench_gate's runs: a healthy one is taken; one whose values turn NaN is left
    for kind, taken in (("healthy", True), ("nan", False)):
        path = tmp_path / f"{kind}.jsonl"
        bench_gate.write_run(path, 1200, np.random.default_rng(1), kind)
        assert _agree(path, monkeypatch) is taken


SMALL_TAKEN = {
    **TAKEN,
    "an integer key beside a float one": '{"step": 1, "tokens": 512, "loss": 2.5}\n'
    '{"step": 2, "tokens": 1024, "loss": 2.0}\n',
    "an integer key that turns fractional": '{"step": 1, "n": 1}\n{"step": 2, "n": 1.5}\n',
    "an exponent is no integer": '{"step": 1, "n": 1e3}\n{"step": 2, "n": 2}\n',
    "an end record with non-ASCII last": '{"step": 1, "a": 1.0}\n'
    '{"event": "end", "state": "crashed", "error": "d\\u00e9j\\u00e0 vu \u00e9"}\n',
    "two end records": '{"step": 1, "a": 1.0}\n{"event": "end", "state": "finished"}\n'
    '{"event": "end", "state": "finished"}\n',
}


@pytest.mark.parametrize("name", list(SMALL_TAKEN))
def test_small_files_the_lane_takes_read_alike(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "run.jsonl"
    path.write_bytes(SMALL_TAKEN[name].encode())
    assert _agree(path, monkeypatch)


def test_integer_keys_keep_polars_dtype() -> None:
    body = SMALL_TAKEN["an integer key beside a float one"].encode()
    frame = _jsonl_compiled.read_whole(body)
    assert frame is not None
    assert frame.schema == pl.Schema({"step": pl.Int64, "tokens": pl.Int64, "loss": pl.Float64})


SMALL_LEFT = {
    **LEFT,
    "a deep end record": '{"step": 1, "a": 1.0}\n{"event": "end", "state": "finished", "x": '
    + "[" * 40
    + "]" * 40
    + "}\n",
    "invalid UTF-8 after the lines": b'{"step": 1, "a": 1.0}\n{"event": "end", "x": "\xff"}\n',
    "a byte order mark": "\ufeff" + '{"step": 1, "a": 1.0}\n',
}


@pytest.mark.parametrize("name", list(SMALL_LEFT))
def test_small_files_the_lane_leaves_read_alike(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = SMALL_LEFT[name]
    path = tmp_path / "run.jsonl"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    _agree(path, monkeypatch)  # (the same read either way, whichever path reads it)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(lines=_lines(_GOOD))
def test_random_small_numeric_lines_read_alike(
    lines: list[str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = tmp_path_factory.mktemp("random") / "run.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.MonkeyPatch.context() as mp:
        assert _agree(path, mp)  # (numbers only: the lane takes every such file)


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(lines=_lines(st.one_of(_GOOD, _BAD), st.one_of(_KEYS, st.sampled_from(["", "é", "a:b"]))))
def test_random_small_lines_with_what_the_lane_leaves(
    lines: list[str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = tmp_path_factory.mktemp("random") / "run.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.MonkeyPatch.context() as mp:
        _agree(path, mp)


def test_the_lane_is_not_tried_twice_on_a_file_it_refuses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = [json.dumps({"step": s, "loss": 1.0}) for s in range(300)]
    lines[200] = '{"step": 200, "loss": NaN}'
    path = tmp_path / "run.jsonl"
    path.write_text("\n".join(lines) + "\n")
    seen: list[int] = []
    real = _jsonl_compiled.read_whole

    def counted(body: bytes) -> pl.DataFrame | None:
        seen.append(len(body))
        return real(body)

    monkeypatch.setattr(_jsonl_compiled, "read_whole", counted)
    (run,) = jsonl.read(path, ReadOptions())
    assert seen == [path.stat().st_size]
    assert run.frame.height > 0


def _last_object_by_lines(data: bytes) -> object:
    """_run_end._last_object as it was: every line of the tail split, read from the end."""
    for line in reversed(data.splitlines()):
        s = line.strip()
        if not s:
            continue
        if not s.startswith(b"{") or s.count(b"{") > 64:
            return None
        try:
            return json.loads(s)
        except (ValueError, RecursionError):
            return None
    return None


_TAIL_PARTS = st.sampled_from(
    [b"\n", b"\r", b"\r\n", b" ", b"\t", b"\x0b", b"\x0c", b"{", b"}", b'{"event": "end"}',
     b'{"event": "end", "state": "finished"}', b'{"step": 3, "loss": 1.5}', b'"', b"x", b"[1]"]
)  # fmt: skip


@settings(max_examples=500, deadline=None)
@given(parts=st.lists(_TAIL_PARTS, max_size=12))
def test_the_last_line_found_from_the_end_is_the_last_of_the_lines(parts: list[bytes]) -> None:
    data = b"".join(parts)
    assert jsonl._run_end._last_object(data) == _last_object_by_lines(data)
