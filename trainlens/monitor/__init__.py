"""trainlens.monitor: log, from inside the training loop, every metric trainlens judges.

Three entry points (each imports torch, and its framework, only when used)::

    from trainlens.monitor import Monitor                 # a plain torch loop
    mon = Monitor(model, optimizer, out="runs/name", scheduler=sched)
    ...  loss.backward(); clip_grad_norm_(...); optimizer.step()
    mon.step(loss=loss, batch=input_ids, logits=logits, attention_mask=mask)

    from trainlens.monitor import HFCallback              # transformers.Trainer
    Trainer(..., callbacks=[HFCallback()])

    from trainlens.monitor import LightningCallback       # lightning.Trainer
    Trainer(..., callbacks=[LightningCallback()])

They write canonical names (docs/metrics.md) to ``<out>/metrics.jsonl`` and the run's
declared schedule, size and hardware to ``<out>/metrics.config.json``, where
``trainlens analyze`` finds it. ``import trainlens`` never imports this package.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "Monitor": "trainlens.monitor.loop",
    "HFCallback": "trainlens.monitor.hf",
    "LightningCallback": "trainlens.monitor.lightning",
    "declared_schedule": "trainlens.monitor.schedule",
}

__all__ = ["HFCallback", "LightningCallback", "Monitor", "declared_schedule"]

if TYPE_CHECKING:
    from trainlens.monitor.hf import HFCallback
    from trainlens.monitor.lightning import LightningCallback
    from trainlens.monitor.loop import Monitor
    from trainlens.monitor.schedule import declared_schedule


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'trainlens.monitor' has no attribute {name!r}")
    return getattr(import_module(module), name)
