"""The compiled JSONL lane (`_jlscan`) against polars' path it stands in for.

Wherever the lane gives a frame, polars' sampled-schema path (jsonl._read_mapped with
the lane switched off) takes the same file whole and gives the same frame: the same
columns in the same order, the same dtypes, the same doubles bit for bit, the same nulls
(trainlens/readers/_jsonl_compiled.py says why each condition is there). Where it gives
none, the reader goes on as before. Checked on the fixture runs, bench-generated runs,
hand-made edge files and random lines. Skipped where the lane is not built."""

from __future__ import annotations

import contextlib
import json
import math
import mmap
import random
import struct
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import BENCH, FIXTURES
from trainlens.core.errors import TrainlensError
from trainlens.core.run import Run
from trainlens.readers import _jsonl_compiled, jsonl

_jlscan = pytest.importorskip("trainlens.readers._jlscan")


def _both(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[object, object]:
    """(the lane's frame or None, polars' path's result) for ``path``, any size."""
    monkeypatch.setattr(jsonl, "FAST_MIN_BYTES", 1)
    size = path.stat().st_size
    if size == 0:  # (nothing to map: the general path says the file is empty)
        return None, None
    with path.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        body = jsonl._run_end.before_closing_end(mm, size)
        lane = _jsonl_compiled.read(mm, body, jsonl._sample(mm, body))
    monkeypatch.setattr(_jsonl_compiled, "_jlscan", None)
    polars_path = jsonl._read_mapped(path) if path.read_bytes().endswith(b"\n") else None
    monkeypatch.setattr(_jsonl_compiled, "_jlscan", _jlscan)
    return lane, polars_path


def _bits(frame: pl.DataFrame) -> list[object]:
    """Every cell, floats as their bit patterns (NaN == NaN, -0.0 != 0.0)."""
    out: list[object] = []
    for s in frame.iter_columns():
        for v in s.to_list():
            out.append(struct.pack("<d", v) if isinstance(v, float) else v)
    return out


def _agree(path: Path, monkeypatch: pytest.MonkeyPatch) -> bool:
    """True when the lane took the file (and agreed); False when it left it to polars."""
    lane, polars_path = _both(path, monkeypatch)
    if lane is None:
        return False
    assert isinstance(lane, pl.DataFrame)
    assert polars_path is not None, f"{path}: the lane took a file polars' path would not"
    frame, _size = polars_path  # type: ignore[misc]
    assert lane.columns == frame.columns
    assert lane.schema == frame.schema
    assert _bits(lane) == _bits(frame)
    # and the whole read, lane on and off: the same runs, or the same sentence
    monkeypatch.setattr(_jsonl_compiled, "_jlscan", None)
    slow = _outcome(path)
    monkeypatch.setattr(_jsonl_compiled, "_jlscan", _jlscan)
    fast = _outcome(path)
    if isinstance(slow, str) or isinstance(fast, str):
        assert fast == slow
        return True
    assert [r.frame.equals(s.frame) for r, s in zip(fast, slow, strict=True)] == [True] * len(fast)
    assert [r.data_quality for r in fast] == [s.data_quality for s in slow]
    return True


def _outcome(path: Path) -> list[Run] | str:
    try:
        return jsonl.read(path, jsonl.ReadOptions())
    except TrainlensError as exc:
        return str(exc)


def test_fixture_runs_read_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    files = sorted(FIXTURES.rglob("*.jsonl"))
    if not files:
        pytest.skip("fixture runs not generated")
    taken = [f for f in files if _agree(f, monkeypatch)]
    assert len(taken) >= len(files) // 2  # most are flat numeric logs


@pytest.mark.parametrize("noisy", [False, True])
def test_generated_runs_read_alike(
    noisy: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    sys.path.insert(0, str(BENCH))
    import generate

    generate.generate(generate.Plan(steps=3000, noisy=noisy, restart=0.5), tmp_path, ("jsonl",))
    assert _agree(tmp_path / "run.jsonl", monkeypatch)


def _write(tmp_path: Path, text: str, name: str = "run.jsonl") -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
    return path


TAKEN = {
    "integers and floats mixed": '{"step": 1, "loss": 3}\n{"step": 2, "loss": 2.5}\n',
    "a key missing on some lines": '{"step": 1, "a": 1.0}\n{"step": 2}\n{"step": 3, "a": 2.0}\n',
    "a key first seen late": '{"step": 1, "a": 1}\n{"step": 2, "b": 2, "a": 1}\n',
    "JSON's number forms": '{"step": 0, "a": -0, "b": 1E+5, "c": 2.5e-3, "d": -0.0}\n'
    '{"step": 1, "a": 1e-320, "b": 123456789012345678, "c": 0.1, "d": 9007199254740993}\n',
    "long mantissas": '{"step": 1, "a": 0.30000000000000000000000000001, '
    '"b": 1.00000000000000011102230246251565404236316680908203125}\n',
    "spaces and tabs": '  {\t"step" :1 ,"a":\t2.0 }  \n',
    "a step key in another case": '{"Step": 5, "a": 1.0}\n{"Step": 6, "a": 2.0}\n',
    "no step key": '{"loss": 1.0}\n{"loss": 2.0}\n',
    "an end record last": '{"step": 1, "a": 1.0}\n{"event": "end", "state": "finished"}\n',
}

LEFT = {
    "a string value": '{"step": 1, "phase": "train", "a": 1.0}\n',
    "null": '{"step": 1, "a": null}\n',
    "true": '{"step": 1, "a": true}\n',
    "a bare NaN": '{"step": 1, "a": NaN}\n',
    "-Infinity": '{"step": 1, "a": -Infinity}\n',
    "a nested object": '{"step": 1, "a": {"b": 1}}\n',
    "a list": '{"step": 1, "a": [1, 2]}\n',
    "a blank line": '{"step": 1, "a": 1.0}\n\n{"step": 2, "a": 1.0}\n',
    "an escape in a key": '{"step": 1, "a\\u0062": 1.0}\n',
    "a colon in a key": '{"step": 1, "a:b": 1.0}\n',
    "a key twice": '{"step": 1, "a": 1.0, "a": 2.0}\n',
    "an empty object": '{"step": 1}\n{}\n',
    "a leading zero": '{"step": 1, "a": 01}\n',
    "a bare dot": '{"step": 1, "a": 1.}\n',
    "a fraction step": '{"step": 1.5, "a": 1.0}\n',
    "a 19-digit integer": '{"step": 1, "a": 1234567890123456789}\n',
    "past the double range": '{"step": 1, "a": 1e400}\n',
    "a carriage return": '{"step": 1, "a": 1.0}\r\n',
    "non-ASCII in a key": '{"step": 1, "ä": 1.0}\n',
    "two step keys by case": '{"step": 1, "STEP": 2, "a": 1.0}\n',
    "no newline at the end": '{"step": 1, "a": 1.0}',
    "a trailing comma": '{"step": 1, "a": 1.0,}\n',
}


@pytest.mark.parametrize("name", list(TAKEN))
def test_files_the_lane_takes_read_alike(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _agree(_write(tmp_path, TAKEN[name]), monkeypatch)


@pytest.mark.parametrize("name", list(LEFT))
def test_files_the_lane_leaves_to_polars(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _write(tmp_path, LEFT[name])
    assert _both(path, monkeypatch)[0] is None
    monkeypatch.setattr(jsonl, "FAST_MIN_BYTES", 1)
    with contextlib.suppress(TrainlensError):  # (the reader reads it, or says why not)
        jsonl.read(path, jsonl.ReadOptions())


def test_a_key_outside_polars_sample_is_left_to_polars(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = [json.dumps({"step": s, "loss": 1.0 / (s + 1)}) for s in range(4000)]
    lines[2500] = json.dumps({"step": 2500, "loss": 0.5, "rare": 1.0})  # past the head
    path = _write(tmp_path, "\n".join(lines) + "\n")
    sample = jsonl._sample(path.read_bytes())
    if b'"rare"' in sample:
        pytest.skip("the sample happens to hold the line")
    assert _both(path, monkeypatch)[0] is None


def test_numbers_are_the_nearest_doubles() -> None:
    rnd = random.Random(3)
    texts = ["0", "-0", "5e-324", "2.2250738585072011e-308", "1.7976931348623157e308"]
    for _ in range(3000):
        x = struct.unpack("<d", rnd.randbytes(8))[0]
        if math.isfinite(x):
            texts += [repr(x), f"{x:.25e}", f"{x:.3g}".replace("inf", "1")]
        texts.append(f"{rnd.randrange(10**18)}.{rnd.randrange(10 ** rnd.randrange(1, 30))}")
    texts = [t for t in texts if math.isfinite(float(t)) and "inf" not in t and "nan" not in t]
    body = "".join(f'{{"v": {t}}}\n' for t in texts).encode()
    got = _jlscan.scan(body, len(body), ())
    assert not isinstance(got, str), got
    (values,) = got[1]
    parsed = pl.Series(values).to_list()
    # (an integer literal is an integer made a float, as polars makes it: -0 is 0.0)
    want = [float(int(t)) if t.lstrip("-").isdigit() else float(t) for t in texts]
    assert [struct.pack("<d", v) for v in parsed] == [struct.pack("<d", v) for v in want]


_KEYS = st.sampled_from(["loss", "lr", "time", "grad_norm/x", "a b", "Loss"])
_STEP = st.one_of(st.integers(-5, 10**12).map(str), st.just(None))
_GOOD = st.one_of(
    st.integers(-(10**18) + 1, 10**18 - 1).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.floats(allow_nan=False, allow_infinity=False, width=32).map(json.dumps),
    st.floats(allow_nan=False, allow_infinity=False).map(lambda x: f"{x:.30e}"),
    st.sampled_from(["-0", "0.0", "-0.0", "1E+5", "1e-320", "5e-324", "2.5E-3"]),
)
_BAD = st.sampled_from(["01", "1.", ".5", "NaN", '"x"', "null", "true", "[1]", "1e400", "1_0"])
_SPACE = st.sampled_from(["", " ", "\t", "  "])


def _lines(values: st.SearchStrategy[str], keys: st.SearchStrategy[str] = _KEYS) -> object:
    """Lines of a step (an integer, or none on a line) and 1-5 other keys."""
    line = st.tuples(_STEP, st.dictionaries(keys, values, min_size=1, max_size=5), _SPACE).map(
        lambda t: (
            "{"
            + t[2]
            + ", ".join(
                f'"{k}":{t[2]}{v}'
                for k, v in ([("step", t[0])] if t[0] is not None else []) + list(t[1].items())
            )
            + "}"
        )
    )
    return st.lists(line, min_size=1, max_size=40)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(lines=_lines(_GOOD))
def test_random_numeric_lines_read_alike(
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
def test_random_lines_with_what_the_lane_leaves(
    lines: list[str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = tmp_path_factory.mktemp("random") / "run.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.MonkeyPatch.context() as mp:
        _agree(path, mp)
