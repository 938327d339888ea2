"""CSV/TSV: Lightning's CSVLogger (the real writer), wide tables with empty cells."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest

import trainlens
from trainlens.core.errors import UnreadableInputError


def test_lightning_csvlogger_sparse_metrics(tmp_path: Path) -> None:
    loggers = pytest.importorskip("lightning.pytorch.loggers")
    logger = loggers.CSVLogger(save_dir=str(tmp_path), name="exp", version=0)
    for step in range(50):
        logger.log_metrics(
            {"train_loss": 3.0 - step * 0.02, "lr-AdamW": 1e-3, "epoch": step // 25}, step=step
        )
        if step % 10 == 9:
            logger.log_metrics({"val_loss": 2.9 - step * 0.01, "epoch": step // 25}, step=step)
    logger.log_metrics({"train_loss": float("nan")}, step=50)
    logger.save()
    path = Path(logger.log_dir) / "metrics.csv"
    [run] = trainlens.read(path)
    assert run.format == "csv"
    steps, loss = run.series("train/loss")
    assert steps.tolist() == list(range(51))
    assert loss[10] == pytest.approx(2.8)
    assert math.isnan(loss[50])
    vsteps, val = run.series("val/loss")
    assert vsteps.tolist() == [9, 19, 29, 39, 49]
    assert val[0] == pytest.approx(2.81)
    assert run.series("lr")[1].size == 50
    # sparse rows are not duplicates: nothing to report
    assert [d for d in run.data_quality if d.severity == "warning"] == []
    assert run.name == "version_0"


def test_tsv_and_non_numeric_cell(tmp_path: Path) -> None:
    path = tmp_path / "run.tsv"
    with path.open("w", newline="") as fh:
        w = csv.writer(fh, delimiter="\t")
        w.writerow(["step", "loss", "lr"])
        for i in range(20):
            w.writerow([i, "oops" if i == 7 else 2.0 - i * 0.01, 0.1])
    [run] = trainlens.read(path)
    assert run.series("train/loss")[0].size == 19
    assert run.series("lr")[0].size == 20
    [issue] = [d for d in run.data_quality if d.kind == "non-numeric"]
    assert issue.location == "line 9" and issue.count == 1


def test_tensorboard_csv_download_layout(tmp_path: Path) -> None:
    path = tmp_path / "run_train-tag-loss.csv"
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["Wall time", "Step", "Value"])
        for i in range(5):
            w.writerow([1.7e9 + i, i * 10, 1.0 / (i + 1)])
    [run] = trainlens.read(path)
    [metric] = run.metrics
    assert metric == "run_train-tag-loss"
    assert run.series(metric)[0].tolist() == [0, 10, 20, 30, 40]


def test_wandb_export_columns(tmp_path: Path) -> None:
    path = tmp_path / "wandb_export.csv"
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["Step", "run-a - loss", "run-a - loss__MIN", "run-a - loss__MAX"])
        for i in range(5):
            w.writerow([i, 2.0, 1.9, 2.1])
    [run] = trainlens.read(path)
    assert run.name == "run-a"
    assert run.series("train/loss")[1].tolist() == [2.0] * 5
    # companions that differ from the value are kept under the metric's canonical name
    assert run.series("train/loss__min")[1].tolist() == [1.9] * 5
    assert run.series("train/loss__max")[1].tolist() == [2.1] * 5


def test_header_only_is_unreadable(tmp_path: Path) -> None:
    path = tmp_path / "h.csv"
    path.write_text("step,loss\n")
    with pytest.raises(UnreadableInputError):
        trainlens.read(path, format="csv")


def test_non_utf8_byte_reported_and_values_kept(tmp_path: Path) -> None:
    path = tmp_path / "enc.csv"
    with path.open("w", newline="", encoding="latin-1") as fh:
        w = csv.writer(fh)
        w.writerow(["step", "loss", "note"])
        w.writerows([[0, 1.0, "ok"], [1, 0.9, "café"], [2, 0.8, "ok"]])  # é as latin-1
    (run,) = trainlens.read(path)
    assert run.series("train/loss")[1].tolist() == [1.0, 0.9, 0.8]
    (issue,) = [d for d in run.data_quality if d.kind == "encoding"]
    assert issue.location == "line 3"


def _csvlogger_sessions(path: Path, sessions: list[tuple[int, float, float]]) -> Path:
    """Keras' CSVLogger(append=True): each fit() call adds its epochs (from 0 again) under
    the one header; (epochs, start loss, lr) per session."""
    lines = ["epoch,accuracy,learning_rate,loss,val_accuracy,val_loss"]
    for epochs, start, lr in sessions:
        for e in range(epochs):
            loss = start * 0.9**e
            lines.append(f"{e},{1 - loss / 2},{lr},{loss},{1 - loss / 1.8},{loss * 0.95}")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_keras_csvlogger_appended_sessions_are_runs(tmp_path: Path) -> None:
    # a brain-tumour CNN's file: four fit() calls, the third at a tenth of the LR. Read as
    # one run its lines were the steps, and the next session's LR a scheduler reset
    path = _csvlogger_sessions(
        tmp_path / "training_log.csv",
        [(5, 1.18, 1e-4), (4, 1.28, 1e-4), (10, 1.06, 1e-5), (5, 1.25, 1e-4)],
    )
    runs = trainlens.read(path)
    assert [r.name for r in runs] == [f"training_log fit {k}" for k in (1, 2, 3, 4)]
    assert [r.series("train/loss")[0].tolist() for r in runs] == [
        list(range(5)),
        list(range(4)),
        list(range(10)),
        list(range(5)),
    ]
    note = [d for d in runs[2].data_quality if d.kind == "fit-sessions"]
    assert note and "line 7" in note[0].message and "4 training sessions" in note[0].message
    bad = [f for a in trainlens.analyze(path) for f in a.findings if f.severity.rank >= 1]
    assert not bad, [f.message for f in bad]


def test_keras_csvlogger_resumed_with_initial_epoch_is_one_run(tmp_path: Path) -> None:
    # fit(initial_epoch=5) continues the count: one session, epochs 0..9
    path = _csvlogger_sessions(tmp_path / "training_log.csv", [(10, 1.2, 1e-4)])
    [run] = trainlens.read(path)
    assert run.name == "training_log" and run.series("train/loss")[0].tolist() == list(range(10))
