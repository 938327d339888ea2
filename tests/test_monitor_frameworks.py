"""trainlens.monitor's callbacks under a real HF Trainer and a real Lightning Trainer on
tiny models (CPU, a few steps), each figure checked against an independent computation."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import trainlens  # noqa: E402

VOCAB, SEQ, BATCH, STEPS = 50, 8, 4, 5


def _rows(path: Path) -> list[dict[str, Any]]:
    """The metric records; the file's last line is the end record of a finished run."""
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert (rows[-1]["event"], rows[-1]["state"]) == ("end", "finished")
    return [r for r in rows if "event" not in r]


def _examples(n: int) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    out = []
    for i in range(n):
        ids = torch.randint(0, VOCAB, (SEQ,), generator=g)
        mask = torch.ones(SEQ, dtype=torch.long)
        mask[SEQ - 1 - i % 3 :] = 0  # 1-3 padded positions
        out.append({"input_ids": ids, "attention_mask": mask, "labels": ids.clone()})
    return out


@pytest.mark.slow  # 25 s on the shared build machine, most of it importing transformers
def test_hf_trainer_callback(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    from trainlens.monitor import HFCallback

    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_layer=1, n_embd=32, n_head=2, vocab_size=VOCAB, n_positions=SEQ
    )
    model = transformers.GPT2LMHeadModel(config)
    data = _examples(BATCH * STEPS)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "hf"),
        max_steps=STEPS,
        per_device_train_batch_size=BATCH,
        learning_rate=1e-3,
        lr_scheduler_type="cosine",
        warmup_steps=2,
        max_grad_norm=0.01,  # clips every step: the logged norm must still be pre-clip
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        dataloader_drop_last=True,
        seed=0,
    )
    callback = HFCallback(every=2)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data, callbacks=[callback])
    trainer.train()
    rows = _rows(tmp_path / "hf" / "trainlens" / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    # HF logs the norm clip_grad_norm_ returned (pre-clip), computed by itself
    hf_norms = [h["grad_norm"] for h in trainer.state.log_history if "grad_norm" in h]
    assert [r["grad_norm"] for r in rows] == pytest.approx(hf_norms, rel=1e-5)
    assert all(n > 0.01 * 10 for n in hf_norms)
    # the LR each step used: the cosine-with-warmup lambda at the scheduler's count before it
    sched = transformers.get_cosine_schedule_with_warmup(
        torch.optim.SGD([torch.zeros(1)], lr=1e-3), 2, STEPS
    )
    want = []
    for _ in range(STEPS):
        want.append(sched.get_last_lr()[0])
        sched.optimizer.step()
        sched.step()
    assert [r["lr"] for r in rows] == pytest.approx(want, rel=1e-9, abs=1e-15)
    # the Trainer shuffles, but every example is used exactly once over the run
    masks = torch.stack([e["attention_mask"] for e in data]).float()
    mean_pad = sum(r["padding_frac"] for r in rows) / STEPS
    assert mean_pad == pytest.approx(1 - float(masks.mean()), abs=1e-6)
    assert all(0 < r["entropy"] <= math.log(VOCAB) + 1e-4 for r in rows)
    assert all(
        r["tokens_per_sec"] * r["step_time"] == pytest.approx(BATCH * SEQ, rel=1e-3) for r in rows
    )
    assert "grad_norm/transformer.wte.weight" in rows[1]
    cfg = json.loads((tmp_path / "hf" / "trainlens" / "metrics.config.json").read_text())
    assert cfg["schedule"]["shape"] == "cosine" and cfg["schedule"]["warmup_steps"] == 2
    [run] = trainlens.read(tmp_path / "hf" / "trainlens" / "metrics.jsonl")
    assert {"train/loss", "grad_norm", "lr", "entropy", "padding_frac"} <= set(run.metrics)


@pytest.mark.slow
def test_hf_trainer_resumed_from_a_checkpoint_goes_on_from_its_step(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    from trainlens.monitor import HFCallback

    def trainer(max_steps: int) -> Any:
        torch.manual_seed(0)
        config = transformers.GPT2Config(
            n_layer=1, n_embd=16, n_head=2, vocab_size=VOCAB, n_positions=SEQ
        )
        args = transformers.TrainingArguments(
            output_dir=str(tmp_path / "hf"),
            max_steps=max_steps,
            per_device_train_batch_size=BATCH,
            save_steps=2,
            report_to=[],
            use_cpu=True,
            seed=0,
        )
        return transformers.Trainer(
            model=transformers.GPT2LMHeadModel(config),
            args=args,
            train_dataset=_examples(BATCH * 6),
            callbacks=[HFCallback()],
        )

    trainer(4).train()
    trainer(6).train(resume_from_checkpoint=str(tmp_path / "hf" / "checkpoint-4"))
    rows = _rows(tmp_path / "hf" / "trainlens" / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6]


@pytest.mark.slow  # 9 s on the shared build machine
def test_lightning_callback(tmp_path: Path) -> None:
    pl = pytest.importorskip("lightning.pytorch")
    from trainlens.monitor import LightningCallback

    class Module(pl.LightningModule):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.emb = torch.nn.Embedding(VOCAB, 16)
            self.out = torch.nn.Linear(16, VOCAB)
            self.pre_clip: list[float] = []
            self.lrs: list[float] = []

        def training_step(self, batch: dict[str, torch.Tensor], idx: int) -> dict[str, Any]:
            logits = self.out(self.emb(batch["input_ids"]))
            loss = torch.nn.functional.cross_entropy(
                logits.reshape(-1, VOCAB), batch["labels"].reshape(-1)
            )
            return {"loss": loss, "logits": logits.detach()}

        def on_before_optimizer_step(self, optimizer: Any) -> None:
            grads = [p.grad.norm() for p in self.parameters() if p.grad is not None]
            self.pre_clip.append(float(torch.linalg.vector_norm(torch.stack(grads))))
            self.lrs.append(optimizer.param_groups[0]["lr"])

        def configure_optimizers(self) -> Any:
            opt = torch.optim.AdamW(self.parameters(), lr=1e-2)
            sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=STEPS)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    torch.manual_seed(0)
    module = Module()
    loader = torch.utils.data.DataLoader(_examples(BATCH * STEPS), batch_size=BATCH)
    trainer = pl.Trainer(
        max_steps=STEPS,
        accelerator="cpu",
        logger=pl.loggers.CSVLogger(str(tmp_path), name="csv", version=0),
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        gradient_clip_val=0.01,
        default_root_dir=str(tmp_path),
        callbacks=[LightningCallback(every=2, log_to_lightning=True)],
    )
    trainer.fit(module, loader)
    rows = _rows(tmp_path / "trainlens" / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    assert [r["grad_norm"] for r in rows] == pytest.approx(module.pre_clip, rel=1e-5)
    assert all(n > 0.1 for n in module.pre_clip)  # well above the clip: pre-clip it is
    assert [r["lr"] for r in rows] == pytest.approx(module.lrs, rel=1e-12)
    assert all("dataloader_wait" in r for r in rows[1:])
    assert all(0 < r["entropy"] <= math.log(VOCAB) + 1e-4 for r in rows)
    # log_to_lightning: the same figures through the Trainer's own logger, at their steps
    with (tmp_path / "csv" / "version_0" / "metrics.csv").open() as fh:
        logged = {
            int(r["step"]): float(r["trainlens/grad_norm"])
            for r in csv.DictReader(fh)
            if r.get("trainlens/grad_norm")
        }
    assert logged == {r["step"]: pytest.approx(r["grad_norm"], rel=1e-5) for r in rows}
    cfg = json.loads((tmp_path / "trainlens" / "metrics.config.json").read_text())
    assert cfg["schedule"] == {
        "shape": "cosine",
        "peak_lr": 1e-2,
        "min_lr": 0.0,
        "total_steps": STEPS,
        "first_step": 1,
    }


@pytest.mark.slow
def test_lightning_resumed_from_a_checkpoint_goes_on_from_its_step(tmp_path: Path) -> None:
    pl = pytest.importorskip("lightning.pytorch")
    from trainlens.monitor import LightningCallback

    class Module(pl.LightningModule):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.out = torch.nn.Linear(SEQ, 1)

        def training_step(self, batch: dict[str, torch.Tensor], idx: int) -> torch.Tensor:
            return self.out(batch["input_ids"].float()).pow(2).mean()

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=1e-3)

    def fit(max_steps: int, ckpt: str | None) -> None:
        saver = pl.callbacks.ModelCheckpoint(
            dirpath=str(tmp_path / "ckpt"), every_n_train_steps=2, save_top_k=-1
        )
        trainer = pl.Trainer(
            max_steps=max_steps,
            accelerator="cpu",
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            default_root_dir=str(tmp_path),
            callbacks=[LightningCallback(), saver],
        )
        loader = torch.utils.data.DataLoader(_examples(BATCH * 6), batch_size=BATCH)
        trainer.fit(Module(), loader, ckpt_path=ckpt)

    fit(4, None)
    (ckpt,) = (tmp_path / "ckpt").glob("*step=4.ckpt")
    fit(6, str(ckpt))
    rows = _rows(tmp_path / "trainlens" / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6]
