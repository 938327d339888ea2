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
from tests.test_reader_hf import tiny_gpt2


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


# ---- detectron2's stdout: its evaluation results, and a run that starts trained ----------
# (lines in CommonMetricPrinter's and print_csv_format's layouts, as a public log holds
# them: HaowenGuan/NYU-Semi-Supervise-Object-Detection output/log_supervised_lr_0.040_
# balance.txt, a Faster R-CNN fine-tuned from its own trained checkpoint)


def _d2_line(it: int, loss: float, lr: float) -> str:
    return (
        f"[11/19 09:04:14] d2.utils.events INFO:  eta: 20:54:12  iter: {it}  total_loss: "
        f"{loss:.4g}  loss_cls: 0.05137  loss_box_reg: 0.07814  loss_rpn_cls: 0.009193  "
        f"loss_rpn_loc: 0.01776  time: 0.6834  data_time: 0.0733  lr: {lr:.5g}  "
        "max_mem: 11811M\n"
    )


def _d2_results(ap: float) -> str:
    head = "[11/19 09:09:41] d2.evaluation.testing INFO: copypaste: "
    return (
        f"{head}Task: bbox\n{head}AP,AP50,AP75,APs,APm,APl\n"
        + head
        + ",".join(f"{ap * r:.4f}" for r in (1.0, 1.9516, 0.9036, 0.0793, 0.3834, 1.2279))
        + "\n"
    )


def _d2_log(path: Path, level: float, aps: tuple[float, float]) -> Path:
    lines = []
    for i, it in enumerate(range(19, 2000, 20)):
        lr = 0.04 * min(1.0, 0.5 + 0.5 * it / 1000)  # WARMUP_FACTOR 0.5 over 1,000 iterations
        wobble = 0.006 * ((i * 7) % 5 - 2)  # flat, within its noise
        lines.append(_d2_line(it, level + wobble, lr))
        if it in (979, 1979):
            lines.append(_d2_results(aps[0] if it == 979 else aps[1]))
    path.write_text("".join(lines))
    return path


def test_detectron2_results_on_stdout_are_read(tmp_path: Path) -> None:
    (a,) = trainlens.analyze(_d2_log(tmp_path / "log.txt", 0.155, (14.8034, 15.1559)))
    ap = a.run.series_frame("val/bbox/AP")
    assert ap.get_column("step").to_list() == [979, 1979]  # the training step before them
    assert ap.get_column("value").to_list() == [14.8034, 15.1559]
    assert a.run.has("val/bbox/AP50") and a.run.has("val/bbox/APl")


def test_a_flat_loss_of_a_model_that_starts_trained_is_no_warning(tmp_path: Path) -> None:
    (a,) = trainlens.analyze(_d2_log(tmp_path / "log.txt", 0.155, (14.8034, 15.1559)))
    [flat] = [f for f in a.findings if f.code == "LOSS002"]
    assert flat.severity.name.lower() == "info"
    assert "started trained" in flat.message and "labels match" not in flat.message


def test_a_flat_loss_with_the_task_metric_at_zero_is_still_a_warning(tmp_path: Path) -> None:
    # the same flat loss, but AP 0 at both evaluations: nothing says the model is trained
    (a,) = trainlens.analyze(_d2_log(tmp_path / "log.txt", 1.9, (0.0, 0.0)))
    [flat] = [f for f in a.findings if f.code == "LOSS002"]
    assert flat.severity.name.lower() == "warning"


# ---- a high but level grad norm beside a falling loss (MMDetection D-FINE) --------------


def _mm_scalars(path: Path, *, grow: bool) -> Path:
    """vis_data/scalars.json as MMEngine's LocalVisBackend writes it: a DETR-family run
    whose pre-clip grad norm rises from ~20 to ~140 in its first 150 iterations and stays
    there (``grow``: keeps climbing, ×1.03 a point) while its summed loss falls 43 -> 5.6."""
    rows = []
    for i, it in enumerate([1, *range(50, 1501, 50)]):
        loss = 5.6 + 37.4 * 0.9 ** (it / 15)
        early = {1: 21.4, 50: 18.0, 100: 73.7}  # (the real run's first three points)
        norm = early.get(it, 140.0 + 8.0 * ((i * 3) % 5 - 2))
        if grow and it >= 150:
            norm *= 1.1 ** (it / 50 - 3)
        rows.append(
            {
                "base_lr": 1e-4,
                "lr": 1e-5,
                "data_time": 0.01,
                "grad_norm": norm,
                "loss": loss,
                "loss_bbox": loss / 3,
                "loss_cls": loss / 3,
                "loss_giou": loss / 3,
                "time": 0.34,
                "epoch": 1,
                "iter": it,
                "memory": 2561,
                "step": it,
            }
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_level_high_grad_norm_beside_a_falling_loss_is_a_note(tmp_path: Path) -> None:
    (a,) = trainlens.analyze(_mm_scalars(tmp_path / "vis_data" / "scalars.json", grow=False))
    [high] = [f for f in a.findings if f.code == "GRAD004"]
    assert high.severity.name.lower() == "info"
    assert "not exploding" in high.message


def test_a_grad_norm_that_keeps_climbing_is_still_exploding(tmp_path: Path) -> None:
    (a,) = trainlens.analyze(_mm_scalars(tmp_path / "vis_data" / "scalars.json", grow=True))
    [high] = [f for f in a.findings if f.code == "GRAD004"]
    assert high.severity.name.lower() == "warning"
    assert "exploding gradients" in high.message


# ---- a split named by a label in no pair (a T5 fine-tune's `logging` lines) --------------


def test_a_split_label_names_the_pairs_after_it(tmp_path: Path) -> None:
    """``Epoch 2 - Validation BLEU: BLEU-1 71.65, …`` and ``Epoch 2 - Dev BLEU: BLEU-1
    63.88, …`` (1025378573/T5-Finetune train.log): two evaluation sets, one name each."""
    lines = []
    for epoch in (1, 2, 3):
        for b in range(5):
            lines.append(
                f"2025-03-02 05:16:20,962 - INFO - Epoch {epoch} - Batch loss: {2 - b / 10}"
            )
        for label, bleu in (("Validation", 70.0), ("Dev", 63.0)):
            lines.append(
                f"2025-03-02 05:34:00,482 - INFO - Epoch {epoch} - {label} BLEU: "
                f"BLEU-1 {bleu + epoch}, BLEU-2 {bleu - 6 + epoch}"
            )
    path = tmp_path / "train.log"
    path.write_text("\n".join(lines) + "\n")
    (a,) = trainlens.analyze(path)
    val = [m for m in a.run.metrics if m.lower() == "val/bleu-1"]
    dev = [m for m in a.run.metrics if m.lower() == "dev/bleu-1"]
    assert len(val) == 1 and len(dev) == 1
    assert a.run.series_frame(val[0]).get_column("value").to_list() == [71.0, 72.0, 73.0]
    assert a.run.series_frame(dev[0]).get_column("value").to_list() == [64.0, 65.0, 66.0]


# ---- Ultralytics before 8.1: its results.csv counts epochs from 0, its TensorBoard from 1


def test_an_old_ultralytics_csv_and_its_tensorboard_give_the_same_steps(tmp_path: Path) -> None:
    """``save_metrics`` before 8.1 wrote ``'%23s,'`` names and ``self.epoch`` (from 0); the
    TensorBoard callback writes ``trainer.epoch + 1`` (a public segment run,
    Andrean-cyber/Segmentation-YOLOv8: CSV steps 0-99 against TensorBoard 1-100)."""
    from torch.utils.tensorboard import SummaryWriter

    keys = ["train/box_loss", "train/seg_loss", "train/cls_loss", "metrics/mAP50(M)"]
    n = len(keys) + 1
    rows = [("%23s," * n % tuple(["epoch", *keys])).rstrip(",")]
    logdir = tmp_path / "train"
    with SummaryWriter(str(logdir)) as writer:
        for epoch in range(12):
            vals = [1.0 - 0.05 * epoch, 2.0 - 0.1 * epoch, 1.5 - 0.08 * epoch, 0.05 * epoch]
            rows.append(("%23.5g," * n % tuple([epoch, *vals])).rstrip(","))
            for k, v in zip(keys, vals, strict=True):
                writer.add_scalar(k, v, epoch + 1)
    (logdir / "results.csv").write_text("\n".join(rows) + "\n")
    (csv,) = trainlens.analyze(logdir / "results.csv")
    (tb,) = trainlens.analyze(logdir)
    assert tb.run.format == "tensorboard"
    c = csv.run.series_frame("train/loss")
    t = tb.run.series_frame("train/loss")
    assert c.get_column("step").to_list() == t.get_column("step").to_list() == list(range(1, 13))
    assert c.get_column("value").to_list() == pytest.approx(t.get_column("value").to_list())
    assert any("count from 0" in i.message for i in csv.run.data_quality)


# ---- round 3: a fine-tune of three epochs, nanoGPT-style eval lines, Lightning's test ----


def test_a_val_loss_rising_over_few_evaluations_is_a_note(tmp_path: Path) -> None:
    """A BERT fine-tune's Keras CSVLogger file, three epochs (DinaKhezzane/bert-imdb-
    sentiment): too few evaluations for the noise guard, but a note names the checkpoint."""
    path = tmp_path / "training_log.csv"
    path.write_text(
        "epoch,accuracy,loss,val_accuracy,val_loss\n"
        "0,0.8232,0.3860,0.8580,0.3179\n1,0.9095,0.2266,0.8650,0.3203\n"
        "2,0.9621,0.1134,0.8610,0.4432\n"
    )
    (a,) = trainlens.analyze(path)
    [val] = [f for f in a.findings if f.code == "VAL001"]
    assert val.severity.name.lower() == "info" and val.step_start == 0
    assert "keep the step-0 checkpoint" in val.message
    # falling at the last evaluation: nothing
    path.write_text(path.read_text().replace("0.4432", "0.3100"))
    (b,) = trainlens.analyze(path)
    assert not [f for f in b.findings if f.code == "VAL001"]


def test_bare_split_keys_are_the_splits_losses(tmp_path: Path) -> None:
    """``[eval] iter 500: train 3.7095 val 3.6459 lr 3.00e-04`` between ``[train] iter 10:
    loss 8.8782 9905 ms/iter`` lines (ethellight565/nanogpt-seis)."""
    lines = []
    for it in range(0, 2001, 10):
        if it % 500 == 0:
            lines.append(
                f"[eval] iter {it}: train {4 - it / 1000:.4f} val {4.1 - it / 1100:.4f} lr 3.00e-04"
            )
        if it:
            lines.append(f"[train] iter {it}: loss {4 - it / 1000:.4f} 2903 ms/iter")
    path = tmp_path / "train.log"
    path.write_text("\n".join(lines) + "\n")
    (a,) = trainlens.analyze(path)
    assert a.run.has("val/loss") and a.run.series_frame("val/loss").height == 5
    assert a.run.series_frame("train/loss").height == 200  # the interval lines' loss


def test_lightning_test_phase_after_fit_is_no_stall(tmp_path: Path) -> None:
    """Lightning's logdir after ``fit`` then ``test``: hp_metric -1 at step 0 in each
    event file, and the test results (with ``epoch``) one step after the last, written 12
    minutes later; written with torch's SummaryWriter at those wall times."""
    from torch.utils.tensorboard import SummaryWriter

    logdir = tmp_path / "version_20"
    t0 = 1_747_494_932.0
    with SummaryWriter(str(logdir), filename_suffix=".0") as w:
        w.add_scalar("hp_metric", -1.0, 0, walltime=t0)
        t = t0
        for step in range(0, 7000, 50):
            t += 3.3 + (15.0 if step % 700 == 0 and step else 0.0)  # a validation per epoch
            w.add_scalar("train_loss_step", 2.0 - step / 8000, step, walltime=t)
            w.add_scalar("epoch", step // 700, step, walltime=t)
            if step % 700 == 650:
                w.add_scalar("val_loss", 1.9 - step / 8100, step, walltime=t + 14)
    first = set(logdir.iterdir())
    with SummaryWriter(str(logdir), filename_suffix=".1") as w:
        w.add_scalar("hp_metric", -1.0, 0, walltime=t + 700)
        w.add_scalar("test_loss", 1.1, 6951, walltime=t + 710)
        w.add_scalar("epoch", 10, 6951, walltime=t + 710)
    # the test run's file is named at its creation, 12 minutes later (here the same second:
    # torch numbers a process's writers, and `.10.` sorts before `.9.`)
    [test_file] = set(logdir.iterdir()) - first
    stamp = test_file.name.split(".")[3]
    test_file.rename(logdir / test_file.name.replace(stamp, str(int(stamp) + 700), 1))
    (a,) = trainlens.analyze(logdir)
    assert not [f for f in a.findings if f.code == "DATA002"]


def test_a_log_that_crashed_before_its_first_step_says_why(tmp_path: Path) -> None:
    """Set-up lines, then CUDA out of memory at the first evaluation (iremurhan/clip-
    retrieval-lab checkpoints/train.log): no format, but the refusal names the error."""
    path = tmp_path / "train.log"
    path.write_text(
        "01/09/2026 14:54:32 - INFO - root -   Using device: cuda\n"
        "01/09/2026 14:55:07 - INFO - root -   Starting training from epoch 0...\n"
        "01/09/2026 14:55:25 - ERROR - root -   Training failed with error: CUDA out of memory.\n"
        "Traceback (most recent call last):\n"
        '  File "train.py", line 256, in main\n'
        "    trainer.train()\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.25 GiB.\n"
    )
    with pytest.raises(
        trainlens.UnreadableInputError, match=r"ends in an error: torch\.OutOfMemoryError"
    ):
        trainlens.analyze(path)


# ---- round 4: DETR's log.txt -----------------------------------------------------------


def test_detr_log_reads_its_test_stats_as_validation(tmp_path: Path) -> None:
    """log.txt as DETR's main.py writes it: ``{**{f'train_{k}'}, **{f'test_{k}'}, 'epoch',
    'n_parameters'}`` per epoch, json.dumps per line; its test_* come from the validation
    loader, ``test_coco_eval_bbox`` is COCOeval's 12 stats (FarjadAhmed/detr_custom_dcmha,
    Gaw4Gura/ConditionalSwinDETR)."""
    path = tmp_path / "log.txt"
    with path.open("w") as f:
        for epoch in range(12):
            stats = [0.01 * epoch * (1 + i % 3) for i in range(12)]
            stats[3] = -1.0  # COCO's undefined (no small objects)
            log = {
                "train_lr": 1e-4,
                "train_class_error": 90.0 - epoch,
                "train_loss": 40.0 - 2 * epoch,
                "train_loss_ce": 2.0 - 0.1 * epoch,
                "test_class_error": 92.0 - epoch,
                "test_loss": 38.0 - 1.5 * epoch,
                "test_coco_eval_bbox": stats,
                "epoch": epoch,
                "n_parameters": 41302368,
            }
            f.write(json.dumps(log) + "\n")
    (a,) = trainlens.analyze(path)
    run = a.run
    assert run.metadata["framework"] == "detr"
    assert run.series_frame("val/loss").get_column("value")[0] == 38.0
    assert run.series_frame("lr").height == 12 and run.has("train/loss")
    ap = run.series_frame("val/coco/AP").get_column("value").to_list()
    assert ap[1] == pytest.approx(0.01)
    assert not run.has("val/coco/APs") and "n_parameters" not in run.metrics
    assert "lr_schedule" not in a.skipped and "val_divergence" not in a.skipped


def test_epoch_iteration_lines_without_a_per_epoch_count(tmp_path: Path) -> None:
    """SwAV's logger (abhinavagarwalla/swav-cifar10 checkpoints/train.log): ``Epoch: [e][i]``
    with no per-epoch count, an argument dump before each launch, a launch appended: the
    steps are e × n + i (n estimated), the dump is no metric, the later launch stands, and
    each epoch's first iteration (the loader starting its workers) gives no data time."""
    head = "INFO - 09/02/20 14:18:08 - 0:00:30 - "
    dump = (
        f"{head}============ Initialized logger ============\n"
        f"{head}arch: resnet50\n                                     base_lr: 0.6\n"
        "                                     epochs: 400\n"
    )

    def launch(lr: float, level: float) -> str:
        out = dump
        for e in range(6):
            for i in range(0, 1001, 50):
                data = 1.6 if i == 0 else 0.001
                out += (
                    f"{head}Epoch: [{e}][{i}]\tTime 0.630 (0.664)\tData {data:.3f} (0.030)\t"
                    f"Loss {level - 0.01 * e:.4f} ({level:.4f})\tLr: {lr * (e + 1) / 6:.4f}\n"
                )
        return out

    path = tmp_path / "train.log"
    path.write_text(launch(0.6, 3.9121) + launch(0.06, 3.0))
    (a,) = trainlens.analyze(path)
    run = a.run
    assert run.metadata["text_shapes"] == {"epoch_iter": 252}
    assert not run.has("base_lr") and not run.has("epochs")
    steps = run.series_frame("train/loss").get_column("step").to_list()
    assert steps[:2] == [0, 50] and steps[21] == 1050  # e × 1050 + i
    assert [i.kind for i in run.data_quality].count("restart") == 1
    assert run.series_frame("train/loss").get_column("value")[0] == 3.0  # the later launch
    assert not [f for f in a.findings if f.code in ("DATA004", "LR005", "LR007")]


def test_a_framework_log_with_no_training_step_says_whose_it_is(tmp_path: Path) -> None:
    """A detectron2 job's log that holds only its environment, config and an unfinished
    evaluation (Boycott0915/CDFSOD-benchmark-personal, DelinQu/MOCO output/log.txt)."""
    path = tmp_path / "log.txt"
    path.write_text(
        "[12/24 14:54:13] detectron2 INFO: Rank of current process: 0. World size: 1\n"
        "[12/24 14:54:14] detectron2 INFO: Environment info:\n"
        "[12/24 14:56:02] d2.data.common INFO: Serialized dataset takes 2.52 MiB\n"
        "[12/24 14:56:02] d2.evaluation.evaluator INFO: Start inference on 5000 batches\n"
    )
    with pytest.raises(
        trainlens.UnreadableInputError, match="a detectron2 log with no training step"
    ):
        trainlens.analyze(path)


def test_prose_pairs_are_no_metrics(tmp_path: Path) -> None:
    """gensim's set-up lines before a training's ``Epoch 1/10, Train Loss: 0.4966``
    (KarimovShohin/DL_HW9 logs/training.log): ``estimated required memory for 7812 words,
    2000000 buckets and 50 dimensions: 408420592 bytes`` is prose, not a metric."""
    prose = (
        "2024-11-13 21:07:03,984 - INFO - estimated required memory for 7812 words, "
        "2000000 buckets and 50 dimensions: 408420592 bytes"
    )
    lines = []
    for e in range(1, 11):
        lines.append(
            f"2024-11-13 21:07:12,189 - INFO - Epoch {e}/10, Train Loss: {0.5 - e / 50:.4f}"
        )
        if e == 3:
            lines.append(prose)
    path = tmp_path / "training.log"
    path.write_text("\n".join(lines) + "\n")
    (a,) = trainlens.analyze(path)
    assert not [m for m in a.run.metrics if " and" in m or " for" in m]
    assert a.run.series_frame("train/loss").height == 10


# ---- round 6: the HF Trainer's printed dicts as transformers 5 prints them ---------------


@pytest.mark.slow  # a real Trainer on a tiny GPT-2 (CPU): a few seconds
def test_the_trainers_own_printed_dicts_with_quoted_numbers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """transformers 5's ProgressCallback prints ``{'loss': '2.897', 'grad_norm':
    '0.7695', ...}`` (each float as f"{v:.4g}": a string), a TRL SFT log's lines
    (Ishihara-Masabumi/Llama_SFT train_log.txt) were "not a format trainlens knows"."""
    transformers = pytest.importorskip("transformers")
    model, data = tiny_gpt2()
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"),
        max_steps=12,
        logging_steps=2,
        per_device_train_batch_size=8,
        report_to=[],
        use_cpu=True,
        seed=0,
        disable_tqdm=False,
        save_strategy="no",
    )
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data)
    capsys.readouterr()
    trainer.train()
    printed = capsys.readouterr().out
    assert "'loss': '" in printed  # (the quoted numbers this test is about)
    log = tmp_path / "train_log.txt"
    log.write_text(printed)
    (a,) = trainlens.analyze(log)
    history = [h for h in trainer.state.log_history if "loss" in h]
    loss = a.run.series_frame("train/loss").get_column("value").to_list()
    assert loss == [float(f"{h['loss']:.4g}") for h in history]
    assert a.run.has("grad_norm") and a.run.has("lr")


def test_swin_transformer_logger_lines(tmp_path: Path) -> None:
    """Swin Transformer's main.py logs ``Train: [e/E][i/n]\\teta … lr …\\ttime v (avg)\\tloss v
    (avg)\\tgrad_norm v (avg)\\tmem NMB``, and its copies ``Train: [e/E]`` alone with a
    ``Validate:`` line of running means (nicetea17/CIFAR10-Classifier-AlexNet-and-Resnet18,
    a W&B run's output.log: "not a format trainlens knows")."""
    head = "[2025-10-21 01:21:16 resnet18](main.py 194): INFO "
    lines = []
    for e in range(6):
        lines.append(
            f"{head}Train: [{e}/50]\tlr 0.000300\ttime 0.3346 (0.3680)\tloss {1.4 - 0.1 * e:.4f} "
            f"(1.7318)\tAcc@1 {48.8 + e:.3f} (37.002)\tMem 4954MB"
        )
        lines.append(
            f"{head}Validate: \tTime 0.102 (0.162)\tLoss 1.2919 ({1.3 - 0.05 * e:.4f})\t"
            f"Acc@1 51.531 ({52.27 + e:.3f})\tMem 4954MB"
        )
    full = [
        f"{head}Train: [3/300][{i}/1251]\teta 0:05:12 lr 0.000125\twd 0.0500\ttime 0.3346 "
        f"(0.3680)\tloss {4.0 - i / 1000:.4f} (4.1)\tgrad_norm 2.31 (2.10)\tmem 4954MB"
        for i in range(0, 1251, 250)
    ]
    path = tmp_path / "output.log"
    path.write_text("\n".join(lines) + "\n")
    (a,) = trainlens.analyze(path)
    run = a.run
    assert run.metadata["text_shapes"] == {"swin": 12}
    assert run.series_frame("train/loss").get_column("step").to_list() == list(range(6))
    val = run.series_frame("val/loss")
    assert val.get_column("value").to_list()[0] == 1.3  # the running mean, not the batch's
    assert run.series_frame("mem/allocated").get_column("value")[0] == 4954 * 2**20
    path.write_text("\n".join(full) + "\n")
    (b,) = trainlens.analyze(path)
    assert b.run.series_frame("train/loss").get_column("step").to_list() == [
        3 * 1251 + i for i in range(0, 1251, 250)
    ]
    assert not b.run.has("eta") and not b.run.has("wd")
    # a copy that prints `key: value` pairs
    path.write_text(
        "".join(f"Train: [{e}/10] loss: {1 - e / 20:.3f}, acc: 0.5\n" for e in range(10))
    )
    (c,) = trainlens.analyze(path)
    assert c.run.series_frame("train/loss").height == 10
