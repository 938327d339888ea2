"""DATA002 judges stalls within one step axis: a Keras logdir's per-epoch series
(``epoch_loss`` at step = epoch) beside its per-batch ones (``batch_loss`` at step =
iteration) does not make the validation between two epochs a stall.

Keras is not installed (no TensorFlow): torch's SummaryWriter writes the same layout, tag
names and order (the callback writes ``evaluation_*_vs_iterations`` and the epoch's logs
after the validation, before the next epoch's first batch), with wall times set the way a
run of 0.05 s batches and a 25 s validation would stamp them."""

from __future__ import annotations

from pathlib import Path

import pytest

import trainlens

STEPS_PER_EPOCH = 3000
STEP_S = 0.05
VALIDATION_S = 25.0


def _keras_logdir(root: Path, epochs: int, update_freq: int, stall_at: int | None) -> Path:
    tb = pytest.importorskip("torch.utils.tensorboard")
    train = tb.SummaryWriter(str(root / "train"), filename_suffix=".v2")
    val = tb.SummaryWriter(str(root / "validation"), filename_suffix=".v2")
    t = 1.7e9
    for epoch in range(epochs):
        for b in range(STEPS_PER_EPOCH):
            it = epoch * STEPS_PER_EPOCH + b
            t += STEP_S + (60.0 if it == stall_at else 0.0)
            if it % update_freq == 0:
                train.add_scalar("batch_loss", 2.0 - 1e-4 * it, it, walltime=t, new_style=True)
        t += VALIDATION_S
        it = (epoch + 1) * STEPS_PER_EPOCH
        val.add_scalar("evaluation_loss_vs_iterations", 2.1 - 0.1 * epoch, it, walltime=t)
        train.add_scalar("epoch_loss", 2.0 - 0.2 * epoch, epoch, walltime=t + 0.01)
        val.add_scalar("epoch_loss", 2.1 - 0.1 * epoch, epoch, walltime=t + 0.02)
    train.close()
    val.close()
    return root


@pytest.mark.parametrize("update_freq", [1, 100])
def test_validation_between_epochs_is_not_a_stall(tmp_path: Path, update_freq: int) -> None:
    logdir = _keras_logdir(tmp_path / "logs", epochs=2, update_freq=update_freq, stall_at=None)
    [analysis] = trainlens.analyze(logdir)
    run = analysis.run
    assert run.series("train/loss_epoch")[0].tolist() == [0, 1]  # the epoch axis is there
    assert "stalls" not in analysis.skipped  # judged (the run has wall times)
    assert not [f for f in analysis.findings if f.code == "DATA002"]


def test_a_stall_inside_an_epoch_is_still_found(tmp_path: Path) -> None:
    logdir = _keras_logdir(tmp_path / "logs", epochs=2, update_freq=1, stall_at=1200)
    [analysis] = trainlens.analyze(logdir)
    [stall] = [f for f in analysis.findings if f.code == "DATA002"]
    assert stall.step_start == 1200
    assert stall.evidence["gap_seconds"] == pytest.approx(60.0 + STEP_S, abs=0.01)
