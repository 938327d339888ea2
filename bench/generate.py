"""Write one large synthetic training run in every format trainlens reads.

    /work/venv/bin/python bench/generate.py --steps 1000000 --out /tmp/trainlens-bench/1m
    /work/venv/bin/python bench/generate.py --steps 100000 --formats jsonl,tensorboard
    /work/venv/bin/python bench/generate.py --steps 2000 --verify   # check the TB bytes

The run has the 12 metrics of /work/shared/reference/ingest_anchors.md: ``loss``, ``lr``,
``grad_norm``, ``tokens_per_sec``, ``step_time_s``, ``mem_bytes``, ``entropy``,
``update_ratio``, ``val_loss`` (every 100 steps) and three per-layer grad norms
``grad_norms/layer_0..2`` (not ``grad_norm/…``: in an MLflow file store ``grad_norm`` is a
file, so it cannot also be a folder; they map to ``grad_norm/layer_0`` …), and a ``time``
per step (wall clock, ms resolution). Values are float32 numbers (what ``tensor.item()``
gives), so every format holds the same numbers; ``mem_bytes`` is a whole number of MiB.
``--restart F`` adds a resume: after step ``F·steps`` the run goes back ``steps/50``
steps and logs them again (a restart).

``--noisy`` makes the metrics look like real logs instead of smooth curves with small
Gaussian noise (the default, whose bytes the bench's history depends on). Sizes are taken
from /work/shared/real-logs: modded-nanogpt's llm.c record run (2024-10-13_llmc_main.log,
loss and ``norm`` at each of 19,560 steps) has, against a 50-step rolling median, a log
grad-norm MAD-sigma of 0.056 with 0.6 % of points beyond 6 sigma (a Student-t with 3
degrees of freedom and scale 0.05 gives both), and a loss MAD-sigma of 1.1 % with 0.1 %
beyond 6 sigma (t with 5 degrees of freedom, scale 0.01); it crosses 3x its median 4 times
in 19k steps. The BLOOM-176B notes (bigscience tr11 chronicles) describe "a few grad norm
spikes" before the first loss spike at iteration 31,216: the grad norm went 0.24 -> 960
over 4 steps and the loss followed 3 steps later (2.2 -> 5.1), back within ~30 steps.
So a noisy run has, on top of that noise:

- grad-norm spikes, about one per 5,000 steps, 3-50x (log-uniform) decaying over a few
  steps; a third of them followed, 1-5 steps later, by a loss spike (+5 % to +100 %,
  back within 5-40 steps);
- loss spikes alone, about one per 20,000 steps;
- LR warmup + cosine (as the clean run);
- throughput (and step time) with t-noise of 2 % and rare drops (one per 100,000 steps,
  10-50 % slower for 20-2,000 steps);
- memory that holds a level and moves in small steps (16-256 MiB, one per ~20,000 steps).

Deterministic by ``--seed``: the events are drawn once for the whole run (a restart
logs the same events again), the noise per chunk as in the clean run.

Written under ``--out`` (default /tmp/trainlens-bench/<steps>; keep it out of the repo):

- ``run.jsonl``: one ``json.dumps``-style line per step (``val_loss`` only on eval steps);
- ``run.csv``: a wide table, ``val_loss`` empty where not evaluated (Lightning style);
- ``tb/events.out.tfevents.<t>.bench``: one Event per step and tag (``simple_value``),
  byte for byte what tensorboardX's ``add_scalar(tag, v, step, walltime)`` writes, after
  its ``brain.Event:2`` version record. The records are built with numpy; their CRC-32C
  checksums use CRC linearity (one table lookup per variable byte), so no Python call per
  record. ``--verify`` writes a small run with tensorboardX itself and compares bytes;
- ``mlruns/``: an MLflow file store made by MlflowClient (experiment, run, a param), whose
  metric files (``timestamp value step`` lines) are then written directly.

Large runs are written in chunks of steps, so memory stays bounded (10M steps is fine).
"""

from __future__ import annotations

import argparse
import io
import math
import os
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import polars as pl

FORMATS = ("jsonl", "csv", "tensorboard", "mlflow")
METRICS: tuple[str, ...] = (
    "loss",
    "lr",
    "grad_norm",
    "tokens_per_sec",
    "step_time_s",
    "mem_bytes",
    "entropy",
    "update_ratio",
    "val_loss",
    "grad_norms/layer_0",
    "grad_norms/layer_1",
    "grad_norms/layer_2",
)
VAL_EVERY = 100
CHUNK_STEPS = 250_000
T0 = 1_700_000_000.0  # wall clock of step 0
MIB = float(1 << 20)


@dataclass(frozen=True)
class Plan:
    steps: int
    seed: int = 0
    restart: float | None = None  # fraction of the run after which it goes back
    noisy: bool = False  # real-log noise, spikes and drops (see the module docstring)

    def step_rows(self) -> np.ndarray:
        """The step of each logged row in file order (a restart logs some steps twice)."""
        if self.restart is None:
            return np.arange(self.steps, dtype=np.int64)
        upto = max(1, int(self.restart * self.steps))
        back = max(1, self.steps // 50)
        resume = max(0, upto - back)
        return np.concatenate(
            [np.arange(upto, dtype=np.int64), np.arange(resume, self.steps, dtype=np.int64)]
        )

    def chunks(self) -> Iterator[pl.DataFrame]:
        """The run as wide frames (step, time, one Float64 column per metric, null where
        not logged), CHUNK_STEPS rows at a time, in file order."""
        rows = self.step_rows()
        t_end = T0
        for k, lo in enumerate(range(0, len(rows), CHUNK_STEPS)):
            chunk, t_end = self._values(rows[lo : lo + CHUNK_STEPS], k, t_end)
            yield chunk

    def _values(self, steps: np.ndarray, k: int, t_start: float) -> tuple[pl.DataFrame, float]:
        if self.noisy:
            return self._noisy_values(steps, k, t_start)
        rng = np.random.default_rng([self.seed, k])
        n = len(steps)
        total = max(self.steps, 1)
        frac = steps / total
        warm = max(1, total // 100)
        peak, floor = 3e-4, 3e-5
        cos = floor + 0.5 * (peak - floor) * (1 + np.cos(np.pi * np.clip(frac, 0, 1)))
        lr = np.where(steps < warm, peak * (steps + 1) / warm, cos)
        loss = 2.0 + 8.0 * np.exp(-6.0 * frac) + rng.normal(0, 0.05, n)
        step_time = 0.25 * np.exp(rng.normal(0, 0.03, n))
        # wall clock: cumulative step times, at millisecond resolution (as MLflow keeps it)
        wall = np.round((t_start + np.cumsum(step_time)) * 1000.0) / 1000.0
        cols: dict[str, np.ndarray] = {
            "loss": loss,
            "lr": lr,
            "grad_norm": 0.8 * np.exp(rng.normal(0, 0.15, n)),
            "tokens_per_sec": 4096 * 8 / step_time,
            "step_time_s": step_time,
            "mem_bytes": (30 * 1024 + rng.integers(0, 64, n)) * MIB,
            "entropy": 3.0 + 5.0 * np.exp(-4.0 * frac) + rng.normal(0, 0.02, n),
            "update_ratio": 1e-3 * np.exp(rng.normal(0, 0.2, n)),
            "val_loss": loss + 0.05 + rng.normal(0, 0.01, n),
        }
        for layer in range(3):
            cols[f"grad_norms/layer_{layer}"] = 0.3 * np.exp(rng.normal(0, 0.2, n)) / (layer + 1)
        return _frame(steps, wall, cols), float(wall[-1]) if n else t_start

    # ---- noisy runs (--noisy) ----

    @cached_property
    def _events(self) -> dict[str, np.ndarray]:
        """Per-step multipliers of the whole run (spikes, drops) and the memory level, drawn
        once so that a chunk boundary or a restart does not cut or redraw an event."""
        total = max(self.steps, 1)
        rng = np.random.default_rng([self.seed, 1_000_003])
        log_g = np.zeros(total + 64)  # log multiplier of the grad norm
        loss_rel = np.zeros(total + 64)  # relative excess of the loss
        slow = np.zeros(total + 2_048)  # relative slow-down of a step
        start = max(1, total // 50)  # no event during warmup

        def times(rate: float) -> np.ndarray:
            n = rng.poisson(rate * max(total - start, 0))
            return np.sort(rng.integers(start, max(start + 1, total), n))

        def loss_spike(at: int) -> None:
            height = math.exp(rng.uniform(math.log(0.05), math.log(1.0)))
            back = int(rng.integers(5, 41))
            decay = np.exp(-np.arange(back) * (5.0 / back))
            loss_rel[at : at + back] += (height * decay)[: max(0, loss_rel.size - at)]

        for at in times(1 / 5_000).tolist():
            peak = rng.uniform(math.log(3.0), math.log(50.0))
            rise, fall = int(rng.integers(0, 4)), int(rng.integers(1, 6))
            shape = np.r_[np.linspace(0.3, 1.0, rise + 1), np.exp(-np.arange(1, fall + 1))]
            log_g[at : at + shape.size] += peak * shape
            if rng.random() < 1 / 3:
                loss_spike(at + rise + int(rng.integers(1, 6)))
        for at in times(1 / 20_000).tolist():
            loss_spike(at)
        for at in times(1 / 100_000).tolist():
            slow[at : at + int(rng.integers(20, 2_001))] += rng.uniform(0.1, 0.5)
        mem = np.zeros(total, dtype=np.int64)  # MiB above the base level
        for at in times(1 / 20_000).tolist():
            mem[at:] += int(rng.integers(16, 257)) * (1 if rng.random() < 0.7 else -1)
        return {
            "grad": np.exp(log_g[:total]),
            "loss": 1.0 + loss_rel[:total],
            "slow": 1.0 + slow[:total],
            "mem": mem - min(int(mem.min()), 0),
        }

    def _noisy_values(
        self, steps: np.ndarray, k: int, t_start: float
    ) -> tuple[pl.DataFrame, float]:
        rng = np.random.default_rng([self.seed, k, 1])
        ev = {name: a[steps] for name, a in self._events.items()}
        n = len(steps)
        total = max(self.steps, 1)
        frac = steps / total
        warm = max(1, total // 100)
        peak, floor = 3e-4, 3e-5
        cos = floor + 0.5 * (peak - floor) * (1 + np.cos(np.pi * np.clip(frac, 0, 1)))
        lr = np.where(steps < warm, peak * (steps + 1) / warm, cos)
        trend = 2.0 + 8.0 * np.exp(-6.0 * frac)
        loss = trend * np.exp(0.01 * rng.standard_t(5, n)) * ev["loss"]
        grad_base = 0.25 + 1.5 * np.exp(-300.0 * frac)  # high early, as in real runs
        grad_noise = np.exp(0.05 * rng.standard_t(3, n))
        step_time = 0.25 * np.exp(0.02 * rng.standard_t(3, n)) * ev["slow"]
        wall = np.round((t_start + np.cumsum(step_time)) * 1000.0) / 1000.0
        cols: dict[str, np.ndarray] = {
            "loss": loss,
            "lr": lr,
            "grad_norm": grad_base * grad_noise * ev["grad"],
            "tokens_per_sec": 4096 * 8 / step_time,
            "step_time_s": step_time,
            "mem_bytes": (30 * 1024 + ev["mem"] + rng.integers(0, 8, n)) * MIB,
            "entropy": (3.0 + 5.0 * np.exp(-4.0 * frac)) * np.exp(0.005 * rng.standard_t(5, n)),
            "update_ratio": 1e-3 * np.exp(0.1 * rng.standard_t(3, n)) * np.sqrt(ev["grad"]),
            "val_loss": trend + 0.05 + rng.normal(0, 0.01, n),
        }
        for layer in range(3):
            noise = np.exp(0.08 * rng.standard_t(3, n))
            cols[f"grad_norms/layer_{layer}"] = grad_base * noise * ev["grad"] / (layer + 2)
        return _frame(steps, wall, cols), float(wall[-1]) if n else t_start


def _frame(steps: np.ndarray, wall: np.ndarray, cols: dict[str, np.ndarray]) -> pl.DataFrame:
    """step, time and the METRICS as float32 numbers, val_loss only on eval steps."""
    series = [pl.Series("step", steps), pl.Series("time", wall)]
    is_val = steps % VAL_EVERY == 0
    for name in METRICS:
        # float32 numbers, as tensor.item() gives them; exact in every format
        v = cols[name].astype(np.float32).astype(np.float64)
        s = pl.Series(name, v)
        if name == "val_loss":
            s = s.set(pl.Series(~is_val), None)  # type: ignore[arg-type]
        series.append(s)
    return pl.DataFrame(series)


# ---- JSONL and CSV ------------------------------------------------------------------------


def _json_number(name: str) -> pl.Expr:
    c = pl.col(name)
    if name == "mem_bytes":
        return c.cast(pl.Int64).cast(pl.String)  # an int in Python's json
    return c.cast(pl.String)


def write_jsonl(plan: Plan, path: Path) -> None:
    """``json.dumps(record)`` lines: ', ' and ': ' separators, keys only when logged."""
    with path.open("wb") as fh:
        for chunk in plan.chunks():
            parts: list[pl.Expr] = [
                pl.lit('{"step": '),
                pl.col("step").cast(pl.String),
                pl.lit(', "time": '),
                pl.col("time").cast(pl.String),
            ]
            for name in METRICS:
                piece = pl.concat_str(pl.lit(f', "{name}": '), _json_number(name))
                if name == "val_loss":
                    piece = pl.when(pl.col(name).is_not_null()).then(piece).otherwise(pl.lit(""))
                parts.append(piece)
            parts.append(pl.lit("}"))
            lines = chunk.select(pl.concat_str(parts).alias("line")).get_column("line")
            fh.write(("\n".join(lines.to_list()) + "\n").encode())


def write_csv(plan: Plan, path: Path) -> None:
    with path.open("wb") as fh:
        for k, chunk in enumerate(plan.chunks()):
            chunk = chunk.with_columns(pl.col("mem_bytes").cast(pl.Int64))
            chunk.write_csv(fh, include_header=k == 0, null_value="")


# ---- TensorBoard ----------------------------------------------------------------------------

try:
    from crc32c import crc32c as _crc32c
except ImportError:  # pragma: no cover - the bench extra installs it
    _crc32c = None

_MASK_DELTA = 0xA282EAD8


def _crc(data: bytes) -> int:
    if _crc32c is not None:
        return int(_crc32c(data))
    import zlib  # noqa: F401  (only to fail loudly below)

    raise SystemExit("bench/generate.py needs the crc32c package for TensorBoard files")


def _mask(crc: np.ndarray) -> np.ndarray:
    crc = crc.astype(np.uint64)
    rot = ((crc >> np.uint64(15)) | (crc << np.uint64(17))) & np.uint64(0xFFFFFFFF)
    return ((rot + np.uint64(_MASK_DELTA)) & np.uint64(0xFFFFFFFF)).astype(np.uint32)


def _mask_int(crc: int) -> int:
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + _MASK_DELTA) & 0xFFFFFFFF


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _record(data: bytes) -> bytes:
    header = len(data).to_bytes(8, "little")
    return (
        header
        + _mask_int(_crc(header)).to_bytes(4, "little")
        + data
        + _mask_int(_crc(data)).to_bytes(4, "little")
    )


class _CrcTables:
    """CRC-32C is affine in the message bits for a fixed length: crc(m) = crc(m with the
    variable bytes zeroed) ^ XOR over variable bytes of contrib[d][byte], where d is the
    number of bytes that follow it. contrib[d][v] = crc(v, 0 * d) ^ crc(0 * (d + 1))."""

    def __init__(self) -> None:
        self.rows: list[np.ndarray] = []

    def contrib(self, d: int) -> np.ndarray:
        while len(self.rows) <= d:
            k = len(self.rows)
            zeros = bytes(k)
            base = _crc(bytes(k + 1))
            self.rows.append(
                np.array([_crc(bytes([v]) + zeros) ^ base for v in range(256)], dtype=np.uint32)
            )
        return self.rows[d]


_TABLES = _CrcTables()


def _step_field_width(steps: np.ndarray) -> np.ndarray:
    """Bytes of the Event.step field: 0 for step 0 (proto3 leaves defaults out), else the
    key byte and the varint."""
    s = steps.astype(np.uint64)
    width = np.ones(len(s), dtype=np.int64)
    for k in range(1, 10):
        width += s >= np.uint64(1 << (7 * k))
    return np.where(steps == 0, 0, 1 + width)


def _event_tail(tag: bytes) -> bytes:
    """Event field 5 (summary) up to the simple_value's 4 bytes: Summary{Value{tag, 0x15}}."""
    value = b"\x0a" + _varint(len(tag)) + tag + b"\x15"
    value_len = len(value) + 4
    summary = b"\x0a" + _varint(value_len) + value
    return b"\x2a" + _varint(len(summary) + 4) + summary


def tensorboard_records(
    steps: np.ndarray, wall: np.ndarray, tag_ids: np.ndarray, values: np.ndarray, tags: list[bytes]
) -> bytes:
    """The framed records of scalar events (one per row) in row order, as tensorboardX
    writes them, built for many records at once."""
    n = len(steps)
    width = _step_field_width(steps)
    tails = [_event_tail(t) for t in tags]
    tail_len = np.array([len(t) for t in tails], dtype=np.int64)
    data_len = 9 + width + tail_len[tag_ids] + 4
    rec_len = 12 + data_len + 4
    offsets = np.zeros(n, dtype=np.int64)
    np.cumsum(rec_len[:-1], out=offsets[1:])
    out = np.zeros(int(rec_len.sum()), dtype=np.uint8)
    wall_b = wall.astype("<f8").view(np.uint8).reshape(n, 8)
    val_b = values.astype("<f4").view(np.uint8).reshape(n, 4)
    su = steps.astype(np.uint64)
    # classes of records that share one layout: (tag, step field width)
    cls = tag_ids.astype(np.int64) * 16 + width
    for key in np.unique(cls).tolist():
        tag_id, w = divmod(int(key), 16)
        idx = np.flatnonzero(cls == key)
        m = len(idx)
        tail = tails[tag_id]
        dlen = 9 + w + len(tail) + 4
        header = dlen.to_bytes(8, "little")
        fixed = bytearray(b"\x09" + bytes(8))
        if w:
            fixed += b"\x10" + bytes(w - 1)
        fixed += tail + bytes(4)
        rows = np.empty((m, dlen), dtype=np.uint8)
        rows[:] = np.frombuffer(bytes(fixed), dtype=np.uint8)
        rows[:, 1:9] = wall_b[idx]
        var_pos = list(range(1, 9))
        if w:
            s = su[idx]
            for k in range(w - 1):
                byte = (s >> np.uint64(7 * k)) & np.uint64(0x7F)
                if k < w - 2:
                    byte |= np.uint64(0x80)
                rows[:, 10 + k] = byte.astype(np.uint8)
                var_pos.append(10 + k)
        rows[:, dlen - 4 :] = val_b[idx]
        var_pos.extend(range(dlen - 4, dlen))
        for p in var_pos:  # template bytes are zero where the variable bytes go
            fixed[p] = 0
        crc = np.full(m, _crc(bytes(fixed)), dtype=np.uint32)
        for p in var_pos:
            crc ^= _TABLES.contrib(dlen - 1 - p)[rows[:, p]]
        full = np.empty((m, 12 + dlen + 4), dtype=np.uint8)
        full[:, :8] = np.frombuffer(header, dtype=np.uint8)
        full[:, 8:12] = np.frombuffer(_mask_int(_crc(header)).to_bytes(4, "little"), dtype=np.uint8)
        full[:, 12 : 12 + dlen] = rows
        full[:, 12 + dlen :] = _mask(crc).astype("<u4").view(np.uint8).reshape(m, 4)
        out[offsets[idx][:, None] + np.arange(16 + dlen)] = full
    return out.tobytes()


def version_record(wall: float) -> bytes:
    """tensorboardX's first record: Event{wall_time, file_version: "brain.Event:2"}."""
    version = b"brain.Event:2"
    data = b"\x09" + np.float64(wall).astype("<f8").tobytes() + b"\x1a" + _varint(len(version))
    return _record(data + version)


def _long_order(chunk: pl.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Rows × metrics in logging order (per step, the metrics in METRICS order),
    leaving out metrics not logged at the step: steps, wall, tag ids, values."""
    n = chunk.height
    vals = np.stack([chunk.get_column(m).to_numpy() for m in METRICS], axis=1)  # n × 12
    logged = ~np.isnan(vals)  # the bench run has no NaN values; null became NaN
    steps = np.repeat(chunk.get_column("step").to_numpy(), len(METRICS)).reshape(n, -1)
    wall = np.repeat(chunk.get_column("time").to_numpy(), len(METRICS)).reshape(n, -1)
    tag_ids = np.broadcast_to(np.arange(len(METRICS)), (n, len(METRICS)))
    return steps[logged], wall[logged], tag_ids[logged], vals[logged]


def write_tensorboard(plan: Plan, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"events.out.tfevents.{int(T0)}.bench"
    tags = [m.encode() for m in METRICS]
    with path.open("wb") as fh:
        fh.write(version_record(T0 - 1.0))
        for chunk in plan.chunks():
            steps, wall, tag_ids, vals = _long_order(chunk)
            fh.write(tensorboard_records(steps, wall, tag_ids, vals, tags))
    return path


def verify_tensorboard(steps: int = 2000) -> None:
    """Write the same small run with tensorboardX and with this module; compare bytes."""
    import tempfile

    from tensorboardX import SummaryWriter

    plan = Plan(steps=steps, restart=0.5)
    chunk = next(plan.chunks())
    s, w, t, v = _long_order(chunk)
    with tempfile.TemporaryDirectory() as tmp:
        writer = SummaryWriter(tmp, flush_secs=3600)
        for step, wall, tag, value in zip(
            s.tolist(), w.tolist(), t.tolist(), v.tolist(), strict=True
        ):
            writer.add_scalar(METRICS[tag], value, step, walltime=wall)
        writer.close()
        (theirs_path,) = Path(tmp).glob("events.out.tfevents.*")
        theirs = theirs_path.read_bytes()
    first = 12 + int.from_bytes(theirs[:8], "little") + 4  # the version record (its time)
    ours = tensorboard_records(s, w, t, v, [m.encode() for m in METRICS])
    if theirs[first:] != ours:
        diff = next(i for i, (a, b) in enumerate(zip(theirs[first:], ours, strict=False)) if a != b)
        raise SystemExit(f"TensorBoard bytes differ from tensorboardX's at byte {diff}")
    version_time = np.frombuffer(theirs[13:21], dtype="<f8")[0]
    if theirs[:first] != version_record(float(version_time)):
        raise SystemExit("the version record differs from tensorboardX's")
    print(f"verify: {len(s):,} records byte-identical to tensorboardX {len(theirs):,} bytes")


# ---- MLflow ---------------------------------------------------------------------------------


def write_mlflow(plan: Plan, root: Path) -> Path:
    """A file store made by MlflowClient, metric files written directly (fast)."""
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    from mlflow.tracking import MlflowClient

    root.mkdir(parents=True, exist_ok=True)
    client = MlflowClient(tracking_uri=root.resolve().as_uri())
    exp_id = client.create_experiment("bench")
    run = client.create_run(exp_id, run_name="bench", start_time=int(T0 * 1000))
    run_id = run.info.run_id
    client.log_param(run_id, "steps", str(plan.steps))
    client.log_metric(run_id, "loss", 0.0, timestamp=int(T0 * 1000), step=0)
    client.set_terminated(run_id, end_time=int(T0 * 1000) + 1)
    metrics_dir = root / exp_id / run_id / "metrics"
    if metrics_dir.exists():
        shutil.rmtree(metrics_dir)
    handles = {}
    try:
        for name in METRICS:
            target = metrics_dir / name
            target.parent.mkdir(parents=True, exist_ok=True)
            handles[name] = target.open("wb")
        for chunk in plan.chunks():
            ts = (chunk.get_column("time") * 1000).round(0).cast(pl.Int64)
            for name in METRICS:
                part = pl.DataFrame(
                    {"timestamp": ts, "value": chunk.get_column(name), "step": chunk["step"]}
                ).drop_nulls("value")
                buf = io.BytesIO()
                part.write_csv(buf, include_header=False, separator=" ")
                handles[name].write(buf.getvalue())
    finally:
        for fh in handles.values():
            fh.close()
    return root / exp_id / run_id


# ---- entry point ----------------------------------------------------------------------------


def generate(plan: Plan, out: Path, formats: tuple[str, ...] = FORMATS) -> dict[str, Path]:
    """Write the run in each format under ``out``; returns format -> path to read."""
    out.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    if "jsonl" in formats:
        paths["jsonl"] = out / "run.jsonl"
        write_jsonl(plan, paths["jsonl"])
    if "csv" in formats:
        paths["csv"] = out / "run.csv"
        write_csv(plan, paths["csv"])
    if "tensorboard" in formats:
        if (out / "tb").exists():
            shutil.rmtree(out / "tb")
        write_tensorboard(plan, out / "tb")
        paths["tensorboard"] = out / "tb"
    if "mlflow" in formats:
        if (out / "mlruns").exists():
            shutil.rmtree(out / "mlruns")
        write_mlflow(plan, out / "mlruns")
        paths["mlflow"] = out / "mlruns"
    return paths


def expected_values(plan: Plan) -> int:
    """How many values the run holds (every format holds exactly these)."""
    rows = plan.step_rows()
    return int(len(rows) * (len(METRICS) - 1) + np.count_nonzero(rows % VAL_EVERY == 0))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument(
        "--out", type=Path, default=None, help="default /tmp/trainlens-bench/<steps>[-noisy]"
    )
    ap.add_argument("--formats", default=",".join(FORMATS), help="comma-separated subset")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--restart", type=float, default=None, help="resume after this fraction")
    ap.add_argument("--noisy", action="store_true", help="real-log noise, spikes and drops")
    ap.add_argument("--verify", action="store_true", help="compare TB bytes with tensorboardX")
    args = ap.parse_args(argv)
    if args.verify:
        verify_tensorboard()
        return 0
    formats = tuple(f.strip() for f in args.formats.split(",") if f.strip())
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        ap.error(f"unknown format(s) {unknown}; choose from {', '.join(FORMATS)}")
    default = f"{args.steps}-noisy" if args.noisy else str(args.steps)
    out = args.out or Path("/tmp/trainlens-bench") / default
    if Path(__file__).resolve().parents[1] in out.resolve().parents:
        ap.error("keep generated data out of the repository (use /tmp)")
    plan = Plan(steps=args.steps, seed=args.seed, restart=args.restart, noisy=args.noisy)
    t = time.perf_counter()
    paths = generate(plan, out, formats)
    for fmt, p in paths.items():
        size = (
            sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
            if p.is_dir()
            else p.stat().st_size
        )
        print(f"{fmt:12s} {p}  ({size / 1e6:,.0f} MB)")
    print(f"{expected_values(plan):,} values in {time.perf_counter() - t:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
