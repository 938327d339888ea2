"""How late ``trainlens watch`` tells what a monitored loop logged (issue 25 item 5).

    PYTHONPATH=$PWD /work/venv/bin/python bench/watch_monitor.py [--rate 2] [--at 30]

A plain torch loop with :class:`trainlens.monitor.Monitor` makes ``--rate`` steps/s (a tiny
model; the rest of each step is a sleep) into ``<tmp>/run``; ``trainlens watch --json``
is started first, on that folder before it exists, and follows it. At step ``--at`` the
loop injects one fault and prints the wall time its ``mon.step`` returned; the bench
prints how long after that the watch's ``finding-opened`` event for it came (the event's
own timestamp). Faults and settings, one run each:

- ``lr-shock``, ``flush_seconds=None``: the LR x40 for one step, written every 50 steps
  (the monitor before issue 25: the record waits for the 50th);
- ``lr-shock``, default (``flush_seconds=2``): the same, written on time too;
- ``nan``, ``flush_seconds=None``: a NaN loss, written at once whatever the schedule.

The finding events (``--json``) are not held back; an incident of warnings would be (the
hold, docs/watch.md), which this does not measure.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

LOOP = r"""
import math, sys, time
import torch
from trainlens.monitor import Monitor
out, rate, at = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
fault, flush = sys.argv[4], sys.argv[5]
torch.manual_seed(0)
model = torch.nn.Linear(16, 1)
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
shock = fault == "lr-shock"
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: 40.0 if shock and i == at - 1 else 1.0)
kw = {} if flush == "default" else {"flush_seconds": None}
x = torch.randn(8, 16)
with Monitor(model, opt, out=out, scheduler=sched, **kw) as mon:
    for step in range(1, at + 61):
        t0 = time.monotonic()
        loss = model(x).pow(2).mean()
        if fault == "nan" and step >= at:
            loss = loss * math.nan
        loss.backward(); opt.step(); sched.step(); opt.zero_grad()
        mon.step(loss=loss)
        if step == at:
            print("FAULT", time.time(), flush=True)
        time.sleep(max(0.0, 1 / rate - (time.monotonic() - t0)))
"""

CODES = {"lr-shock": ("LR007", "lr"), "nan": ("NAN001", "train/loss")}


def once(fault: str, flush: str, rate: float, at: int) -> float | None:
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        watch = subprocess.Popen(
            [sys.executable, "-m", "trainlens", "watch", str(run), "--json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert watch.stderr is not None and watch.stdout is not None
        watch.stderr.readline()  # "waiting for ... to appear": the watch is ready
        told: list[float] = []
        code, metric = CODES[fault]

        def follow() -> None:
            assert watch.stdout is not None
            for line in watch.stdout:
                e = json.loads(line)
                f = e.get("finding") or {}
                if e["event"] == "finding-opened" and (f.get("code"), f.get("metric")) == (
                    code,
                    metric,
                ):
                    told.append(e["time"])

        reader = threading.Thread(target=follow, daemon=True)
        reader.start()
        loop = subprocess.run(
            [sys.executable, "-c", LOOP, str(run), str(rate), str(at), fault, flush],
            capture_output=True,
            text=True,
            check=True,
        )
        deadline = time.time() + 10
        while not told and time.time() < deadline:
            time.sleep(0.1)
        watch.terminate()
        watch.wait(timeout=30)
        fault_at = float(next(ln for ln in loop.stdout.splitlines() if ln.startswith("FAULT"))[6:])
        return told[0] - fault_at if told else None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=float, default=2.0, help="steps per second")
    ap.add_argument("--at", type=int, default=30, help="the step of the fault")
    args = ap.parse_args()
    print(f"{args.rate:g} steps/s, fault at step {args.at}")
    for fault, flush in (("lr-shock", "count"), ("lr-shock", "default"), ("nan", "count")):
        got = once(fault, flush, args.rate, args.at)
        shown = "not told" if got is None else f"{got:.2f} s"
        print(
            f"  {fault:9s} flush {'every 50 steps' if flush == 'count' else 'default':15s} {shown}"
        )


if __name__ == "__main__":
    main()
