"""Issue 15's number: watching a 1M-step file that grows by 100 steps costs work in
proportion to the 100 steps, not to the million.

    /work/venv/bin/python bench/watch_follow.py                     # 1M steps, grow by 100
    /work/venv/bin/python bench/watch_follow.py --steps 100000 --grow 100 --repeats 5

The run is bench/generate.py's (12 metrics a step; JSONL one line a step, TensorBoard one
record per value, CSV a wide table), written ``--grow × --repeats`` steps longer than
``--steps``. Its first ``--steps`` steps are copied and followed (the first poll reads
them all); then, ``--repeats`` times, the bytes of the next ``--grow`` steps are appended
(what the writer added) and one poll of the follower is timed against
a full ``trainlens.read`` of the file as it is then. Printed per format: the poll, the full
read, their ratio, and the ratio of the data (grow / steps): a poll costing in proportion
to the new steps has a ratio near the data's plus a fixed cost per poll (a stat, an open,
a reader call).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from generate import METRICS, VAL_EVERY, Plan, generate

from trainlens.api import read
from trainlens.readers import ReadOptions
from trainlens.watch.discovery import follower_for

FORMATS = ("jsonl", "tensorboard", "csv")


def _file(p: Path) -> Path:
    return next(p.iterdir()) if p.is_dir() else p


def bench_format(fmt: str, made: Path, work: Path, steps: int, grow: int, repeats: int) -> None:
    src = _file(made)
    full = src.read_bytes()
    cuts = [_offset(fmt, full, steps + grow * k) for k in range(repeats + 1)]
    if work.exists():
        shutil.rmtree(work)
    target = work / src.relative_to(made.parent)
    target.parent.mkdir(parents=True)
    target.write_bytes(full[: cuts[0]])
    watched = target.parent if made.is_dir() else target
    follower = follower_for(watched, fmt, ReadOptions())
    t = time.perf_counter()
    first = follower.poll()
    t_first = time.perf_counter() - t
    assert first is not None
    polls, reads, cpu, read_cpu = [], [], [], []
    rows = 0
    for k in range(repeats):
        with target.open("ab") as fh:
            fh.write(full[cuts[k] : cuts[k + 1]])
        t, c = time.perf_counter(), time.process_time()
        chunk = follower.poll()
        polls.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
        assert chunk is not None
        rows += chunk.frame.height
        t, c = time.perf_counter(), time.process_time()
        read(watched)
        reads.append(time.perf_counter() - t)
        read_cpu.append(time.process_time() - c)
    p, r = statistics.median(polls), statistics.median(reads)
    pc, rc = statistics.median(cpu), statistics.median(read_cpu)
    print(
        f"{fmt:12s} first poll {t_first * 1e3:7.0f} ms | poll after +{grow} steps "
        f"{p * 1e3:6.1f} ms (cpu {pc * 1e3:5.1f}, {rows // repeats} values) | full read "
        f"{r * 1e3:6.0f} ms (cpu {rc * 1e3:5.0f}) | poll/read wall {p / r:.4f} cpu {pc / rc:.4f}",
        flush=True,
    )


def _offset(fmt: str, data: bytes, steps: int) -> int:
    """The byte at which step ``steps`` starts in generate.py's file: JSONL has a line a
    step, CSV a header and a line a step, TensorBoard a version record, then one record per
    value (11 a step, and ``val_loss`` at every 100th step)."""
    if fmt in ("jsonl", "csv"):
        at = 0
        for _ in range(steps + (fmt == "csv")):
            at = data.index(b"\n", at) + 1
        return at
    records = 1 + steps * (len(METRICS) - 1) + -(-steps // VAL_EVERY)
    at = 0
    for _ in range(records):  # each record: 8-byte length, 4-byte crc, data, 4-byte crc
        at += 16 + int.from_bytes(data[at : at + 8], "little")
    return at


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--grow", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--formats", default=",".join(FORMATS))
    ap.add_argument("--out", type=Path, default=Path("/tmp/trainlens-bench/watch-follow"))
    args = ap.parse_args(argv)
    formats = tuple(f for f in args.formats.split(",") if f)
    t = time.perf_counter()
    total = args.steps + args.grow * args.repeats
    made = generate(Plan(steps=total), args.out / str(total), formats)
    print(f"wrote the runs in {time.perf_counter() - t:.0f} s", flush=True)
    print(
        f"{args.steps:,} steps, growing by {args.grow} steps {args.repeats} times; data "
        f"ratio {args.grow / args.steps:.5f}; load average {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    for fmt in formats:
        bench_format(fmt, made[fmt], args.out / "work", args.steps, args.grow, args.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
