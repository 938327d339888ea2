"""Parquet and CSV dumps of W&B history, written by pandas (+ pyarrow) as a user does it,
and parquet files ``trainlens convert`` writes read back to the same frame.

A user saves ``run.history()`` / ``run.scan_history()`` (a pandas DataFrame: ``_step``,
``_runtime``, ``_timestamp`` and a column per metric, NaN where a metric was not logged)
with ``to_parquet`` or ``to_csv``. Built here from the fixture runs' values; the frame
must be the one the fixture's JSONL gives.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

import trainlens
from tests.conftest import FIXTURE_RUNS
from trainlens.cli import main
from trainlens.readers import detect_format, read_runs

pd = pytest.importorskip("pandas")
pytest.importorskip("pyarrow")


def _history(fixture: str) -> Any:
    """The fixture's rows as W&B's ``run.history(samples=...)`` gives them: W&B's own
    columns (its step, the seconds since the start, the wall time) beside the metrics."""
    rows = [
        json.loads(line, parse_constant=float)
        for line in (FIXTURE_RUNS / fixture / "metrics.jsonl").read_text().splitlines()
    ]
    out = []
    for row in rows:
        step, when = row.pop("step"), row.pop("time")
        out.append({**row, "_step": step, "_runtime": when - rows[0].get("time", 0.0)})
        out[-1]["_timestamp"] = when
    start = out[0]["_timestamp"]
    for row in out:
        row["_runtime"] = row["_timestamp"] - start
    return pd.DataFrame(out)


def _frame(run: trainlens.Run) -> pl.DataFrame:
    return run.frame.select(
        "step", pl.col("metric").cast(pl.String), "value", "wall_time", "superseded"
    ).sort("metric", "step", "value")


def _jsonl(fixture: str) -> trainlens.Run:
    (run,) = read_runs(FIXTURE_RUNS / fixture / "metrics.jsonl")
    return run


# ---- parquet dumps ---------------------------------------------------------------------------


@pytest.mark.parametrize("fixture", ["healthy_cosine", "memory_leak"])
def test_history_parquet_reads_as_the_jsonl(fixture: str, tmp_path: Path) -> None:
    out = tmp_path / "history.parquet"
    _history(fixture).to_parquet(out)  # pandas' default: pyarrow, the RangeIndex as metadata
    assert out.read_bytes()[:4] == b"PAR1"
    (run,) = read_runs(out)
    assert run.format == "parquet"
    assert _frame(run).equals(_frame(_jsonl(fixture)))  # values bit for bit, wall times too
    assert not {"_runtime", "_step", "_timestamp"} & set(run.metrics)
    assert run.data_quality == []  # the sparse metrics' NaN cells are absent values


def test_history_parquet_with_an_index_and_a_trainer_step(tmp_path: Path) -> None:
    full = _history("healthy_cosine")
    half = len(full) // 2
    # two pages of history joined (the index is 0..k, 0..m: no range, written as a column)
    df = pd.concat([full.iloc[:half], full.iloc[half:].reset_index(drop=True)])
    df["trainer/global_step"] = df["_step"] * 4  # Lightning's own step beside W&B's
    df["time"] = 0.25  # a logged duration named like a time column
    out = tmp_path / "dump.parquet"
    df.to_parquet(out)
    assert "__index_level_0__" in pl.read_parquet(out).columns
    (run,) = read_runs(out)
    ref = _jsonl("healthy_cosine")
    _, loss = run.series("train/loss")
    ref_steps, ref_loss = ref.series("train/loss")
    steps, _ = run.series("train/loss")
    assert steps.tolist() == (ref_steps * 4).tolist()  # the trainer's step wins
    assert loss.tolist() == ref_loss.tolist()
    assert "_step" not in run.metrics  # W&B's count of log calls is no metric
    assert "time" in run.metrics  # the user's metric; the wall time is _timestamp
    wall = run.series_frame("train/loss").get_column("wall_time").to_list()
    assert wall == ref.series_frame("train/loss").get_column("wall_time").to_list()
    notes = [d for d in run.data_quality if d.kind == "pandas-index"]
    assert len(notes) == 1 and "__index_level_0__" in notes[0].message
    assert notes[0].severity == "info"


def test_same_findings_as_the_jsonl(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "memory_leak.parquet"
    _history("memory_leak").to_parquet(out)

    def findings(path: Path) -> list[tuple[Any, ...]]:
        capsys.readouterr()
        main(["analyze", str(path), "--json"])
        (doc,) = json.loads(capsys.readouterr().out)["runs"]
        return [(f["code"], f["metric"], f["step_start"], f["step_end"]) for f in doc["findings"]]

    got = findings(out)
    assert got == findings(FIXTURE_RUNS / "memory_leak" / "metrics.jsonl")
    assert any(code == "MEM001" for code, *_ in got)


def test_parquet_is_sniffed_by_content_and_can_be_forced(tmp_path: Path) -> None:
    out = tmp_path / "export.bin"  # a name that says nothing
    _history("healthy_cosine").to_parquet(out)
    assert detect_format(out) == "parquet"
    (run,) = read_runs(out, format="parquet")
    assert run.has("train/loss")


def test_a_cut_parquet_is_one_sentence(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cut.parquet"
    _history("healthy_cosine").to_parquet(out)
    out.write_bytes(out.read_bytes()[:2000])
    assert main(["analyze", str(out)]) == 2
    err = capsys.readouterr().err
    assert "not a parquet file polars can read" in err and "Traceback" not in err


# ---- trainlens convert -> parquet -> the same frame ------------------------------------------


@pytest.mark.parametrize("fixture", ["crash_resume", "healthy_cosine"])
def test_convert_round_trip(fixture: str, tmp_path: Path) -> None:
    run = _jsonl(fixture)
    out = trainlens.convert(run, tmp_path / "run.parquet")
    (back,) = read_runs(out)
    assert back.frame.height == run.frame.height
    assert _frame(back).equals(_frame(run))  # superseded values too (crash_resume restarts)
    if fixture == "crash_resume":
        assert back.frame.get_column("superseded").sum() > 0


def test_convert_round_trip_of_several_runs(tmp_path: Path) -> None:
    runs = [_jsonl("healthy_cosine"), _jsonl("lr_shock_recover")]
    out = trainlens.convert(runs, tmp_path / "all.parquet")
    back = read_runs(out)
    assert [r.name for r in back] == [r.name for r in runs]
    for got, want in zip(back, runs, strict=True):
        assert _frame(got).equals(_frame(want))


# ---- CSV dumps ------------------------------------------------------------------------------


def test_history_csv_with_pandas_index(tmp_path: Path) -> None:
    out = tmp_path / "history.csv"
    _history("healthy_cosine").to_csv(out)  # pandas' default: the index as a first column
    assert out.read_text().startswith(",")  # its header is empty
    (run,) = read_runs(out)
    assert "" not in run.metrics and "_runtime" not in run.metrics
    ref = _frame(_jsonl("healthy_cosine"))
    got = _frame(run)
    # CSV holds the text pandas wrote (repr: round-trips floats exactly)
    assert got.equals(ref)
    (note,) = [d for d in run.data_quality if d.kind == "pandas-index"]
    assert note.severity == "info" and "pandas' row index" in note.message


def test_history_jsonl(tmp_path: Path) -> None:
    out = tmp_path / "history.jsonl"
    _history("healthy_cosine").to_json(out, orient="records", lines=True, double_precision=15)
    (run,) = read_runs(out)
    assert run.format == "jsonl"
    got, want = _frame(run), _frame(_jsonl("healthy_cosine"))
    # pandas' to_json writes at most 15 decimal places (default 10): the exact LRs the
    # monitor logs come back within that, not bit for bit
    assert got.drop("value").equals(want.drop("value"))
    assert np.allclose(
        got["value"].to_numpy(), want["value"].to_numpy(), rtol=1e-9, atol=0, equal_nan=True
    )
    assert not {"_runtime", "_step", "_timestamp"} & set(run.metrics)


def test_an_unnamed_first_column_that_is_no_row_number_stays(tmp_path: Path) -> None:
    out = tmp_path / "table.csv"
    out.write_text(",step,loss\n5,1,2.0\n9,2,1.5\n")
    (run,) = read_runs(out)
    assert "" in run.metrics  # not 0..n-1: not pandas' default index, kept
    assert not [d for d in run.data_quality if d.kind == "pandas-index"]


def test_wandb_chart_export_is_not_a_history_dump(tmp_path: Path) -> None:
    out = tmp_path / "chart.csv"
    out.write_text(
        "Step,run-a - loss,run-a - loss__MIN,run-a - loss__MAX\n0,2.0,2.0,2.0\n1,1.5,1.5,1.5\n"
    )
    (run,) = read_runs(out)
    assert run.name == "run-a" and run.metrics == ["train/loss"]


def test_gate_takes_a_parquet_run_from_an_archive(tmp_path: Path) -> None:
    from trainlens.gate.discover import discover

    archive = tmp_path / "archive"
    archive.mkdir()
    trainlens.convert(_jsonl("healthy_cosine"), archive / "healthy.parquet")
    (archive / "notes.txt").write_text("not a run\n")
    found = discover([str(archive)])
    assert [(s.path, s.name) for s in found] == [(str(archive / "healthy.parquet"), "healthy")]
