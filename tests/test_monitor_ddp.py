"""trainlens.monitor under a real 2-process DDP run (gloo, CPU): rank 0 alone writes, and
every rank's step time and data wait are gathered every k steps as ``<name>/rank<i>``."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

WORKER = r"""
import os, sys, time, torch, torch.distributed as dist
sys.path.insert(0, sys.argv[3])
from trainlens.monitor import Monitor
rank, out = int(sys.argv[1]), sys.argv[2]
dist.init_process_group("gloo", rank=rank, world_size=2)
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(
    torch.nn.Sequential(torch.nn.Embedding(20, 8), torch.nn.Linear(8, 20)))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
mon = Monitor(model, opt, out=out, every=3)
g = torch.Generator().manual_seed(rank)
for step in range(6):
    ids = torch.randint(0, 20, (4, 5), generator=g)
    if rank == 1:
        time.sleep(0.05)  # rank 1 is the straggler: its data takes longer
    logits = model(ids)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 20), ids.reshape(-1))
    loss.backward()
    opt.step()
    opt.zero_grad()
    mon.step(loss=loss, batch=ids)
mon.close()
dist.destroy_process_group()
"""


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run_two_ranks(tmp_path: Path, worker: str, *args: str) -> Path:
    """Run ``worker`` as ranks 0 and 1 of a gloo job (argv: rank, out, repo root, *args);
    both must exit 0. Returns the run's output folder."""
    script = tmp_path / "worker.py"
    script.write_text(worker)
    out = tmp_path / "run"
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_port()), "PATH": "/usr/bin:/bin"}
    root = str(Path(__file__).resolve().parent.parent)
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(r), str(out), root, *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in (0, 1)
    ]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err[-2000:]
    return out


@pytest.mark.slow  # two torch processes: ~10 s on the shared build machine
def test_ddp_rank0_writes_and_per_rank_times_are_gathered(tmp_path: Path) -> None:
    out = _run_two_ranks(tmp_path, WORKER)
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r.get("event") for r in rows].count("end") == 1  # rank 0's end record only
    rows = [r for r in rows if "event" not in r]
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6]  # one writer, not two
    gathered = [r for r in rows if "step_time/rank1" in r]
    assert [r["step"] for r in gathered] == [1, 3, 6]
    for r in gathered[1:]:
        # rank 1 slept 50 ms before each forward: its data wait shows it, rank 0's does not
        assert r["dataloader_wait/rank1"] >= 0.045
        assert r["dataloader_wait/rank0"] < r["dataloader_wait/rank1"]
        assert r["step_time/rank0"] == pytest.approx(r["step_time"], rel=1e-3)
    assert json.loads((out / "metrics.config.json").read_text())["world_size"] == 2


FSDP_WORKER = r"""
import json, os, sys, time, torch, torch.distributed as dist
sys.path.insert(0, sys.argv[3])
from torch.distributed.fsdp import fully_shard
from trainlens.monitor import Monitor
rank, out, clip = int(sys.argv[1]), sys.argv[2], sys.argv[4] == "clip"
dist.init_process_group("gloo", rank=rank, world_size=2)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
for layer in (model[0], model[2]):
    fully_shard(layer)
fully_shard(model)
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
# a step takes >= 0.1 s (the sleep): written on time, every 2 records by the ranks' gathered
# step times, on both ranks at the same steps (the flush is a collective under FSDP2)
mon = Monitor(model, opt, out=out, every=2, flush_seconds=0.15)
want, on_disk = [], []
for step in range(4):
    g = torch.Generator().manual_seed(10 * step + rank)
    loss = model(torch.randn(8, 16, generator=g)).pow(2).mean()
    time.sleep(0.1)
    loss.backward()
    # the whole-model figures, independently: every shard gathered
    grads = {n: p.grad.full_tensor() for n, p in model.named_parameters()}
    total = torch.linalg.vector_norm(torch.stack([t.norm() for t in grads.values()]))
    want.append({"grad_norm": float(total), **{n: float(t.norm()) for n, t in grads.items()}})
    if clip:
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.01)
    opt.step()
    opt.zero_grad()
    mon.step(loss=loss, tokens=8)
    if rank == 0:
        mon.drain()  # what the step handed to the writer thread is on disk: then count
        on_disk.append(len(open(os.path.join(out, "metrics.jsonl")).readlines()))
mon.close()
if rank == 0:
    with open(os.path.join(out, "want.json"), "w") as fh:
        json.dump({"figures": want, "on_disk": on_disk}, fh)
dist.destroy_process_group()
"""


@pytest.mark.slow  # two torch processes per case
@pytest.mark.parametrize("clip", ["clip", "noclip"])
def test_fsdp2_global_and_per_tensor_norms_are_the_whole_models(tmp_path: Path, clip: str) -> None:
    """Under FSDP2 (fully_shard) params and grads are DTensors sharded across the ranks:
    the logged norms are the whole model's, pre-clip, not rank 0's shard (and the flush
    does not fail on a DTensor)."""
    out = _run_two_ranks(tmp_path, FSDP_WORKER, clip)
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if "event" not in r]  # (the end record)
    got = json.loads((out / "want.json").read_text())
    want = got["figures"]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    # every step >= 0.1 s (its sleep), as both ranks' gathered times say: never 2 records
    # waiting (2 x 0.1 s > 0.15 s), long before flush_every's 50; and no rank waited for
    # a flush collective the other did not make (that would have hung the job)
    on_disk = got["on_disk"]
    assert all(0 <= step - n <= 1 for step, n in enumerate(on_disk, 1)), on_disk
    for row, w in zip(rows, want, strict=True):
        assert row["grad_norm"] == pytest.approx(w["grad_norm"], rel=1e-5)
    for step in (1, 2, 4):  # the per-tensor steps at every=2
        row, w = rows[step - 1], want[step - 1]
        for name in ("0.weight", "0.bias", "2.weight"):
            assert row[f"grad_norm/{name}"] == pytest.approx(w[name], rel=1e-4)
        assert 0 < row["update_ratio"] < 1
