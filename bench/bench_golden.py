"""The golden-curve comparison at scale: a 1M-step candidate against three 1M-step
references, timed against reading the four runs (the target: the comparison costs no
more than the read).

Writes four JSONL runs (step, loss, lr, grad_norm, step_time; seeded noise about one
curve) to --out once, then in one process: reads them (trainlens' reader), builds the
band (``from_runs``), compares the candidate (``reference_checks``), and prints CPU and
wall seconds for each and the ratio of comparison to read.

    /work/venv/bin/python bench/bench_golden.py --steps 1000000
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def write(path: Path, steps: int, seed: int) -> None:
    import polars as pl

    rng = np.random.default_rng(seed)
    x = np.arange(1, steps + 1)
    frac = x / steps
    lr = np.where(x < 2000, 3e-4 * x / 2000, 3e-4 * (0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * frac))))
    loss = 2.0 + 8.0 * np.exp(-x / (steps / 20)) + rng.normal(0, 0.05, steps)
    grad = np.abs(1.0 + rng.standard_t(4, steps) * 0.1)
    st = 0.25 * (1 + np.abs(rng.normal(0, 0.03, steps)))
    pl.DataFrame(
        {"step": x, "loss": loss, "lr": lr, "grad_norm": grad, "step_time": st}
    ).write_ndjson(path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--out", default="/tmp/trainlens-bench-golden")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    names = ["ref0", "ref1", "ref2", "cand"]
    for i, n in enumerate(names):
        p = out / f"{n}-{a.steps}.jsonl"
        if not p.exists():
            write(p, a.steps, i)

    from trainlens.gate.golden import from_runs
    from trainlens.gate.reference import reference_checks
    from trainlens.readers import read_runs

    def timed(f):  # type: ignore[no-untyped-def]
        c0, w0 = time.process_time(), time.perf_counter()
        r = f()
        return r, time.process_time() - c0, time.perf_counter() - w0

    runs, read_cpu, read_wall = timed(
        lambda: {n: read_runs([out / f"{n}-{a.steps}.jsonl"])[0] for n in names}
    )
    golden, band_cpu, band_wall = timed(lambda: from_runs([(n, runs[n]) for n in names[:3]]))
    outcomes, cmp_cpu, cmp_wall = timed(lambda: reference_checks(golden, runs["cand"]))
    print(f"{a.steps:,} steps x 4 runs, 4 metrics each")
    print(f"read 4 runs:          {read_cpu:6.2f} s CPU  {read_wall:6.2f} s wall")
    print(f"band of 3 references: {band_cpu:6.2f} s CPU  {band_wall:6.2f} s wall")
    print(f"compare candidate:    {cmp_cpu:6.2f} s CPU  {cmp_wall:6.2f} s wall")
    total = band_cpu + cmp_cpu
    print(
        f"band + compare / read: {total / read_cpu:.2f}x CPU "
        f"({'met' if total <= read_cpu else 'NOT met'}: target <= 1x)"
    )
    fails = [o.check for o in outcomes if o.check.status == "fail"]
    print("departures (healthy synthetic candidate, expected none):", [c.name for c in fails])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
