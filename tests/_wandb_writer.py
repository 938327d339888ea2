"""Writes W&B offline runs with the real SDK from fixture runs' metrics.jsonl (run by
tests/test_reader_wandb_run.py in a subprocess: W&B's SDK keeps global state and a service
process, which stay out of the test process this way).

usage: python _wandb_writer.py OUT_DIR NAME=FIXTURE[:resume_at_row] ...
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import wandb

WANDB_OWN = ("step", "time")  # the fixture's step and wall time: W&B writes its own


def rows(path: Path) -> list[dict[str, float]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def log_rows(run: wandb.Run, part: list[dict[str, float]]) -> None:
    for row in part:
        values = {k: v for k, v in row.items() if k not in WANDB_OWN}
        run.log(values, step=int(row["step"]))


def write(out: Path, name: str, fixture: Path, resume_at: int | None) -> None:
    data = rows(fixture / "metrics.jsonl")
    config = {"lr_schedule": "cosine", "optim": {"warmup_steps": 50}, "n_params": 124_000_000}
    run_id = f"{name.replace('_', '')}01"
    first = data if resume_at is None else data[:resume_at]
    run = wandb.init(project="trainlens-test", id=run_id, name=name, dir=str(out), config=config)
    log_rows(run, first)
    run.finish()
    if resume_at is not None:  # the job restarted from a checkpoint: same id, resumed
        run = wandb.init(
            project="trainlens-test", id=run_id, name=name, dir=str(out), resume="allow"
        )
        log_rows(run, data[resume_at:])
        run.finish()


# values at the edges of the float parsers (the compiled lane's fast path and strtod)
EDGE = [
    0.1,
    -0.0,
    5e-324,
    2.2250738585072014e-308,
    1.7976931348623157e308,
    1e22,
    1e23,
    9007199254740993.0,
    123456789012345680.0,
    0.30000000000000004,
    -1.5e-7,
    3.0,
    2.5e-5,
    1.7961465546557145e9,
    4.35,
    1e-22,
    1e-23,
]


# long metric names that differ only in the middle: the compiled lane's key lookup
# compares the first, second and last 8 bytes and must still tell these apart
LONG_KEYS = {b: f"grad_norm/block.{b:02d}.attn.weight" for b in range(3)}


def write_extras(out: Path) -> None:
    """What a training script logs beside plain numbers: a nested dict, a string, a
    bool, a metric that starts late, and a config changed after init."""
    run = wandb.init(project="trainlens-test", id="extras01", name="extras", dir=str(out))
    for step in range(30):
        row: dict[str, object] = {"loss": 1.0 / (step + 1), "eval": {"loss": 2.0 + step}}
        row["note"] = f"step {step}"
        row["ok"] = step % 2 == 0
        row["edge"] = EDGE[step % len(EDGE)]
        if step >= 20:
            row["late/metric"] = float(step)
        run.log(row, step=step)
    for step in range(30, 60):  # plain records: the compiled lane's (the ones above are not)
        row = {"edge": EDGE[step % len(EDGE)]}
        for block in LONG_KEYS:  # (keys alike but for their middle bytes)
            row[LONG_KEYS[block]] = block * 1000.0 + step
        run.log(row, step=step)
    run.config.update({"model": {"n_layer": 12, "d_model": 768}})
    run.finish()


def main() -> None:
    out = Path(sys.argv[1])
    fixtures = Path(__file__).resolve().parents[1] / "fixtures" / "runs"
    for spec in sys.argv[2:]:
        name, _, rest = spec.partition("=")
        if name == "extras":
            (out / name).mkdir(parents=True, exist_ok=True)
            write_extras(out / name)
            continue
        fixture, _, at = rest.partition(":")
        target = out / name
        target.mkdir(parents=True, exist_ok=True)
        write(target, name, fixtures / fixture, int(at) if at else None)


if __name__ == "__main__":
    main()
