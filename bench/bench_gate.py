"""Gate many archived runs: runs per second with one worker process and with two.

Generates N JSONL runs of S steps each (step, loss, lr, grad_norm, tokens_per_sec, time,
and a val_loss every 500 steps) into a temporary directory outside the repository — 2 %
of them diverge to NaN, 2 % lose a third of their throughput half-way — then gates the
directory with ``jobs=1`` (in this process) and ``jobs=2`` (a spawn process pool), checks
that both give the same verdicts, and prints runs per second and the speed-up.

    /work/venv/bin/python bench/bench_gate.py                  # 1,000 runs x 10k steps
    /work/venv/bin/python bench/bench_gate.py --runs 200       # quicker

The numbers depend on what else the machine runs; the load average is printed with them.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def write_run(path: Path, steps: int, rng: np.random.Generator, kind: str) -> None:
    s = np.arange(1, steps + 1)
    loss = 3.0 * np.exp(-s / (steps / 5)) + 1.0 + rng.normal(0, 0.02, steps)
    grad = 1.0 + rng.normal(0, 0.05, steps)
    tps = 50_000 + rng.normal(0, 500, steps)
    if kind == "nan":
        at = int(steps * 0.6)
        loss[at:] = np.nan
        grad[at:] = np.nan
    elif kind == "slow":
        tps[steps // 2 :] *= 0.66
    dt = 50_000 * 0.2 / tps  # a fixed batch of tokens per step
    t = 1.7e9 + np.cumsum(dt)
    train = pl.DataFrame(
        {
            "step": s,
            "loss": loss,
            "lr": np.full(steps, 3e-4),
            "grad_norm": grad,
            "tokens_per_sec": tps,
            "time": t,
        }
    )
    lines = train.select(
        pl.concat_str(
            pl.lit('{"step":'),
            pl.col("step").cast(pl.String),
            pl.lit(',"loss":'),
            pl.col("loss").cast(pl.String),
            pl.lit(',"lr":'),
            pl.col("lr").cast(pl.String),
            pl.lit(',"grad_norm":'),
            pl.col("grad_norm").cast(pl.String),
            pl.lit(',"tokens_per_sec":'),
            pl.col("tokens_per_sec").cast(pl.String),
            pl.lit(',"time":'),
            pl.col("time").cast(pl.String),
            pl.lit("}"),
        ).alias("line")
    )["line"].to_list()
    every = 500
    out: list[str] = []
    for i, line in enumerate(lines, 1):
        out.append(line)
        if i % every == 0:
            v = loss[i - 1] + 0.05
            out.append(f'{{"step":{i},"val_loss":{"NaN" if np.isnan(v) else repr(float(v))}}}')
    path.write_text("\n".join(out) + "\n")


def generate(root: Path, n: int, steps: int) -> dict[str, str]:
    rng = np.random.default_rng(0)
    kinds: dict[str, str] = {}
    for i in range(n):
        kind = "nan" if i % 50 == 7 else ("slow" if i % 50 == 23 else "healthy")
        name = f"run_{i:05d}"
        d = root / name
        d.mkdir(parents=True)
        write_run(d / "metrics.jsonl", steps, rng, kind)
        kinds[name] = kind
    return kinds


def _cpu_seconds() -> float:
    """CPU time of this process and of its reaped children (the pool's workers)."""
    import resource

    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--jobs", type=int, default=2, help="the parallel run's worker count")
    args = ap.parse_args()

    from trainlens.core.config import Config
    from trainlens.gate import gate

    tmp = Path(tempfile.mkdtemp(prefix="trainlens-bench-gate-"))
    try:
        t0 = time.perf_counter()
        kinds = generate(tmp / "runs", args.runs, args.steps)
        size = sum(p.stat().st_size for p in (tmp / "runs").rglob("*.jsonl"))
        print(
            f"generated {args.runs:,} runs x {args.steps:,} steps "
            f"({size / 2**20:,.0f} MB of JSONL) in {time.perf_counter() - t0:.1f} s"
        )
        print(
            f"cpus {os.cpu_count()}, load average before: "
            f"{', '.join(f'{x:.1f}' for x in os.getloadavg())}"
        )

        timings: dict[int, float] = {}
        verdicts: dict[int, dict[str, str]] = {}
        cpu: dict[int, float] = {}
        for jobs in (1, args.jobs):
            t = time.perf_counter()
            c = _cpu_seconds()
            result = gate([str(tmp / "runs")], config=Config(), jobs=jobs)
            timings[jobs] = time.perf_counter() - t
            cpu[jobs] = _cpu_seconds() - c
            verdicts[jobs] = {r.name: r.verdict for r in result.reports}
            rate = args.runs / timings[jobs]
            print(
                f"jobs={jobs}: {timings[jobs]:7.1f} s   {rate:6.2f} runs/s   "
                f"{len(result.failed)} failed, {len(result.passed)} passed   "
                f"(load average {os.getloadavg()[0]:.1f})"
            )
        # on a busy machine the wall-clock speed-up says more about the neighbours than
        # about the gate; CPU seconds per run say whether the work itself parallelizes
        print(
            f"CPU time per run: {1e3 * cpu[1] / args.runs:.0f} ms with jobs=1, "
            f"{1e3 * cpu[args.jobs] / args.runs:.0f} ms with jobs={args.jobs} "
            f"(workers included; the difference is process start-up and result transfer)"
        )

        same = verdicts[1] == verdicts[args.jobs]
        nan_caught = all(verdicts[1][n] == "fail" for n, k in kinds.items() if k == "nan")
        speedup = timings[1] / timings[args.jobs]
        print(
            f"speed-up with {args.jobs} processes: {speedup:.2f}x "
            f"(parallel efficiency {speedup / args.jobs:.0%}); same verdicts: {same}; "
            f"every NaN run failed: {nan_caught}"
        )
        return 0 if same and nan_caught else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
