"""W&B's CSV downloads: a chart export (one run per W&B run) and a runs table (one run per
row, final values only, config kept as the run's params)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

import trainlens
from trainlens.core.names import AliasTable
from trainlens.readers._wandb import split_config_summary


def _write(path: Path, rows: list[list[object]]) -> Path:
    with path.open("w", newline="") as fh:
        csv.writer(fh, quoting=csv.QUOTE_ALL).writerows(rows)  # W&B quotes every cell
    return path


def test_chart_export_two_runs_of_unequal_length(tmp_path: Path) -> None:
    header = ["Step"]
    for run in ("swift-fox-1", "calm-sea-2"):
        header += [f"{run} - train/loss", f"{run} - train/loss__MIN", f"{run} - train/loss__MAX"]
    rows: list[list[object]] = [header]
    for step in range(0, 20, 2):
        a = 3.0 - step * 0.1
        b = 2.5 - step * 0.05 if step < 12 else ""  # the second run stopped at step 10
        rows.append([step, a, a, a, b, b, b])
    path = _write(tmp_path / "wandb_export.csv", rows)
    runs = trainlens.read(path)
    assert [r.name for r in runs] == ["swift-fox-1", "calm-sea-2"]
    fox, sea = runs
    assert fox.metrics == ["train/loss"] and sea.metrics == ["train/loss"]
    assert fox.series("train/loss")[0].tolist() == list(range(0, 20, 2))
    # empty cells are no point, not NaN
    steps, loss = sea.series("train/loss")
    assert steps.tolist() == [0, 2, 4, 6, 8, 10]
    assert loss[-1] == pytest.approx(2.0)
    [note] = [d for d in sea.data_quality if d.kind == "wandb-companions"]
    assert "equal the value" in note.message and note.severity == "info"


def test_chart_export_companions_that_differ_are_kept_apart(tmp_path: Path) -> None:
    rows: list[list[object]] = [["Step", "r - step_time_ms", "r - step_time_ms__MIN"]]
    rows += [[i, 100.0, 90.0 if i == 3 else 100.0] for i in range(6)]
    [run] = trainlens.read(_write(tmp_path / "export.csv", rows))
    assert run.series("step_time")[1].tolist() == [0.1] * 6  # ms, scaled to seconds
    mins = run.series("step_time__min")[1].tolist()
    assert mins[3] == pytest.approx(0.09) and mins[0] == pytest.approx(0.1)


def test_chart_run_name_with_a_dash(tmp_path: Path) -> None:
    rows: list[list[object]] = [["Step", "lr 1e-3 - bs 64 - val_loss"]]
    rows += [[i, 2.0 - 0.1 * i] for i in range(4)]
    [run] = trainlens.read(_write(tmp_path / "export.csv", rows))
    assert run.name == "lr 1e-3 - bs 64" and run.metrics == ["val/loss"]


def test_chart_export_on_a_custom_x_axis_interleaved_runs(tmp_path: Path) -> None:
    # a chart drawn against a logged metric (an RLlib sweep: x = num_steps_sampled): each
    # run brings its own `_step` column and the rows interleave, each row one run's point.
    # A row where this run has no point is another run's, not this run's value without a
    # step: nothing is skipped and no note says so
    header = ["ray/tune/info/num_steps_sampled"]
    for run in ("dashing-puddle", "super-monkey"):
        header += [f"{run} - _step", f"{run} - energy_cost_mean"]
    rows: list[list[object]] = [header]
    for i in range(10):
        rows.append([100 * (i + 1), 2 * (i + 1), 5.0 - 0.1 * i, "", ""])
        rows.append([100 * (i + 1) + 56, "", "", i + 3, 4.0 - 0.1 * i])
    runs = trainlens.read(_write(tmp_path / "wandb_export.csv", rows))
    assert [r.name for r in runs] == ["dashing-puddle", "super-monkey"]
    puddle, monkey = runs
    assert puddle.series("energy_cost_mean")[0].tolist() == list(range(2, 22, 2))
    assert monkey.series("energy_cost_mean")[0].tolist() == list(range(3, 13))
    for run in runs:
        assert not [d for d in run.data_quality if "without a usable step" in d.message]


def test_chart_export_with_a_header_wider_than_the_sniffed_head(tmp_path: Path) -> None:
    # 30 runs x 3 columns: a 4,005-byte header in a real export (snet-analysis), wider than
    # the 4 KiB head the format is sniffed from, was "not a format trainlens knows"
    names = [f"breezy-cloud-{k} - dataset_stats.S100_N30_m3_full.gap_mean" for k in range(30)]
    header = ["Step"] + [c + tail for c in names for tail in ("", "__MIN", "__MAX")]
    rows: list[list[object]] = [header]
    for e in range(0, 50, 10):
        rows.append([e] + [1.0 + 0.01 * e + k for k in range(30) for _ in range(3)])
    path = _write(tmp_path / "wandb_export.csv", rows)
    assert path.read_bytes().index(b"\n") > 4096
    runs = trainlens.read(path)
    assert len(runs) == 30 and runs[0].name == "breezy-cloud-0"
    assert runs[0].series("dataset_stats.S100_N30_m3_full.gap_mean")[0].tolist() == [
        0,
        10,
        20,
        30,
        40,
    ]


def test_plain_csv_with_a_dash_in_a_column_is_not_a_chart(tmp_path: Path) -> None:
    rows: list[list[object]] = [["step", "loss", "lr - group 0"]]
    rows += [[i, 1.0 / (i + 1), 0.1] for i in range(5)]
    [run] = trainlens.read(_write(tmp_path / "metrics.csv", rows))
    assert run.has("train/loss") and run.has("lr - group 0")


FIXED = ["Name", "State", "Notes", "User", "Tags", "Created", "Runtime", "Sweep"]


def test_runs_table_one_run_per_row(tmp_path: Path) -> None:
    config = ["batch_size", "learning_rate", "max_iters", "optimizer"]
    summary = ["_step", "lr", "train/loss", "val/loss"]
    rows: list[list[object]] = [FIXED + config + summary]
    for i, name in enumerate(["base", "wide", "base"]):
        fixed = [name, "finished", "-", "me", "", "2026-05-25T14:08:33.000Z", 700 + i, ""]
        rows.append([*fixed, 64, 1e-3, 5000, "adamw", 4999, 1e-4, 1.0 + i, 1.5 + i])
    runs = trainlens.read(_write(tmp_path / "wandb_export.csv", rows))
    assert [r.name for r in runs] == ["base", "wide", "base#2"]
    base = runs[0]
    # final values only, at the row's own step; config columns are not metrics
    assert sorted(base.metrics) == ["lr", "train/loss", "val/loss"]
    assert base.series("val/loss")[0].tolist() == [4999]
    assert runs[2].series("train/loss")[1].tolist() == [3.0]
    assert base.metadata["params"] == {
        "batch_size": 64,
        "learning_rate": 0.001,
        "max_iters": 5000,
        "optimizer": "adamw",
    }
    assert base.metadata["wandb"]["State"] == "finished"
    [note] = [d for d in base.data_quality if d.kind == "summary-only"]
    assert "not its history" in note.message and note.location == "line 2"


def test_runs_table_without_a_step_column_is_at_step_zero(tmp_path: Path) -> None:
    rows: list[list[object]] = [[*FIXED, "seed", "val_loss"]]
    rows.append(["a", "crashed", "", "", "", "", 3, "", 1, 2.25])
    rows.append(["b", "running", "", "", "", "", 3, "", 2, ""])  # no summary value yet
    [run] = trainlens.read(_write(tmp_path / "runs.csv", rows))
    assert run.name == "a" and run.series("val/loss")[0].tolist() == [0]
    assert run.metadata["params"] == {"seed": 1}
    assert any("1 run(s)" in d.message and "b" in d.message for d in run.data_quality)


def test_config_summary_boundary() -> None:
    table = AliasTable()
    # W&B sorts each block: the order starting again is the boundary
    cols = ["batch_size", "lr", "warmup", "iter", "lr", "train/loss"]
    assert split_config_summary(cols, table) == (cols[:3], cols[3:])
    # no boundary to see: by name (a canonical metric, a '/', a step column)
    cols = ["seed", "zeta", "_step", "val_loss"]
    config, summary = split_config_summary(cols, table)
    assert config == ["seed", "zeta"] and summary == ["_step", "val_loss"]


def test_real_chart_export(shared_dir: Path) -> None:
    path = shared_dir / "real-logs/EvergreenTree_di-f-fu-sion/wandb_export.csv"
    runs = trainlens.read(path)
    assert [r.name for r in runs] == [
        "oxford_flowers102-colu-conv2d",
        "oxford_flowers102-relu-conv2d",
    ]
    colu, relu = runs
    assert colu.metrics == ["train/loss"] and relu.metrics == ["train/loss"]
    steps, loss = colu.series("train/loss")
    assert steps.size == 1170 and steps[-1] == 1285
    assert loss.min() == pytest.approx(0.0126, abs=5e-5)
    rsteps, _ = relu.series("train/loss")
    assert rsteps.size == 1170 - 140 and rsteps[-1] < 1133


def test_real_runs_table(shared_dir: Path) -> None:
    path = shared_dir / "real-logs/Lucas-longxutang_Comp3242_Group_Project_nanoGPT/wandb_export.csv"
    runs = trainlens.read(path)
    assert len(runs) == 64 and len({r.name for r in runs}) == 64
    for r in runs:
        assert set(r.metrics) == {"lr", "train/loss", "train/step_loss", "val/loss"}
        assert r.metadata["params"]["max_iters"] == 5000
        assert r.series("val/loss")[0].tolist() == [5000]
    f2 = [r for r in runs if r.name.split("#")[0] == "F2_context_512"]
    assert len(f2) == 4
    for r in f2:
        assert 0.33 <= r.series("train/loss")[1][0] <= 0.37
        assert 2.0 <= r.series("val/loss")[1][0] <= 2.03
    best = min(runs, key=lambda r: r.series("val/loss")[1][0])
    assert best.name.split("#")[0] == "G1_ternary_weights"


def test_runs_table_with_columns_hidden_and_flags(tmp_path: Path) -> None:
    """The user picks the visible columns (no "State" here); a true/false summary is a
    flag kept with the params, never a metric."""
    fixed = ["Name", "Runtime", "End Time", "Hostname", "Notes", "Tags"]
    rows: list[list[object]] = [[*fixed, "batch", "seed", "offload", "tokens_per_sec"]]
    rows.append(["a", 300, "2026-05-29T08:53:32.000Z", "nid1", "-", "x", 240, 1, "true", 1e5])
    rows.append(["b", 310, "2026-05-29T08:54:32.000Z", "nid2", "-", "x", 240, 2, "false", 9e4])
    runs = trainlens.read(_write(tmp_path / "table.csv", rows))
    assert [r.name for r in runs] == ["a", "b"]
    assert runs[0].metrics == ["tokens_per_sec"]
    assert runs[1].metadata["params"] == {"batch": 240, "seed": 2, "offload": False}


def test_runs_table_step_that_is_no_step(tmp_path: Path) -> None:
    rows: list[list[object]] = [[*FIXED, "_step", "loss"]]
    rows.append(["x", "finished", "", "", "", "", 1, "", "abc", 0.5])
    rows.append(["y", "finished", "", "", "", "", 1, "", "1e30", 0.4])
    rows.append(["z", "finished", "", "", "", "", 1, "", "7", 0.3])
    runs = trainlens.read(_write(tmp_path / "runs.csv", rows))
    assert [r.series("train/loss")[0].tolist() for r in runs] == [[0], [0], [7]]
    [note] = [d for d in runs[0].data_quality if d.kind == "non-numeric"]
    assert note.count == 2 and note.location == "line 2"


def test_api_runs_export_summary_and_history(tmp_path: Path) -> None:
    """W&B's API export (config, then the sorted summary with _runtime/_step/_timestamp/
    _wandb, then name and id): one run per id; several rows of one id are its history."""
    header = ["epochs", "optimizer", "learning_rate", "_runtime", "_step", "_timestamp"]
    header += ["_wandb", "train_loss", "val_loss", "name", "id"]
    rows: list[list[object]] = [header]
    rows.append([30, "Adam", 0.005, 353.5, 35, 1748551479.7, "{'runtime': 353}", 0.05, 0.12])
    rows[-1] += ["trainsample_3404", "s4221lzx"]
    rows.append([30, "Adam", 0.005, 336.0, 36, 1748554436.0, "{'runtime': 336}", 0.04, 0.11])
    rows[-1] += ["trainsample_3404", "pxhphayy"]  # same name, another run (a seed)
    for step in (0, 10, 20):  # a history: three rows of one id
        rows.append([30, "SGD", 0.1, 10.0 + step, step, 1748556000.0 + step, "{}", 1.0, 1.1])
        rows[-1] += ["hist", "abc123"]
    runs = trainlens.read(_write(tmp_path / "export.csv", rows))
    assert [r.name for r in runs] == ["trainsample_3404", "trainsample_3404#2", "hist"]
    first, _, hist = runs
    assert sorted(first.metrics) == ["train/loss", "val/loss"]
    assert first.series("val/loss")[0].tolist() == [35]
    assert first.metadata["params"] == {"epochs": 30, "optimizer": "Adam", "learning_rate": 0.005}
    assert first.metadata["wandb"]["id"] == "s4221lzx"
    assert any(d.kind == "summary-only" for d in first.data_quality)
    assert hist.series("train/loss")[0].tolist() == [0, 10, 20]
    assert not any(d.kind == "summary-only" for d in hist.data_quality)
    assert hist.frame.get_column("wall_time").drop_nulls().len() == 6
