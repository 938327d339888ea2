"""Time ``write_report`` on a long run: 1M steps × 12 metrics by default.

    python bench/bench_report.py [--steps 1000000] [--out DIR]

Prints the seconds (wall clock and CPU) spent building the figures, and writing the
PNGs, SVGs, report.html and report.md, plus the size of what was written. The run has a
one-step grad-norm spike and loss spike, a NaN stretch and a restart, so the report has
findings to draw; detection runs first and is timed separately (it is not the report).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl

from trainlens.api import analyze_run
from trainlens.core.config import Config
from trainlens.core.run import build_run
from trainlens.report import build_figures, write_report


def long_run(n: int, seed: int = 0) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    steps = np.arange(n, dtype=np.int64)
    t = steps / n
    spike = n // 2
    loss = 2.0 + 4.0 * np.exp(-8 * t) + rng.normal(0, 0.02, n)
    loss[spike + 5] += 3.0
    loss[int(0.8 * n) : int(0.8 * n) + 10] = np.nan
    grad = 0.8 * np.exp(rng.normal(0, 0.1, n))
    grad[spike] *= 40
    warm = n // 100
    lr = np.where(
        steps < warm,
        3e-4 * (steps + 1) / warm,
        3e-5
        + 0.5 * (3e-4 - 3e-5) * (1 + np.cos(np.pi * np.clip((steps - warm) / (n - warm), 0, 1))),
    )
    cols = {
        "train/loss": loss,
        "grad_norm": grad,
        "lr": lr,
        "tokens_per_sec": 4e4 + rng.normal(0, 400, n),
        "update_ratio": 1e-3 * np.exp(rng.normal(0, 0.2, n)),
        "entropy": 5 - 2 * t + rng.normal(0, 0.01, n),
        "mem/allocated": (20 + 2 * t) * 2**30,
        "step_time": 0.2 + rng.exponential(0.01, n),
        "loss_scale": 2.0 ** (16 - (steps // (n // 8))),
        "grad_norm/embed": grad * 0.3,
        "grad_norm/head": grad * 0.5,
    }
    parts = [
        pl.DataFrame(
            {"step": steps, "metric": pl.Series([m] * 1).extend_constant(m, n - 1), "value": v}
        )
        for m, v in cols.items()
    ]
    every = 1000
    parts.append(
        pl.DataFrame(
            {
                "step": steps[::every],
                "metric": ["val/loss"] * len(steps[::every]),
                "value": loss[::every] + 0.05,
            }
        )
    )
    df = pl.concat(parts).sort("step", maintain_order=True)
    # a restart: steps from 60 % on logged, then the job resumed at 58 %
    cut, back = int(0.6 * n), int(0.58 * n)
    return pl.concat([df.filter(pl.col("step") < cut), df.filter(pl.col("step") >= back)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--smooth", type=float, default=None)
    args = ap.parse_args()

    long = long_run(args.steps)
    run = build_run(long, name="bench", source="bench", fmt="jsonl")
    n_metrics = run.frame.get_column("metric").n_unique()
    t0 = time.perf_counter()
    analysis = analyze_run(run, Config())
    t_detect = time.perf_counter() - t0
    print(
        f"run: {args.steps:,} steps × {n_metrics} metrics = {run.frame.height:,} values; "
        f"{len(analysis.findings)} findings (detection {t_detect:.2f} s, not counted below)"
    )

    t0, c0 = time.perf_counter(), time.process_time()
    figures = build_figures([analysis], smoothing=args.smooth)
    t_build, c_build = time.perf_counter() - t0, time.process_time() - c0
    del figures

    out = args.out or Path(tempfile.mkdtemp(prefix="trainlens-bench-"))
    t0, c0 = time.perf_counter(), time.process_time()
    page = write_report([analysis], out, smoothing=args.smooth)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    files = sorted(out.iterdir())
    svg = sum(f.stat().st_size for f in files if f.suffix == ".svg")
    png = sum(f.stat().st_size for f in files if f.suffix == ".png")
    print(f"figures only: {t_build:.2f} s wall, {c_build:.2f} s CPU")
    print(
        f"write_report: {wall:.2f} s wall, {cpu:.2f} s CPU "
        f"({sum(f.suffix == '.png' for f in files)} panels; PNG {png / 1e6:.1f} MB, "
        f"SVG {svg / 1e6:.1f} MB, report.html {page.stat().st_size / 1e6:.1f} MB)"
    )
    print(f"seconds: {wall:.2f}")


if __name__ == "__main__":
    main()
