"""trainlens.monitor inside HF ``transformers.Trainer``: ``Trainer(..., callbacks=[HFCallback()])``.

The callback builds a :class:`~trainlens.monitor.loop.Monitor` on the Trainer's model and
optimizer when training begins. A forward hook on the model sees each training
micro-batch's inputs (input ids, attention mask) and outputs (loss, logits), so tokens,
padding and entropy need nothing from the user; the optimizer hooks see the pre-clip
gradient norm (the Trainer clips through ``clip_grad_norm_``) and the LR each step used.
Evaluation losses are written as ``val/loss``. Written to ``<output_dir>/trainlens/``
unless ``out=`` says otherwise.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from trainlens.monitor.loop import DEFAULT_EVERY, Monitor


def _args_schedule(args: Any, max_steps: int) -> dict[str, Any]:
    """The schedule TrainingArguments declare (when the scheduler object cannot say)."""
    shape = str(getattr(args.lr_scheduler_type, "value", args.lr_scheduler_type))
    return {
        "shape": shape,
        "peak_lr": float(args.learning_rate),
        "warmup_steps": int(args.get_warmup_steps(max_steps)),
        "total_steps": int(max_steps),
    }


class HFCallback(TrainerCallback):
    """Log every optimizer step of a ``transformers.Trainer`` run for trainlens."""

    def __init__(self, out: str | Path | None = None, every: int = DEFAULT_EVERY, **kw: Any):
        self.out = out
        self.every = every
        self.kw = kw
        self.monitor: Monitor | None = None
        self._hook: Any = None

    def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        model, optimizer = kw.get("model"), kw.get("optimizer")
        if model is None or optimizer is None or self.monitor is not None:
            return
        from trainlens.monitor.schedule import declared_schedule

        sched = kw.get("lr_scheduler")
        declared, _ = declared_schedule(sched)
        schedule = declared or _args_schedule(args, state.max_steps)
        dtype = "bfloat16" if args.bf16 else "float16" if args.fp16 else None
        out = self.out if self.out is not None else Path(args.output_dir) / "trainlens"
        # resumed from a checkpoint (the state is restored before this event): the records
        # go on from its step, appended to the same file
        opts: dict[str, Any] = {
            "every": self.every,
            "schedule": schedule,
            "dtype": dtype,
            "resume_step": int(state.global_step),
        }
        self.monitor = Monitor(model, optimizer, out, **(opts | self.kw))
        self._hook = model.register_forward_hook(self._forward_hook, with_kwargs=True)

    def _forward_hook(self, module: Any, args: Any, kwargs: Any, output: Any) -> None:
        if self.monitor is None or not module.training:
            return
        loss = getattr(output, "loss", None)
        logits = getattr(output, "logits", None)
        batch = kwargs.get("input_ids", args[0] if args else None)
        mask = kwargs.get("attention_mask")
        self.monitor.step(loss=loss, batch=batch, logits=logits, attention_mask=mask)

    def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if self.monitor is not None:
            self.monitor.step()  # the optimizer stepped: write its record
            if self.monitor.stopped:
                control.should_training_stop = True

    def on_evaluate(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        metrics = kw.get("metrics") or {}
        if self.monitor is not None and "eval_loss" in metrics:
            self.monitor.log({"val/loss": float(metrics["eval_loss"])}, step=state.global_step)

    def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        if self.monitor is not None:
            self.monitor.close()
            self.monitor = None
