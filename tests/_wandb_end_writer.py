"""Writes one W&B offline run with the real SDK that ends normally (``finish``) or by an
exception that escapes the script (``crash``): what each leaves as its exit record
(tests/test_run_state.py runs it in a subprocess).

usage: python _wandb_end_writer.py OUT_DIR finish|crash
"""

from __future__ import annotations

import sys
from pathlib import Path

import wandb


def main() -> None:
    out, how = Path(sys.argv[1]), sys.argv[2]
    out.mkdir(parents=True, exist_ok=True)
    run = wandb.init(project="trainlens-test", id=f"end{how}", name=how, dir=str(out))
    for step in range(20):
        run.log({"loss": 2.0 - step / 100, "lr": 1e-3}, step=step)
    if how == "crash":
        raise RuntimeError("the loader died")
    run.finish()


if __name__ == "__main__":
    main()
