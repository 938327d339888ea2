"""Rules from the tenth held-out round of issue 26 (docs/formats.md, "Held-out check"):
each file is a small synthetic excerpt written here in the shape of the public log the
round read (its origin, repository @ commit and path, named in each test), never its
bytes.

- A line of ``name:value`` cells is a log line, not a CSV header; ``iters`` is a step.
- DeiT's ``log.txt`` (DETR's layout without COCO): ``test_*`` are the validation set's.
- A result on a line of its own after each epoch is the epoch's; a running best is not
  the metric itself.
- A copula after a name (``loss is:``) is no part of it; a line announcing an
  evaluation names the split of the line after it.
- A batch counter with its total, of any name or none, after the epoch is the step
  within the epoch; a figure per tensor between two steps is no step's value.
- A printed config's list is no step.
- A name with its unit in brackets (``Time (mins)``) is one name.
- A per-epoch test accuracy takes the validation's name when no validation series has it.
- A text in a legacy Chinese code page is decoded by rule and its Chinese names read.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import trainlens
from trainlens.readers import _sniff


def _analyze(path: Path) -> trainlens.Analysis:
    (a,) = trainlens.analyze(path)
    return a


# ---- a key/value log with commas is no CSV -------------------------------------------------


def test_name_value_cells_are_a_log_not_a_csv_header(tmp_path: Path) -> None:
    """Serendipity-luck/DeepLab-V1-PyTorch @ab3b173, exp/log.txt: `<date> <time> iters:
    100, loss:1.3818, accuracy:0.6422` lines were sniffed as a CSV ("no numeric metric
    columns found")."""
    path = tmp_path / "log.txt"
    path.write_text(
        "".join(
            f"2024-01-30 21:{22 + i}:28 iters: {100 * (i + 1)}, loss:{1.4 - 0.1 * i:.4f}, "
            f"accuracy:{0.64 + 0.02 * i:.4f}\n"
            for i in range(9)
        )
    )
    assert not _sniff_csv(path)
    run = _analyze(path).run
    assert run.format == "text"
    steps, loss = run.series("train/loss")
    assert steps.tolist() == [100 * (i + 1) for i in range(9)]
    assert loss[0] == pytest.approx(1.4)
    assert run.has("train/accuracy") and "iters" not in run.metrics


def _sniff_csv(path: Path) -> bool:
    from trainlens.readers import csv

    return csv.sniff(path, path.read_bytes()[:4096])


def test_a_real_csv_header_is_still_a_csv(tmp_path: Path) -> None:
    path = tmp_path / "log.csv"
    path.write_text("step,loss,lr\n1,2.0,0.1\n2,1.9,0.1\n3,1.8,0.1\n")
    assert _sniff_csv(path)
    assert _analyze(path).run.format == "csv"


# ---- DeiT's log.txt -----------------------------------------------------------------------


def test_deit_log_txt_reads_its_test_stats_as_validation(tmp_path: Path) -> None:
    """JER-ry/CF-ViT @0afa441, output/log.txt: DeiT's main.py `log_stats` (`train_lr`,
    `train_loss`, `test_<res>_acc1` … per resolution, `epoch`, `n_parameters`), no test
    loss: its `test_*` kept their names and `train_lr` was no LR."""
    path = tmp_path / "log.txt"
    with path.open("w") as f:
        for epoch in range(8):
            log = {
                "train_lr": 1e-6 + 1e-4 * min(epoch, 4) / 4,
                "train_loss": 6.9 - 0.3 * epoch,
                "test_96_acc1": 50.0 + epoch,
                "test_384_acc1": 55.0 + 2 * epoch,
                "test_384_acc5": 80.0 + epoch,
                "epoch": epoch,
                "n_parameters": 22_000_000,
            }
            f.write(json.dumps(log) + "\n")
    run = _analyze(path).run
    assert run.metadata["framework"] == "deit"
    assert run.series_frame("val/384_acc1").get_column("value").to_list()[:2] == [55.0, 57.0]
    assert run.series_frame("lr").height == 8 and run.has("train/loss")
    assert "n_parameters" not in run.metrics and not any(m.startswith("test_") for m in run.metrics)
    assert any("DeiT" in i.message for i in run.data_quality)


def test_a_json_lines_file_of_train_and_test_keys_alone_needs_the_layouts_marks(
    tmp_path: Path,
) -> None:
    """Without a test loss or the parameter count, `train_*`/`test_*` keys are no DeiT
    log (any script may name its keys so): the names stay as they are."""
    path = tmp_path / "log.jsonl"
    path.write_text(
        "".join(
            json.dumps({"epoch": e, "train_loss": 2.0 - 0.1 * e, "test_acc": 0.5}) + "\n"
            for e in range(6)
        )
    )
    run = _analyze(path).run
    assert run.metadata.get("framework") != "deit"


# ---- a result on a line of its own; a running best ------------------------------------------


def test_an_epochs_result_on_its_own_line_and_a_running_best(tmp_path: Path) -> None:
    """120205690/LLMSystems-Minitorch-Framework @3e225de, training_log.txt: `Epoch N,
    loss …, train accuracy: …%`, then `Validation accuracy: …%` and `Best Valid accuracy:
    …%` each on a line of its own: the validation accuracy was left out (a lone pair)."""
    path = tmp_path / "training_log.txt"
    out = ""
    best = 0
    for e in range(1, 21):
        val = 50 + e if e % 3 else 45 + e
        best = max(best, val)
        out += f"Epoch {e}, loss {0.7 - 0.01 * e}, train accuracy: {54 + e:.2f}%\n"
        out += f"Validation accuracy: {val:.2f}%\nBest Valid accuracy: {best:.2f}%\n"
    path.write_text(out)
    run = _analyze(path).run
    steps, acc = run.series("val/accuracy")
    assert steps.tolist() == list(range(1, 21))
    assert acc[2] == pytest.approx(0.48) and acc[3] == pytest.approx(0.54)  # not the best
    assert run.series("best Valid accuracy")[1][2] == pytest.approx(0.52)


def test_a_line_that_says_best_keeps_its_step(tmp_path: Path) -> None:
    """`New best! epoch 5 val_loss: 0.3`: the pairs are the best so far, the epoch is still
    the line's step."""
    path = tmp_path / "train.log"
    out = ""
    for e in range(1, 11):
        out += f"epoch {e} loss: {1 - 0.05 * e:.3f} val_loss: {1.1 - 0.04 * e:.3f}\n"
        if e % 3 == 0:
            out += f"New best! epoch {e} val_loss: {1.1 - 0.04 * e:.3f}\n"
    path.write_text(out)
    run = _analyze(path).run
    assert run.series("best val_loss")[0].tolist() == [3, 6, 9]
    assert run.series("val/loss")[0].tolist() == list(range(1, 11))
    assert "best epoch" not in run.metrics


def test_a_configuration_value_said_once_is_still_left_out(tmp_path: Path) -> None:
    """The rule above keeps a lone pair said after most steps, not one said once."""
    path = tmp_path / "train.log"
    out = "batch_size: 64\n"
    for e in range(1, 11):
        out += f"Epoch {e}, loss {1 - 0.05 * e}, acc: {0.5 + 0.01 * e}\n"
    path.write_text(out)
    run = _analyze(path).run
    assert "batch_size" not in run.metrics and run.has("train/loss")


# ---- `loss is:`; a line announcing the evaluation ------------------------------------------


def test_a_copula_is_no_part_of_a_name_and_an_announced_evaluation_is_val(
    tmp_path: Path,
) -> None:
    """AIHHU/PaddleCIFAR10 @d81e600, training_log.txt: `epoch: 0,  loss is: 0.63, acc is:
    0.78` for training, the same after a `testing in eval mode……` line for the
    evaluation: only `epoch` was read (`loss is` held a function word)."""
    path = tmp_path / "training_log.txt"
    out = "testing in eval mode……\nepoch: 0,  loss is: 2.50, acc is: 0.07\n"
    for e in range(12):
        out += f"epoch: {e},  loss is: {0.63 - 0.04 * e}, acc is: {0.78 + 0.01 * e}\n"
        out += "testing in eval mode……\n"
        out += f"epoch: {e},  loss is: {0.49 - 0.02 * e}, acc is: {0.83 + 0.005 * e}\n"
        out += "Now continue training……\n"
    path.write_text(out)
    run = _analyze(path).run
    steps, loss = run.series("train/loss")
    assert steps.tolist() == list(range(12)) and loss[0] == pytest.approx(0.63)
    vsteps, vloss = run.series("val/loss")
    assert vsteps.tolist() == list(range(12)) and vloss[1] == pytest.approx(0.47)
    assert run.has("val/acc") and "epoch" not in run.metrics


# ---- a batch counter after the epoch, named or not ---------------------------------------


def test_a_counter_of_any_name_after_the_epoch_is_the_batch(tmp_path: Path) -> None:
    """utkarshsharma00/equicat @3885da9, output/training.log: `Epoch [1/10], Sample [1/5],
    Loss: -1.306412, LR: 0.001000`, each followed by `Gradient stats for <tensor>:` and
    `  Norm: …, Mean: …, Std: …` per tensor: "no training metrics found" (`Change from
    previous epoch: 1.58` was taken for an epoch)."""
    path = tmp_path / "training.log"
    head = "2024-09-10 11:08:05,789 - INFO - "
    out = ""
    for e in range(1, 5):
        out += f"{head}Starting epoch {e}/4\n"
        for i in range(1, 6):
            out += f"{head}Epoch [{e}/4], Sample [{i}/5], Loss: {-1.3 - 0.1 * e:.6f}, LR: 0.001\n"
            for t in ("a.weight", "b.weight", "c.weight"):
                out += f"{head}Gradient stats for {t}:\n"
                out += f"{head}  Norm: {0.1 * i:.6f}, Mean: -0.0003, Std: 0.0038\n"
        out += f"{head}Epoch [{e}/4], Average Loss: {-1.4 - 0.1 * e:.6f}, Final LR: 0.001\n"
        out += f"{head}    Change from previous epoch: 1.582983\n"
    path.write_text(out)
    a = _analyze(path)
    run = a.run
    steps, _ = run.series("train/loss")
    assert steps.tolist() == list(range(1, 21))  # (epoch - 1) × 5 + sample
    assert not run.has("grad_norm")  # a tensor's norm, one of three at each step
    assert any("per tensor" in i.message for i in run.data_quality)
    assert not [f for f in a.findings if f.code.startswith("GRAD")]


def test_an_unnamed_counter_after_the_epoch_is_the_batch(tmp_path: Path) -> None:
    """h31263219/2026ImageClassification_HW3 @0369956, output/train.log (round 8, 13):
    `Epoch 0 [  20/188] loss=… lr=…` counted lines as steps; and an `Epoch 0 val acc:`
    line after the batches, with no batch, is the epoch's."""
    path = tmp_path / "train.log"
    out = ""
    for e in range(3):
        for i in range(20, 188, 40):
            out += f"Epoch {e} [{i:4d}/188] loss={2 - 0.3 * e - i / 1000:.4f} lr=2.00e-05\n"
        out += f"Epoch {e} val acc: {0.4 + 0.1 * e:.2f}\n"
    path.write_text(out)
    run = _analyze(path).run
    steps, _ = run.series("train/loss")
    assert steps.tolist() == [e * 188 + i for e in range(3) for i in range(20, 188, 40)]
    vsteps, acc = run.series("val/accuracy")
    assert vsteps.tolist() == [180, 368, 556] and acc[1] == pytest.approx(0.5)


# ---- a printed config's list; a name with its unit -------------------------------------------


def test_a_printed_configs_list_is_no_step(tmp_path: Path) -> None:
    """AI-Zhpp/CMT @efb7b6a, output/log.txt: reid-strong-baseline's yacs dump (`STEPS:
    [50, 70, 90]`) before two `Epoch[1] Iteration[50/436] Loss: …` lines: `STEPS` was the
    step, and "no training metrics found"."""
    path = tmp_path / "log.txt"
    out = "SOLVER:\n  BASE_LR: 0.00035\n  STEPS: [50, 70, 90, 110]\n  GAMMA: 0.4\n"
    out += "Running with config:\nSOLVER:\n  STEPS: [50, 70, 90, 110]\n"
    for i in (50, 100, 150):
        out += (
            "2024-01-05 17:11:51,638 reid_baseline.train INFO: Epoch[1] "
            f"Iteration[{i}/436] Loss: {148.5 - i / 50:.3f}, Acc: 0.012, Base Lr: 3.82e-05\n"
        )
    path.write_text(out)
    run = _analyze(path).run
    assert run.series("train/loss")[0].tolist() == [50, 100, 150]
    assert run.has("lr")


def test_a_name_and_its_unit_in_brackets_is_one_name(tmp_path: Path) -> None:
    """3ZadeSSG/Automatic-Image-Captioning @4950746, training_log.txt: `Epoch [2/2], Step
    [1/12942], Loss: 2.3066, Perplexity: 10.0401, Time (mins): 0.015`: a metric `mins)`."""
    path = tmp_path / "training_log.txt"
    path.write_text(
        "".join(
            f"Epoch [1/1], Step [{i}/12], Loss: {2.3 - 0.01 * i:.4f}, Perplexity: 9.9, "
            f"Time (mins): {0.012 * i:.3f}\n"
            for i in range(1, 13)
        )
    )
    run = _analyze(path).run
    assert "Time (mins)" in run.metrics and "mins)" not in run.metrics


# ---- a test set in the validation's role ---------------------------------------------------


def test_a_per_epoch_test_accuracy_is_the_held_out_set_when_no_validation(
    tmp_path: Path,
) -> None:
    """5697526/CIFAR-10-Network @02e9745, training.log (round 8, 5) and
    111223-oss/EViT-Jittor-Reproduction @80e91de, logs/train_log.txt (round 9, 4):
    `Epoch 1/35, Train Loss: …, Test Acc: 59.86%` and no validation series: the test set
    is the held-out set the user watches; named val/accuracy."""
    path = tmp_path / "training.log"
    path.write_text(
        "".join(
            f"Epoch {e}/12, Train Loss: {1.5 - 0.1 * e:.4f}, Test Acc: {50 + 2 * e:.2f}%\n"
            for e in range(1, 13)
        )
    )
    run = _analyze(path).run
    assert run.series("val/accuracy")[1][0] == pytest.approx(0.52)


def test_a_test_accuracy_beside_a_validation_one_keeps_its_name(tmp_path: Path) -> None:
    path = tmp_path / "training.log"
    path.write_text(
        "".join(
            f"Epoch {e}/12, Train Loss: {1.5 - 0.1 * e:.4f}, Test Acc: {40 + e:.2f}%, "
            f"Val Acc: {50 + e:.2f}%\n"
            for e in range(1, 13)
        )
    )
    run = _analyze(path).run
    assert run.series("val/accuracy")[1][0] == pytest.approx(0.51)
    assert run.series("Test Acc")[1][0] == pytest.approx(0.41)


# ---- a legacy Chinese code page; Chinese names --------------------------------------------


def _gbk_log() -> str:
    out = "模型训练开始，起始时间：2024-07-13 06:23:43.091239\n"
    for e in range(3):
        for i in range(10, 60, 10):
            out += (
                f"当前Batch：{i}/50 | 当前epoch:{e}/50 | 当前损失值：{10 - e - i / 100:.4f} "
                f"| 当前准确率：{e + i / 100:.2f}%\n"
            )
        out += "最佳模型保存成功！\n"
    return out


def test_a_gbk_log_is_decoded_and_its_chinese_names_read(tmp_path: Path) -> None:
    """davidsongtao/Medical_QA_System_GPT2 @9b7d88a, logs/train_log.txt (round 9, 5): GBK
    bytes (a Chinese Windows console), `当前Batch：10/6035 | 当前epoch:0/50 | 当前损失值：
    10.113 | 当前准确率：0.00%` with full-width colons: not read."""
    path = tmp_path / "train_log.txt"
    path.write_bytes(_gbk_log().encode("gbk"))
    assert _sniff.legacy_codec(path.read_bytes()) is not None
    run = _analyze(path).run
    steps, loss = run.series("train/loss")
    assert steps.tolist() == [e * 50 + i for e in range(3) for i in range(10, 60, 10)]
    assert loss[0] == pytest.approx(9.9)
    assert run.has("train/accuracy")
    note = run.data_quality[0]
    assert note.kind == "encoding" and "GB18030" in note.message


def test_the_same_log_in_utf8_reads_alike_and_latin1_is_no_chinese(tmp_path: Path) -> None:
    utf8 = tmp_path / "utf8.txt"
    utf8.write_text(_gbk_log(), encoding="utf-8")
    run = _analyze(utf8).run
    assert run.series("train/loss")[0].tolist()[:2] == [10, 20]
    assert not any(i.kind == "encoding" for i in run.data_quality)
    latin = "".join(f"époque {e}: café loss={1 - 0.01 * e}\n" for e in range(10))
    assert _sniff.legacy_codec(latin.encode("latin-1")) is None


def test_chinese_epoch_summary_names(tmp_path: Path) -> None:
    """96966/Transformer-Pytorch @e30d088, training_log.txt: batch lines `Epoch:  16 |
    Batch:   920/ 1330 | LR: 2.97e-04 |Loss: 4.6069`, then `Epoch 16 完成 | 训练损失:
    4.6130 | 验证损失: 6.0073 | 时间: 385.8s` (train loss, val loss, time) and `✓
    保存最佳模型，验证损失: 5.9688` (the best model saved): the val loss was not read."""
    path = tmp_path / "training_log.txt"
    out = ""
    for e in range(16, 22):
        for b in range(100, 400, 100):
            out += f"Epoch: {e:3d} | Batch: {b:5d}/ 300 | LR: 2.97e-04 |Loss: {4.6 - e / 100:.4f}\n"
        out += "✓ 保存最佳模型，验证损失: 5.9\n"
        out += f"Epoch {e} 完成 | 训练损失: {4.6 - e / 100:.4f} | 验证损失: {6.0 - e / 1000:.4f}\n"
    path.write_text(out)
    run = _analyze(path).run
    steps, val = run.series("val/loss")
    assert len(steps) == 6 and val[0] == pytest.approx(5.984)
    assert steps[0] == 300  # the last batch of the first epoch


# ---- VAL006: a validation task metric that ended worse than its best ----------------------


def test_a_validation_accuracy_that_fell_after_its_best_is_a_regression(tmp_path: Path) -> None:
    """JER-ry/CF-ViT @0afa441, output/log.txt: top-1 rose to 77.8 % at epoch 199, fell to
    60.5 % by epoch 210 after a loss spike at 201 and ended at 65.0 %: no validation loss
    is logged, so nothing was found. Written in DeiT's log.txt layout."""
    path = tmp_path / "log.txt"
    with path.open("w") as f:
        for epoch in range(60):
            acc = 40 + 0.9 * epoch if epoch < 40 else 60 + 0.1 * (epoch - 40)
            log = {
                "train_lr": 1e-4,
                "train_loss": 6.0 - 0.02 * epoch + (0.6 if epoch == 41 else 0.0),
                "test_acc1": acc + 0.2 * (-1) ** epoch,
                "epoch": epoch,
                "n_parameters": 22_000_000,
            }
            f.write(json.dumps(log) + "\n")
    a = _analyze(path)
    (f,) = [f for f in a.findings if f.code == "VAL006"]
    assert f.metric == "val/acc1" and f.evidence["best_step"] == 39
    assert f.severity.value == "error" and "keep the step-39 checkpoint" in f.message


def test_a_validation_accuracy_still_rising_is_silent(tmp_path: Path) -> None:
    path = tmp_path / "log.txt"
    with path.open("w") as f:
        for epoch in range(60):
            log = {
                "train_loss": 6.0 - 0.02 * epoch,
                "test_acc1": 40 + 0.5 * epoch + 0.3 * (-1) ** epoch,
                "epoch": epoch,
                "n_parameters": 22_000_000,
            }
            f.write(json.dumps(log) + "\n")
    assert not [f for f in _analyze(path).findings if f.code.startswith("VAL")]


# ---- a progressive GAN's [scale : iteration] ----------------------------------------------


def test_a_stage_and_its_iteration_in_brackets(tmp_path: Path) -> None:
    """AIforMS/PGAN-Paddle @6faae6f, logs/train_log.txt (round 9, 8): `[0 :   6700] loss G :
    1.495 loss D : 2.846`, the scale and its iteration, which starts again at each scale;
    a relaunch resumes a saved iteration (`Model found at path …_s0_i300.pdparams,
    pursuing the training`): refused before (no step word)."""
    path = tmp_path / "train_log.txt"
    out = "Running PGAN\nsize (4, 4)\n"
    for i in range(100, 700, 100):
        out += f"[0 : {i:6d}] loss G : {3 - i / 1000:.3f} loss D : {1 + i / 1000:.3f}\n"
    out += "Running PGAN\nModel found at path out_s0_i300.pdparams, pursuing the training\n"
    for i in range(400, 700, 100):  # (400 to 600 done again)
        out += f"[0 : {i:6d}] loss G : 2.500 loss D : 1.500\n"
    out += "size (8, 8)\n"
    for i in range(100, 400, 100):
        out += f"[1 : {i:6d}] loss G : -1.000 loss D : 0.500\n"
    path.write_text(out)
    a = _analyze(path)
    run = a.run
    steps, _ = run.series("loss G")
    assert steps.tolist()[-3:] == [700, 800, 900]  # the scale's iterations after 600
    assert "stage" not in run.metrics and "iter" not in run.metrics
    assert any(f.code == "DATA001" for f in a.findings)  # 400 redone: a real restart
