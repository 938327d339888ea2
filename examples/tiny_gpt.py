"""A small GPT trained on the CPU with trainlens.monitor: copy the lines marked ``# trainlens``.

    python examples/tiny_gpt.py --out runs/tiny --steps 300
    python examples/tiny_gpt.py --out runs/nan --steps 300 --inject nan@200
    trainlens analyze runs/tiny -v

Faults to try (``--inject``): ``nan@STEP`` (logits overflow to inf from STEP),
``lr_shock@STEP`` (gradient x50 and LR x40 at STEP), ``freeze:emb`` (the embeddings
frozen from a third of the run), ``crash@STEP`` (a RuntimeError at STEP: the run's file
ends with a ``crashed`` end record), ``hang@STEP`` (the job sleeps for ever at STEP: kill
it, and ``trainlens watch`` calls the run stalled). Data: sequences from a few random
sparse Markov chains over 96 tokens, right-padded to random lengths (so padding is real
and masked).
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

VOCAB, SEQ, BATCH, HEADS = 96, 64, 8, 4


class Block(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, HEADS, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor, causal: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=causal, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self, d: int = 64, layers: int = 2) -> None:
        super().__init__()
        self.tok = nn.Embedding(VOCAB, d)
        self.pos = nn.Embedding(SEQ, d)
        self.blocks = nn.ModuleList(Block(d) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, VOCAB, bias=False)
        self.register_buffer("causal", torch.triu(torch.ones(SEQ, SEQ, dtype=torch.bool), 1))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.tok(ids) + self.pos(torch.arange(ids.shape[1]))
        for block in self.blocks:
            x = block(x, self.causal[: ids.shape[1], : ids.shape[1]])
        return self.head(self.ln_f(x))


class Data:
    """Seeded synthetic language: a mixture of sparse first-order Markov chains. All the
    run's sequences are drawn up front (one vectorized pass), so the loop's data wait is
    a slice, as with a prefetching DataLoader."""

    def __init__(self, seed: int, batches: int, chains: int = 4) -> None:
        g = torch.Generator().manual_seed(20240601)
        logits = torch.full((chains, VOCAB, VOCAB), -1e9)
        succ = torch.rand(chains, VOCAB, VOCAB, generator=g).argsort(-1)[..., :5]
        logits.scatter_(-1, succ, torch.randn(chains, VOCAB, 5, generator=g))
        trans = torch.softmax(logits, -1) * 0.98 + 0.02 / VOCAB
        gen = torch.Generator().manual_seed(seed)
        n = batches * BATCH
        chain = torch.randint(0, chains, (n,), generator=gen)
        ids = torch.empty(n, SEQ + 1, dtype=torch.long)
        ids[:, 0] = torch.randint(0, VOCAB, (n,), generator=gen)
        for t in range(SEQ):
            ids[:, t + 1] = torch.multinomial(trans[chain, ids[:, t]], 1, generator=gen).squeeze(1)
        lengths = torch.randint(SEQ * 3 // 4, SEQ + 1, (n,), generator=gen)
        self.ids = ids
        self.mask = (torch.arange(SEQ)[None, :] < lengths[:, None]).long()
        self.next = 0

    def batch(self) -> dict[str, torch.Tensor]:
        i = self.next
        self.next = (i + BATCH) % self.ids.shape[0]
        ids = self.ids[i : i + BATCH]
        return {
            "input_ids": ids[:, :-1],
            "labels": ids[:, 1:],
            "attention_mask": self.mask[i : i + BATCH],
        }


def schedule(
    opt: torch.optim.Optimizer, steps: int, warmup: int
) -> torch.optim.lr_scheduler.LRScheduler:
    """Warmup then cosine to 10 % of peak, as torch schedulers (read by the monitor)."""
    warm = torch.optim.lr_scheduler.LinearLR(opt, 1e-3, 1.0, total_iters=warmup)
    cos = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps - warmup, eta_min=3e-4)
    return torch.optim.lr_scheduler.SequentialLR(opt, [warm, cos], milestones=[warmup])


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default="runs/tiny_gpt")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--no-monitor", action="store_true")
    p.add_argument("--inject", default=None, help="nan@STEP | lr_shock@STEP | freeze:emb")
    p.add_argument("--every", type=int, default=None, help="monitor per-tensor period")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--d-model", type=int, default=64, help="width (64: 116k parameters)")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--val-every", type=int, default=50)
    p.add_argument("--stop-on", default=None, help="stop at a finding of this severity")
    return p.parse_args(argv)


def _fault(spec: str | None) -> tuple[str | None, int]:
    if not spec:
        return None, 0
    if spec == "freeze:emb":
        return "freeze", 0
    kind, _, at = spec.partition("@")
    if kind not in ("nan", "lr_shock", "crash", "hang") or not at.isdigit():
        raise SystemExit(
            "--inject: expected nan@STEP, lr_shock@STEP, crash@STEP, hang@STEP or freeze:emb, "
            f"got {spec!r}"
        )
    return kind, int(at)


def main(argv: list[str] | None = None) -> list[float]:
    """Train; print the median step time; return each step's process CPU seconds."""
    args = parse(argv)
    fault, at = _fault(args.inject)
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    data, val = Data(args.seed, args.steps), Data(777, 4)
    val_batches = [val.batch() for _ in range(4)]
    model = TinyGPT(args.d_model, args.layers)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.01)
    sched = schedule(opt, args.steps, warmup=max(1, args.steps // 20))
    freeze_at = args.steps // 3 if fault == "freeze" else 0
    mon = None
    if not args.no_monitor:
        from trainlens.monitor import Monitor  # trainlens

        extra = {
            "seq_len": SEQ,
            "n_layer": args.layers,
            "n_head": HEADS,
            "head_dim": args.d_model // HEADS,
        }
        kw: dict[str, Any] = {"every": args.every} if args.every else {}
        if args.stop_on:
            kw["stop_on"] = args.stop_on
        mon = Monitor(model, opt, out=args.out, scheduler=sched, config=extra, **kw)  # trainlens
    times: list[float] = []
    cpu: list[float] = []
    for step in range(1, args.steps + 1):
        t0, c0 = time.perf_counter(), time.process_time()
        if fault == "crash" and step == at:
            raise RuntimeError(f"injected crash at step {step}")
        if fault == "hang" and step == at:
            print(f"hanging at step {step}", flush=True)
            while True:
                time.sleep(60)
        batch = data.batch()
        if freeze_at and step == freeze_at:
            for p in (*model.tok.parameters(), *model.pos.parameters()):
                p.requires_grad_(False)
                p.grad = None
        logits = model(batch["input_ids"])
        if fault == "nan" and step >= at:
            logits = logits * 1e38 * 1e38  # overflow to inf: the loss and grads turn NaN
        mask = batch["attention_mask"]
        tok_loss = F.cross_entropy(
            logits.reshape(-1, VOCAB), batch["labels"].reshape(-1), reduction="none"
        )
        loss = (tok_loss * mask.reshape(-1)).sum() / mask.sum()
        loss.backward()
        if fault == "lr_shock" and step == at:
            for p in model.parameters():
                if p.grad is not None:
                    p.grad.mul_(50.0)
            for g in opt.param_groups:
                g["lr"] *= 40.0
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if fault == "lr_shock" and step == at:
            for g in opt.param_groups:
                g["lr"] /= 40.0
        sched.step()
        opt.zero_grad(set_to_none=True)
        if mon is not None:
            mon.step(loss=loss, batch=batch, logits=logits)  # trainlens
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        if mon is not None and mon.stopped:  # trainlens: stop_on met
            print(f"stopped after step {step}: {mon.stopped}")
            break
        if mon is not None and (step % args.val_every == 0 or step == args.steps):
            mon.log({"val/loss": evaluate(model, val_batches)})  # trainlens
    if mon is not None:
        mon.close()  # trainlens
    print(
        f"step time median {statistics.median(times) * 1e3:.3f} ms "
        f"(cpu {statistics.median(cpu) * 1e3:.3f} ms) over {len(times)} steps"
    )
    return cpu


def evaluate(model: TinyGPT, batches: list[dict[str, torch.Tensor]]) -> float:
    model.eval()
    total = 0.0
    with torch.no_grad():
        for b in batches:
            logits = model(b["input_ids"])
            total += F.cross_entropy(logits.reshape(-1, VOCAB), b["labels"].reshape(-1)).item()
    model.train()
    out = total / len(batches)
    return out if math.isfinite(out) else float("nan")


if __name__ == "__main__":
    main()
