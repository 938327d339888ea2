"""The cost of auditing a safetensors header near the format's 100 MB cap.

Writes a 92 MB header of 865,000 one-element F32 tensors (the shape a header that big
takes: many small entries), then, each in a fresh process, measures the wall time and
peak RSS of (a) a plain ``json.loads`` of the header (what the audit did before its
checks; its dict-per-tensor parse was 754 MB RSS and 8.9 s on the dev box), and (b)
``trainlens.checkpoints._files.audit_safetensors``. Prints both and their ratios.

usage: python bench/safetensors_header.py [N_TENSORS] [WORK_DIR]
"""

from __future__ import annotations

import struct
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = """
import json, resource, struct, sys, time
sys.path.insert(0, {repo!r})
path, how = sys.argv[1], sys.argv[2]
t = time.perf_counter()
if how == "json":
    with open(path, "rb") as fh:
        (n,) = struct.unpack("<Q", fh.read(8))
        header = json.loads(fh.read(n))
    ok = len(header)
else:
    from trainlens.checkpoints._files import audit_safetensors
    audit = audit_safetensors(path, "x")
    assert not audit.problems, audit.problems
    ok = len(audit.tensors)
print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, ok)
"""


def write(path: Path, n: int) -> int:
    entry = (
        '"model.layers.{i}.self_attn.q_proj.weight":'
        '{{"dtype":"F32","shape":[1],"data_offsets":[{a},{b}]}}'
    )
    blob = (
        "{" + ",".join(entry.format(i=i, a=4 * i, b=4 * i + 4) for i in range(n)) + "}"
    ).encode()
    blob += b" " * (-len(blob) % 8)
    with path.open("wb") as fh:
        fh.write(struct.pack("<Q", len(blob)) + blob)
        fh.write(b"\0" * (4 * n))
    return len(blob)


def run(path: Path, how: str) -> tuple[float, int]:
    code = CHILD.format(repo=str(Path(__file__).resolve().parents[1]))
    out = subprocess.run(
        [sys.executable, "-c", code, str(path), how], capture_output=True, text=True, check=True
    ).stdout.split()
    return float(out[0]), int(out[1])


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 865_000
    with tempfile.TemporaryDirectory(dir=sys.argv[2] if len(sys.argv) > 2 else None) as d:
        path = Path(d) / "big.safetensors"
        size = write(path, n)
        plain_t, plain_rss = run(path, "json")
        audit_t, audit_rss = run(path, "audit")
    mb = size / 1e6
    print(f"header {mb:.1f} MB, {n:,} tensors")
    for what, t, rss in (("json.loads", plain_t, plain_rss), ("audit", audit_t, audit_rss)):
        print(f"{what:<11} {t:6.2f} s  peak RSS {rss / 1e6:5.0f} MB ({rss / size:.1f}x the header)")
    print(f"audit / json.loads: time {audit_t / plain_t:.2f}x, RSS {audit_rss / plain_rss:.2f}x")


if __name__ == "__main__":
    main()
