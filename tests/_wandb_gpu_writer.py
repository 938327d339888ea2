"""Writes a W&B offline run with GPU system metrics (run by tests/test_energy_measured.py
in a subprocess, like tests/_wandb_writer.py).

W&B writes GPU power as *stats* records, sampled by its own system monitor (in the Go
``wandb-core`` since 0.18), never as ``wandb.log`` values: logging ``gpu.0.powerWatts``
would make a history metric, not what a real run holds. This machine has no GPU, so the
monitor samples none. The records are therefore made the way the SDK itself makes them —
W&B's protobuf classes (``wandb.proto.wandb_internal_pb2.StatsRecord``, as
``InterfaceShared._make_stats`` builds one) — and sent down the run's own interface
(``run._interface._publish``, what ``publish_stats`` calls), so wandb-core writes them into
the ``.wandb`` log with its own writer. ``publish_stats`` itself would stamp every sample
with the current time; the records here carry chosen times (W&B's 15 s interval, and a
pause) so the test knows the energy exactly.

usage: python _wandb_gpu_writer.py OUT_DIR
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import wandb
from wandb.proto import wandb_internal_pb2 as pb

N_GPUS = 2
# seconds after the start at which the GPUs are sampled: every 15 s (W&B's default), then
# a 300 s pause (the job was stopped: no samples), then every 15 s again
OFFSETS = [15 * k for k in range(10)] + [435 + 15 * k for k in range(5)]
CONFIG = {"gpu": "a100-80gb", "n_gpus": N_GPUS}


def watts(gpu: int, sample: int) -> float:
    return 100.0 + 50.0 * gpu + 3.0 * sample


def stats_record(when: int, sample: int) -> pb.StatsRecord:
    stats = pb.StatsRecord()
    stats.stats_type = pb.StatsRecord.StatsType.SYSTEM
    stats.timestamp.FromSeconds(when)
    items = {}
    for gpu in range(N_GPUS):
        items[f"gpu.{gpu}.powerWatts"] = watts(gpu, sample)
        items[f"gpu.{gpu}.gpu"] = 90.0 + gpu
        items[f"gpu.{gpu}.memoryAllocatedBytes"] = 1e9 * (gpu + 1)
        items[f"gpu.{gpu}.memoryAllocated"] = 12.5 * (gpu + 1)
        items[f"gpu.{gpu}.temp"] = 60.0 + gpu
    # W&B's per-process view of the device the process uses: the same GPU 0 again
    items["gpu.process.0.powerWatts"] = watts(0, sample)
    for key, value in items.items():
        item = stats.item.add()
        item.key = key
        item.value_json = repr(value)
    return stats


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    start = int(time.time())
    run = wandb.init(project="trainlens-test", id="gpu01", name="gpu", dir=str(out), config=CONFIG)
    for step in range(40):
        run.log({"loss": 4.0 / (step + 1)}, step=step)
    interface = run._interface
    assert interface is not None
    for sample, offset in enumerate(OFFSETS):
        record = interface._make_record(stats=stats_record(start + offset, sample))
        interface._publish(record)
    run.finish()


if __name__ == "__main__":
    main()
