"""HF Trainer's trainer_state.json, written by a real Trainer on a tiny model (CPU)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

import trainlens


@pytest.fixture(scope="module")
def trainer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    out = tmp_path_factory.mktemp("hf") / "out"
    cfg = transformers.GPT2Config(vocab_size=64, n_positions=32, n_embd=32, n_layer=1, n_head=2)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(cfg)
    g = torch.Generator().manual_seed(0)
    data = []
    for _ in range(64):
        ids = torch.randint(0, 64, (32,), generator=g)
        data.append({"input_ids": ids, "labels": ids})
    args = transformers.TrainingArguments(
        output_dir=str(out),
        max_steps=20,
        logging_steps=2,
        eval_strategy="steps",
        eval_steps=5,
        save_steps=10,
        per_device_train_batch_size=8,
        report_to=[],
        use_cpu=True,
        seed=0,
        disable_tqdm=True,
    )
    trainer = transformers.Trainer(
        model=model, args=args, train_dataset=data, eval_dataset=data[:16]
    )
    trainer.train()
    trainer.save_state()
    return out


def test_trainer_state_matches_log_history(trainer_dir: Path) -> None:
    path = trainer_dir / "trainer_state.json"
    history = json.loads(path.read_text())["log_history"]
    [run] = trainlens.read(path)
    assert run.format == "hf-trainer"
    train = [h for h in history if "loss" in h]
    evals = [h for h in history if "eval_loss" in h]
    steps, loss = run.series("train/loss")
    assert steps.tolist() == [h["step"] for h in train] == list(range(2, 21, 2))
    assert loss.tolist() == [h["loss"] for h in train]
    assert run.series("lr")[1].tolist() == [h["learning_rate"] for h in train]
    assert run.series("grad_norm")[1].tolist() == [h["grad_norm"] for h in train]
    vs, vl = run.series("val/loss")
    assert vs.tolist() == [5, 10, 15, 20]
    assert vl.tolist() == [h["eval_loss"] for h in evals]
    # the final summary's averaged train_loss must not pollute the per-step series
    final = next(h for h in history if "train_runtime" in h)
    assert run.series("final/train_loss")[1].tolist() == [final["train_loss"]]
    assert run.metadata["global_step"] == 20
    assert all(math.isfinite(x) for x in loss)


def test_directory_and_checkpoint_dirs(trainer_dir: Path) -> None:
    [run] = trainlens.read(trainer_dir)
    assert run.series("train/loss")[0][-1] == 20
    [ckpt] = trainlens.read(trainer_dir / "checkpoint-10")
    assert ckpt.series("train/loss")[0][-1] == 10
