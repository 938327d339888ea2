"""Time trainlens reading a W&B offline run against W&B's own decoding and against polars.

    /work/venv/bin/python bench/wandb_read.py                    # 100k steps x 12 metrics
    /work/venv/bin/python bench/wandb_read.py --steps 1000000    # ~10 min to write once

The run is written once by the real W&B SDK (``WANDB_MODE=offline``) under --data,
outside the repository: ``--steps`` calls of ``wandb.log`` of 12 metrics (W&B adds
``_step``, ``_runtime``, ``_timestamp``). The SDK writes ~2,000 steps a second here
(20k steps: 10 s), so a 1M-step run takes ~8 minutes to write: the default is 100k. The
same values go to a JSONL file (one line per step) for polars.

Readers, each a whole process (``python -c …``, imports included), run back to back in
paired rounds; the ratio is taken within a round and the median printed (CPU time from
``os.wait4``, wall time beside it, and each reader's largest peak RSS):

- **trainlens**: ``trainlens.readers.read_runs(<run folder>)``;
- **wandb**: W&B's own decoding of the same file. wandb 0.31 ships no Python reader of
  its transaction log any more (its datastore moved into the Go ``wandb-core``); this is
  what its Python ``DataStore`` did (≤ 0.17, ``wandb sync``): the log framed chunk by
  chunk with CRC-32 checks, each record parsed by ``wandb_internal_pb2.Record`` and each
  history value by ``json.loads``, into a polars long frame (the same shape trainlens
  returns);
- **polars**: ``pl.read_ndjson`` of the JSONL of the same values (wide: one row a step).

Targets (issue 17): trainlens >= 20x faster than wandb's reader, <= 3x polars.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
METRICS = 12

WRITE = r"""
import json, math, sys, wandb
steps, out = int(sys.argv[1]), sys.argv[2]
run = wandb.init(project="bench", id=f"bench{steps}", dir=out, name="bench")
keys = ["loss", "lr", "grad_norm", "tokens_per_sec", "step_time", "mem_bytes", "entropy",
        "update_ratio", "grad_norm/layer_0", "grad_norm/layer_1", "grad_norm/layer_2",
        "val_loss"]
with open(f"{out}/run.jsonl", "w") as fh:
    for s in range(steps):
        row = {k: math.sin(s * 1e-3 + i) + i + 1e-7 * s for i, k in enumerate(keys)}
        run.log(row, step=s)
        fh.write(json.dumps({"step": s, **row}) + "\n")
run.finish()
"""

WANDB_READ = r"""
import json, struct, sys, zlib
import polars as pl
from wandb.proto import wandb_internal_pb2 as pb
data = open(sys.argv[1], "rb").read()
pos, parts, steps, keys, vals = 7, b"", [], [], []
def record(raw):
    r = pb.Record()
    r.ParseFromString(raw)
    if r.WhichOneof("record_type") != "history":
        return
    row = {".".join(i.nested_key) or i.key: json.loads(i.value_json) for i in r.history.item}
    step = row.pop("_step")
    for k, v in row.items():
        if k not in ("_runtime", "_timestamp"):
            steps.append(step); keys.append(k); vals.append(float(v))
while pos + 7 <= len(data):
    left = 32768 - pos % 32768
    if left < 7:
        pos += left; continue
    crc, n, kind = struct.unpack_from("<IHB", data, pos)
    if kind == 0:
        pos += left; continue
    chunk = data[pos + 7 : pos + 7 + n]
    if zlib.crc32(chunk, zlib.crc32(bytes([kind]))) != crc:
        raise SystemExit("bad checksum")
    pos += 7 + n
    if kind == 1:
        record(chunk)
    elif kind == 2:
        parts = chunk
    else:
        parts += chunk
        if kind == 4:
            record(parts)
frame = pl.DataFrame({"step": steps, "metric": keys, "value": vals})
print(frame.height)
"""

# The history values trainlens read: every row but the system metrics' (named by their
# raw W&B name: an alias may give one a canonical name, as proc.memory.rssMB -> mem/rss),
# counted with a mask (a filter of the frame would copy 12M rows just to count them).
TRAINLENS_READ = r"""
import sys
import polars as pl
from trainlens.readers import read_runs
(run,) = read_runs(sys.argv[1])
system = [k for k, raw in run.raw_names.items() if raw.startswith("system/")]
print(run.frame.select((~pl.col("metric").is_in(system)).sum()).item())
"""


POLARS_READ = r"""
import sys
import polars as pl
frame = pl.read_ndjson(sys.argv[1])
print(frame.height * (frame.width - 1))
"""


def write(steps: int, data: Path) -> Path:
    out = data / f"wandb-{steps}"
    if not (out / "run.jsonl").is_file() or not list(out.glob("wandb/*run-*/*.wandb")):
        out.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
        env["WANDB_DISABLE_GIT"] = "true"
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", WRITE, str(steps), str(out)], env=env, check=True)
        print(f"wrote {steps:,} steps with the W&B SDK in {time.perf_counter() - t:.0f} s")
    return out


def run_child(code: str, arg: Path) -> tuple[float, float, float, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    t = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(arg)], stdout=subprocess.PIPE, env=env, text=True
    )
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    if status:
        raise SystemExit(f"a reader failed with status {status}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, out.strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--data", type=Path, default=Path("/tmp/trainlens-bench"))
    args = ap.parse_args()
    if REPO in args.data.resolve().parents:
        raise SystemExit("--data must be outside the repository")
    out = write(args.steps, args.data)
    log = next(out.glob("wandb/*run-*/*.wandb"))
    jsonl = out / "run.jsonl"
    print(
        f"{log} ({log.stat().st_size / 1e6:.0f} MB), {jsonl} ({jsonl.stat().st_size / 1e6:.0f} MB)"
    )
    readers = {
        "trainlens": (TRAINLENS_READ, log.parent),
        "wandb": (WANDB_READ, log),
        "polars": (POLARS_READ, jsonl),
    }
    times: dict[str, list[tuple[float, float, float]]] = {k: [] for k in readers}
    counts: dict[str, str] = {}
    for r in range(args.rounds):
        for name in readers if r % 2 == 0 else reversed(readers):
            code, arg = readers[name]
            wall, cpu, rss, got = run_child(code, arg)
            times[name].append((wall, cpu, rss))
            counts[name] = got
    if len(set(counts.values())) != 1:
        raise SystemExit(f"the readers read different numbers of values: {counts}")
    print(f"load average {os.getloadavg()[0]:.2f}; {counts['trainlens']} values each")
    for name, ts in times.items():
        wall = statistics.median(t[0] for t in ts)
        cpu = statistics.median(t[1] for t in ts)
        rss = max(t[2] for t in ts)
        print(f"  {name:10s} wall {wall:7.2f} s   cpu {cpu:7.2f} s   peak RSS {rss:6.0f} MB")

    def ratio(a: str, b: str, i: int) -> float:
        return statistics.median(x[i] / y[i] for x, y in zip(times[a], times[b], strict=True))

    print(
        f"wandb / trainlens   cpu {ratio('wandb', 'trainlens', 1):6.1f}x  "
        f"wall {ratio('wandb', 'trainlens', 0):6.1f}x   (target >= 20x)"
    )
    print(
        f"trainlens / polars  cpu {ratio('trainlens', 'polars', 1):6.2f}x  "
        f"wall {ratio('trainlens', 'polars', 0):6.2f}x   (target <= 3x)"
    )


if __name__ == "__main__":
    main()
