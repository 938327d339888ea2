"""DATA002 on a step logged twice: HF's Trainer writes its train summary at the last step,
then the final evaluation (minutes of generation later) at the same step, each with an
``epoch``. The step's time is the first of them, so the evaluation is no stall before it
(a T5 summarization run's 54-minute final eval was one). Written with torch's
SummaryWriter, as HF's TensorBoardCallback does."""

from __future__ import annotations

from pathlib import Path

import pytest

import trainlens


def _hf_like_logdir(root: Path, final_eval_s: float) -> Path:
    tb = pytest.importorskip("torch.utils.tensorboard")
    w = tb.SummaryWriter(str(root))
    t0 = 1.7e9
    for step in range(500, 20001, 500):
        t = t0 + step * 0.25
        w.add_scalar("train/loss", 3.0 - step * 5e-5, step, walltime=t)
        w.add_scalar("train/epoch", step / 20000 * 3, step, walltime=t)
    last, t_end = 20337, t0 + 20337 * 0.25
    w.add_scalar("train/train_runtime", 20337 * 0.25, last, walltime=t_end)
    w.add_scalar("train/epoch", 3.0, last, walltime=t_end)
    w.add_scalar("eval/loss", 1.63, last, walltime=t_end + final_eval_s)
    w.add_scalar("eval/runtime", final_eval_s, last, walltime=t_end + final_eval_s)
    w.add_scalar("train/epoch", 3.0, last, walltime=t_end + final_eval_s)
    w.close()
    return root


def test_final_eval_at_the_last_step_is_no_stall(tmp_path: Path) -> None:
    [analysis] = trainlens.analyze(_hf_like_logdir(tmp_path / "runs", final_eval_s=3255.0))
    assert not [f for f in analysis.findings if f.code == "DATA002"]
