"""Peak memory of each reader against the size of its input and of the frame it becomes.

    /work/venv/bin/python bench/memory.py                  # the issue's sizes (~10 min)
    /work/venv/bin/python bench/memory.py --small          # a twentieth of them (~1 min)
    /work/venv/bin/python bench/memory.py --only jsonl-one-line,hf-trainer
    /work/venv/bin/python bench/memory.py --markdown out.md

Issue 23, item 9: peak RSS at most 2x the input, or 2x the canonical frame it becomes,
whichever is larger. Each input is written once under ``--out`` (default
/tmp/trainlens-bench/memory, never the repository) by the writer that makes it in
practice:

- ``jsonl-one-line``: one JSON object on one line, most of its bytes in lists (a record
  holding a histogram of ``--jsonl-mb`` MB: ``json.dumps`` of a dict of lists);
- ``keras-history``: ``json.dump(history.history)``: one object of per-epoch lists, at
  most the Keras reader's size limit;
- ``hf-trainer``: a ``trainer_state.json`` of ``--hf-mb`` MB written by transformers'
  ``TrainerState.save_to_json`` (train entries every step, eval every 100, a final
  entry, as in the real states of ../shared/real-logs);
- ``parquet-long``: ``--parquet-rows`` rows of the canonical frame written as
  ``trainlens convert`` writes it (``DataFrame.write_parquet``);
- ``parquet-wide``: a W&B ``run.history()`` table (``_step``, ``_runtime``,
  ``_timestamp``, metrics) saved by pandas ``to_parquet``;
- ``jsonl``, ``csv``, ``tensorboard``, ``mlflow``: bench/generate.py's run of
  ``--steps`` steps (12 metrics);
- ``text``: a Megatron-LM stdout of ``--steps`` iterations;
- ``pandas-json``: a table of ``--steps`` / 25 rows (step, loss, lr, grad_norm, epoch)
  saved by pandas ``DataFrame.to_json()`` in its default layout (orient 'columns');
- ``wandb``: a run of ``--wandb-steps`` steps written by the W&B SDK (offline);
- ``mlflow-sqlite``: ``--sqlite-steps`` steps of 4 metrics logged by ``MlflowClient``
  into a sqlite store.

Each is read in a fresh process twice: ``read`` (``trainlens.read`` alone) and
``analyze`` (``python -m trainlens analyze FILE``). Peak RSS is ``/usr/bin/time``'s
maximum resident set size. A baseline process of each kind (the same imports, nothing
read; ``analyze`` of a 5-line file) is subtracted: the ratio is
``(peak - baseline) / max(input, frame)``, the frame being ``Run.frame.estimated_size()``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

import generate  # noqa: E402  (bench/generate.py, beside this script)

MB = 1e6

READ = r"""
import sys, time
t = time.process_time()
import trainlens
runs = trainlens.read(sys.argv[1], **({"format": sys.argv[2]} if len(sys.argv) > 2 else {}))
frame = sum(r.frame.estimated_size() for r in runs)
values = sum(r.frame.height for r in runs)
print(frame, values)
"""
READ_BASELINE = "import numpy, polars, trainlens, trainlens.readers, trainlens.readers.jsonl"


@dataclass
class Measure:
    peak_mb: float
    wall_s: float
    cpu_s: float
    out: str


def measure(args: list[str]) -> Measure:
    """Peak RSS (``/usr/bin/time``), wall and CPU time of one process."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as tf:
        cmd = ["/usr/bin/time", "-f", "%M %e %U %S", "-o", tf.name, *args]
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
        kb, wall, user, sys_ = tf.read().split()[-4:]
    if proc.returncode not in (0, 1):  # (analyze exits 1 when it finds problems)
        raise SystemExit(f"{' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return Measure(int(kb) / 1024 * 1.048576, float(wall), float(user) + float(sys_), proc.stdout)


def size_of(path: Path) -> int:
    if path.is_dir():
        return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    return path.stat().st_size


# ---- inputs -------------------------------------------------------------------------------


def write_jsonl_one_line(path: Path, mb: float) -> None:
    """One record whose lists hold the bytes: a step, two scalars, a histogram."""
    n = int(mb * MB / 19.5)  # json.dumps of a random float in [0, 1) and ", ": ~19.5 bytes
    rng = np.random.default_rng(0)
    record = {"step": 1000, "loss": 2.5, "lr": 3e-4, "hist/weights": rng.random(n).tolist()}
    path.write_text(json.dumps(record) + "\n")


def write_keras_history(path: Path, mb: float) -> None:
    epochs = int(mb * MB / (4 * 19.5))
    rng = np.random.default_rng(0)
    keys = ("loss", "accuracy", "val_loss", "val_accuracy")
    with path.open("w") as fh:
        json.dump({k: rng.random(epochs).tolist() for k in keys}, fh)


def write_hf_trainer(path: Path, mb: float) -> None:
    """A trainer_state.json as transformers writes it (indent 2, sorted keys)."""
    from transformers import TrainerState

    steps = int(mb * MB / 140)  # bytes per train entry in that layout (with 1 eval in 100)
    rng = np.random.default_rng(0)
    loss = (2.0 + 3.0 / (1 + np.arange(steps) / 1000) + rng.normal(0, 0.02, steps)).round(4)
    norm = np.abs(rng.normal(1.0, 0.2, steps)).round(6)
    lr = 3e-4 * np.minimum(1, np.arange(1, steps + 1) / 2000)
    history: list[dict[str, float | int]] = []
    for s in range(steps):
        step = s + 1
        history.append(
            {
                "epoch": round(step / steps, 4),
                "grad_norm": float(norm[s]),
                "learning_rate": float(lr[s]),
                "loss": float(loss[s]),
                "step": step,
            }
        )
        if step % 100 == 0:
            history.append(
                {
                    "epoch": round(step / steps, 4),
                    "eval_loss": float(loss[s]) + 0.1,
                    "eval_runtime": 12.5,
                    "eval_samples_per_second": 80.0,
                    "eval_steps_per_second": 10.0,
                    "step": step,
                }
            )
    history.append(
        {
            "epoch": 1.0,
            "step": steps,
            "total_flos": 1.2e18,
            "train_loss": float(loss.mean()),
            "train_runtime": 3600.0,
            "train_samples_per_second": 100.0,
            "train_steps_per_second": 1.0,
        }
    )
    state = TrainerState(
        epoch=1.0, global_step=steps, max_steps=steps, logging_steps=1, log_history=history
    )
    state.save_to_json(str(path))


def write_parquet_long(path: Path, rows: int) -> None:
    """The canonical frame of ``rows`` values written as ``trainlens convert`` does."""
    metrics = ("loss", "lr", "grad_norm", "tokens_per_sec", "entropy")
    per = rows // len(metrics)
    step = np.arange(per, dtype=np.int64)
    parts = []
    for i, m in enumerate(metrics):
        # values rounded as logs print them (4 digits): what makes such a file small
        value = (np.sin(step * 1e-4 + i) + 2.0 + i).round(4)
        parts.append(
            pl.DataFrame(
                {
                    "step": step,
                    "metric": pl.Series([m], dtype=pl.Categorical).new_from_index(0, per),
                    "value": value,
                    "wall_time": 1.7e9 + step.astype(np.float64),
                    "superseded": np.zeros(per, dtype=bool),
                }
            )
        )
    pl.concat(parts).write_parquet(path)


def write_parquet_wide(path: Path, steps: int) -> None:
    """A W&B history as pandas saves it: ``run.history().to_parquet(path)``."""
    import pandas as pd

    rng = np.random.default_rng(0)
    s = np.arange(steps)
    df = pd.DataFrame(
        {
            "_step": s,
            "_runtime": s * 0.5,
            "_timestamp": 1.7e9 + s * 0.5,
            "loss": 2 + 1 / (1 + s / 1e4) + rng.normal(0, 0.01, steps),
            "lr": 3e-4 * np.minimum(1, (s + 1) / 2000),
            "grad_norm": np.abs(rng.normal(1, 0.2, steps)),
            "tokens_per_sec": rng.normal(1e5, 1e3, steps),
        }
    )
    df.to_parquet(path)


def write_pandas_json(path: Path, rows: int) -> None:
    """``df.to_json(path)``: one object of columns, each keyed by the index labels."""
    import pandas as pd

    rng = np.random.default_rng(0)
    s = np.arange(rows)
    df = pd.DataFrame(
        {
            "step": s,
            "loss": 2 + 1 / (1 + s / 1e3) + rng.normal(0, 0.01, rows),
            "lr": 3e-4 * np.minimum(1, (s + 1) / 2000),
            "grad_norm": np.abs(rng.normal(1, 0.2, rows)),
            "epoch": s / 10000,
        }
    )
    df.to_json(path)


def write_text(path: Path, steps: int) -> None:
    """Megatron-LM's iteration lines (the layout of ../shared/real-logs' Megatron logs)."""
    rng = np.random.default_rng(0)
    loss = 2 + 8 / (1 + np.arange(steps) / 500) + rng.normal(0, 0.02, steps)
    norm = np.abs(rng.normal(1, 0.2, steps))
    with path.open("w") as fh:
        for lo in range(0, steps, 100_000):
            fh.write(
                "".join(
                    f" iteration {i + 1:8d}/ {steps:8d} | consumed samples: {(i + 1) * 256:12d} "
                    f"| elapsed time per iteration (ms): 512.3 | learning rate: 3.000E-04 "
                    f"| global batch size:   256 | lm loss: {loss[i]:.6E} | loss scale: 1.0 "
                    f"| grad norm: {norm[i]:.3f} | number of skipped iterations:   0 "
                    "| number of nan iterations:   0 |\n"
                    for i in range(lo, min(lo + 100_000, steps))
                )
            )


WANDB_WRITE = r"""
import math, sys, wandb
steps, out = int(sys.argv[1]), sys.argv[2]
run = wandb.init(project="bench", id=f"mem{steps}", dir=out, name="mem")
keys = ["loss", "lr", "grad_norm", "tokens_per_sec", "entropy", "update_ratio"]
for s in range(steps):
    run.log({k: math.sin(s * 1e-3 + i) + i + 1e-7 * s for i, k in enumerate(keys)}, step=s)
run.finish()
"""


def write_wandb(folder: Path, steps: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    env["WANDB_DISABLE_GIT"] = "true"
    subprocess.run(
        [sys.executable, "-c", WANDB_WRITE, str(steps), str(folder)], env=env, check=True
    )


def write_mlflow_sqlite(path: Path, steps: int) -> None:
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{path}")
    run = client.create_run(client.create_experiment("mem"))
    names = ("loss", "lr", "grad_norm", "tokens_per_sec")
    batch: list[Metric] = []
    for s in range(steps):
        batch += [
            Metric(k, float(np.sin(s * 1e-3 + i)), 1_700_000_000_000 + s, s)
            for i, k in enumerate(names)
        ]
        if len(batch) >= 1000:  # MLflow's limit per log_batch call
            client.log_batch(run.info.run_id, metrics=batch)
            batch = []
    if batch:
        client.log_batch(run.info.run_id, metrics=batch)
    client.set_terminated(run.info.run_id)


@dataclass
class Input:
    name: str
    path: Path
    write: Callable[[Path], object]


def inputs(args: argparse.Namespace, out: Path) -> list[Input]:
    scale = 20 if args.small else 1
    steps = args.steps // scale
    gen = out / f"generate-{steps}"
    plan = generate.Plan(steps=steps)
    mb_jsonl, mb_hf = args.jsonl_mb / scale, args.hf_mb / scale
    rows, wb_steps, db_steps = (
        args.parquet_rows // scale,
        args.wandb_steps // scale,
        args.sqlite_steps // scale,
    )

    def from_generate(fmt: str) -> Callable[[Path], object]:
        return lambda _: generate.generate(plan, gen, (fmt,))

    return [
        Input(
            "jsonl-one-line",
            out / f"one-line-{mb_jsonl:g}MB.jsonl",
            lambda p: write_jsonl_one_line(p, mb_jsonl),
        ),
        Input(
            "keras-history",
            out / f"keras-{60 / scale:g}MB.json",
            lambda p: write_keras_history(p, 60 / scale),
        ),
        Input(
            "hf-trainer",
            out / f"hf-{mb_hf:g}MB" / "trainer_state.json",
            lambda p: write_hf_trainer(p, mb_hf),
        ),
        Input("parquet-long", out / f"long-{rows}.parquet", lambda p: write_parquet_long(p, rows)),
        Input(
            "parquet-wide",
            out / f"history-{steps}.parquet",
            lambda p: write_parquet_wide(p, steps),
        ),
        Input("jsonl", gen / "run.jsonl", from_generate("jsonl")),
        Input("csv", gen / "run.csv", from_generate("csv")),
        Input("tensorboard", gen / "tb", from_generate("tensorboard")),
        Input("mlflow", gen / "mlruns", from_generate("mlflow")),
        Input("text", out / f"megatron-{steps}.log", lambda p: write_text(p, steps)),
        Input(
            "pandas-json",
            out / f"to_json-{steps // 25}.json",
            lambda p: write_pandas_json(p, steps // 25),
        ),
        Input("wandb", out / f"wandb-{wb_steps}", lambda p: write_wandb(p, wb_steps)),
        Input(
            "mlflow-sqlite",
            out / f"mlflow-{db_steps}.db",
            lambda p: write_mlflow_sqlite(p, db_steps),
        ),
    ]


def read_target(inp: Input) -> Path:
    """What trainlens is given: the W&B SDK's run folder inside the folder written."""
    if inp.name == "wandb":
        return next(inp.path.glob("wandb/offline-run-*"))
    return inp.path


# ---- measuring ----------------------------------------------------------------------------


@dataclass
class Row:
    name: str
    input_mb: float
    frame_mb: float
    values: int
    read: Measure
    analyze: Measure | None


def ratio(peak: float, baseline: float, input_mb: float, frame_mb: float) -> float:
    return (peak - baseline) / max(input_mb, frame_mb, 1e-9)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--out", type=Path, default=Path("/tmp/trainlens-bench/memory"))
    ap.add_argument("--small", action="store_true", help="every size divided by 20")
    ap.add_argument("--only", default="", help="comma-separated inputs (default: all)")
    ap.add_argument("--jsonl-mb", type=float, default=314)
    ap.add_argument("--hf-mb", type=float, default=147)
    ap.add_argument("--parquet-rows", type=int, default=50_000_000)
    ap.add_argument("--steps", type=int, default=1_000_000, help="generate.py's run, text log")
    ap.add_argument("--wandb-steps", type=int, default=100_000)
    ap.add_argument("--sqlite-steps", type=int, default=100_000)
    ap.add_argument("--no-analyze", action="store_true", help="the read alone")
    ap.add_argument("--markdown", type=Path, help="also write the table here")
    args = ap.parse_args(argv)
    out = args.out.resolve()
    if REPO in out.parents or out == REPO:
        ap.error("keep generated data out of the repository (use /tmp)")
    chosen = inputs(args, out)
    if args.only:
        wanted = {w.strip() for w in args.only.split(",") if w.strip()}
        unknown = wanted - {i.name for i in chosen}
        if unknown:
            ap.error(f"unknown input(s) {sorted(unknown)}; choose from {[i.name for i in chosen]}")
        chosen = [i for i in chosen if i.name in wanted]
    for inp in chosen:
        if not inp.path.exists():
            inp.path.parent.mkdir(parents=True, exist_ok=True)
            t = time.perf_counter()
            inp.write(inp.path)
            print(f"wrote {inp.name}: {inp.path} in {time.perf_counter() - t:.0f} s", flush=True)

    py = sys.executable
    tiny = out / "tiny.jsonl"
    tiny.write_text(
        "".join(json.dumps({"step": s, "loss": 1.0 / (s + 1)}) + "\n" for s in range(5))
    )
    base_read = measure([py, "-c", READ_BASELINE]).peak_mb
    base_analyze = measure([py, "-m", "trainlens", "analyze", str(tiny)]).peak_mb
    rows: list[Row] = []
    for inp in chosen:
        target = read_target(inp)
        r = measure([py, "-c", READ, str(target)])
        frame_bytes, values = (int(x) for x in r.out.split()[-2:])
        a = None
        if not args.no_analyze:
            a = measure([py, "-m", "trainlens", "analyze", "--json", str(target)])
        rows.append(Row(inp.name, size_of(inp.path) / MB, frame_bytes / MB, values, r, a))
        print(f"measured {inp.name}", flush=True)

    table = render(rows, base_read, base_analyze)
    header = (
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average "
        f"{os.getloadavg()[0]:.1f}, {os.cpu_count()} cores, Python {sys.version.split()[0]}, "
        f"polars {pl.__version__}; baselines: read {base_read:.0f} MB (imports), analyze "
        f"{base_analyze:.0f} MB (a 5-line file)"
    )
    print(header)
    print(table)
    if args.markdown:
        args.markdown.write_text(header + "\n\n" + table + "\n")
    return 0


def render(rows: list[Row], base_read: float, base_analyze: float) -> str:
    lines = [
        "| input | input MB | frame MB | values | read peak MB | read ratio | read wall s "
        "| read CPU s | analyze peak MB | analyze ratio |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        rr = ratio(r.read.peak_mb, base_read, r.input_mb, r.frame_mb)
        a_peak = f"{r.analyze.peak_mb:,.0f}" if r.analyze else "—"
        a_ratio = (
            f"{ratio(r.analyze.peak_mb, base_analyze, r.input_mb, r.frame_mb):.2f}"
            if r.analyze
            else "—"
        )
        lines.append(
            f"| {r.name} | {r.input_mb:,.1f} | {r.frame_mb:,.1f} | {r.values:,} "
            f"| {r.read.peak_mb:,.0f} | {rr:.2f} | {r.read.wall_s:.2f} | {r.read.cpu_s:.2f} "
            f"| {a_peak} | {a_ratio} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
