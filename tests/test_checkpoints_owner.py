"""analyze judges only the checkpoints that are the run's: by its layout, its config or the
user's word. What a search finds near the run is a note naming the folder, never a finding.

``analyze mlflow.db`` reported "ERROR CKPT001 checkpoint-600 is truncated" for a
``ckpt/out/`` folder of another run three levels below the store, and exited 1 with
``--fail-on error``; a run in a shared folder was judged by others' ``ckpt/`` folders."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainlens.cli import main

torch = pytest.importorskip("torch")
mlflow_tracking = pytest.importorskip("mlflow.tracking")


def _truncated_torch_save(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(torch.nn.Linear(8, 8).state_dict(), path)
    path.write_bytes(path.read_bytes()[:-300])  # the zip directory at the end is gone


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An MLflow SQLite store written by the real client (700 steps of train/loss) and,
    three levels below it, another run's HF-style checkpoint-600, cut short."""
    from mlflow.entities import Metric

    root = tmp_path_factory.mktemp("proj")
    db = root / "mlflow.db"
    client = mlflow_tracking.MlflowClient(tracking_uri=f"sqlite:///{db}")
    exp = client.create_experiment("e", artifact_location=str(root / "artifacts"))
    run = client.create_run(exp, run_name="a")
    t0 = 1_700_000_000_000
    metrics = [Metric("train/loss", 3.0 / (s + 1), t0 + s * 1000, s) for s in range(700)]
    client.log_batch(run.info.run_id, metrics=metrics)
    client.set_terminated(run.info.run_id)
    _truncated_torch_save(root / "ckpt" / "out" / "checkpoint-600" / "pytorch_model.bin")
    return db


def _analyze(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict]:
    code = main(["analyze", *args, "--json"])
    return code, json.loads(capsys.readouterr().out)["runs"][0]


def test_a_store_does_not_own_the_checkpoints_below_it(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["analyze", str(store), "--fail-on", "error"]) == 0
    out = capsys.readouterr().out
    assert "CKPT" not in out
    code, doc = _analyze(capsys, str(store), "--fail-on", "error")
    assert code == 0
    assert not [f for f in doc["findings"] if f["code"].startswith("CKPT")]
    [note] = [d for d in doc["data_quality"] if d["kind"] == "checkpoints-elsewhere"]
    folder = str(store.parent / "ckpt" / "out")
    assert note["severity"] == "info"
    assert f"found checkpoints in {folder} that may belong to this run" in note["message"]
    assert f"pass --checkpoints {folder} to audit them" in note["message"]
    assert folder in out  # the note is printed, too


def test_the_folder_the_user_names_is_audited(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = store.parent / "ckpt" / "out"
    code, doc = _analyze(capsys, str(store), "--checkpoints", str(folder), "--fail-on", "error")
    assert code == 1
    [broken] = [f for f in doc["findings"] if f["code"] == "CKPT001"]
    assert broken["step_start"] == 600 and "truncated" in broken["message"]
    assert not [d for d in doc["data_quality"] if d["kind"] == "checkpoints-elsewhere"]


def _jsonl(path: Path, n: int = 300) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as fh:
        for i in range(n):
            fh.write(json.dumps({"step": i, "loss": 3.0 / (i + 1), "lr": 1e-3}) + "\n")
    return path


def test_a_run_in_a_shared_folder_is_not_judged_by_others_ckpt_folders(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _jsonl(tmp_path / "run.jsonl")
    _truncated_torch_save(tmp_path / "ckpt" / "other" / "ckpt_step_100.pt")
    code, doc = _analyze(capsys, str(run), "--fail-on", "warning")
    assert code == 0
    assert not [f for f in doc["findings"] if f["code"].startswith("CKPT")]
    [note] = [d for d in doc["data_quality"] if d["kind"] == "checkpoints-elsewhere"]
    assert str(tmp_path / "ckpt" / "other") in note["message"]


def test_the_runs_checkpoints_folder_and_what_its_config_names_are_its_own(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _jsonl(tmp_path / "exp" / "metrics.jsonl")
    _truncated_torch_save(tmp_path / "exp" / "checkpoints" / "ckpt_step_100.pt")
    _, doc = _analyze(capsys, str(run))
    assert [f["step_start"] for f in doc["findings"] if f["code"] == "CKPT001"] == [100]
    assert not [d for d in doc["data_quality"] if d["kind"] == "checkpoints-elsewhere"]

    # a folder the run config names as where it saved, inside the run's folder
    other = _jsonl(tmp_path / "exp2" / "metrics.jsonl")
    _truncated_torch_save(tmp_path / "exp2" / "saves" / "ckpt_step_200.pt")
    (other.parent / "config.json").write_text(json.dumps({"trainer": {"save_dir": "saves"}}))
    _, doc = _analyze(capsys, str(other))
    assert [f["step_start"] for f in doc["findings"] if f["code"] == "CKPT001"] == [200]

    # one it names outside the run's folder is not opened: a note names it
    outside = tmp_path / "elsewhere"
    _truncated_torch_save(outside / "ckpt_step_200.pt")
    (other.parent / "config.json").write_text(json.dumps({"save_dir": str(outside)}))
    (other.parent / "saves" / "ckpt_step_200.pt").unlink()
    _, doc = _analyze(capsys, str(other))
    assert not [f for f in doc["findings"] if f["code"].startswith("CKPT")]
    [note] = [d for d in doc["data_quality"] if d["kind"] == "checkpoints-elsewhere"]
    assert f"the run config names {outside} as where it saves" in note["message"]


def test_an_hf_tensorboard_log_owns_its_output_dirs_checkpoints(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """HF Trainer logs TensorBoard into output_dir/runs/<date>/ and saves into
    output_dir/checkpoint-N/ (the layout, written here with torch's SummaryWriter and
    torch.save): analyze of the log folder audits them."""
    from torch.utils.tensorboard import SummaryWriter

    out = tmp_path / "out"
    log = out / "runs" / "Dec01_17-44-02_vm"
    writer = SummaryWriter(str(log))
    for step in range(1, 31):
        writer.add_scalar("train/loss", 3.0 / step, step)
    writer.close()
    for step in (10, 20):
        folder = _made(out / f"checkpoint-{step}")
        torch.save(torch.nn.Linear(8, 8).state_dict(), folder / "pytorch_model.bin")
        torch.save({"state": {}}, folder / "optimizer.pt")
    _truncated_torch_save(out / "checkpoint-30" / "pytorch_model.bin")
    _, doc = _analyze(capsys, str(log))
    assert [f["step_start"] for f in doc["findings"] if f["code"] == "CKPT001"] == [30]


def _made(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return folder
