"""Each detector's time on one run beside the time to read it, in one process.

    /work/venv/bin/python bench/detectors.py                       # 1M noisy steps, JSONL + TB
    /work/venv/bin/python bench/detectors.py --steps 100000 --clean --repeats 3
    /work/venv/bin/python bench/detectors.py --formats tensorboard --profile grad_spikes

The data comes from ``bench/generate.py`` (``--noisy`` unless ``--clean``), written under
/tmp/trainlens-bench/ when it is not there yet. For each format, in this one process:
``--repeats`` rounds of (read the run, then run every detector on it, in the order
``trainlens analyze`` runs them); each figure is the median over the rounds, as CPU time
(``time.process_time``: this process' user + system time, which other work on a shared
machine disturbs far less than wall time) beside wall time. The verdict is the one of
issue 13: all detectors together cost no more than the read (CPU, median of the rounds'
own ratios). The first round also pays the detectors' imports (scipy.special and the
like); it is counted like the others, so the median shows the steady cost, the max the
first. ``--profile NAME`` prints cProfile's top functions of one more run of NAME.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import generate  # noqa: E402

import trainlens  # noqa: E402
from trainlens.api import build_context  # noqa: E402
from trainlens.core.config import Config  # noqa: E402
from trainlens.detectors import available, load, make_params  # noqa: E402
from trainlens.detectors.base import Skip  # noqa: E402


def clock(fn: Callable[[], object]) -> tuple[float, float]:
    """(CPU s, wall s) of one call."""
    c, t = time.process_time(), time.perf_counter()
    fn()
    return time.process_time() - c, time.perf_counter() - t


def one_round(path: Path) -> dict[str, tuple[float, float]]:
    out: dict[str, tuple[float, float]] = {}
    runs: list[trainlens.Run] = []
    out["read"] = clock(lambda: runs.extend(trainlens.read(path)))
    run = runs[0]
    ctx = build_context(run, Config())
    out["views"] = clock(run._by_metric)  # the per-metric views every detector shares
    for name in available():
        module = load(name)
        params = make_params(name, module, {})

        def go(module=module, params=params) -> None:  # type: ignore[no-untyped-def]
            with contextlib.suppress(Skip):
                module.detect(run, params, ctx)

        out[name] = clock(go)
    return out


def profile(path: Path, name: str, top: int) -> None:
    import cProfile
    import pstats

    run = trainlens.read(path)[0]
    ctx = build_context(run, Config())
    run._by_metric()
    module = load(name)
    params = make_params(name, module, {})
    prof = cProfile.Profile()
    prof.enable()
    with contextlib.suppress(Skip):
        module.detect(run, params, ctx)
    prof.disable()
    pstats.Stats(prof).sort_stats("cumulative").print_stats(top)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--clean", action="store_true", help="the smooth run, not --noisy")
    ap.add_argument("--formats", default="jsonl,tensorboard")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--data", type=Path, default=Path("/tmp/trainlens-bench"))
    ap.add_argument("--profile", metavar="DETECTOR", default=None)
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args(argv)
    formats = tuple(f.strip() for f in args.formats.split(",") if f.strip())
    folder = args.data / (str(args.steps) if args.clean else f"{args.steps}-noisy")
    plan = generate.Plan(steps=args.steps, noisy=not args.clean)
    files = {"jsonl": folder / "run.jsonl", "csv": folder / "run.csv"}
    files |= {"tensorboard": folder / "tb", "mlflow": folder / "mlruns"}
    missing = tuple(f for f in formats if not files[f].exists())
    if missing:
        print(f"writing {', '.join(missing)} under {folder} …", flush=True)
        generate.generate(plan, folder, missing)
    if args.profile:
        for fmt in formats:
            profile(files[fmt], args.profile, args.top)
        return 0
    load1 = os.getloadavg()[0]
    print(f"{'clean' if args.clean else 'noisy'} run, {args.steps:,} steps; ", end="")
    print(f"{args.repeats} rounds per format; load average {load1:.2f}", flush=True)
    verdicts = []
    for fmt in formats:
        rounds = [one_round(files[fmt]) for _ in range(args.repeats)]
        names = list(rounds[0])
        detectors = [n for n in names if n not in ("read", "views")]

        def med(name: str, k: int, rounds=rounds) -> float:  # type: ignore[no-untyped-def]
            return statistics.median(r[name][k] for r in rounds)

        print(f"\n{fmt} ({files[fmt]})")
        print("| step | CPU s | wall s | max CPU s |\n|---|---|---|---|")
        for name in names:
            worst = max(r[name][0] for r in rounds)
            print(f"| {name} | {med(name, 0):.3f} | {med(name, 1):.3f} | {worst:.3f} |")
        totals = [sum(r[n][0] for n in detectors) for r in rounds]
        walls = [sum(r[n][1] for n in detectors) for r in rounds]
        ratio = statistics.median(t / r["read"][0] for t, r in zip(totals, rounds, strict=True))
        wratio = statistics.median(t / r["read"][1] for t, r in zip(walls, rounds, strict=True))
        print(
            f"| all detectors | {statistics.median(totals):.3f} | "
            f"{statistics.median(walls):.3f} | {max(totals):.3f} |"
        )
        print(f"detectors / read: {ratio:.2f}x (CPU), {wratio:.2f}x (wall)")
        verdicts.append((fmt, ratio, wratio))
    print()
    for fmt, ratio, wratio in verdicts:
        ok = "met" if ratio <= 1.0 else "NOT met"
        print(f"{fmt}: all detectors <= the read: {ratio:.2f}x (CPU), {wratio:.2f}x (wall) {ok}")
    print(f"load average at the end {os.getloadavg()[0]:.2f}")
    return 0 if all(r <= 1.0 for _, r, _ in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
