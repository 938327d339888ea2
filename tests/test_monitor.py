"""trainlens.monitor in a plain torch loop: every figure against an independent torch
computation, the file read back by trainlens with canonical names, and the lazy import."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import trainlens  # noqa: E402
from trainlens.monitor import Monitor, declared_schedule  # noqa: E402
from trainlens.monitor.stats import mean_entropy  # noqa: E402

VOCAB, SEQ, BATCH = 11, 6, 4


class Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(VOCAB, 8)
        self.hidden = torch.nn.Linear(8, 8)
        self.out = torch.nn.Linear(8, VOCAB)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.out(torch.tanh(self.hidden(self.emb(ids))))


def _batch(g: torch.Generator) -> dict[str, torch.Tensor]:
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)
    lengths = torch.randint(2, SEQ + 1, (BATCH,), generator=g)
    mask = (torch.arange(SEQ)[None, :] < lengths[:, None]).long()
    return {"input_ids": ids, "attention_mask": mask}


def _norm(tensors: list[torch.Tensor]) -> float:
    return float(torch.linalg.vector_norm(torch.stack([t.norm() for t in tensors])))


def _train(
    out: Path, steps: int, *, clip: float | None, every: int = 1, freeze: bool = False
) -> tuple[list[dict[str, Any]], dict[str, list[Any]]]:
    """Train Tiny with the monitor; return the file's step records and what the test
    computed itself at each step (grad norms before clipping, weights, LRs, entropy)."""
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Tiny()
    if freeze:
        model.hidden.bias.requires_grad_(False)
    opt = torch.optim.AdamW(
        [
            {"params": [model.emb.weight], "lr": 1e-2},
            {"params": [p for n, p in model.named_parameters() if not n.startswith("emb")]},
        ],
        lr=3e-2,
    )
    mon = Monitor(model, opt, out=out, every=every, flush_every=3)
    seen: dict[str, list[Any]] = {"norm": [], "tensor": [], "ratio": [], "ent": [], "pad": []}
    for _ in range(steps):
        batch = _batch(g)
        logits = model(batch["input_ids"])
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, VOCAB), batch["input_ids"].reshape(-1)
        )
        loss.backward()
        named = [(n, p) for n, p in model.named_parameters() if p.grad is not None]
        seen["norm"].append(_norm([p.grad for _, p in named]))
        seen["tensor"].append({n: float(p.grad.norm()) for n, p in named})
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        before = {n: p.detach().clone() for n, p in model.named_parameters()}
        opt.step()
        after = dict(model.named_parameters())
        deltas = [after[n].detach() - w for n, w in before.items()]
        seen["ratio"].append(_norm(deltas) / _norm([p.detach() for p in after.values()]))
        dist = torch.distributions.Categorical(logits=logits.detach())
        m = batch["attention_mask"].float()
        seen["ent"].append(float((dist.entropy() * m).sum() / m.sum()))
        seen["pad"].append(1.0 - float(m.mean()))
        opt.zero_grad()
        mon.step(loss=loss, batch=batch, logits=logits)
    mon.close()
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    # the file ends with the end record of a run that finished (docs/monitor.md)
    assert {k: rows[-1][k] for k in ("event", "state", "step")} == {
        "event": "end",
        "state": "finished",
        "step": rows[-2]["step"],
    }
    return rows[:-1], seen


@pytest.mark.parametrize("clip", [None, 1e-3])
def test_grad_norm_is_pre_clip_with_and_without_clipping(
    tmp_path: Path, clip: float | None
) -> None:
    rows, seen = _train(tmp_path, 4, clip=clip)
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    for row, norm, per_tensor in zip(rows, seen["norm"], seen["tensor"], strict=True):
        if clip is not None:
            assert norm > 10 * clip  # the clip really cut these grads
        assert row["grad_norm"] == pytest.approx(norm, rel=1e-5)
        for name, value in per_tensor.items():
            assert row[f"grad_norm/{name}"] == pytest.approx(value, rel=1e-4)


def test_update_ratio_entropy_padding_against_torch(tmp_path: Path) -> None:
    rows, seen = _train(tmp_path, 3, clip=1.0)
    for row, ratio, ent, pad in zip(rows, seen["ratio"], seen["ent"], seen["pad"], strict=True):
        assert row["update_ratio"] == pytest.approx(ratio, rel=1e-4)
        assert row["entropy"] == pytest.approx(ent, rel=1e-5)
        assert row["padding_frac"] == pytest.approx(pad, abs=1e-6)
        assert row["tokens_per_sec"] == pytest.approx(BATCH * SEQ / row["step_time"], rel=1e-3)
        assert row["samples_per_sec"] == pytest.approx(BATCH / row["step_time"], rel=1e-3)


def test_frozen_tensor_logs_exactly_zero_and_per_tensor_every_k(tmp_path: Path) -> None:
    rows, _ = _train(tmp_path, 6, clip=None, every=3, freeze=True)
    tensor_rows = [r for r in rows if "grad_norm/hidden.weight" in r]
    assert [r["step"] for r in tensor_rows] == [1, 3, 6]
    assert all(r["grad_norm/hidden.bias"] == 0.0 for r in tensor_rows)
    assert all(r["update_ratio/hidden.bias"] == 0.0 for r in tensor_rows)
    assert all(r["grad_norm/hidden.weight"] > 0 for r in tensor_rows)
    assert all("grad_norm" in r and "lr" in r for r in rows)  # global figures every step


def test_entropy_in_chunks_matches_categorical() -> None:
    from trainlens.monitor import stats

    g = torch.Generator().manual_seed(3)
    logits = torch.randn(3, 5, 1000, generator=g) * 4
    mask = torch.ones(3, 5)
    mask[0, 3:] = 0
    want = torch.distributions.Categorical(logits=logits).entropy()
    old = stats._CHUNK_VALUES
    stats._CHUNK_VALUES = 2000  # two rows per chunk: the chunk boundaries are crossed
    try:
        got = mean_entropy(logits, mask)
    finally:
        stats._CHUNK_VALUES = old
    assert float(got) == pytest.approx(float((want * mask).sum() / mask.sum()), rel=1e-5)
    # a masked-out token (logit -inf) has probability 0 and adds nothing
    logits[..., :10] = -math.inf
    want = torch.distributions.Categorical(logits=logits).entropy()
    assert float(mean_entropy(logits)) == pytest.approx(float(want.mean()), rel=1e-5)


@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)`")
def test_lr_per_group_under_a_scheduler_stepped_per_micro_batch(tmp_path: Path) -> None:
    model = Tiny()
    opt = torch.optim.SGD(
        [{"params": model.emb.parameters(), "lr": 0.1}, {"params": model.out.parameters()}], lr=0.5
    )
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda n: 1.0 / (1 + n))
    mon = Monitor(model, opt, out=tmp_path, every=1)
    g = torch.Generator().manual_seed(0)
    used: list[list[float]] = []
    for _ in range(3):
        for _micro in range(2):  # two micro-batches per optimizer step
            batch = _batch(g)
            loss = model(batch["input_ids"]).logsumexp(-1).mean()
            loss.backward()
            sched.step()  # stepped per micro-batch: the LR moves twice per optimizer step
            if _micro == 1:
                used.append([grp["lr"] for grp in opt.param_groups])
                opt.step()
                opt.zero_grad()
            mon.step(loss=loss, batch=batch)
    mon.close()
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if "event" not in r]  # (the end record)
    assert [r["step"] for r in rows] == [1, 2, 3]
    logged = [lr for r in rows for lr in (r["lr"], r["lr/group1"])]
    assert logged == pytest.approx([lr for pair in used for lr in pair], rel=1e-12)
    assert used[0] != used[1]
    # tokens add up over the step's micro-batches
    assert rows[1]["tokens_per_sec"] * rows[1]["step_time"] == pytest.approx(
        2 * BATCH * SEQ, rel=1e-3
    )


def test_clock_times_the_steps_and_resume_step_numbers_them(tmp_path: Path) -> None:
    """``clock=`` is what step_time and dataloader_wait are measured with (a clock that
    advances 0.25 s in the loader and 1 s in the step gives exactly those); a monitor
    built with ``resume_step`` appends the resumed steps to the same file."""
    now = [100.0]
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Tiny()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def train(mon: Monitor, steps: int) -> None:
        for _ in range(steps):
            now[0] += 0.25  # the data loader
            batch = _batch(g)
            logits = model(batch["input_ids"])  # the step's compute starts here
            now[0] += 1.0
            loss = logits.logsumexp(-1).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            mon.step(loss=loss, batch=batch)
        mon.close()

    train(Monitor(model, opt, out=tmp_path, clock=lambda: now[0]), 3)
    train(Monitor(model, opt, out=tmp_path, clock=lambda: now[0], resume_step=1), 2)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    # each monitor closed with its end record; the resumed one's is the file's last
    assert [(r["step"], r.get("event")) for r in rows if "event" in r] == [(3, "end"), (3, "end")]
    rows = [r for r in rows if "event" not in r]
    assert [r["step"] for r in rows] == [1, 2, 3, 2, 3]
    # a monitor's first step is timed from its forward (no previous step to wait after)
    assert [r["step_time"] for r in rows] == [1.0, 1.25, 1.25, 1.0, 1.25]
    assert [r.get("dataloader_wait") for r in rows] == [None, 0.25, 0.25, None, 0.25]
    assert rows[1]["tokens_per_sec"] == BATCH * SEQ / 1.25
    [run] = trainlens.read(tmp_path / "metrics.jsonl")
    assert [d.kind for d in run.data_quality].count("restart") == 1


def test_file_read_back_with_canonical_names_and_config(tmp_path: Path) -> None:
    _train(tmp_path, 3, clip=1.0)
    [run] = trainlens.read(tmp_path / "metrics.jsonl")
    names = set(run.metrics)
    for name in (
        "train/loss",
        "lr",
        "grad_norm",
        "update_ratio",
        "entropy",
        "padding_frac",
        "step_time",
        "dataloader_wait",
        "tokens_per_sec",
        "samples_per_sec",
        "mem/rss",
        "grad_norm/emb.weight",
        "update_ratio/out.bias",
    ):
        assert name in names, name
    cfg = json.loads((tmp_path / "metrics.config.json").read_text())
    assert cfg["n_params"] == sum(p.numel() for p in Tiny().parameters())
    assert cfg["dtype"] == "float32" and cfg["world_size"] == 1


def test_declared_schedule_read_from_scheduler_objects(tmp_path: Path) -> None:
    from trainlens.api import build_context
    from trainlens.core.config import Config

    opt = torch.optim.SGD(Tiny().parameters(), lr=2e-3)
    warm = torch.optim.lr_scheduler.LinearLR(opt, 0.01, 1.0, total_iters=10)
    cos = torch.optim.lr_scheduler.CosineAnnealingLR(opt, 90, eta_min=2e-4)
    seq = torch.optim.lr_scheduler.SequentialLR(opt, [warm, cos], milestones=[10])
    got, note = declared_schedule(seq)
    assert note is None
    assert got == {
        "shape": "cosine",
        "peak_lr": 2e-3,
        "min_lr": 2e-4,
        "total_steps": 100,
        "warmup_steps": 10,
    }
    _, note = declared_schedule(torch.optim.lr_scheduler.LambdaLR(opt, lambda n: 1.0))
    assert note is not None and "LambdaLR" in note
    from transformers import get_cosine_schedule_with_warmup

    got, _ = declared_schedule(get_cosine_schedule_with_warmup(opt, 5, 50))
    assert got["shape"] == "cosine" and got["warmup_steps"] == 5 and got["total_steps"] == 50

    # analyze finds the schedule the monitor wrote beside the run
    model = Tiny()
    opt2 = torch.optim.SGD(model.parameters(), lr=2e-3)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt2, 40)
    mon = Monitor(model, opt2, out=tmp_path, scheduler=sched)
    opt2.step()
    mon.step(loss=1.0)
    mon.close()
    [run] = trainlens.read(tmp_path / "metrics.jsonl")
    ctx = build_context(run, Config())
    assert ctx.schedule["shape"] == "cosine" and ctx.schedule["total_steps"] == 40
    assert ctx.model["n_params"] == sum(p.numel() for p in model.parameters())


def test_import_trainlens_does_not_import_torch() -> None:
    code = (
        "import sys, trainlens, trainlens.monitor, trainlens.api, trainlens.cli;"
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_nonfinite_values_written_and_read_back(tmp_path: Path) -> None:
    model = Tiny()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    mon = Monitor(model, opt, out=tmp_path, every=1)
    ids = torch.zeros(2, 3, dtype=torch.long)
    logits = model(ids) * math.inf
    loss = logits.logsumexp(-1).mean() - logits.mean()
    loss.backward()
    opt.step()
    mon.step(loss=loss, batch=ids, logits=logits)
    mon.close()
    [run] = trainlens.read(tmp_path / "metrics.jsonl")
    _, values = run.series("grad_norm")
    assert values.size == 1 and not math.isfinite(values[0])


def test_stop_on_error_stops_the_nan_run_at_its_step(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = Tiny()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    found: list[Any] = []
    mon = Monitor(model, opt, out=tmp_path, stop_on="error", on_finding=found.append)
    g = torch.Generator().manual_seed(0)
    last = 0
    for step in range(1, 61):
        batch = _batch(g)
        logits = model(batch["input_ids"])
        if step >= 40:
            logits = logits * math.inf  # overflow: loss and grads NaN from step 40
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, VOCAB), batch["input_ids"].reshape(-1)
        )
        loss.backward()
        opt.step()
        opt.zero_grad()
        mon.step(loss=loss, batch=batch, logits=logits)
        last = step
        if mon.stopped:
            break
    mon.close()
    assert last == 40
    assert mon.stopped is not None and mon.stopped.startswith("NAN001")
    assert any(f.code == "NAN001" and f.step_start == 40 for f in found)


def test_tensorboard_output_read_back(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    torch.manual_seed(0)
    model = Tiny()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    mon = Monitor(model, opt, out=tmp_path, tensorboard=True, every=2)
    g = torch.Generator().manual_seed(0)
    for _ in range(3):
        batch = _batch(g)
        loss = model(batch["input_ids"]).logsumexp(-1).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        mon.step(loss=loss, batch=batch)
    mon.close()
    [tb] = trainlens.read(tmp_path / "tb")
    [js] = trainlens.read(tmp_path / "metrics.jsonl")
    for name in ("train/loss", "grad_norm", "lr", "padding_frac"):
        steps, values = tb.series(name)
        want_steps, want = js.series(name)
        assert list(steps) == list(want_steps) == [1, 2, 3]
        assert values == pytest.approx(want, rel=1e-5)
