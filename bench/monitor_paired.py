"""trainlens.monitor's overhead measured paired in one process (issue 28).

    PYTHONPATH=$PWD /work/venv/bin/python bench/monitor_paired.py            # both sizes
    PYTHONPATH=$PWD /work/venv/bin/python bench/monitor_paired.py --sizes 64x2 --steps 2000

Two identical examples/tiny_gpt.py models (same seed, so the same initial weights; the
same batches; AdamW, warmup + cosine, clipping at 1.0, as tiny_gpt's own loop) train in
one process on one torch thread, their steps interleaved: model A with a
:class:`~trainlens.monitor.Monitor` (default settings: every=10, flush every 50 records or
2 s), model B without, A first on even steps and B first on odd ones. Each step is timed
(wall clock and the training thread's CPU clock), so every pair of steps saw the same
machine: other processes on a shared machine slow both alike, which is what lets this
resolve 1-5 % where two separate runs (bench/monitor.py's process level) cannot.

Printed per size: the overhead of the mean step and of the median one (A - B, as a share
of B), a bootstrap 95 % interval of the mean's share (pairs resampled), the IQR, p99 and
max of the per-pair difference, and the mean difference on each kind of step: plain
ones, the per-tensor ones (step 1 and every ``every``-th: grad norms per tensor, update
ratios), and the ones where a flush was handed over (the records left the monitor), on
a plain step and on a per-tensor one (with the defaults on the 116k model every flush
comes on a per-tensor step: 50 records, every 10th per-tensor), so that each is compared
with its own kind. Also the handover itself (``Monitor.flush`` on the training thread,
timed), and the unmonitored model's steps at the monitored one's flushes against its
other steps: the writer thread's work slows whatever runs beside it (on a machine whose
cores share a physical core, or its caches), and in the pairing part of that lands on the
unmonitored model. The CPU of the monitor's writer thread is added to its total CPU share
(it is work the process does, off the training thread). ``--warmup`` pairs are not counted.

``--variants``: several monitored models in the same run, each handing
``Monitor.step`` a different part of what it can take (``full``: loss, batch and logits
as tiny_gpt's loop; ``no-logits``: no entropy; ``loss-only``: no tokens or padding
either), every model's steps interleaved with the others' (the order rotated each
step): what each figure costs, measured under the same load.

``--sizes DxL``: tiny_gpt's width x layers; the default 64x2 is the fixture-size model
(116k parameters, 121k with its causal-mask buffer: the issue's "121k") and 128x4
nanoGPT's CPU example (826k), the two sizes of bench/monitor.py.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))


def _machine() -> str:
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores"


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


#: what each monitored model hands to ``Monitor.step`` (``--variants``)
VARIANTS = {
    "full": ("loss", "batch", "logits"),  # what tiny_gpt's loop gives: every figure
    "no-logits": ("loss", "batch"),  # no entropy
    "loss-only": ("loss",),  # no entropy, no tokens or padding
}


class Trainer:
    """One tiny_gpt model, its optimizer and schedule; ``step`` is one training step."""

    def __init__(
        self, d: int, layers: int, steps: int, out: Path | None, gives: tuple[str, ...] = ()
    ) -> None:
        import tiny_gpt  # type: ignore[import-not-found]
        import torch

        self.F = torch.nn.functional
        self.vocab = tiny_gpt.VOCAB
        torch.manual_seed(0)
        self.model = tiny_gpt.TinyGPT(d, layers)
        self.opt = torch.optim.AdamW(
            self.model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.01
        )
        self.sched = tiny_gpt.schedule(self.opt, steps, warmup=max(1, steps // 20))
        self.mon: Any = None
        self.gives = gives
        if out is not None:
            from trainlens.monitor import Monitor

            self.mon = Monitor(self.model, self.opt, out=out, scheduler=self.sched)
        self.clip = torch.nn.utils.clip_grad_norm_
        self.handovers: list[float] = []  # thread CPU of each Monitor.flush
        if self.mon is not None:
            flush = self.mon.flush

            def timed_flush(*args: Any, **kw: Any) -> None:
                c = time.thread_time()
                try:
                    flush(*args, **kw)
                finally:
                    self.handovers.append(time.thread_time() - c)

            self.mon.flush = timed_flush

    def step(self, batch: dict[str, Any]) -> None:
        logits = self.model(batch["input_ids"])
        mask = batch["attention_mask"]
        tok = self.F.cross_entropy(
            logits.reshape(-1, self.vocab), batch["labels"].reshape(-1), reduction="none"
        )
        loss = (tok * mask.reshape(-1)).sum() / mask.sum()
        loss.backward()
        self.clip(self.model.parameters(), 1.0)
        self.opt.step()
        self.sched.step()
        self.opt.zero_grad(set_to_none=True)
        if self.mon is not None:
            given = {"loss": loss, "batch": batch, "logits": logits}
            self.mon.step(**{k: given[k] for k in self.gives})


def _thread_cpu(thread: threading.Thread | None) -> float:
    if thread is None or thread.ident is None:
        return 0.0
    try:
        return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
    except (OSError, AttributeError):
        return 0.0


def _writer_cpu() -> float:
    """CPU seconds of the monitors' writer threads so far (0 when they have none)."""
    threads = [t for t in threading.enumerate() if t.name.startswith("trainlens-monitor")]
    return sum(_thread_cpu(t) for t in threads)


def _writer_of(mon: Any) -> threading.Thread | None:
    """The monitor's writer thread (None before the writer thread existed)."""
    return getattr(getattr(mon, "_writer", None), "_thread", None)


def _timed(t: Trainer, batch: dict[str, Any]) -> tuple[float, float]:
    w, c = time.perf_counter(), time.thread_time()
    t.step(batch)
    return time.perf_counter() - w, time.thread_time() - c


def paired(
    d: int, layers: int, steps: int, warmup: int, variants: tuple[str, ...] = ("full",)
) -> dict[str, Any]:
    """Model 0 without a monitor and one monitored model per variant, trained on the same
    batches, their steps interleaved (the order rotated every step)."""
    import tiny_gpt
    import torch

    torch.set_num_threads(1)
    total = steps + warmup
    data = tiny_gpt.Data(0, total)
    batches = [data.batch() for _ in range(total)]
    n = len(variants) + 1
    with tempfile.TemporaryDirectory() as tmp:
        models = [Trainer(d, layers, total, None)]
        models += [Trainer(d, layers, total, Path(tmp) / v, VARIANTS[v]) for v in variants]
        n_params = sum(p.numel() for p in models[0].model.parameters())
        wall = np.zeros((n, steps))
        cpu = np.zeros((n, steps))
        # per monitored model: 0 plain step, 1 per-tensor step, 2 a flush was handed over
        # on a plain step, 3 on a per-tensor step
        kind = np.zeros((n, steps), dtype=np.int8)
        writer0 = [0.0] * n
        for i, batch in enumerate(batches):
            if i == warmup:
                writer0 = [_thread_cpu(_writer_of(m.mon)) for m in models]
            got = {}
            for which in [(i + k) % n for k in range(n)]:
                got[which] = _timed(models[which], batch)
            if i < warmup:
                continue
            j = i - warmup
            for which in range(n):
                wall[which, j], cpu[which, j] = got[which]
                mon = models[which].mon
                if mon is None:
                    continue
                kind[which, j] = (0 if mon._records else 2) + mon._tensor_step(mon.opt_step)
        writer = [
            _thread_cpu(_writer_of(m.mon)) - w0 for m, w0 in zip(models, writer0, strict=True)
        ]
        for m in models[1:]:
            m.mon.close()
        handovers = [m.handovers[:-1] for m in models]  # (not the flush of close)
    return {
        "params": n_params,
        "variants": variants,
        "wall": wall,
        "cpu": cpu,
        "kind": kind,
        "writer": writer,
        "handovers": handovers,
    }


def _bootstrap_share(diff: np.ndarray, base: np.ndarray, n: int = 2000) -> tuple[float, float]:
    rng = np.random.default_rng(0)
    idx = rng.integers(0, len(diff), (n, len(diff)))
    shares = diff[idx].mean(1) / base[idx].mean(1)
    lo, hi = np.percentile(shares, [2.5, 97.5])
    return float(lo), float(hi)


def report(got: dict[str, Any]) -> None:
    for v, variant in enumerate(got["variants"], start=1):
        kinds = got["kind"][v]
        print(f"  monitor given {', '.join(VARIANTS[variant])} ({variant}):")
        for clock in ("wall", "cpu"):
            on, off = got[clock][v], got[clock][0]
            diff = on - off
            mean_share = diff.mean() / off.mean()
            median_share = (np.median(on) - np.median(off)) / np.median(off)
            lo, hi = _bootstrap_share(diff, off)
            q1, q3 = np.percentile(diff, [25, 75])
            label = "wall" if clock == "wall" else "thread CPU"
            print(
                f"    {label:10s}: step {off.mean() * 1e3:.2f} ms (median "
                f"{np.median(off) * 1e3:.2f}); monitor mean {diff.mean() * 1e3:+.3f} ms = "
                f"{mean_share:+.2%} [95% CI {lo:+.2%}, {hi:+.2%}], median {median_share:+.2%}; "
                f"diff IQR {q1 * 1e3:+.3f}..{q3 * 1e3:+.3f} ms, "
                f"p99 {np.percentile(diff, 99) * 1e3:+.3f}, max {diff.max() * 1e3:+.3f} ms"
            )
            parts = []
            kinds_named = (
                (0, "plain"),
                (1, "per-tensor"),
                (2, "flush on plain"),
                (3, "flush on per-tensor"),
            )
            for k, what in kinds_named:
                sel = kinds == k
                if sel.any():
                    parts.append(
                        f"{what} mean {diff[sel].mean() * 1e3:+.3f} ms, median "
                        f"{np.median(diff[sel]) * 1e3:+.3f} (n={int(sel.sum())})"
                    )
            print(f"    {'':10s}  by step: " + "; ".join(parts))
            at_flush = kinds >= 2
            if at_flush.any():
                rest = off[~at_flush].mean()
                print(
                    f"    {'':10s}  the unmonitored model at the flushes: "
                    f"{(off[at_flush].mean() - rest) * 1e3:+.3f} ms against its other steps"
                )
        on, off = got["cpu"][v], got["cpu"][0]
        writer = got["writer"][v]
        total = (on.sum() - off.sum() + writer) / off.sum()
        print(
            f"    total CPU : monitor {total:+.2%} of the step's CPU, its writer thread "
            f"{writer / len(off) * 1e3:.3f} ms/step of it"
        )
        hand = np.array(got["handovers"][v])
        if hand.size:
            print(
                f"    handover  : Monitor.flush on the training thread {hand.mean() * 1e6:.0f} µs "
                f"mean, {hand.max() * 1e6:.0f} µs max (n={hand.size})"
            )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", nargs="+", default=["64x2", "128x4"], help="tiny_gpt DxL")
    p.add_argument("--steps", type=int, default=1000, help="measured pairs of steps")
    p.add_argument("--warmup", type=int, default=30)
    p.add_argument(
        "--variants",
        nargs="+",
        default=["full"],
        choices=sorted(VARIANTS),
        help="monitored models in the same run, each given these to Monitor.step",
    )
    args = p.parse_args()
    import torch

    import trainlens

    print(
        f"{_machine()}; torch {torch.__version__}, one thread; trainlens from "
        f"{Path(trainlens.__file__).parent}"
    )
    for size in args.sizes:
        d, layers = (int(x) for x in size.split("x"))
        before = _load()
        got = paired(d, layers, args.steps, args.warmup, tuple(args.variants))
        print(
            f"tiny_gpt d {d}, {layers} layers, {got['params'] / 1e3:.0f}k params: "
            f"{args.steps} interleaved steps each (+{args.warmup} warm-up), load average "
            f"{before} -> {_load()}"
        )
        report(got)


if __name__ == "__main__":
    main()
