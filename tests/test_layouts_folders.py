"""Folders people point at: Lightning's CSVLogger store (lightning_logs/ or one version_N/),
a folder holding one metrics file, and Git LFS pointers where the logs should be."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

import trainlens
from trainlens.cli import main
from trainlens.core.errors import UnreadableInputError
from trainlens.gate.discover import discover

LFS_POINTER = (
    "version https://git-lfs.github.com/spec/v1\n"
    "oid sha256:a2c3d128d495cdd74d960a960437f14faf0bdd5268ca00c4c37453a5a4ad855d\n"
    "size 9535408\n"
)


def _lightning_store(root: Path, versions: int = 2, steps: int = 40) -> Path:
    loggers = pytest.importorskip("lightning.pytorch.loggers")
    for v in range(versions):
        logger = loggers.CSVLogger(save_dir=str(root), name="lightning_logs", version=v)
        logger.log_hyperparams({"lr": 1e-3 * (v + 1), "warmup_steps": 10})
        for step in range(steps):
            logger.log_metrics({"train/loss": 3.0 - 0.01 * step, "epoch": step // 20}, step=step)
            if step % 10 == 9:
                logger.log_metrics({"val/loss": 2.9 - 0.01 * step, "epoch": step // 20}, step)
        logger.save()
    return root / "lightning_logs"


@pytest.mark.slow
def test_lightning_logs_is_a_run_store(tmp_path: Path) -> None:
    store = _lightning_store(tmp_path)
    runs = trainlens.read(store)
    assert [r.name for r in runs] == ["version_0", "version_1"]
    for r in runs:
        # the source is the metrics file: the run's hparams.yaml is found beside it
        assert Path(r.source).name == "metrics.csv"
        assert (Path(r.source).parent / "hparams.yaml").is_file()
        assert r.series("train/loss")[0].tolist() == list(range(40))
        assert r.series("val/loss")[0].tolist() == [9, 19, 29, 39]
    [one] = trainlens.read(store / "version_1")
    assert one.name == "version_1" and one.frame.height == runs[1].frame.height
    # the save_dir above lightning_logs/ reads too
    assert [r.name for r in trainlens.read(tmp_path)] == [
        "lightning_logs/version_0",
        "lightning_logs/version_1",
    ]


@pytest.mark.slow
def test_lightning_version_without_rows_is_a_note(tmp_path: Path) -> None:
    store = _lightning_store(tmp_path, versions=1)
    (store / "version_1").mkdir()
    (store / "version_1" / "metrics.csv").write_text("epoch,step,train/loss\n")  # just started
    [run] = trainlens.read(store)
    assert run.name == "version_0"
    [note] = [d for d in run.data_quality if d.kind == "unreadable-run"]
    assert "version_1" in note.message and "no rows" in note.message


def test_lightning_run_config_found_beside_metrics(tmp_path: Path) -> None:
    from trainlens.runconfig import find_run_config

    store = _lightning_store(tmp_path, versions=1)
    [run] = trainlens.read(store)
    config, where = find_run_config(run)
    assert where is not None and where.endswith("hparams.yaml")
    assert config.get("warmup_steps") == 10


def test_gate_discovers_lightning_versions_and_keras_logdirs(tmp_path: Path) -> None:
    _lightning_store(tmp_path / "lightning")
    tb = pytest.importorskip("torch.utils.tensorboard")
    for split in ("train", "validation"):
        w = tb.SummaryWriter(str(tmp_path / "keras" / "logs" / split), filename_suffix=".v2")
        w.add_scalar("epoch_loss", 1.0, 0)
        w.close()
    names = [s.name for s in discover([str(tmp_path)])]
    assert names == [
        "keras/logs",
        "lightning/lightning_logs/version_0",
        "lightning/lightning_logs/version_1",
    ]
    [keras] = discover([str(tmp_path / "keras" / "logs")])
    assert Path(keras.path) == tmp_path / "keras" / "logs"


def test_folder_with_one_metrics_file(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    with (logs / "training_log.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["epoch", "accuracy", "loss", "val_accuracy", "val_loss"])
        for e in range(6):
            w.writerow([e, 0.5 + 0.05 * e, 1.2 - 0.1 * e, 0.5 + 0.02 * e, 1.1 - 0.05 * e])
    (logs / "notes.md").write_text("not a metrics file\n")
    [run] = trainlens.read(logs)
    assert run.name == "training_log"
    # Keras' CSVLogger: no step column, one row per epoch: the epoch is the step
    assert run.series("val/loss")[0].tolist() == [0, 1, 2, 3, 4, 5]
    (tmp_path / "logs" / "other.jsonl").write_text('{"step": 0, "loss": 1.0}\n')
    with pytest.raises(UnreadableInputError, match="2 metrics files"):
        trainlens.read(logs)


def test_lfs_pointer_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pointer = tmp_path / "metrics.jsonl"
    pointer.write_text(LFS_POINTER)
    assert main(["analyze", str(pointer)]) == 2
    err = capsys.readouterr().err
    assert "this is a Git LFS pointer, not the log itself; run `git lfs pull`" in err
    with pytest.raises(UnreadableInputError, match="Git LFS pointer"):
        trainlens.read(pointer, format="csv")  # whatever format is forced


def test_folder_of_lfs_pointer_event_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "logs" / "run1"
    run_dir.mkdir(parents=True)
    (run_dir / "events.out.tfevents.1785969174.host.1.0").write_text(LFS_POINTER)
    assert main(["analyze", str(tmp_path / "logs")]) == 2
    assert "Git LFS pointer" in capsys.readouterr().err
    # a pulled file beside a pointer: the pulled one is read, the pointer is a note
    tb = pytest.importorskip("torch.utils.tensorboard")
    w = tb.SummaryWriter(str(tmp_path / "logs" / "run2"))
    w.add_scalar("loss", 1.0, 0)
    w.close()
    [run] = trainlens.read(tmp_path / "logs")
    assert run.name == "run2"
    [note] = [d for d in run.data_quality if d.kind == "lfs-pointer"]
    assert "git lfs pull" in note.message


def test_gate_reports_an_lfs_pointer_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "train.log").write_text(LFS_POINTER)
    (tmp_path / "runs" / "README.txt").write_text("notes\n")
    assert [s.name for s in discover([str(tmp_path / "runs")])] == ["runs"]
    assert main(["gate", str(tmp_path / "runs")]) == 2
    assert "run `git lfs pull`" in capsys.readouterr().out


def test_real_lightning_logs(shared_dir: Path) -> None:
    store = shared_dir / "real-logs/Arshya-Guru_deepmind-research/lightning_logs"
    runs = trainlens.read(store)
    assert [r.name for r in runs] == ["version_13", "version_18"]
    v13, v18 = runs
    assert v13.series("train/loss")[0][-1] == 7269
    # version_18 resumed (its step restarted while the epoch did not): every row is kept
    steps, _ = v18.series("train/loss")
    assert steps.size == 1467 and steps[0] == 9 and steps[-1] == 14669
    assert v18.series("epoch")[1][0] == 100


def test_real_keras_csvlogger_folder(shared_dir: Path) -> None:
    [run] = trainlens.read(shared_dir / "real-logs/Althea80_DM2025-Lab2-Exercise/logs")
    steps, val = run.series("val/loss")
    assert steps[int(val.argmin())] == 3  # the README's epoch 3


def test_real_lfs_pointer(shared_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(shared_dir / "real-logs/yx-lim_mjlab-trained/logs")]) == 2
    assert "Git LFS pointer, not the log itself; run `git lfs pull`" in capsys.readouterr().err


def test_folder_with_one_text_log_beside_other_files(tmp_path: Path) -> None:
    (tmp_path / "README.txt").write_text("how this run was made\n")
    (tmp_path / "LICENSE").write_text("MIT\n")
    log = tmp_path / "main.log"
    log.write_text("".join(f"s:{i} trl:{3.0 - 0.01 * i:.4f}\n" for i in range(30)))
    [run] = trainlens.read(tmp_path)
    assert run.name == "main" and run.series("train/loss")[0].size == 30
    (tmp_path / "second.log").write_text(log.read_text())
    with pytest.raises(UnreadableInputError, match="2 metrics files"):
        trainlens.read(tmp_path)


def test_symlink_loop_in_a_run_folder(tmp_path: Path) -> None:
    version = tmp_path / "logs" / "lightning_logs" / "version_0"
    version.mkdir(parents=True)
    (version / "metrics.csv").write_text("step,loss\n0,1.0\n1,0.9\n2,0.8\n")
    (tmp_path / "logs" / "loop").symlink_to("loop")  # points at itself: ELOOP
    (version / "up").symlink_to("../..")  # a cycle through the tree
    [run] = trainlens.read(tmp_path / "logs")
    assert run.name == "lightning_logs/version_0"
    assert [s.name for s in discover([str(tmp_path / "logs")])] == ["lightning_logs/version_0"]
