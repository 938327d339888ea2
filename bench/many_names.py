"""Many metric names: how analyze's cost grows with the number of names (issue 23).

A JSONL of 3 steps x N names (``m/000000`` ...), analyzed in this process, CPU seconds
(polars' threads included; on a shared machine the wall clock measures the neighbours).
Linear work gives ~4x the time for 4x the names; the old per-metric stalls loop was
quadratic (16x). The suite asserts only that every name and value is read
(tests/test_hostile_special.py); the speed is measured here.

    /work/venv/bin/python bench/many_names.py            # 5k, 20k, 100k
"""

from __future__ import annotations

import json
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def many_names(path: Path, names: int, steps: int = 3) -> Path:
    rng = random.Random(0)
    with path.open("w") as fh:
        for s in range(steps):
            row: dict[str, float] = {"step": s}
            row.update({f"m/{i:06d}": round(rng.random(), 6) for i in range(names)})
            fh.write(json.dumps(row) + "\n")
    return path


def cpu_seconds(path: Path) -> float:
    from trainlens.api import analyze

    t0 = time.process_time()
    (a,) = analyze([path])
    took = time.process_time() - t0
    assert len(a.run.metrics) > 0 and a.findings == []
    return took


def main() -> int:
    sizes = [int(x) for x in (sys.argv[1:] or ["5000", "20000", "100000"])]
    with tempfile.TemporaryDirectory() as tmp:
        paths = {n: many_names(Path(tmp) / f"{n}.jsonl", n) for n in sizes}
        cpu_seconds(paths[sizes[0]])  # imports and first calls out of the comparison
        took = {n: min(cpu_seconds(paths[n]) for _ in range(3 if n <= 20000 else 1)) for n in sizes}
    base = sizes[0]
    for n in sizes:
        ratio = took[n] / took[base]
        print(f"{n:>7,} names: {took[n]:7.2f} s CPU   x{ratio:5.1f} for x{n / base:g} the names")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
