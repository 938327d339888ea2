"""LOSS002 / LOSS004 / VAL001 on real CPU training runs made here with torch: a 10-class
classifier trained with LR 0 (never learns: loss at ln 10, accuracy at 1/10), with an LR
far too small (a tiny, statistically significant slope), with a working LR (healthy:
silent), and a model memorizing 48 noisy-label samples with a 40-sample validation set
(noisy evals; overfits after its best). Each run writes the JSON lines a training loop
logs, one record per logged step; the runs take about a second together."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import trainlens

torch = pytest.importorskip("torch")

CLASSES = 10


def _data(n: int, seed: int, label_noise: float = 0.0) -> tuple:
    g = torch.Generator().manual_seed(seed)
    centers = torch.randn(CLASSES, 16, generator=torch.Generator().manual_seed(0)) * 1.5
    y = torch.randint(0, CLASSES, (n,), generator=g)
    x = centers[y] + torch.randn(n, 16, generator=g)
    flip = torch.rand(n, generator=g) < label_noise
    y = torch.where(flip, torch.randint(0, CLASSES, (n,), generator=g), y)
    return x, y


def _train(path: Path, lr: float, epochs: int, n_train: int, label_noise: float = 0.0) -> Path:
    torch.set_num_threads(1)  # tiny matrices: threads only contend (16 s -> well under 1 s)
    torch.manual_seed(1)
    x, y = _data(n_train, 1, label_noise)
    xv, yv = _data(40, 2, label_noise)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9 if lr else 0.0)
    loss_fn = torch.nn.CrossEntropyLoss()
    step = 0
    with path.open("w") as out:
        for _ in range(epochs):
            for idx in torch.randperm(n_train).split(16):
                logits = model(x[idx])
                loss = loss_fn(logits, y[idx])
                opt.zero_grad()
                loss.backward()
                opt.step()
                step += 1
                acc = (logits.argmax(1) == y[idx]).float().mean().item()
                out.write(json.dumps({"step": step, "loss": loss.item(), "accuracy": acc}) + "\n")
            with torch.no_grad():
                lv = model(xv)
                val = {"val_loss": loss_fn(lv, yv).item()}
                val["val_accuracy"] = (lv.argmax(1) == yv).float().mean().item()
            out.write(json.dumps({"step": step, **val}) + "\n")
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[trainlens.Finding]]:
    root = tmp_path_factory.mktemp("torch_runs")
    made = {
        "lr_zero": _train(root / "lr_zero.jsonl", lr=0.0, epochs=40, n_train=160),
        "lr_tiny": _train(root / "lr_tiny.jsonl", lr=2e-6, epochs=40, n_train=160),
        "healthy": _train(root / "healthy.jsonl", lr=0.05, epochs=40, n_train=160),
        "memorizes": _train(root / "memo.jsonl", lr=0.1, epochs=150, n_train=48, label_noise=0.3),
    }
    out = {}
    for name, path in made.items():
        [analysis] = trainlens.analyze(path)
        out[name] = analysis.findings
    return out


def _codes(findings: list[trainlens.Finding], rank: int = 1) -> set[str]:
    return {f.code for f in findings if f.severity.rank >= rank}


def test_lr_zero_never_learns_at_chance(runs: dict[str, list[trainlens.Finding]]) -> None:
    [f] = [f for f in runs["lr_zero"] if f.code == "LOSS002"]
    assert f.severity.value == "warning"
    assert f.evidence["accuracy_chance"] is not None  # 0.1: loss at ln 10
    assert "never beat chance" in f.message


def test_lr_far_too_small_is_not_learning(runs: dict[str, list[trainlens.Finding]]) -> None:
    [f] = [f for f in runs["lr_tiny"] if f.code == "LOSS002"]
    assert f.severity.value == "warning"
    assert -0.02 < f.evidence["rel_change"] < 0  # it fell, by less than 2 %


def test_healthy_run_is_silent(runs: dict[str, list[trainlens.Finding]]) -> None:
    assert not _codes(runs["healthy"])


def test_memorizing_with_noisy_evals_overfits(runs: dict[str, list[trainlens.Finding]]) -> None:
    [f] = [f for f in runs["memorizes"] if f.code == "VAL001"]
    assert f.severity.rank >= 1
    assert f.evidence["train_final"] < f.evidence["train_at_best"]
    assert not _codes(runs["memorizes"]) - {"VAL001"}
