"""Two restarts in one run, written by each format's real writer: each is reported once,
with its own from/to steps, whatever layout the reader gives the frame (rows grouped by
metric, or in file order)."""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path

import pytest

import trainlens

# trained to 99, resumed at 50; trained to 199, resumed at 150; on to 299
STEPS = [*range(0, 100), *range(50, 200), *range(150, 300)]
METRICS = ("loss", "lr", "grad_norm")


def _value(metric: str, i: int) -> float:
    return {"loss": 3.0 - i * 1e-3, "lr": 1e-3, "grad_norm": 1.0 + (i % 7) * 0.01}[metric]


def _write(fmt: str, root: Path) -> Path:
    if fmt == "jsonl":
        path = root / "run.jsonl"
        with path.open("w") as fh:
            for i, s in enumerate(STEPS):
                fh.write(json.dumps({"step": s, **{m: _value(m, i) for m in METRICS}}) + "\n")
        return path
    if fmt == "csv":
        path = root / "run.csv"
        with path.open("w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["step", *METRICS])
            for i, s in enumerate(STEPS):
                w.writerow([s, *(_value(m, i) for m in METRICS)])
        return path
    if fmt == "tensorboard":
        tb = pytest.importorskip("torch.utils.tensorboard")
        writer = tb.SummaryWriter(str(root / "tb"))
        for i, s in enumerate(STEPS):
            for m in METRICS:
                writer.add_scalar(m, _value(m, i), s)
        writer.close()
        return root / "tb"
    mlflow = pytest.importorskip("mlflow")
    mp = pytest.MonkeyPatch()
    mp.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    store = root / "mlruns"
    mlflow.set_tracking_uri(f"file:{store}")
    t0 = int(time.time() * 1000)
    with mlflow.start_run(run_name="run") as active:
        client = mlflow.MlflowClient()
        for i, s in enumerate(STEPS):
            for m in METRICS:  # one millisecond per logged step: the order is the time
                client.log_metric(active.info.run_id, m, _value(m, i), timestamp=t0 + i, step=s)
    mp.undo()
    return store


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "tensorboard", "mlflow"])
def test_two_restarts_each_reported_once(fmt: str, tmp_path: Path) -> None:
    (run,) = trainlens.read(_write(fmt, tmp_path))
    rs = [i for i in run.data_quality if i.kind == "restart"]
    got = [(r.details["from_step"], r.details["to_step"], r.details["superseded"]) for r in rs]
    # 50 superseded values (steps 50..99, then 150..199) of each of the three metrics
    assert got == [(99, 50, 150), (199, 150, 150)]
    if fmt in ("jsonl", "csv"):  # the line the step went back on (CSV: after its header)
        first = 101 if fmt == "jsonl" else 102
        assert [r.location for r in rs] == [f"line {first}", f"line {first + 150}"]
    steps, values = run.series("train/loss")
    assert steps.tolist() == list(range(300))
    # the value that stands at step 60 is the one logged after the first resume
    assert values[60] == pytest.approx(_value("loss", 110))


def test_a_second_complete_run_in_one_file_is_no_resume(tmp_path: Path) -> None:
    """modded-nanogpt keeps each seed's run in one file: a run that reached its declared
    last step, then another from step 0, is not a resume (info, said so); a step that
    goes back short of the end still is (warning)."""
    from trainlens.detectors import run_detectors
    from trainlens.detectors.base import Context

    def seed(last: int, total: int = 40) -> list[str]:
        return [
            f"step:{s}/{total} train_loss:{4.0 - 0.01 * s:.4f} train_time:{50 * s}ms "
            f"step_avg:{50.0:.2f}ms"
            for s in range(1, last + 1)
        ]

    for runs, sev, phrase in (
        (seed(40) + seed(40), "info", "another run"),
        (seed(30) + seed(40), "warning", "restarted"),
    ):
        path = tmp_path / f"{sev}.txt"
        path.write_text("\n".join(runs) + "\n")
        (run,) = trainlens.read(path)
        res = run_detectors(run, trainlens.Config(select=["restarts"]), Context())
        (f,) = [f for f in res.findings if f.code == "DATA001"]
        assert f.severity.value == sev and phrase in f.message, f.message
