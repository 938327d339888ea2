"""Writes one W&B offline run with the real SDK: N steps of a few plain metrics (run by
tests/test_hostile_records.py in a subprocess, see tests/conftest.py's run_wandb_offline).

usage: python _wandb_plain_writer.py OUT_DIR STEPS
"""

from __future__ import annotations

import sys
from pathlib import Path

import wandb

METRICS = ("loss", "lr", "grad_norm")


def main() -> None:
    out, steps = Path(sys.argv[1]), int(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    run = wandb.init(project="trainlens-test", id="plain01", name="plain", dir=str(out))
    for step in range(steps):
        run.log({"loss": 2.0 - step / 1000, "lr": 1e-3, "grad_norm": 1.0 + step % 7}, step=step)
    run.finish()


if __name__ == "__main__":
    main()
