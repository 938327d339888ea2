"""The same run written as JSONL, CSV, TensorBoard and MLflow gives the same summary."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest

import trainlens

N = 300
VAL_EVERY = 50


def _series() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    steps = np.arange(N)
    loss = 1.5 + 2.0 * np.exp(-steps / 80) + rng.normal(0, 0.02, N)
    lr = np.where(steps < 30, 6e-4 * (steps + 1) / 30, 6e-4 * np.cos(np.pi * (steps - 30) / 540))
    grad = np.exp(rng.normal(0, 0.2, N))
    tps = 50_000 + rng.normal(0, 500, N)
    return {"loss": loss, "lr": lr, "grad_norm": grad, "tokens_per_sec": tps}


def _val(step: int) -> float:
    return 1.6 + 2.0 * math.exp(-step / 80) + (0.05 if step == 200 else 0.0)


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("formats")
    data = _series()
    out: dict[str, Path] = {}

    jsonl = root / "run.jsonl"
    with jsonl.open("w") as fh:
        for i in range(N):
            fh.write(json.dumps({"step": i, **{k: float(v[i]) for k, v in data.items()}}) + "\n")
            if i % VAL_EVERY == VAL_EVERY - 1:
                fh.write(json.dumps({"step": i, "val_loss": _val(i)}) + "\n")
    out["jsonl"] = jsonl

    csv_path = root / "run.csv"
    with csv_path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["step", *data, "val_loss"])
        for i in range(N):
            val = _val(i) if i % VAL_EVERY == VAL_EVERY - 1 else ""
            w.writerow([i, *(repr(float(v[i])) for v in data.values()), val])
    out["csv"] = csv_path

    tb = pytest.importorskip("torch.utils.tensorboard")
    tb_dir = root / "tb"
    writer = tb.SummaryWriter(str(tb_dir))
    for i in range(N):
        for k, v in data.items():
            writer.add_scalar(k, float(v[i]), i)
        if i % VAL_EVERY == VAL_EVERY - 1:
            writer.add_scalar("val_loss", _val(i), i)
    writer.close()
    out["tensorboard"] = tb_dir

    mlflow = pytest.importorskip("mlflow")
    mp = pytest.MonkeyPatch()
    mp.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    store = root / "mlruns"
    mlflow.set_tracking_uri(f"file:{store}")
    with mlflow.start_run(run_name="run"):
        for i in range(N):
            mlflow.log_metrics({k: float(v[i]) for k, v in data.items()}, step=i)
            if i % VAL_EVERY == VAL_EVERY - 1:
                mlflow.log_metric("val_loss", _val(i), step=i)
    mp.undo()
    out["mlflow"] = store
    return out


def test_same_summary_in_every_format(written: dict[str, Path]) -> None:
    summaries = {}
    for fmt, path in written.items():
        [result] = trainlens.analyze(path)
        assert result.run.format == fmt
        summaries[fmt] = result.summary
    ref = summaries["jsonl"]
    for fmt, s in summaries.items():
        assert s["steps"] == {"first": 0, "last": N - 1, "count": N}, fmt
        assert set(s["metrics"]) == {
            "train/loss",
            "lr",
            "grad_norm",
            "tokens_per_sec",
            "val/loss",
        }, fmt
        assert s["metrics"]["train/loss"]["values"] == N, fmt
        assert s["metrics"]["val/loss"]["values"] == N // VAL_EVERY, fmt
        assert s["val_loss"]["best_step"] == ref["val_loss"]["best_step"] == N - 1, fmt
        # TensorBoard stores float32: agree to float32 precision
        assert s["val_loss"]["best"] == pytest.approx(ref["val_loss"]["best"], rel=1e-6), fmt
        assert s["train_loss"]["final"] == pytest.approx(ref["train_loss"]["final"], rel=1e-6)
        assert s["tokens_per_sec"]["mean"] == pytest.approx(
            ref["tokens_per_sec"]["mean"], rel=1e-6
        ), fmt


def test_same_findings_in_every_format(written: dict[str, Path]) -> None:
    codes = {}
    for fmt, path in written.items():
        [result] = trainlens.analyze(path)
        codes[fmt] = sorted(
            (f.code, f.step_start) for f in result.findings if f.code not in {"DATA002"}
        )
    assert len({tuple(v) for v in codes.values()}) == 1, codes
