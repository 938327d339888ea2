"""How fast and how cheap ``trainlens watch`` is on a run being written (issue 15).

    /work/venv/bin/python bench/watch.py                       # latency + CPU, JSONL and TB
    /work/venv/bin/python bench/watch.py --soak 3600           # + memory over an hour

A writer process logs a real run at ``--rate`` steps/s with ``--metrics`` metrics per step
(JSONL lines, flushed per step; or TensorBoard through tensorboardX's SummaryWriter, flushed
per step) and injects a NaN loss at ``--fault``; ``trainlens watch --json`` follows it in
another process. Printed:

- **latency**: from the writer's flush of the faulty record to the NAN001 announcement
  (the event's own timestamp), target < 2 s;
- **CPU**: the watch process's user+system CPU over the steady part of the run (after its
  start-up) divided by the wall time: the share of one core, target < 5 %;
- with ``--soak SECONDS``: the watch's resident memory (VmRSS) sampled every 10 s while a
  healthy run is written for that long, the least-squares slope in MB/hour, and the data
  the run grew by in the same time (a watch keeps the run's values, so memory grows with
  the data; the slope beyond that is what would be a leak).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

WRITER = r"""
import json, math, os, random, sys, time
fmt, path = sys.argv[1], sys.argv[2]
steps, metrics, fault = int(sys.argv[3]), int(sys.argv[5]), int(sys.argv[6])
rate = float(sys.argv[4])
random.seed(0)
names = ["loss", "grad_norm", "lr", "tokens_per_sec"] + [f"extra/m{i}" for i in range(metrics - 4)]
if fmt == "tensorboard":
    from tensorboardX import SummaryWriter
    w = SummaryWriter(path, flush_secs=3600)
    w.add_scalar("loss", 3.0, 0); w.flush()
    print("FILE", [os.path.join(path, f) for f in os.listdir(path)][0], flush=True)
else:
    fh = open(path, "a")
    print("FILE", path, flush=True)
t0 = time.time()
for s in range(1, steps + 1):
    vals = {n: random.gauss(1.0, 0.05) for n in names}
    vals["loss"] = 3.0 * math.exp(-s / 2000) + 1.5 + random.gauss(0, 0.01)
    vals["lr"] = 1e-3
    vals["tokens_per_sec"] = 40000 + random.gauss(0, 200)
    if fault and s >= fault:
        vals["loss"] = float("nan")
    if fmt == "tensorboard":
        for n, v in vals.items():
            w.add_scalar(n, v, s)
        w.flush()
    else:
        fh.write(json.dumps({"step": s, **vals}) + "\n"); fh.flush()
    if s == fault:
        print("FAULT", time.time(), flush=True)
    delay = t0 + s / rate - time.time()
    if delay > 0:
        time.sleep(delay)
print("DONE", time.time(), flush=True)
"""


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class Watch:
    """``trainlens watch --json`` on ``path``; its events, as they arrive, in a thread."""

    def __init__(self, path: str, *extra: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "trainlens", "watch", path, "--json", *extra],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self.events: list[dict] = []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.events.append(json.loads(line))

    def wait_for(self, kind: str, timeout: float = 60) -> None:
        end = time.time() + timeout
        while time.time() < end and not any(e["event"] == kind for e in self.events):
            time.sleep(0.05)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self.thread.join(timeout=5)


def _writer(fmt: str, path: str, steps: int, rate: float, metrics: int, fault: int):
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, fmt, path, str(steps), str(rate), str(metrics), str(fault)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,  # tensorboardX says "NaN or Inf found" once per NaN
        text=True,
    )
    assert proc.stdout is not None
    kind, file = proc.stdout.readline().split(maxsplit=1)
    assert kind == "FILE"
    return proc, file.strip()


def latency_and_cpu(fmt: str, args: argparse.Namespace, tmp: Path) -> dict:
    target = str(tmp / ("run.jsonl" if fmt == "jsonl" else "tb"))
    steps = int(args.rate * args.seconds)
    fault = int(steps * 0.8)
    writer, file = _writer(fmt, target, steps, args.rate, args.metrics, fault)
    watch = Watch(file)
    watch.wait_for("run-appeared")
    time.sleep(3)  # past start-up (imports, the first read)
    c0, t0 = _cpu_seconds(watch.proc.pid), time.time()
    marks: dict[str, float] = {}
    assert writer.stdout is not None
    for line in writer.stdout:
        k, v = line.split()
        marks[k] = float(v)
        if k == "FAULT":
            c1, t1 = _cpu_seconds(watch.proc.pid), time.time()
    writer.wait()
    watch.wait_for("finding-opened", timeout=30)
    time.sleep(1)
    watch.stop()
    nan = [
        e
        for e in watch.events
        if e["event"] == "finding-opened" and e["finding"]["code"] == "NAN001"
    ]
    return {
        "format": fmt,
        "latency_s": (nan[0]["time"] - marks["FAULT"]) if nan else float("nan"),
        "cpu_share": (c1 - c0) / (t1 - t0),
        "steady_seconds": t1 - t0,
    }


def soak(args: argparse.Namespace, tmp: Path) -> dict:
    target = str(tmp / "soak.jsonl")
    steps = int(args.rate * args.soak)
    writer, file = _writer("jsonl", target, steps, args.rate, args.metrics, 0)
    watch = Watch(file)
    watch.wait_for("run-appeared")
    samples: list[tuple[float, float, int]] = []
    t0 = time.time()
    while writer.poll() is None:
        samples.append((time.time() - t0, _rss_mb(watch.proc.pid), os.path.getsize(file)))
        time.sleep(10)
    watch.stop()
    import numpy as np

    t = np.array([s[0] for s in samples]) / 3600
    rss = np.array([s[1] for s in samples])
    size = np.array([s[2] for s in samples]) / 2**20
    half = len(t) // 4  # after start-up
    slope = float(np.polyfit(t[half:], rss[half:], 1)[0]) if len(t) > 8 else float("nan")
    grown = float(size[-1] - size[half]) if len(t) > 8 else float("nan")
    return {
        "seconds": args.soak,
        "rss_start_mb": float(rss[half]),
        "rss_end_mb": float(rss[-1]),
        "slope_mb_per_hour": slope,
        "values_per_hour": args.rate * args.metrics * 3600,
        "file_grew_mb": grown,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=float, default=100.0, help="steps per second")
    ap.add_argument("--metrics", type=int, default=20, help="metrics per step")
    ap.add_argument("--seconds", type=float, default=60.0, help="length of the faulty run")
    ap.add_argument("--formats", default="jsonl,tensorboard")
    ap.add_argument("--soak", type=float, default=0.0, help="also soak this many seconds")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        print(f"writer: {args.rate:g} steps/s x {args.metrics} metrics, {args.seconds:g} s")
        print(f"{'format':<12} {'latency':>9} {'CPU of one core':>16}")
        for fmt in args.formats.split(","):
            r = latency_and_cpu(fmt, args, tmp)
            print(f"{fmt:<12} {r['latency_s']:>8.2f}s {100 * r['cpu_share']:>15.1f}%")
        if args.soak:
            s = soak(args, tmp)
            print(
                f"soak {s['seconds']:g} s: RSS {s['rss_start_mb']:.0f} -> {s['rss_end_mb']:.0f} MB,"
                f" slope {s['slope_mb_per_hour']:.1f} MB/hour while the file grew "
                f"{s['file_grew_mb']:.0f} MB ({s['values_per_hour']:,} values/hour)"
            )


if __name__ == "__main__":
    main()
