"""Each detector's time on one run beside the time to read it, in one process.

    /work/venv/bin/python bench/detectors.py                       # 1M noisy steps, JSONL + TB
    /work/venv/bin/python bench/detectors.py --steps 100000 --clean --repeats 3
    /work/venv/bin/python bench/detectors.py --formats tensorboard --profile grad_spikes

The data comes from ``bench/generate.py`` (``--noisy`` unless ``--clean``), written under
/tmp/trainlens-bench/ when it is not there yet. For each format, ``--repeats`` rounds of:
read the run in a fresh process (start-up and imports included, as ``bench/compare.py``
and docs/performance.md time every reader), then in this process read it again and run
every detector on it one by one, then all of them through ``run_detectors`` as
``trainlens analyze`` runs them (the verdict's figure: it includes any step across
detectors). Each figure is the
median over the rounds, as CPU time (``time.process_time``, or the child's user + system
time from wait4: other work on a shared machine disturbs it far less than wall time)
beside wall time. The verdict is issue 13's: all detectors together cost no more than the
read (CPU, median of the rounds' own ratios), the read being the process; the ratio to
the read inside this process (after imports) is printed beside it. The first round also
pays the detectors' imports (scipy.special and the like); the median shows the steady
cost, the max column the first. ``--profile NAME`` prints cProfile's top functions of
one more run of NAME.
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
from trainlens.detectors import available, load, make_params, run_detectors  # noqa: E402
from trainlens.detectors.base import Skip  # noqa: E402


def clock(fn: Callable[[], object]) -> tuple[float, float]:
    """(CPU s, wall s) of one call."""
    c, t = time.process_time(), time.perf_counter()
    fn()
    return time.process_time() - c, time.perf_counter() - t


ALL = "all detectors (run_detectors)"
READ_CHILD = "import sys, trainlens; trainlens.read(sys.argv[1])"


def read_process(path: Path) -> tuple[float, float]:
    """(CPU s, wall s) of a fresh process that reads the run: interpreter start-up and
    imports included, as bench/compare.py times every reader (CPU: the child's user +
    system time from wait4)."""
    t = time.perf_counter()
    pid = os.posix_spawn(sys.executable, [sys.executable, "-c", READ_CHILD, str(path)], env)
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - t
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"reading {path} in a child process failed")
    return usage.ru_utime + usage.ru_stime, wall


env = {**os.environ, "PYTHONPATH": str(HERE.parent)}


def one_round(path: Path) -> dict[str, tuple[float, float]]:
    out: dict[str, tuple[float, float]] = {"read (a process)": read_process(path)}
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
    # all of them as analyze runs them: with whatever run_detectors adds across detectors
    out[ALL] = clock(lambda: run_detectors(run, Config(), ctx))
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
        detectors = [n for n in names if not n.startswith(("read", "views")) and n != ALL]

        def med(name: str, k: int, rounds=rounds) -> float:  # type: ignore[no-untyped-def]
            return statistics.median(r[name][k] for r in rounds)

        print(f"\n{fmt} ({files[fmt]})")
        print("| step | CPU s | wall s | max CPU s |\n|---|---|---|---|")
        for name in names:
            worst = max(r[name][0] for r in rounds)
            print(f"| {name} | {med(name, 0):.3f} | {med(name, 1):.3f} | {worst:.3f} |")
        totals = [r[ALL][0] for r in rounds]
        walls = [r[ALL][1] for r in rounds]
        each = [sum(r[n][0] for n in detectors) for r in rounds]
        print(f"(the detectors one by one add up to {statistics.median(each):.3f} s of CPU)")
        for read in ("read (a process)", "read"):
            ratio, wratio = (
                statistics.median(
                    t / r[read][k] for t, r in zip(totals if k == 0 else walls, rounds, strict=True)
                )
                for k in (0, 1)
            )
            print(f"all detectors / {read}: {ratio:.2f}x (CPU), {wratio:.2f}x (wall)")
            verdicts.append((fmt, read, ratio, wratio))
    print()
    for fmt, read, ratio, wratio in verdicts:
        ok = "met" if ratio <= 1.0 else "NOT met"
        print(f"{fmt}: all detectors <= the {read}: {ratio:.2f}x (CPU), {wratio:.2f}x (wall): {ok}")
    print(f"load average at the end {os.getloadavg()[0]:.2f}")
    return 0 if all(r <= 1.0 for _, read, r, _ in verdicts if read != "read") else 1


if __name__ == "__main__":
    sys.exit(main())
