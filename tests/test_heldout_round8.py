"""Rules from the eighth held-out round of issue 26 (docs/formats.md, "Held-out check"):
each file written in the layout its writer's code prints (the writers are training
scripts that do not install: YOLOv5's train.py, PaddleClas' and MXNet's loggers), quoting
the lines of the public logs the round read.

- YOLOv5 ≤ v5.0 / YOLOv7 ``results.txt`` (no header): read by its train.py's layout.
- A log that restored a training checkpoint before its first step resumes a run: its
  flat loss is an info, not "the loss has not decreased" (a real OLMo continued run).
- PaddleClas' ``[Train][Epoch e/E][Iter: i/n]`` lines and its evaluation's means.
- MXNet's Speedometer ``Epoch[e] Batch [i]`` lines, with no per-epoch count.
- The general reader leaves out a configuration a relaunch prints between two steps.
- LR007 leaves out a rise after decay that stays under 1 % of the peak.
- A UTF-16 file (PowerShell's ``>``) is refused with how to convert it.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

import trainlens
from trainlens.readers._run_resume import restored_in

# ---- YOLOv5's results.txt -----------------------------------------------------------------


def _yolov5_line(epoch: int, epochs: int, parts: list[float], results: list[float]) -> str:
    """One line as YOLOv5 v5.0's train.py writes it: ``s = ('%10s' * 2 + '%10.4g' * 6) %
    ('%g/%g' % (epoch, epochs - 1), mem, *mloss, targets.shape[0], imgs.shape[-1])`` then
    ``f.write(s + '%10.4g' * 7 % results + '\\n')``; ``mem = '%.3gG' % (memory_reserved /
    1E9)``. ``parts``: the mean loss parts and their total (mloss)."""
    mem = "%.3gG" % (1.86 + 0.01 * min(epoch, 3))
    s = ("%10s" * 2 + "%10.4g" * (len(parts) + 2)) % (
        "%g/%g" % (epoch, epochs - 1),  # noqa: UP031 (the writer's own format)
        mem,
        *parts,
        24 + epoch % 7,
        416,
    )
    return s + "%10.4g" * 7 % tuple(results) + "\n"


def _yolov5_run(path: Path, epochs: int = 30, f1: bool = False, landmark: bool = False) -> None:
    lines = []
    for e in range(epochs):
        box, obj, cls = 0.1 - 0.0015 * e, 0.09 - 0.0005 * e, 0.0
        parts = [box, obj, cls] + ([0.3 - 0.002 * e] if landmark else [])
        p, r = 0.05 + 0.008 * e, 0.1 + 0.02 * e
        fourth = 2 * p * r / (p + r) if f1 else 0.001 + 0.009 * e
        results = [p, r, 0.005 + 0.017 * e, fourth, 0.09 - 0.0014 * e, 0.055, 0.0]
        lines.append(_yolov5_line(e, epochs, [*parts, sum(parts)], results))
    path.write_text("".join(lines))


def test_yolov5_results_txt_is_read_by_its_train_py_layout(tmp_path: Path) -> None:
    path = tmp_path / "runs" / "train" / "exp" / "results.txt"
    path.parent.mkdir(parents=True)
    _yolov5_run(path)
    (a,) = trainlens.analyze(path)
    run = a.run
    assert run.format == "csv" and run.metadata["framework"] == "yolov5"
    steps = run.series_frame("train/loss").get_column("step").to_list()
    assert steps == list(range(30))  # the epoch, from 0 (as its TensorBoard)
    loss = run.series_frame("train/loss").get_column("value").to_list()
    assert loss[0] == pytest.approx(0.19, abs=1e-4)  # the logged total
    for name in ("train/box_loss", "val/box_loss", "metrics/mAP_0.5", "metrics/mAP_0.5:0.95"):
        assert run.has(name), name
    mem = run.series_frame("mem/reserved").get_column("value").to_list()
    assert mem[0] == pytest.approx(1.86e9)  # GB of 10^9 bytes
    assert run.metadata["max_steps"] == 29
    assert any("YOLOv5-style results.txt" in i.message for i in run.data_quality)
    assert not [f for f in a.findings if f.severity != "info"]
    # its folder (hyp.yaml and opt.yaml beside, no TensorBoard) reads the same file
    (path.parent / "hyp.yaml").write_text("lr0: 0.01\nbox: 0.05\n")
    (path.parent / "opt.yaml").write_text("epochs: 30\n")
    (b,) = trainlens.analyze(path.parent)
    assert b.run.series_frame("train/loss").get_column("step").to_list() == steps


def test_yolov3_archive_f1_and_yolov5_face_landmark_layouts(tmp_path: Path) -> None:
    f1 = tmp_path / "v3" / "results.txt"
    f1.parent.mkdir()
    _yolov5_run(f1, f1=True)
    (a,) = trainlens.analyze(f1)
    assert a.run.has("metrics/F1") and not a.run.has("metrics/mAP_0.5:0.95")
    face = tmp_path / "face" / "results.txt"
    face.parent.mkdir()
    (face.parent / "hyp.yaml").write_text("box: 0.05\ncls: 0.5\nlandmark: 0.005\nobj: 1.0\n")
    _yolov5_run(face, landmark=True)
    (b,) = trainlens.analyze(face)
    assert b.run.has("train/landmark_loss") and b.run.has("metrics/mAP_0.5:0.95")
    assert b.run.series_frame("train/loss").get_column("value")[0] == pytest.approx(0.49)


def test_a_cut_last_line_of_results_txt_is_said_and_the_rest_kept(tmp_path: Path) -> None:
    path = tmp_path / "results.txt"
    _yolov5_run(path, epochs=12)
    text = path.read_text()
    path.write_text(text + text.splitlines()[-1][:37])  # a line cut while written
    (a,) = trainlens.analyze(path)
    assert a.run.series_frame("train/loss").height == 12
    bad = [i for i in a.run.data_quality if i.kind == "malformed-line"]
    assert bad and bad[0].location == "line 13"


# ---- a run that restored a training checkpoint ---------------------------------------------


def _olmo_like(path: Path, setup: str) -> None:
    """OLMo's stdout (AntonioLopardo/OLMo training.log): set-up lines, then a block per
    step; the loss flat at ~3.0 from step 1 (a continued run of a trained 1B model)."""
    out = setup
    for step in range(1, 301):
        loss = 3.0 + 0.04 * math.sin(step * 1.7) + 0.02 * math.cos(step * 0.31)
        out += (
            f"2025-12-12 11:05:02.009\thost:0\tolmo.train:979\tINFO\t[step={step}/15000,epoch=0]\n"
            f"    optim/total_grad_norm=0.2{step % 7}\n"
            f"    train/CrossEntropyLoss={loss:.3f}\n"
        )
    path.write_text(out)


def test_a_flat_loss_after_a_restored_checkpoint_is_a_resumed_run(tmp_path: Path) -> None:
    path = tmp_path / "training.log"
    _olmo_like(
        path,
        "2025-12-12 11:03:43.396\thost:0\ttrain:352\tINFO\tLoading checkpoint from ckpt/latest\n"
        "2025-12-12 11:04:38.164\thost:0\tolmo.train:409\tINFO\tResetting learning rate...\n"
        "2025-12-12 11:04:38.165\thost:0\tolmo.train:421\tINFO\tRestoring RNG states...\n",
    )
    (a,) = trainlens.analyze(path)
    assert a.run.metadata["restored_checkpoint"] == "line 3: `Restoring RNG states...`"
    (flat,) = [f for f in a.findings if f.code == "LOSS002"]
    assert flat.severity == "info" and "restored a training checkpoint" in flat.message


def test_loading_pretrained_weights_is_no_restored_run(tmp_path: Path) -> None:
    path = tmp_path / "training.log"
    _olmo_like(
        path,
        "Loading checkpoint shards: 100%|##########| 2/2 [00:03<00:00]\n"
        "resume_from_checkpoint=None\nresume: true\n",
    )
    (a,) = trainlens.analyze(path)
    assert "restored_checkpoint" not in a.run.metadata
    (flat,) = [f for f in a.findings if f.code == "LOSS002"]
    assert flat.severity == "warning"


@pytest.mark.parametrize(
    ("line", "found"),
    [
        ("Continuing training from checkpoint, will skip to saved global_step", True),
        ("Restoring states from the checkpoint path at /w/epoch=3.ckpt", True),
        ("mmengine - INFO - Auto resumed from the latest checkpoint /w/epoch_3.pth", True),
        ("Resuming training from epoch 5", True),
        ("[Checkpointer] Loading from R-50.pkl ...", False),
        ("config: resumed=False", False),
    ],
)
def test_restore_lines_of_the_trainers(line: str, found: bool) -> None:
    head = f"set-up\n{line}\nstep 1 loss 2.0\n".encode()
    assert (restored_in(head, 3) is not None) is found
    assert restored_in(head, 2) is None  # (after the first step: not the run's start)


# ---- PaddleClas and MXNet ----------------------------------------------------------------


def test_paddleclas_train_and_eval_lines(tmp_path: Path) -> None:
    """robinbg/PaddleClas output/train.log's lines (ppcls 2.5)."""
    head = "[2022/10/07 21:46:40] ppcls INFO: "
    out = ""
    for e in range(1, 6):
        for i in range(0, 98, 10):
            loss = 6.9 - 0.3 * e - 0.001 * i
            out += (
                f"{head}[Train][Epoch {e}/400][Iter: {i}/98]lr(LinearWarmup): 0.0000{e}204, "
                f"CELoss: {loss:.5f}, loss: {loss:.5f}, batch_cost: 0.49343s, reader_cost: "
                "0.00027, ips: 259.40864 samples/s, eta: 2 days, 20:58:19\n"
            )
        out += f"{head}[Train][Epoch {e}/400][Avg]CELoss: 6.92425, loss: 6.92425\n"
        out += f"{head}[Eval][Epoch {e}][Iter: 0/25]CELoss: 6.9, loss: 6.9, top1: 0.0, top5: 0.0\n"
        out += f"{head}[Eval][Epoch {e}][Avg]CELoss: 6.5, loss: 6.5, top1: 0.0{e}, top5: 0.1\n"
        out += f"{head}[Eval][Epoch {e}][best metric: 0.00146]\n"
    path = tmp_path / "train.log"
    path.write_text(out)
    (a,) = trainlens.analyze(path)
    run = a.run
    assert run.metadata["text_shapes"]["paddleclas"] == 55
    steps = run.series_frame("train/loss").get_column("step").to_list()
    assert steps[:2] == [0, 10] and steps[10] == 98  # (epoch - 1) × 98 + iter
    assert run.series_frame("val/top1").get_column("step").to_list() == [90, 188, 286, 384, 482]
    assert run.has("lr") and run.has("step_time") and not run.has("eta")


def test_mxnet_speedometer_lines(tmp_path: Path) -> None:
    """Spark001/AsymmNet checkpoints/log.txt (GluonCV's train_imagenet.py)."""
    out = "Namespace(batch_size=256, lr=0.4, num_epochs=360)\n"
    for e in range(4):
        for b in range(49, 650, 50):
            out += (
                f"Epoch[{e}] Batch [{b}]\tSpeed: 3962.536041 samples/sec\t"
                f"accuracy={0.1 * e + b / 10000:.6f}\tlr=0.166453\n"
            )
        out += f"[Epoch {e}] training: accuracy=0.065053\n"
        out += f"[Epoch {e}] speed: 3815 samples/sec\ttime cost: 343.580997\n"
        out += f"[Epoch {e}] validation: top1=0.{17 + e} top5=0.379668\n"
    path = tmp_path / "log.txt"
    path.write_text(out)
    (a,) = trainlens.analyze(path)
    run = a.run
    steps = run.series_frame("train/accuracy").get_column("step").to_list()
    assert steps[:2] == [49, 99] and steps[13] == 699 + 49  # e × (649 + 50) + i
    assert run.series_frame("val/top1").get_column("value").to_list() == [0.17, 0.18, 0.19, 0.2]
    assert run.has("samples_per_sec")
    assert not [i for i in run.data_quality if i.kind == "restart"]


# ---- the general reader: a configuration between two steps ---------------------------------


def test_a_configuration_printed_by_a_relaunch_is_no_metric(tmp_path: Path) -> None:
    """maskrcnn-benchmark's trainer lines, a relaunch printing its yacs config between two
    steps (qiuyuchen14/maskrcnn-benchmark checkpoints/log.txt); an evaluation's block of 7
    lines is kept."""
    head = "2020-02-28 16:13:30,732 maskrcnn_benchmark.trainer INFO: "

    def steps(a: int, b: int) -> str:
        return "".join(
            f"{head}eta: 6:12:33  iter: {i}  loss: {2.0 - i / 1000:.4f} (2.5)  lr: 0.0025\n"
            for i in range(a, b, 20)
        )

    config = "Running with config:\nMODEL:\n" + "".join(f"  KEY_{k}: {k / 10}\n" for k in range(14))
    evaluation = "Evaluation:\n" + "".join(f"  metric_{k}: 0.{k}\n" for k in range(7))
    path = tmp_path / "log.txt"
    path.write_text(steps(20, 500) + evaluation + steps(500, 1000) + config + steps(1000, 1400))
    (a,) = trainlens.analyze(path)
    run = a.run
    assert not any(m.startswith("KEY_") for m in run.metrics)
    assert run.has("metric_3") and run.series_frame("metric_3").get_column("step")[0] == 480
    assert any("a configuration a relaunch printed" in i.message for i in run.data_quality)


# ---- LR007: a rise under 1 % of the peak -----------------------------------------------------


def _cosine_past_its_end(path: Path, rise_to: float) -> None:
    out = ""
    for step in range(0, 4000, 10):
        t = min(step / 3800, 1.0)
        lr = 1e-3 * 0.5 * (1 + math.cos(math.pi * t)) if step < 3800 else 1e-8
        if step >= 3900:
            lr = rise_to * (step - 3890) / 100
        out += f'{{"step": {step}, "lr": {lr:.8f}, "loss": {3.0 - step / 4000:.4f}}}\n'
    path.write_text(out)


def test_an_lr_rise_under_a_percent_of_the_peak_is_no_anomaly(tmp_path: Path) -> None:
    low, high = tmp_path / "low.jsonl", tmp_path / "high.jsonl"
    _cosine_past_its_end(low, 9e-8)  # PaddleClas: 1e-08 → 9e-08 of a 1e-3 peak
    _cosine_past_its_end(high, 2e-4)
    (a,) = trainlens.analyze(low)
    assert not [f for f in a.findings if f.code == "LR007"]
    (b,) = trainlens.analyze(high)
    assert [f for f in b.findings if f.code == "LR007"]


# ---- UTF-16 ----------------------------------------------------------------------------------


def test_a_utf16_log_is_read_as_its_text(tmp_path: Path) -> None:
    """h31263219/2026ImageClassification_HW3 output/train.log, written by PowerShell's `>`:
    it was "not a format trainlens knows"."""
    path = tmp_path / "train.log"
    text = "".join(f"Epoch {e}/10, Train Loss: {1 / (e + 1):.4f}\r\n" for e in range(1, 11))
    path.write_bytes(text.encode("utf-16"))  # (a byte-order mark, then UTF-16 LE)
    (a,) = trainlens.analyze(path)
    run = a.run
    assert run.source == str(path) and run.name == tmp_path.name  # (its folder's name)
    assert run.series_frame("train/loss").get_column("step").to_list() == list(range(1, 11))
    assert run.data_quality[0].kind == "encoding" and "UTF-16" in run.data_quality[0].message
    assert all(str(path.parent) in i.source for i in run.data_quality)
    empty = tmp_path / "empty.log"
    empty.write_bytes("no metrics here\r\n".encode("utf-16"))
    with pytest.raises(trainlens.UnreadableInputError, match=str(empty)):
        trainlens.analyze(empty)


def test_a_log_whose_only_shape_follows_steps_is_read_by_the_general_reader(
    tmp_path: Path,
) -> None:
    """The same HW3 log: hand-rolled `Epoch 0 [20/188] loss=…` lines with pycocotools'
    summary after each epoch; the summary's shape takes no step of its own, so the file
    was read as nothing."""
    out = ""
    for e in range(4):
        for i in range(0, 188, 20):
            out += f"Epoch {e} [{i:4d}/188] loss={2 - 0.3 * e - i / 1000:.4f} lr=2.00e-05 (1.1s)\n"
        out += (
            " Average Precision  (AP) @[ IoU=0.50:0.95 | area=   all | maxDets=100 ] = "
            f"0.{30 + e}\n"
        )
    path = tmp_path / "train.log"
    path.write_text(out)
    (a,) = trainlens.analyze(path)
    run = a.run
    assert run.has("train/loss") and run.has("val/coco/ap")
    assert not run.has("IoU") and not run.has("maxDets")


# ---- the general reader: an epoch named on several lines, each its own ---------------------


def test_an_epoch_on_several_lines_of_different_names_is_the_step(tmp_path: Path) -> None:
    """Ma-787639046/NLP_Trans output/train.log: each epoch is named by a start line, its
    loss line, a validation line and a save line; no name repeats within an epoch, so the
    epoch is the step (not the count of lines naming it). A per-batch log, whose loss
    repeats within an epoch, still counts its lines."""
    head = "[INFO] 2021-12-25 21:43:42,093 : "
    out = ""
    for e in range(1, 13):
        out += f"{head}[Epoch {e}/ Rank 0] Trainging...\n"
        out += f"{head}Epoch: {e:2d}, loss: {9 - 0.5 * e:.3f}\n"
        out += f"{head}[Epoch {e}] Validating...\n"
        out += f"{head}Epoch: {e:2d}, dev_bleu: {0.5 * e:.2f}, dev_loss: {8 - 0.4 * e:.3f}\n"
    path = tmp_path / "train.log"
    path.write_text(out)
    (a,) = trainlens.analyze(path)
    assert a.run.series_frame("train/loss").get_column("step").to_list() == list(range(1, 13))
    batches = tmp_path / "batches.log"
    batches.write_text(
        "".join(f"Epoch {e} - Batch loss: {5 - 0.01 * i:.3f}\n" for e in range(3) for i in range(8))
    )
    (b,) = trainlens.analyze(batches)
    assert b.run.series_frame("Batch loss").get_column("step").to_list() == list(range(1, 25))


def test_a_loggers_name_and_level_are_no_key(tmp_path: Path) -> None:
    """JessicaAuditore/DBNet output/train.log: `DBNet INFO: [1/200], [1/755], global_step:
    1, …` read `DBNet INFO` as a metric of value 1."""
    head = "2021-01-31 17:41:33,637 DBNet INFO: "
    path = tmp_path / "train.log"
    path.write_text(
        "".join(
            f"{head}[1/200], [{i}/755], global_step: {i}, speed: 0.5 samples/sec, acc: 0.48, "
            f"loss: {10.8 - 0.01 * i:.4f}, lr:0.000333333, time:12.84\n"
            for i in range(1, 40)
        )
    )
    (a,) = trainlens.analyze(path)
    assert a.run.has("train/loss") and not [m for m in a.run.metrics if "INFO" in m]


def test_counters_written_against_their_names_in_brackets(tmp_path: Path) -> None:
    """1490780232/ranzcr_clip_catether_line_classifiation log/log.txt (reid-strong-
    baseline's ignite logger): `Epoch[2] Iteration[150/3385] Loss: 0.216, Acc: 0.909, Base
    Lr: 7.28e-05` was "no training metrics found"."""
    head = "2021-02-09 12:27:54,228 baseline.train INFO: "
    path = tmp_path / "log.txt"
    path.write_text(
        "".join(
            f"{head}Epoch[{e}] Iteration[{i}/400] Loss: {0.5 - 0.01 * e - i / 1e5:.3f}, "
            f"Acc: 0.9, Base Lr: 7.28e-05\n"
            for e in range(1, 6)
            for i in range(50, 401, 50)
        )
    )
    (a,) = trainlens.analyze(path)
    steps = a.run.series_frame("train/loss").get_column("step").to_list()
    assert steps[:2] == [50, 100] and steps[8] == 450  # (epoch - 1) × 400 + iteration
    assert a.run.has("lr")
