"""A pandas ``DataFrame.to_json()`` file (orient 'columns', pandas' default) is read as the
table it is, fast; every file here is written by pandas itself."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pandas as pd
import polars as pl
import pytest

import trainlens
from trainlens.core.errors import UnreadableInputError


def _frame(rows: int) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    s = np.arange(rows)
    return pd.DataFrame(
        {
            "step": s,
            "loss": 2 + 1 / (1 + s / 1e3) + rng.normal(0, 0.01, rows),
            "lr": 3e-4 * np.minimum(1, (s + 1) / 2000),
            "grad_norm": np.abs(rng.normal(1, 0.2, rows)),
            "epoch": s / 10000,
        }
    )


def _values(run: trainlens.Run, metric: str) -> pl.DataFrame:
    return run.frame.filter(pl.col("metric") == metric).select("step", "value")


def test_a_to_json_table_of_40k_rows_reads_in_seconds(tmp_path: Path) -> None:
    # 3.4 MB: read as one JSON record (200k nested keys) it ran past 300 s and 971 MB
    df = _frame(40_000)
    path = tmp_path / "metrics.json"
    df.to_json(path)
    assert path.stat().st_size > 3_000_000
    t = time.monotonic()
    (run,) = trainlens.read(path)
    elapsed = time.monotonic() - t
    assert elapsed < 20, elapsed  # (0.4 s CPU on the 2-core box; a loaded box is slower)
    assert run.format == "jsonl"
    assert sorted(run.frame.get_column("metric").unique().to_list()) == [
        "epoch",
        "grad_norm",
        "lr",
        "train/loss",
    ]
    loss = _values(run, "train/loss")
    assert loss.get_column("step").to_list() == list(range(40_000))
    # pandas writes 10 significant digits by default (double_precision=10)
    np.testing.assert_allclose(loss.get_column("value").to_numpy(), df["loss"], rtol=1e-9)
    (note,) = [d for d in run.data_quality if d.kind == "pandas-layout"]
    assert "5 column(s) of 40000 row(s)" in note.message and "'step' column" in note.message


def test_without_a_step_column_the_index_is_the_step(tmp_path: Path) -> None:
    df = pd.DataFrame(
        {"loss": [3.0, np.nan, 2.0, 1.5], "run": ["a", "a", "a", "a"]}, index=[10, 20, 30, 40]
    )
    path = tmp_path / "history.json"
    df.to_json(path)
    (run,) = trainlens.read(path)
    loss = _values(run, "train/loss")
    # the NaN cell (pandas writes null) is an absent value, as in the JSONL reader
    assert loss.rows() == [(10, 3.0), (30, 2.0), (40, 1.5)]
    kinds = {d.kind: d for d in run.data_quality}
    assert "the index is the step" in kinds["pandas-layout"].message
    assert "run" in kinds["non-metric-column"].message


def test_a_wandb_history_saved_with_to_json(tmp_path: Path) -> None:
    s = np.arange(50)
    df = pd.DataFrame(
        {"_step": s, "_runtime": s * 0.5, "_timestamp": 1.7e9 + s * 0.5, "loss": 1 / (1 + s)}
    )
    path = tmp_path / "history.json"
    df.to_json(path)
    (run,) = trainlens.read(path)
    assert run.frame.get_column("metric").unique().to_list() == ["train/loss"]
    loss = run.frame.filter(pl.col("metric") == "train/loss")
    assert loss.get_column("step").to_list() == list(range(50))
    assert loss.get_column("wall_time")[3] == pytest.approx(1.7e9 + 1.5)


def test_a_one_line_record_nesting_named_objects_is_still_a_record(tmp_path: Path) -> None:
    # the same shape of JSON with names for keys: a JSON line, read as before
    path = tmp_path / "run.jsonl"
    path.write_text(json.dumps({"train": {"loss": 2.0, "acc": 0.5}, "val": {"loss": 3.0}}))
    (run,) = trainlens.read(path)
    assert not [d for d in run.data_quality if d.kind == "pandas-layout"]
    assert set(run.frame.get_column("metric").to_list()) == {"train/loss", "train/acc", "val/loss"}


def test_a_cell_that_is_an_object_is_no_to_json_table(tmp_path: Path) -> None:
    # {"a": {"0": {...}}} is not what to_json writes: the JSONL reader's record
    path = tmp_path / "odd.json"
    path.write_text(json.dumps({"a": {"0": {"x": 1.0}}, "step": 3}))
    (run,) = trainlens.read(path)
    assert run.frame.get_column("metric").to_list() == ["a/0/x"]


def test_a_cut_to_json_file_is_an_error_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "cut.json"
    _frame(100).to_json(path)
    path.write_bytes(path.read_bytes()[:-500])
    with pytest.raises(UnreadableInputError, match=r"cut\.json"):
        trainlens.read(path)
