"""What trainlens.monitor's callbacks cost inside HF Trainer and Lightning.

    /work/venv/bin/python bench/monitor_frameworks.py               # both, 3 rounds
    /work/venv/bin/python bench/monitor_frameworks.py --only hf --rounds 5
    /work/venv/bin/python bench/monitor_frameworks.py --self        # in-process accounting

The model is the same in both frameworks: a GPT-2 (``transformers.GPT2LMHeadModel``) the
size of nanoGPT's CPU example (4 layers, 4 heads, d_model 128, context 64, batch 12;
vocabulary 96), 0.8M parameters, trained with AdamW, a cosine schedule with warmup and
gradient clipping at 1.0, one torch thread, 25% of the positions padded. Lightning's
module returns ``{"loss", "logits"}`` so that the callback computes the entropy there too.

Process level (default): each round trains once without the callback and once with it,
each in a fresh process, the order alternated; a timing callback present in both runs
records the process CPU time of every optimizer step, and the run prints the median of
its per-step times. The bench prints the median over rounds and the ratio.

``--self``: one run with the callback, each entry point the monitor adds (the callback's
hooks, the optimizer and forward hooks, the clip observer) timed with the training
thread's CPU clock — outermost calls only, so nothing is counted twice — plus the CPU of
the monitor's writer thread (the conversion and the writing, off the training thread),
and the sum divided by the CPU time of the steps without it. Other processes on a shared
machine move that ratio far less than they move two separate runs.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from monitor_paired import _load, _machine, _writer_cpu  # noqa: E402

VOCAB, SEQ, BATCH, LAYERS, HEADS, WIDTH = 96, 64, 12, 4, 4, 128


def _data(n: int) -> list[dict[str, Any]]:
    import torch

    g = torch.Generator().manual_seed(0)
    out = []
    for _ in range(n):
        ids = torch.randint(0, VOCAB, (SEQ,), generator=g)
        mask = torch.ones(SEQ, dtype=torch.long)
        mask[int(torch.randint(SEQ // 2, SEQ + 1, (1,), generator=g)) :] = 0
        labels = ids.masked_fill(mask == 0, -100)
        out.append({"input_ids": ids, "attention_mask": mask, "labels": labels})
    return out


def _model() -> Any:
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_layer=LAYERS,
        n_head=HEADS,
        n_embd=WIDTH,
        vocab_size=VOCAB,
        n_positions=SEQ,
        bos_token_id=0,
        eos_token_id=0,
    )
    return transformers.GPT2LMHeadModel(config)


def run_hf(steps: int, monitor: bool, out: Path, writer: list[float] | None = None) -> list[float]:
    """Per-step process CPU seconds of an HF Trainer run (``writer`` gets the CPU seconds
    of the monitor's writer thread)."""
    import transformers

    from trainlens.monitor import HFCallback

    times: list[float] = []

    class Clock(transformers.TrainerCallback):  # type: ignore[misc]
        def on_step_end(self, *a: Any, **k: Any) -> None:
            times.append(time.process_time())
            if writer is not None and len(times) == steps:
                writer.append(_writer_cpu())

    args = transformers.TrainingArguments(
        output_dir=str(out),
        max_steps=steps,
        per_device_train_batch_size=BATCH,
        learning_rate=1e-3,
        lr_scheduler_type="cosine",
        warmup_steps=steps // 10,
        max_grad_norm=1.0,
        logging_steps=10**9,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        dataloader_drop_last=True,
        disable_tqdm=True,
        seed=0,
    )
    callbacks: list[Any] = [Clock()] + ([HFCallback()] if monitor else [])
    trainer = transformers.Trainer(
        model=_model(), args=args, train_dataset=_data(steps * BATCH), callbacks=callbacks
    )
    trainer.train()
    return [b - a for a, b in itertools.pairwise(times)]


def run_lightning(
    steps: int, monitor: bool, out: Path, writer: list[float] | None = None
) -> list[float]:
    """Per-step process CPU seconds of a Lightning run (``writer``: as for run_hf)."""
    import lightning.pytorch as pl
    import torch

    from trainlens.monitor import LightningCallback

    times: list[float] = []

    class Clock(pl.Callback):  # type: ignore[misc]
        def on_train_batch_end(self, *a: Any, **k: Any) -> None:
            times.append(time.process_time())
            if writer is not None and len(times) == steps:
                writer.append(_writer_cpu())

    class Module(pl.LightningModule):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.gpt = _model()

        def training_step(self, batch: dict[str, Any], idx: int) -> dict[str, Any]:
            out = self.gpt(**batch)
            return {"loss": out.loss, "logits": out.logits.detach()}

        def configure_optimizers(self) -> Any:
            import transformers

            opt = torch.optim.AdamW(self.parameters(), lr=1e-3)
            sched = transformers.get_cosine_schedule_with_warmup(opt, steps // 10, steps)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    loader = torch.utils.data.DataLoader(_data(steps * BATCH), batch_size=BATCH)
    callbacks: list[Any] = [Clock()] + ([LightningCallback()] if monitor else [])
    trainer = pl.Trainer(
        max_steps=steps,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        gradient_clip_val=1.0,
        default_root_dir=str(out),
        callbacks=callbacks,
    )
    trainer.fit(Module(), loader)
    return [b - a for a, b in itertools.pairwise(times)]


RUNNERS = {"hf": run_hf, "lightning": run_lightning}
#: the entry points each framework's callback adds, outermost first
ENTRIES = {
    "hf": [
        ("trainlens.monitor.hf", "HFCallback", ["_forward_hook", "on_step_end"]),
    ],
    "lightning": [
        (
            "trainlens.monitor.lightning",
            "LightningCallback",
            ["on_train_batch_start", "on_before_optimizer_step", "on_train_batch_end"],
        ),
    ],
}
MONITOR_ENTRIES = ["_pre_hook", "_post_hook", "_forward_pre_hook", "_saw_clip"]


def self_time(name: str, steps: int) -> tuple[dict[str, float], float, float]:
    """(training-thread CPU seconds by entry point, CPU seconds of the steps without
    them, CPU seconds of the writer thread)."""
    import importlib

    from trainlens.monitor.loop import Monitor

    spent: dict[str, float] = {}
    depth = [0]

    def timed(f: Any, label: str) -> Any:
        @functools.wraps(f)
        def wrapper(*a: Any, **k: Any) -> Any:
            if depth[0]:
                return f(*a, **k)  # inside another entry point: counted there
            depth[0] += 1
            t = time.thread_time()
            try:
                return f(*a, **k)
            finally:
                spent[label] = spent.get(label, 0.0) + time.thread_time() - t
                depth[0] -= 1

        return wrapper

    for module, cls_name, methods in ENTRIES[name]:
        cls = getattr(importlib.import_module(module), cls_name)
        for m in methods:
            setattr(cls, m, timed(getattr(cls, m), m))
    for m in MONITOR_ENTRIES:
        setattr(Monitor, m, timed(getattr(Monitor, m), m))
    writer: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        per_step = RUNNERS[name](steps, True, Path(tmp), writer)
    # entry points over the measured steps only (the first step's are outside them)
    total = sum(per_step)
    scale = len(per_step) / steps
    parts = {k: v * scale for k, v in spent.items()}
    return parts, total - sum(parts.values()) - writer[0], writer[0]


def child(name: str, steps: int, monitor: bool) -> None:
    import torch

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        per_step = RUNNERS[name](steps, monitor, Path(tmp))
    print(json.dumps({"median": statistics.median(per_step)}))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--only", choices=sorted(RUNNERS), nargs="+", default=sorted(RUNNERS))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--self", action="store_true", help="in-process accounting (see above)")
    p.add_argument("--child", nargs=2, metavar=("FRAMEWORK", "ON"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args.child[0], args.steps, args.child[1] == "on")
        return
    print(
        f"GPT-2 {LAYERS} layers, d_model {WIDTH}, context {SEQ}, batch {BATCH}, "
        f"vocabulary {VOCAB}; {args.steps} steps; CPU, one thread; {_machine()}; "
        f"load average {_load()}"
    )
    if args.self:
        import torch

        torch.set_num_threads(1)
        for name in args.only:
            parts, rest, writer = self_time(name, args.steps)
            mon = sum(parts.values())
            each = ", ".join(f"{k} {v / args.steps * 1e6:.0f}" for k, v in parts.items())
            print(
                f"{name}: µs/step by entry point: {each}; "
                f"writer thread {writer / args.steps * 1e6:.0f}"
            )
            print(
                f"{name}: monitor {mon / args.steps * 1e3:.3f} ms/step of training-thread CPU, "
                f"{mon / rest:.2%} of the step without it ({rest / args.steps * 1e3:.2f} ms); "
                f"with the writer thread {(mon + writer) / rest:.2%}; load average {_load()}"
            )
        return
    for name in args.only:
        got: dict[bool, list[float]] = {False: [], True: []}
        for r in range(args.rounds):
            for monitor in (False, True) if r % 2 == 0 else (True, False):
                cmd = [sys.executable, __file__, "--steps", str(args.steps)]
                cmd += ["--child", name, "on" if monitor else "off"]
                done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
                if done.returncode != 0:
                    raise SystemExit(done.stderr[-2000:])
                got[monitor].append(json.loads(done.stdout.strip().splitlines()[-1])["median"])
        off, on = statistics.median(got[False]), statistics.median(got[True])
        ratios = ", ".join(f"{b / a:.3f}" for a, b in zip(got[False], got[True], strict=True))
        print(
            f"{name}: CPU per step {off * 1e3:.2f} ms without the callback, "
            f"{on * 1e3:.2f} ms with it: ratio {on / off:.3f} ({args.rounds} rounds, "
            f"per-round ratios {ratios})"
        )


if __name__ == "__main__":
    main()
