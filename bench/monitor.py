"""What trainlens.monitor costs: examples/tiny_gpt.py's step time with and without it.

    /work/venv/bin/python bench/monitor.py                   # 5 rounds, 300 steps each
    /work/venv/bin/python bench/monitor.py --d-model 64 --layers 2   # the fixtures' size
    /work/venv/bin/python bench/monitor.py --rounds 3 --every 1 10 50

Each round runs tiny_gpt once without the monitor and once with it for each ``--every``
(per-tensor grad norms and update ratios every k steps), in a fresh process each, one
torch thread, the order rotated between rounds. A run prints the median of its per-step
process CPU time (and wall time); the bench prints, per setting, the median over rounds
and its ratio to the run without the monitor. CPU time, not wall time, is the headline:
on a shared machine other processes move the wall clock of a step by far more than 3 %,
and the monitor's cost is CPU work in the training process (it adds no sleeps and no
waits). Wall-clock medians are printed beside it.

``--self`` measures the same thing from inside one process, which other processes cannot
disturb: tiny_gpt runs with the monitor, each of the monitor's entry points (the
optimizer pre/post hooks, the forward pre-hook, the clip observer, ``step`` with its
flushes) is timed with the training thread's CPU clock, the CPU of the monitor's writer
thread is added, and the sum is divided by the CPU time of the steps without it. It
leaves out indirect costs (allocator, caches), which the process-level comparison
includes. bench/monitor_paired.py measures the overhead paired in one process (two
identical models, steps interleaved): the method that resolves 1-5 % on a shared machine.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINE = re.compile(r"step time median ([\d.]+) ms \(cpu ([\d.]+) ms\)")


def run(steps: int, every: int | None, out: Path, size: list[str]) -> tuple[float, float]:
    cmd = [sys.executable, str(ROOT / "examples" / "tiny_gpt.py"), "--steps", str(steps), *size]
    cmd += ["--out", str(out)] + (["--no-monitor"] if every is None else ["--every", str(every)])
    done = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=ROOT)
    m = LINE.search(done.stdout)
    if m is None:
        raise SystemExit(f"unexpected output: {done.stdout!r} {done.stderr[-500:]!r}")
    return float(m.group(1)), float(m.group(2))


def self_time(steps: int, every: int, size: list[str]) -> tuple[dict[str, float], float]:
    """(monitor CPU seconds per entry point and of its writer thread, loop CPU seconds
    without them) of one tiny_gpt run."""
    import functools
    import time

    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "examples"))
    sys.path.insert(0, str(ROOT / "bench"))
    import tiny_gpt  # type: ignore[import-not-found]
    from monitor_paired import _writer_cpu

    from trainlens.monitor.loop import Monitor
    from trainlens.monitor.writer import Writer

    spent: dict[str, float] = {}
    originals = {}
    for name in ("before_step", "_post_hook", "_forward_pre_hook", "_saw_clip", "step"):
        original = originals[name] = getattr(Monitor, name)

        def timed(*a: object, _f: object = original, _n: str = name, **k: object) -> object:
            t = time.thread_time()
            try:
                return _f(*a, **k)  # type: ignore[operator]
            finally:
                spent[_n] = spent.get(_n, 0.0) + time.thread_time() - t

        setattr(Monitor, name, functools.wraps(original)(timed))
    close = Writer.close

    def closing(self: Writer) -> None:
        self.wait()
        spent["writer thread"] = _writer_cpu()  # (before its thread ends)
        close(self)

    Writer.close = closing  # type: ignore[method-assign]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            argv = ["--out", tmp, "--steps", str(steps), "--every", str(every), *size]
            cpu = tiny_gpt.main(argv)
    finally:
        for name, original in originals.items():
            setattr(Monitor, name, original)
        Writer.close = close  # type: ignore[method-assign]
    return spent, sum(cpu) - sum(spent.values())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--every", type=int, nargs="+", default=[1, 10, 50])
    p.add_argument("--self", action="store_true", help="in-process accounting (see above)")
    # default: the width and depth of nanoGPT's CPU example (n_embd 128, 4 layers, 4 heads),
    # the small GPT people train on a CPU; --d-model 64 --layers 2 is the fixtures' size
    p.add_argument("--d-model", type=int, default=128, help="tiny_gpt's width (64: 116k params)")
    p.add_argument("--layers", type=int, default=4)
    args = p.parse_args()
    size = ["--d-model", str(args.d_model), "--layers", str(args.layers)]
    if args.self:
        for every in args.every:
            parts, rest = self_time(args.steps, every, size)
            mon = sum(parts.values())
            each = ", ".join(f"{k} {v / args.steps * 1e6:.0f}" for k, v in parts.items())
            print(f"every={every}: µs/step by entry point: {each}")
            print(
                f"every={every}: monitor {mon / args.steps * 1e3:.3f} ms/step of CPU, "
                f"{mon / rest:.2%} of the step without it ({rest / args.steps * 1e3:.3f} ms)"
            )
        return
    settings: list[int | None] = [None, *args.every]
    wall: dict[int | None, list[float]] = {s: [] for s in settings}
    cpu: dict[int | None, list[float]] = {s: [] for s in settings}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = settings[r % len(settings) :] + settings[: r % len(settings)]
            for s in order:
                w, c = run(args.steps, s, Path(tmp) / f"r{r}_{s}", size)
                wall[s].append(w)
                cpu[s].append(c)
    base_c, base_w = statistics.median(cpu[None]), statistics.median(wall[None])
    print(
        f"tiny_gpt d_model {args.d_model}, {args.layers} layers, {args.steps} steps, "
        f"{args.rounds} rounds (median of per-step medians)"
    )
    print(f"{'monitor':<16}{'cpu ms/step':>12}{'ratio':>9}{'wall ms/step':>14}{'ratio':>9}")
    for s in settings:
        c, w = statistics.median(cpu[s]), statistics.median(wall[s])
        name = "off" if s is None else f"on, every={s}"
        print(f"{name:<16}{c:>12.3f}{c / base_c:>9.3f}{w:>14.3f}{w / base_w:>9.3f}")


if __name__ == "__main__":
    main()
