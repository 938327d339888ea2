"""HF Trainer's trainer_state.json, written by a real Trainer on a tiny model (CPU)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

import trainlens


def tiny_gpt2() -> tuple[Any, list[dict[str, Any]]]:
    """A one-layer GPT-2 of 64 tokens and 64 random sequences of 32 (seeded): what a
    real Trainer trains on the CPU in seconds."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.GPT2Config(vocab_size=64, n_positions=32, n_embd=32, n_layer=1, n_head=2)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(cfg)
    g = torch.Generator().manual_seed(0)
    data = []
    for _ in range(64):
        ids = torch.randint(0, 64, (32,), generator=g)
        data.append({"input_ids": ids, "labels": ids})
    return model, data


@pytest.fixture(scope="module")
def trainer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    transformers = pytest.importorskip("transformers")
    out = tmp_path_factory.mktemp("hf") / "out"
    model, data = tiny_gpt2()
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


@pytest.mark.slow
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


@pytest.mark.slow
def test_directory_and_checkpoint_dirs(trainer_dir: Path) -> None:
    [run] = trainlens.read(trainer_dir)
    assert run.series("train/loss")[0][-1] == 20
    [ckpt] = trainlens.read(trainer_dir / "checkpoint-10")
    assert ckpt.series("train/loss")[0][-1] == 10


def _rl_state(path: Path, grpo: bool) -> Path:
    """A trainer_state.json with TRL's keys: GRPO's (reward, completions/…, a loss that is
    ~0 at the start and drifts up with the KL) or DPO's (rewards/…, a loss falling from
    ln 2)."""
    history = []
    for s in range(1, 301):
        if grpo:
            kl = 0.02 * (1 - math.exp(-s / 100)) * (1 + 0.3 * math.sin(s * 1.7))
            entry = {
                "loss": 0.04 * kl if s > 1 else 0.0,
                "reward": 0.2 + 0.5 * (1 - math.exp(-s / 150)),
                "reward_std": 0.3,
                "completions/mean_length": 180.0 + s * 0.1,
                "kl": kl,
            }
        else:
            entry = {
                "loss": 0.25 + 0.44 * math.exp(-s / 80),
                "rewards/chosen": 0.01 * s,
                "rewards/margins": 0.02 * s,
            }
        history.append({"step": s, "epoch": s / 300, "learning_rate": 1e-6, **entry})
    path.write_text(json.dumps({"global_step": 300, "log_history": history}))
    return path


def test_online_rl_loss_is_not_a_training_loss(tmp_path: Path) -> None:
    # GRPO's loss is the policy objective: read as train/loss it was an error ("spiked at
    # step 2 … never returned near 0") and a warning ("has not decreased")
    [run] = trainlens.read(_rl_state(tmp_path / "trainer_state.json", grpo=True))
    assert not run.has("train/loss") and run.has("rl/loss")
    assert any(d.kind == "rl-objective" for d in run.data_quality)
    [analysis] = trainlens.analyze(run)
    assert not [f for f in analysis.findings if f.severity.rank >= 1]


def test_dpo_loss_stays_a_training_loss(tmp_path: Path) -> None:
    [run] = trainlens.read(_rl_state(tmp_path / "trainer_state.json", grpo=False))
    assert run.has("train/loss") and not run.has("rl/loss")
