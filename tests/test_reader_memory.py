"""Readers that hold less memory (issue 23, item 9) read the same frame and notes.

Each lighter path is compared with the path it spares: the JSONL reader's emptying of
long numeric lists, the trainer state read a piece of entries at a time, the parquet
reader's categorical metric column, and canonicalize's repeated-step check beside
mark_restarts. One bound on peak memory is checked in a child process, with a wide
margin (bench/memory.py has the measurements).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

import trainlens
from trainlens.core.canonical import mark_restarts
from trainlens.core.run import Run, build_run
from trainlens.readers import _long_lines, hf_trainer
from trainlens.readers.base import ReadOptions

REPO = Path(__file__).resolve().parents[1]


def _same_runs(a: list[Run], b: list[Run]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert_frame_equal(x.frame, y.frame)
        assert [d.to_dict() for d in x.data_quality] == [d.to_dict() for d in y.data_quality]


def _read_both(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[list[Run], list[Run]]:
    """The file read with the long lines emptied (LONG_LINE lowered so a small file has
    them) and with nothing emptied."""
    monkeypatch.setattr(_long_lines, "LONG_LINE", 2000)
    light = trainlens.read(path, format="jsonl")
    monkeypatch.setattr(_long_lines, "LONG_LINE", 1 << 62)
    whole = trainlens.read(path, format="jsonl")
    return light, whole


# ---- JSONL: long numeric lists ---------------------------------------------------------------


def test_long_lists_emptied_read_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(1)
    lines = [
        {"step": s, "loss": 1.0 / (s + 1), "hist": rng.random(400).tolist(), "tag": "a[1, 2]"}
        for s in range(20)
    ]
    lines[3]["grid"] = [[1.5] * 100, [2.5] * 100]  # a list of lists: the inner ones emptied
    lines[5]["names"] = ["x"] * 200  # a list of strings: left as it is
    lines[7]["loss"] = math.nan
    lines[8]["hist"] = [math.inf, *rng.random(300).tolist()]
    path = tmp_path / "run.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    light, whole = _read_both(path, monkeypatch)
    _same_runs(light, whole)
    assert light[0].frame.height == 20
    (note,) = [d for d in light[0].data_quality if d.kind == "non-metric-column"]
    assert {"hist", "grid", "names", "tag"} <= set(note.details["columns"])


def test_a_bracket_inside_a_string_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    # a key and a text value that look like lists: only the real list is emptied
    text = "[" + ", ".join(["1.0"] * 200) + "]"
    record = {"step": 3, "a[0]": 2.0, "note": text, "hist": [0.5] * 200, "b": 4.0}
    monkeypatch.setattr(_long_lines, "LONG_LINE", 1000)
    emptied, _ = _long_lines.empty_long_lists(json.dumps(record).encode() + b"\n")
    parsed = json.loads(emptied)
    assert parsed["note"] == text and parsed["a[0]"] == 2.0 and parsed["b"] == 4.0
    assert parsed["hist"] == []


def test_a_malformed_long_list_is_still_a_bad_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = '{"step": 2, "loss": 0.5, "hist": [' + ", ".join(["0.25"] * 300) + ", ]}"
    good = [json.dumps({"step": s, "loss": 1.0, "hist": [0.1] * 300}) for s in (1, 3)]
    path = tmp_path / "run.jsonl"
    path.write_text("\n".join([good[0], bad, good[1]]) + "\n")
    light, whole = _read_both(path, monkeypatch)
    _same_runs(light, whole)
    (issue,) = [d for d in light[0].data_quality if d.kind == "bad-line"]
    assert issue.location == "line 2"
    assert light[0].frame.get_column("step").to_list() == [1, 3]


def test_a_cut_last_line_keeps_its_length_in_the_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = json.dumps({"step": 1, "loss": 1.0})
    cut = json.dumps({"step": 2, "hist": [0.5] * 600, "loss": 0.9})[:-8]  # still being written
    path = tmp_path / "run.jsonl"
    path.write_text(first + "\n" + cut)
    light, whole = _read_both(path, monkeypatch)
    _same_runs(light, whole)
    (issue,) = [d for d in light[0].data_quality if d.kind == "truncated-line"]
    assert f"({len(cut)} bytes)" in issue.message


def test_one_long_line_is_read_in_little_more_than_its_bytes(tmp_path: Path) -> None:
    # before: 13x the file on top of the imports (a 16 MB line took 0.2 GB more); now ~1x
    path = tmp_path / "one.jsonl"
    values = np.random.default_rng(0).random(400_000).tolist()
    path.write_text(json.dumps({"step": 7, "loss": 2.0, "hist": values}) + "\n")
    tiny = tmp_path / "tiny.jsonl"
    tiny.write_text('{"step": 1, "loss": 2.0}\n')
    child = textwrap.dedent(
        """
        import sys, trainlens
        def kb(key):
            for line in open("/proc/self/status"):
                if line.startswith(key):
                    return int(line.split()[1])
        trainlens.read(sys.argv[2])  # (imports and polars' start: ~20 MB, not this read)
        before = kb("VmRSS:")
        (run,) = trainlens.read(sys.argv[1])
        print(run.frame.height, kb("VmHWM:") - before)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", child, str(path), str(tiny)],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    ).stdout.split()
    assert out[0] == "1"
    grown = int(out[1]) * 1024
    # (plus 32 MB for what varies from run to run: allocator arenas, polars' threads)
    assert grown < 3 * path.stat().st_size + (32 << 20), (grown, path.stat().st_size)


# ---- trainer_state.json in pieces ------------------------------------------------------------


def _write_state(path: Path, history: list[dict[str, object]]) -> None:
    from transformers import TrainerState

    TrainerState(
        global_step=len(history), max_steps=len(history), log_history=history
    ).save_to_json(str(path))


def _hf_both(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Run, Run, bool]:
    monkeypatch.setattr(hf_trainer, "PIECE", 2048)
    pieces = hf_trainer._in_pieces(path.read_bytes()) is not None
    (light,) = hf_trainer.read(path, ReadOptions())
    monkeypatch.setattr(hf_trainer, "_in_pieces", lambda data: None)
    (whole,) = hf_trainer.read(path, ReadOptions())
    return light, whole, pieces


def test_trainer_state_in_pieces_reads_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    history: list[dict[str, object]] = []
    for step in range(1, 400):
        history.append(
            {"epoch": step / 400, "grad_norm": 1.0, "loss": 2.0 - step / 1000, "step": step}
        )
        if step % 50 == 0:
            history.append({"epoch": step / 400, "eval_loss": 2.1, "step": step})
    history[10]["loss"] = math.nan
    history[20] = {"loss": 1.0}  # no step: a note, values counted
    history[30]["epoch"] = 9.0  # epoch twice at one step with another value: a note
    history.append({"epoch": 1.0, "step": 399, "train_runtime": 10.0, "train_loss": 1.7})
    path = tmp_path / "trainer_state.json"
    _write_state(path, history)
    light, whole, pieces = _hf_both(path, monkeypatch)
    assert pieces
    _same_runs([light], [whole])
    assert light.metadata == whole.metadata
    kinds = {d.kind for d in light.data_quality}
    assert "bad-step" in kinds
    assert "final/train_runtime" in light.frame.get_column("metric").cast(pl.String).to_list()


def test_trainer_state_with_a_brace_in_a_string_falls_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a cut after a '}' inside a string leaves a piece that does not parse: read whole
    history: list[dict[str, object]] = [
        {"loss": 1.0, "note": "}" * 3000, "step": s, "cfg": {"a": {"b": 1}}} for s in range(1, 40)
    ]
    path = tmp_path / "trainer_state.json"
    _write_state(path, history)
    light, whole, _ = _hf_both(path, monkeypatch)
    _same_runs([light], [whole])
    assert light.frame.height == 39


# ---- parquet: a categorical metric column ----------------------------------------------------


def test_converted_parquet_reads_as_with_text_metric_names(tmp_path: Path) -> None:
    steps = list(range(50))
    run = build_run(
        pl.DataFrame(
            {
                "step": steps * 2 + [10, 11],  # a restart at the end of loss
                "metric": ["loss"] * 50 + ["lr"] * 50 + ["loss", "loss"],
                "value": [float(s) for s in range(102)],
            }
        ),
        name="r",
        source="x",
        fmt="jsonl",
    )
    categorical = tmp_path / "run.parquet"
    trainlens.convert(run, categorical)
    text = tmp_path / "text.parquet"
    pl.read_parquet(categorical).with_columns(pl.col("metric").cast(pl.String)).write_parquet(text)
    assert isinstance(pl.read_parquet(categorical).schema["metric"], pl.Categorical)
    a, b = trainlens.read(categorical), trainlens.read(text)
    assert_frame_equal(a[0].frame, b[0].frame)
    assert [d.message for d in a[0].data_quality] == [d.message for d in b[0].data_quality]


# ---- canonicalize: repeated steps without mark_restarts ---------------------------------------


@pytest.mark.parametrize("seed", range(6))
def test_repeated_step_check_agrees_with_mark_restarts(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 3000
    step = np.sort(rng.integers(0, 400, n))
    metric = rng.choice(["loss", "epoch", "lr"], n)
    value = rng.choice([0.5, 1.0, 2.0], n)
    long = pl.DataFrame({"step": step, "metric": metric, "value": value})
    run = build_run(long, name="r", source="s", fmt="hf-trainer")
    expected, issues = mark_restarts(
        run.frame.drop("superseded"),
        source="s",
    )
    assert_frame_equal(run.frame, expected)
    assert [d.to_dict() for d in run.data_quality] == [d.to_dict() for d in issues]
    assert issues  # (values repeat at one step with another value: the check had work)
