"""trainlens.monitor inside Lightning: ``Trainer(..., callbacks=[LightningCallback()])``.

Lightning runs the forward, backward and clipping inside ``optimizer.step(closure)``,
after the optimizer's step pre-hooks: so the step's figures are taken in
``on_before_optimizer_step`` (gradients final, unscaled under AMP, not yet clipped), and
the step's start in ``on_train_batch_start`` (the batch is in hand: the time before it is
the dataloader wait). The loss comes from what ``training_step`` returned (a tensor or a
dict with ``loss``; a ``logits`` entry there gives the entropy, and the batch's
``input_ids`` / ``attention_mask`` the tokens and padding). Validation losses logged as
``val_loss`` or ``val/loss`` are written as ``val/loss``. Written to
``<default_root_dir>/trainlens/`` unless ``out=`` says otherwise; with
``log_to_lightning=True`` the same figures also go to the Trainer's own loggers
(TensorBoard, CSV, W&B, ...) under ``trainlens/<name>``, at their optimizer step.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lightning.pytorch import Callback

from trainlens.monitor.loop import DEFAULT_EVERY, Monitor

#: Lightning precision flags -> the dtype the run config carries
_PRECISION = {"bf16-mixed": "bf16-mixed", "16-mixed": "16-mixed", "bf16-true": "bfloat16"}


class LightningCallback(Callback):
    """Log every optimizer step of a ``lightning.Trainer`` run for trainlens."""

    def __init__(
        self,
        out: str | Path | None = None,
        every: int = DEFAULT_EVERY,
        log_to_lightning: bool = False,
        **kw: Any,
    ):
        self.out = out
        self.every = every
        self.log_to_lightning = log_to_lightning
        self.kw = kw
        self.monitor: Monitor | None = None

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        if self.monitor is not None or not trainer.optimizers:
            return
        configs = getattr(trainer, "lr_scheduler_configs", None) or []
        sched = configs[0].scheduler if configs else None
        scaler = getattr(trainer.precision_plugin, "scaler", None)
        dtype = _PRECISION.get(str(trainer.precision))
        out = self.out if self.out is not None else Path(trainer.default_root_dir) / "trainlens"
        # resumed from a checkpoint (restored before this hook): records go on from its step
        opts: dict[str, Any] = {
            "every": self.every,
            "scheduler": sched,
            "dtype": dtype,
            "resume_step": int(trainer.global_step),
        }
        self.monitor = Monitor(
            pl_module,
            trainer.optimizers[0],
            out,
            scaler=scaler,
            hook_optimizer=False,
            **(opts | self.kw),
        )
        if self.log_to_lightning and trainer.loggers:
            self.monitor.add_sink(_LoggerSink(trainer.loggers))

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, idx: int) -> None:
        if self.monitor is not None:
            self.monitor.mark_start()

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        if self.monitor is not None:
            self.monitor.before_step()

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, idx: int
    ) -> None:
        if self.monitor is None:
            return
        logits = None
        loss = outputs
        if isinstance(outputs, Mapping):
            loss, logits = outputs.get("loss"), outputs.get("logits")
        mask = batch.get("attention_mask") if isinstance(batch, Mapping) else None
        self.monitor.step(loss=loss, batch=batch, logits=logits, attention_mask=mask)
        if self.monitor.stopped:
            trainer.should_stop = True

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if self.monitor is None or trainer.sanity_checking:
            return
        metrics = trainer.callback_metrics
        for key in ("val/loss", "val_loss"):
            if key in metrics:
                step = trainer.global_step
                self.monitor.log({"val/loss": float(metrics[key])}, step=step)
                return

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        if self.monitor is not None:
            self.monitor.close()
            self.monitor = None

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        """The run ends with ``exception`` (Ctrl-C too): its end record says crashed."""
        if self.monitor is not None:
            self.monitor.close(error=exception)
            self.monitor = None


class _LoggerSink:
    """The monitor's records through Lightning's loggers, at each record's own step (the
    records arrive in batches at the monitor's flush: no host sync per step)."""

    def __init__(self, loggers: list[Any]) -> None:
        self.loggers = loggers

    def write(self, records: list[dict[str, Any]]) -> None:
        for rec in records:
            metrics = {
                f"trainlens/{k}": v
                for k, v in rec.items()
                if k not in ("step", "time") and isinstance(v, float)
            }
            for logger in self.loggers:
                logger.log_metrics(metrics, step=int(rec["step"]))

    def close(self) -> None:
        """The loggers are the Trainer's: it closes them."""
