"""Rules from the second held-out round of issue 26 (docs/formats.md, "Held-out check"):
each written by the framework's own writer where it installs (Stable-Baselines3's logger),
else in the layout its writer's code prints (YOLOv5's ``utils/loggers``), and read to the
metrics the writer meant.

- SB3's TensorBoard is read by the rules of its progress.csv: on a real PPO logdir its
  ``train/loss`` (the RL objective) drew LOSS001 and LOSS002, SB3's NaN
  ``explained_variance`` NAN001.
- YOLOv5 (and the trainers that copy its train.py) log three gain-weighted loss parts
  and one ``x/lr<i>`` per param group: read like Ultralytics' (the sum is the loss, the
  weights' group the LR), where before no train loss was judged.
- A Sacred ``FileStorageObserver`` run folder (``metrics.json`` beside ``run.json``) is
  a run, as its metrics.json is.
- A DVCLive file beside split folders (fastai's ``accuracy.tsv`` beside ``train/`` and
  ``eval/``) is in no split: it is not made ``train/accuracy``.
"""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest

import trainlens
from tests.test_frameworks_json import _pkg_resources_shim


def _sb3_tensorboard(root: Path) -> Path:
    logger_mod = pytest.importorskip("stable_baselines3.common.logger")
    pytest.importorskip("torch.utils.tensorboard")
    logger = logger_mod.configure(str(root / "PPO_1"), ["tensorboard"])
    for it in range(1, 41):
        steps = 2048 * it
        logger.record("rollout/ep_rew_mean", -200.0 + 5.0 * it)
        logger.record("time/fps", 900)
        # PPO's objective: its value-loss part grows with the returns (a healthy run)
        logger.record("train/loss", 50.0 * it + (4000.0 if it == 12 else 0.0))
        logger.record("train/value_loss", 100.0 * it)
        logger.record("train/entropy_loss", -1.4 + 0.01 * it)
        logger.record("train/learning_rate", 3e-4)
        logger.record("train/explained_variance", math.nan if it <= 3 else 0.5)
        logger.dump(step=steps)
    logger.close()
    return root / "PPO_1"


def test_sb3_tensorboard_is_read_by_the_rules_of_its_csv(tmp_path: Path) -> None:
    path = _sb3_tensorboard(tmp_path)
    (a,) = trainlens.analyze(path)
    run = a.run
    assert run.format == "tensorboard"
    assert run.has("train/rl_loss") and not run.has("train/loss")
    assert run.raw_names["train/rl_loss"] == "train/loss"
    ev = run.series_frame("train/explained_variance").get_column("value").to_list()
    assert len(ev) == 37 and all(math.isfinite(v) for v in ev)
    codes = {f.code for f in a.findings}
    assert not codes & {"LOSS001", "LOSS002", "NAN001"}, codes
    note = " ".join(i.message for i in run.data_quality)
    assert "Stable-Baselines3's TensorBoard" in note and "3 NaN value(s)" in note


def _yolov5_results(path: Path, epochs: int = 30) -> Path:
    """results.csv as YOLOv5's ``Loggers.on_fit_epoch_end`` writes it: a header of
    ``'%20s,'`` names, then ``'%20.5g,'`` values (utils/loggers/__init__.py)."""
    keys = [
        "train/box_loss",
        "train/obj_loss",
        "train/cls_loss",
        "metrics/precision",
        "metrics/recall",
        "metrics/mAP_0.5",
        "metrics/mAP_0.5:0.95",
        "val/box_loss",
        "val/obj_loss",
        "val/cls_loss",
        "x/lr0",
        "x/lr1",
        "x/lr2",
    ]
    n = len(keys) + 1
    lines = [("%20s," * n % tuple(["epoch", *keys])).rstrip(",")]
    for e in range(epochs):
        decay = 0.01 * (1 - e / epochs) + 1e-4
        bias = 0.1 - (0.1 - decay) * min(1.0, e / 3)  # warmup_bias_lr down to the schedule
        vals = [
            0.12 * 0.95**e,
            0.024 * 0.97**e,
            0.0,
            min(0.9, 0.05 * e),
            min(0.8, 0.04 * e),
            min(0.85, 0.045 * e),
            min(0.5, 0.02 * e),
            0.11 * 0.96**e,
            0.017 * 0.98**e,
            0.0,
            bias,
            decay,
            decay,
        ]
        lines.append(("%20.5g," * n % tuple([e, *vals])).rstrip(","))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_yolov5_results_sum_their_loss_parts_and_take_the_weights_lr(tmp_path: Path) -> None:
    path = _yolov5_results(tmp_path / "results.csv")
    (a,) = trainlens.analyze(path)
    run = a.run
    assert run.metadata["framework"] == "yolov5"
    loss = run.series_frame("train/loss")
    assert loss.height == 30
    first = loss.get_column("value")[0]
    assert first == pytest.approx(0.12 + 0.024 + 0.0, rel=1e-4)
    assert run.has("val/loss")
    assert run.raw_names["lr"] == "x/lr1"  # not x/lr0, the bias group's warmup
    notes = " ".join(i.message for i in run.data_quality)
    assert "YOLOv5" in notes and "parts of its loss" not in notes
    assert "loss_trend" not in a.skipped


def test_a_sacred_run_folder_is_a_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if importlib.util.find_spec("sacred") is None:
        pytest.skip("sacred is not installed")
    _pkg_resources_shim(monkeypatch)  # (sacred 0.8 imports pkg_resources, gone in setuptools 81)
    from sacred import Experiment
    from sacred.observers import FileStorageObserver

    ex = Experiment("heldout", save_git_info=False)
    ex.observers.append(FileStorageObserver(str(tmp_path / "my_runs")))

    @ex.main
    def main(_run: object) -> None:
        for step in range(20):
            _run.log_scalar("training.loss", 2.0 / (1 + step), step)  # type: ignore[attr-defined]

    ex.run()
    folder = tmp_path / "my_runs" / "1"
    assert (folder / "run.json").is_file()
    (a,) = trainlens.analyze(folder)
    assert a.run.source.endswith("metrics.json")
    assert a.run.series_frame("train/loss").height == 20


def test_a_dvclive_file_beside_split_folders_is_in_no_split(tmp_path: Path) -> None:
    metrics = tmp_path / "dvclive" / "plots" / "metrics"
    for rel, values in {
        "train/loss.tsv": [0.9, 0.8, 0.7],
        "eval/loss.tsv": [0.5, 0.4, 0.3],
        "accuracy.tsv": [0.7, 0.8, 0.9],
    }.items():
        f = metrics / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        leaf = Path(rel).stem
        rows = [f"{1700000000000 + i * 1000}\t{i}\t{v}" for i, v in enumerate(values)]
        f.write_text(f"timestamp\tstep\t{leaf}\n" + "\n".join(rows) + "\n")
    (tmp_path / "dvclive" / "metrics.json").write_text(json.dumps({"accuracy": 0.9}))
    (a,) = trainlens.analyze(tmp_path / "dvclive")
    assert set(a.run.metrics) >= {"accuracy", "train/loss", "val/loss"}
    assert not a.run.has("train/accuracy")
    assert any("in none, kept as logged" in i.message for i in a.run.data_quality)
