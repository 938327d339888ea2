"""Gate a fleet: N small and medium runs of mixed formats in a folder tree, whole processes.

Builds (once; ``--rebuild`` to write it again) under /tmp/trainlens-bench/fleet-<small>x
<medium>/ a tree of runs in five formats, cycled: JSONL, a wide CSV, a TensorBoard event
file (bench/generate.py's writer, byte for byte tensorboardX's), an MLflow file store and
an HF ``trainer_state.json``. Small runs have 1,200 steps (~13k values), medium ones
20,000 (~220k); each is a copy of one of a few seeds' runs, in its own folder
(``<format>/<size>_<n>/``), as an archive holds them.

Then, in one run of this script, each measured as a whole process (imports included),
``--repeats`` times interleaved, medians:

- ``trainlens gate TREE -j 1`` and ``-j <all cores>`` (``--format json``: the runs'
  value counts come from it, and every run must be judged, none unreadable);
- the user's alternative: a Python loop over the same runs reading each into a pandas
  DataFrame — tbparse's ``SummaryReader(...).scalars`` for TensorBoard, ``read_json
  (lines=True)`` for JSONL, ``read_csv`` for CSV and MLflow's metric files, ``json`` +
  ``DataFrame(log_history)`` for trainer_state.json. It only reads; the gate reads,
  runs every detector and judges.

Prints runs/s and values/s (wall clock and per CPU second: the CPU figure is what one
core does, whatever the neighbours take) and the ratios, with the load average.

    /work/venv/bin/python bench/fleet.py                      # 200 small + 20 medium runs
    /work/venv/bin/python bench/fleet.py --small 300 --medium 0 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent))
import generate as gen  # (bench/generate.py, beside this script)

REPO = Path(__file__).resolve().parents[1]
ROOT = Path("/tmp/trainlens-bench")
FORMATS = ("jsonl", "csv", "tensorboard", "mlflow", "hf-trainer")
SIZES = {"small": 1_200, "medium": 20_000}
SEEDS = 3  # distinct runs per size and format; the others are copies of them


def _trainer_state(plan: gen.Plan, path: Path) -> None:
    """An HF Trainer ``trainer_state.json`` of the run: a train entry per step (loss,
    learning_rate, grad_norm, epoch, step) and an eval entry where val_loss was logged."""
    df = pl.concat(list(plan.chunks()))
    history: list[dict[str, float | int]] = []
    for row in df.select("step", "loss", "lr", "grad_norm", "val_loss").iter_rows():
        step, loss, lr, gn, val = row
        epoch = round(step / plan.steps, 6)
        history.append(
            {"epoch": epoch, "grad_norm": gn, "learning_rate": lr, "loss": loss, "step": step}
        )
        if val is not None:
            history.append({"epoch": epoch, "eval_loss": val, "step": step})
    state = {
        "best_metric": None,
        "epoch": 1.0,
        "global_step": plan.steps - 1,
        "log_history": history,
        "logging_steps": 1,
        "max_steps": plan.steps,
        "num_train_epochs": 1,
        "total_flos": 0.0,
    }
    path.write_text(json.dumps(state, indent=2))


def _write_seed(fmt: str, plan: gen.Plan, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    if fmt == "hf-trainer":
        _trainer_state(plan, out / "trainer_state.json")
        return
    paths = gen.generate(plan, out / "_gen", (fmt,))
    src = paths[fmt]
    if fmt in ("jsonl", "csv"):
        shutil.move(str(src), out / f"metrics.{fmt}")
    else:  # tb/ or mlruns/: the folder itself is the run's
        shutil.move(str(src), out / src.name)
    shutil.rmtree(out / "_gen", ignore_errors=True)


def build(tree: Path, small: int, medium: int) -> list[tuple[str, str, Path]]:
    """The fleet: (format, size, run folder) of each run, written once."""
    seeds = tree / "_seeds"
    runs: list[tuple[str, str, Path]] = []
    counts = {"small": small, "medium": medium}
    k = 0
    for size, n in counts.items():
        for i in range(n):
            fmt = FORMATS[k % len(FORMATS)]
            k += 1
            runs.append((fmt, size, tree / fmt / f"{size}_{i:05d}"))
    done = tree / ".complete"
    if done.exists() and json.loads(done.read_text()) == [small, medium]:
        return runs
    if tree.exists():
        shutil.rmtree(tree)
    for fmt in FORMATS:
        for size, steps in SIZES.items():
            if not counts[size]:
                continue
            for s in range(SEEDS):
                _write_seed(fmt, gen.Plan(steps=steps, seed=s), seeds / fmt / f"{size}_{s}")
    for i, (fmt, size, folder) in enumerate(runs):
        shutil.copytree(seeds / fmt / f"{size}_{i % SEEDS}", folder)
    shutil.rmtree(seeds)
    done.write_text(json.dumps([small, medium]))
    return runs


# the user's alternative: a loop over the runs, each read into a pandas DataFrame
_ALTERNATIVE = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    import pandas as pd
    from tbparse import SummaryReader

    values = 0
    for line in open(sys.argv[1]):
        fmt, folder = line.rstrip("\\n").split("\\t")
        folder = Path(folder)
        if fmt == "tensorboard":
            df = SummaryReader(str(folder / "tb")).scalars
            values += len(df)
        elif fmt == "jsonl":
            df = pd.read_json(folder / "metrics.jsonl", lines=True)
            values += int(df.drop(columns=["step", "time"]).notna().sum().sum())
        elif fmt == "csv":
            df = pd.read_csv(folder / "metrics.csv")
            values += int(df.drop(columns=["step", "time"]).notna().sum().sum())
        elif fmt == "mlflow":
            for f in (folder / "mlruns").glob("*/*/metrics/**/*"):
                if f.is_file():
                    df = pd.read_csv(f, sep=" ", header=None, names=["ts", "value", "step"])
                    values += len(df)
        else:
            state = json.loads((folder / "trainer_state.json").read_text())
            df = pd.DataFrame(state["log_history"])
            values += int(df.drop(columns=["step", "epoch"]).notna().sum().sum())
    print(values)
    """
)


def _timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """(wall s, CPU s of the process and its children, stdout) of one whole process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=REPO)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode not in (0, 1):  # (1: a run failed the gate, which is a verdict)
        raise SystemExit(f"{' '.join(cmd[:4])} … failed ({p.returncode}):\n{p.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, p.stdout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--small", type=int, default=200, help="runs of 1,200 steps")
    ap.add_argument("--medium", type=int, default=20, help="runs of 20,000 steps")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="the parallel -j")
    ap.add_argument("--rebuild", action="store_true")
    ap.add_argument("--no-alternative", action="store_true", help="skip the pandas loop")
    args = ap.parse_args()

    tree = ROOT / f"fleet-{args.small}x{args.medium}"
    if args.rebuild and tree.exists():
        shutil.rmtree(tree)
    t = time.perf_counter()
    runs = build(tree, args.small, args.medium)
    size = sum(f.stat().st_size for f in tree.rglob("*") if f.is_file())
    print(
        f"fleet: {len(runs)} runs ({args.small} of 1,200 steps, {args.medium} of 20,000; "
        f"{', '.join(FORMATS)} in turn), {size / 1e6:,.0f} MB under {tree} "
        f"(ready in {time.perf_counter() - t:.1f} s)"
    )
    listing = tree.parent / f"{tree.name}.runs.tsv"  # (outside: the gate reads the tree)
    listing.write_text("".join(f"{fmt}\t{folder}\n" for fmt, _s, folder in runs))
    env = dict(os.environ, PYTHONPATH=str(REPO))
    gate = [sys.executable, "-m", "trainlens", "gate", str(tree), "--format", "json"]
    cmds = {
        "gate -j 1": [*gate, "-j", "1"],
        f"gate -j {args.jobs}": [*gate, "-j", str(args.jobs)],
    }
    if not args.no_alternative:
        cmds["pandas + tbparse loop"] = [sys.executable, "-c", _ALTERNATIVE, str(listing)]
    got: dict[str, list[tuple[float, float]]] = {k: [] for k in cmds}
    values: dict[str, int] = {}
    loads = [os.getloadavg()[0]]
    for _ in range(args.repeats):
        for name, cmd in cmds.items():
            wall, cpu, out = _timed(cmd, env)
            got[name].append((wall, cpu))
            loads.append(os.getloadavg()[0])
            if name.startswith("gate"):
                doc = json.loads(out)
                judged = [r for r in doc["runs"] if r["verdict"] in ("pass", "fail")]
                if len(judged) != len(runs):
                    raise SystemExit(f"{name}: {len(judged)} of {len(runs)} runs judged")
                values[name] = sum(int(r["summary"]["values"]) for r in doc["runs"])
            else:
                values[name] = int(out.strip())
    print(
        f"cpus {os.cpu_count()}; load average over the runs: median "
        f"{statistics.median(loads):.1f} (min {min(loads):.1f}, max {max(loads):.1f}); "
        f"{args.repeats} repeats, medians"
    )
    n = len(runs)
    med = {
        k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v))
        for k, v in got.items()
    }
    print(
        f"{'':24s} {'wall s':>8s} {'runs/s':>8s} {'Mvalues/s':>10s} {'CPU s':>8s} "
        f"{'runs/CPU-s':>11s} {'Mvalues/CPU-s':>14s}"
    )
    for name, (wall, cpu) in med.items():
        v = values[name]
        print(
            f"{name:24s} {wall:8.2f} {n / wall:8.1f} {v / wall / 1e6:10.2f} {cpu:8.2f} "
            f"{n / cpu:11.1f} {v / cpu / 1e6:14.2f}"
        )
    one, many = med["gate -j 1"], med[f"gate -j {args.jobs}"]
    print(
        f"-j {args.jobs} takes {many[0] / one[0]:.2f}x of -j 1's wall time "
        f"(speed-up {one[0] / many[0]:.2f}x on {args.jobs} processes) and "
        f"{many[1] / one[1]:.2f}x its CPU"
    )
    if "pandas + tbparse loop" in med:
        alt = med["pandas + tbparse loop"]
        print(
            f"gate -j 1 against the loop that only reads: {alt[0] / one[0]:.2f}x its speed "
            f"(wall), {alt[1] / one[1]:.2f}x (CPU); values read: gate "
            f"{values['gate -j 1']:,}, loop {values['pandas + tbparse loop']:,}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
