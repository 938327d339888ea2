"""Writes one short run through each of trainlens' own writers, an LR shock (x40 for one
optimizer step) in each (run by tests/test_own_writers.py in a subprocess with W&B
offline, see tests/conftest.py's run_wandb_offline):

- ``plain/``: :class:`trainlens.monitor.Monitor` in a plain torch loop, with
  ``tensorboard=True`` (``plain/metrics.jsonl``, ``plain/tb/``);
- ``hf/``: a ``transformers.Trainer`` with :class:`~trainlens.monitor.HFCallback`
  (``hf/trainlens/metrics.jsonl``);
- ``pl/``: a Lightning ``Trainer`` with ``LightningCallback(log_to_lightning=True)`` and
  three of its loggers: ``CSVLogger`` (``pl/csv/``), ``TensorBoardLogger`` (``pl/tb/``)
  and ``WandbLogger`` (``pl/wandb/``), besides the callback's own ``pl/trainlens/``.

usage: python _own_writers.py OUT_DIR STEPS SHOCK_STEP
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch

VOCAB, SEQ, BATCH, LR = 40, 8, 4, 1e-3


def shocked(shock: int) -> Any:
    """LambdaLR's factor: x40 at optimizer step ``shock`` (1-based), else 1."""
    return lambda i: 40.0 if i == shock - 1 else 1.0


def examples(n: int) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    out = []
    for i in range(n):
        ids = torch.randint(0, VOCAB, (SEQ,), generator=g)
        mask = torch.ones(SEQ, dtype=torch.long)
        mask[SEQ - 1 - i % 3 :] = 0
        out.append({"input_ids": ids, "attention_mask": mask, "labels": ids.clone()})
    return out


class Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(VOCAB, 16)
        self.out = torch.nn.Linear(16, VOCAB)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.out(self.emb(ids))


def loss_of(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1))


def plain(out: Path, steps: int, shock: int) -> None:
    from trainlens.monitor import Monitor

    torch.manual_seed(0)
    model = Tiny()
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, shocked(shock))
    data = examples(BATCH * steps)
    with Monitor(model, opt, out=out, scheduler=sched, tensorboard=True) as mon:
        for step in range(steps):
            batch = {
                k: torch.stack([e[k] for e in data[step * BATCH : (step + 1) * BATCH]])
                for k in data[0]
            }
            logits = model(batch["input_ids"])
            loss = loss_of(logits, batch["labels"])
            loss.backward()
            opt.step()
            sched.step()
            opt.zero_grad()
            mon.step(loss=loss, batch=batch, logits=logits)
            if (step + 1) % 20 == 0:
                mon.log({"val/loss": float(loss)})


def hf(out: Path, steps: int, shock: int) -> None:
    import transformers

    from trainlens.monitor import HFCallback

    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_layer=1, n_embd=16, n_head=2, vocab_size=VOCAB, n_positions=SEQ
    )
    model = transformers.GPT2LMHeadModel(config)
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, shocked(shock))
    args = transformers.TrainingArguments(
        output_dir=str(out),
        max_steps=steps,
        per_device_train_batch_size=BATCH,
        learning_rate=LR,
        lr_scheduler_type="constant",
        eval_strategy="steps",
        eval_steps=20,
        per_device_eval_batch_size=BATCH,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        seed=0,
        disable_tqdm=True,
    )
    trainer = transformers.Trainer(
        model=model,
        args=args,
        train_dataset=examples(BATCH * steps),
        eval_dataset=examples(BATCH),
        optimizers=(opt, sched),
        callbacks=[HFCallback()],
    )
    trainer.train()


def lightning(out: Path, steps: int, shock: int) -> None:
    import lightning.pytorch as pl

    from trainlens.monitor import LightningCallback

    class Module(pl.LightningModule):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.net = Tiny()

        def training_step(self, batch: dict[str, torch.Tensor], idx: int) -> dict[str, Any]:
            logits = self.net(batch["input_ids"])
            return {"loss": loss_of(logits, batch["labels"]), "logits": logits.detach()}

        def validation_step(self, batch: dict[str, torch.Tensor], idx: int) -> None:
            self.log("val_loss", loss_of(self.net(batch["input_ids"]), batch["labels"]))

        def configure_optimizers(self) -> Any:
            opt = torch.optim.AdamW(self.parameters(), lr=LR)
            sched = torch.optim.lr_scheduler.LambdaLR(opt, shocked(shock))
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    torch.manual_seed(0)
    loggers = [
        pl.loggers.CSVLogger(str(out), name="csv", version=0),
        pl.loggers.TensorBoardLogger(str(out), name="tb", version=0),
        pl.loggers.WandbLogger(save_dir=str(out / "wandb"), project="trainlens-test", offline=True),
    ]
    trainer = pl.Trainer(
        max_steps=steps,
        accelerator="cpu",
        logger=loggers,
        log_every_n_steps=10,
        val_check_interval=20,
        limit_val_batches=1,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=str(out),
        callbacks=[LightningCallback(log_to_lightning=True)],
    )
    loader = torch.utils.data.DataLoader(examples(BATCH * steps), batch_size=BATCH)
    val = torch.utils.data.DataLoader(examples(BATCH), batch_size=BATCH)
    trainer.fit(Module(), loader, val)
    import wandb

    wandb.finish()


def main() -> None:
    out, steps, shock = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    plain(out / "plain", steps, shock)
    hf(out / "hf", steps, shock)
    lightning(out / "pl", steps, shock)


if __name__ == "__main__":
    main()
