"""``trainlens.convert``: several runs into one file, the same from Python as from the CLI.

The merging of several runs used to live in the ``convert`` command, so a Python caller
got a TypeError for a list of runs; and the JSONL writer dropped the ``run`` column the
CSV and Parquet outputs kept, so two runs' values could not be told apart in it.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

import trainlens
from trainlens.cli import main
from trainlens.core.errors import UsageError


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from torch.utils.tensorboard import SummaryWriter

    root = tmp_path_factory.mktemp("tb")
    for name, offset in (("run1", 0.0), ("run2", 1.0)):
        writer = SummaryWriter(str(root / name))
        for step in range(5):
            writer.add_scalar("train/loss", offset + 1.0 / (step + 1), step)
        writer.close()
    return root


@pytest.mark.parametrize("ext", ["parquet", "csv", "jsonl"])
def test_several_runs_convert_with_a_run_column(two_runs: Path, tmp_path: Path, ext: str) -> None:
    runs = trainlens.read(two_runs)
    assert sorted(r.name for r in runs) == ["run1", "run2"]
    out = trainlens.convert(runs, tmp_path / f"all.{ext}")
    if ext == "parquet":
        frame = pl.read_parquet(out)
    elif ext == "csv":
        frame = pl.read_csv(out)
    else:
        frame = pl.DataFrame([json.loads(line) for line in out.read_text().splitlines()])
    assert frame.columns == ["step", "metric", "value", "wall_time", "superseded", "run"]
    assert frame.height == 10
    by_run = {
        name: sorted(frame.filter(pl.col("run") == name)["value"].to_list())
        for name in ("run1", "run2")
    }
    assert by_run["run1"] == pytest.approx(sorted(1.0 / (s + 1) for s in range(5)))
    assert by_run["run2"] == pytest.approx(sorted(1.0 + 1.0 / (s + 1) for s in range(5)))


@pytest.mark.parametrize("ext", ["csv", "jsonl"])
def test_cli_writes_what_the_api_writes(
    two_runs: Path, tmp_path: Path, ext: str, capsys: pytest.CaptureFixture[str]
) -> None:
    cli_out = tmp_path / f"cli.{ext}"
    assert main(["convert", str(two_runs), "-o", str(cli_out)]) == 0
    assert "wrote 10 values from 2 run(s)" in capsys.readouterr().out
    api_out = trainlens.convert(trainlens.read(two_runs), tmp_path / f"api.{ext}")
    assert cli_out.read_bytes() == api_out.read_bytes()


def test_one_run_keeps_the_plain_frame(two_runs: Path, tmp_path: Path) -> None:
    run = trainlens.read(two_runs / "run1")[0]
    for given in (run, [run]):
        out = trainlens.convert(given, tmp_path / "one.csv")
        assert pl.read_csv(out).columns == ["step", "metric", "value", "wall_time", "superseded"]
    with pytest.raises(UsageError, match="no runs"):
        trainlens.convert([], tmp_path / "none.csv")
