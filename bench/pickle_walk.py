"""How fast the checkpoint audit walks a pickle, against pickletools.genops (which only
decodes opcodes: no stack, no memo), on a torch ``data.pkl`` and on a memo bomb.

    python bench/pickle_walk.py

Prints µs an opcode, best of 5, in one run (the machine is shared: ratios, not times).
"""

from __future__ import annotations

import io
import pickletools
import time
import zipfile
from collections.abc import Callable

import torch

from trainlens.checkpoints._budget import PickleBudget, Spend
from trainlens.checkpoints._pickles import scan


def best(fn: Callable[[], object]) -> float:
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def unbounded() -> Spend:
    return Spend(PickleBudget(bytes=2**40, opcodes=2**40, memo=2**40, seconds=1e9))


def main() -> None:
    buf = io.BytesIO()
    torch.save({f"layer{i}.weight": torch.zeros(2) for i in range(3000)}, buf)
    with zipfile.ZipFile(buf) as zf:
        data = zf.read(next(n for n in zf.namelist() if n.endswith("data.pkl")))
    bomb = b"\x80\x04]\x94" + b"\x94" * (4 * 2**20) + b"."
    for label, blob in (("torch data.pkl, 3000 tensors", data), ("MEMOIZE bomb", bomb)):
        ops = sum(1 for _ in pickletools.genops(blob))
        g = best(lambda b=blob: sum(1 for _ in pickletools.genops(b)))  # type: ignore[misc]
        w = best(lambda b=blob: scan(b, spend=unbounded()))  # type: ignore[misc]
        print(
            f"{label}: {ops:,} opcodes; genops {g / ops * 1e6:.3f} µs/op, "
            f"audit walk {w / ops * 1e6:.3f} µs/op ({w / g:.2f}x)"
        )


if __name__ == "__main__":
    main()
