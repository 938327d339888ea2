"""Keras TensorBoard logdirs: ``train/`` + ``validation/`` are one run, Keras tag names map
to canonical ones, and epoch-indexed and batch-indexed steps never share a series.

Real Keras is not installed (no TensorFlow): torch's SummaryWriter writes the same layout
and tag names (Keras' callback: ``<logdir>/train`` and ``<logdir>/validation``, files
ending ``.v2``, ``epoch_*`` at step = epoch, ``batch_*`` and
``evaluation_*_vs_iterations`` at step = optimizer iteration)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import trainlens

STEPS_PER_EPOCH = 50


def _keras_logdir(
    root: Path, epochs: int = 4, batch_level: bool = False, eval_vs_iterations: bool = False
) -> Path:
    tb = pytest.importorskip("torch.utils.tensorboard")
    train = tb.SummaryWriter(str(root / "train"), filename_suffix=".v2")
    val = tb.SummaryWriter(str(root / "validation"), filename_suffix=".v2")
    # Keras (TF2 summaries) writes scalars as tensors: new_style=True writes the same
    train.add_text("keras", "model config")  # Keras writes the model config as text
    for epoch in range(epochs):
        if batch_level:
            for b in range(STEPS_PER_EPOCH):
                it = epoch * STEPS_PER_EPOCH + b
                train.add_scalar("batch_loss", 2.0 - 0.004 * it, it, new_style=True)
                train.add_scalar("batch_accuracy", 0.3 + 0.001 * it, it, new_style=True)
        train.add_scalar("epoch_loss", 2.0 - 0.2 * epoch, epoch, new_style=True)
        train.add_scalar("epoch_accuracy", 0.3 + 0.05 * epoch, epoch, new_style=True)
        train.add_histogram("dense/kernel_0", np.linspace(-1, 1, 64), epoch)
        val.add_scalar("epoch_loss", 2.1 - 0.15 * epoch, epoch, new_style=True)
        val.add_scalar("epoch_accuracy", 0.28 + 0.04 * epoch, epoch, new_style=True)
        if batch_level or eval_vs_iterations:
            it = (epoch + 1) * STEPS_PER_EPOCH
            val.add_scalar("evaluation_loss_vs_iterations", 2.1 - 0.15 * epoch, it, new_style=True)
            val.add_scalar(
                "evaluation_accuracy_vs_iterations", 0.28 + 0.04 * epoch, it, new_style=True
            )
    train.close()
    val.close()
    return root


def test_epoch_level_logdir_is_one_run(tmp_path: Path) -> None:
    logdir = _keras_logdir(tmp_path / "logs")
    assert all(f.name.endswith(".v2") for f in logdir.rglob("events.out.tfevents.*"))
    [run] = trainlens.read(logdir)
    assert run.name == "logs"
    assert sorted(run.metrics) == ["train/accuracy", "train/loss", "val/accuracy", "val/loss"]
    steps, loss = run.series("train/loss")
    assert steps.tolist() == [0, 1, 2, 3]
    assert loss.tolist() == pytest.approx([2.0, 1.8, 1.6, 1.4])
    assert run.series("val/loss")[1][-1] == pytest.approx(1.65)
    assert run.raw_names["val/loss"] == "validation/epoch_loss"
    assert run.raw_names["train/loss"] == "train/epoch_loss"
    # the histograms and the text config are counted, not read as metrics
    [skipped] = [d for d in run.data_quality if d.kind == "non-scalar"]
    assert skipped.count == 4 + 1


def test_batch_level_tags_keep_their_own_axis(tmp_path: Path) -> None:
    logdir = _keras_logdir(tmp_path / "logs", batch_level=True)
    [run] = trainlens.read(logdir)
    steps, _ = run.series("train/loss")  # batch_loss: one point per iteration
    assert steps.tolist() == list(range(4 * STEPS_PER_EPOCH))
    vsteps, _ = run.series("val/loss")  # evaluation_loss_vs_iterations
    assert vsteps.tolist() == [50, 100, 150, 200]
    # the epoch-indexed series have names of their own (epoch 0..3, never mixed in)
    assert run.series("train/loss_epoch")[0].tolist() == [0, 1, 2, 3]
    assert run.series("val/loss_epoch")[0].tolist() == [0, 1, 2, 3]
    assert run.has("train/accuracy") and run.has("val/accuracy")
    assert run.has("train/accuracy_epoch") and run.has("val/accuracy_epoch")
    assert not [d for d in run.data_quality if d.kind in ("restart", "duplicate-step")]
    [analysis] = trainlens.analyze(logdir)
    assert not [f for f in analysis.findings if f.code.startswith("DATA")]


def test_evaluation_vs_iterations_alone_keeps_the_epoch_axis(tmp_path: Path) -> None:
    """TF 2.6+ Keras writes evaluation_*_vs_iterations at every validation even with
    update_freq="epoch": train/loss is then per epoch, and val/loss must be too."""
    logdir = _keras_logdir(tmp_path / "logs", eval_vs_iterations=True)
    [run] = trainlens.read(logdir)
    assert run.series("train/loss")[0].tolist() == [0, 1, 2, 3]
    assert run.series("val/loss")[0].tolist() == [0, 1, 2, 3]
    assert run.series("val/loss_vs_iterations")[0].tolist() == [50, 100, 150, 200]
    assert not run.has("train/loss_epoch")


def test_several_keras_runs_under_one_folder(tmp_path: Path) -> None:
    _keras_logdir(tmp_path / "fit" / "run_a", epochs=3)
    _keras_logdir(tmp_path / "fit" / "run_b", epochs=2)
    runs = trainlens.read(tmp_path / "fit")
    assert [r.name for r in runs] == ["run_a", "run_b"]
    assert [r.series("val/loss")[0].size for r in runs] == [3, 2]


def test_only_a_train_folder_is_named_after_its_run(tmp_path: Path) -> None:
    tb = pytest.importorskip("torch.utils.tensorboard")
    w = tb.SummaryWriter(str(tmp_path / "exp1" / "train"), filename_suffix=".v2")
    for epoch in range(3):
        w.add_scalar("epoch_loss", 1.0 / (epoch + 1), epoch)
    w.close()
    [run] = trainlens.read(tmp_path / "exp1")
    assert run.name == "exp1" and run.metrics == ["train/loss"]
    [same] = trainlens.read(tmp_path / "exp1" / "train")  # pointed at the split folder
    assert same.name == "exp1" and same.metrics == ["train/loss"]


def test_one_events_file_of_a_keras_logdir(tmp_path: Path) -> None:
    logdir = _keras_logdir(tmp_path / "logs")
    [val_file] = (logdir / "validation").glob("events.out.tfevents.*")
    [run] = trainlens.read(val_file)
    assert run.name == "logs" and sorted(run.metrics) == ["val/accuracy", "val/loss"]


def test_real_keras_logdir(shared_dir: Path) -> None:
    [run] = trainlens.read(shared_dir / "real-logs/mrdbourke_tensorflow-deep-learning/logs")
    assert sorted(run.metrics) == ["train/accuracy", "train/loss", "val/accuracy", "val/loss"]
    assert run.series("train/loss")[1].tolist() == pytest.approx([1.7525, 1.3681], abs=1e-4)
    assert run.series("val/loss")[1].tolist() == pytest.approx([1.4710, 1.2541], abs=1e-4)
    assert run.series("val/accuracy")[1].tolist() == pytest.approx([0.4816, 0.5680], abs=1e-4)


# ---- Keras' History saved as JSON ------------------------------------------------------


def test_keras_history_json(tmp_path: Path) -> None:
    import json

    from trainlens.gate.discover import discover
    from trainlens.readers import detect_format

    history = {
        "loss": [1.33, 0.79, 0.61, 0.52],
        "accuracy": [0.52, 0.71, 0.78, 0.81],
        "val_loss": [0.95, 0.79, None, 0.83],  # an epoch without validation
        "val_accuracy": [0.66, 0.70, None, 0.69],
        "note": "lr 1e-3",  # not a metric
    }
    path = tmp_path / "history.json"
    path.write_text(json.dumps(history, indent=2))  # as json.dump(model.fit(...).history)
    assert detect_format(path) == "keras-history"
    [run] = trainlens.read(path)
    assert sorted(run.metrics) == ["train/accuracy", "train/loss", "val/accuracy", "val/loss"]
    assert run.series("train/loss")[0].tolist() == [0, 1, 2, 3]
    assert run.series("val/loss")[0].tolist() == [0, 1, 3]
    assert any("note" in d.message for d in run.data_quality if d.kind == "non-metric-column")
    assert [s.name for s in discover([str(tmp_path)])] == ["history"]
    # a JSONL whose first object holds no list is still JSONL
    jsonl = tmp_path / "m.json"
    jsonl.write_text('{"step": 0, "loss": 1.0}\n{"step": 1, "loss": 0.9}\n')
    assert detect_format(jsonl) == "jsonl"


def test_keras_history_nested_too_deep_is_one_sentence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from trainlens.cli import main

    path = tmp_path / "history.json"
    path.write_text('{"loss": [1.0, ' + "[" * 5000 + "]" * 5000 + "]}")
    assert main(["analyze", str(path)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "history.json" in err
