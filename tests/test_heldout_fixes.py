"""What the held-out public logs of issue 26 showed wrong, each written as its writer writes
it (docs/formats.md, "Held-out check", names the files; they are not in this repo).

- COCO's undefined results: detectron2 writes NaN to TensorBoard for a size with no
  ground truth, OpenMMLab's CocoMetric writes -1; neither is a value gone bad.
- A detector's total loss (a sum of parts) is no cross-entropy over k classes: its level
  says nothing of chance (detectron2 `total_loss` 1.83 read as ln 6 made a detection
  head's `fg_cls_accuracy` "at the chance of 6 classes").
- LLaMA-Factory writes `throughput` 0 when it counts no tokens: no measurement.
- YOLOX's `after_iter` lines and pycocotools' summary lines (written here in the layout
  of YOLOX's `Trainer.after_iter` and `COCOeval.summarize`, checked against the public
  logs tkp153/ML and 851624623/YOLOX; YOLOX pins its own torch and is not installed).
- MMEngine keys with a space (`coco/AP .5`), cut at the space before.
- A log whose last launch finished after earlier crashed ones is finished.
- Two writers appending to one file in turn are no chain of restarts.
- `Val Loss: … | Token Acc: …` repeats a key of the training half: the evaluation's.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from trainlens.api import analyze
from trainlens.core.run import Run
from trainlens.readers import read_runs


def _one(path: Path) -> Run:
    (run,) = read_runs(path)
    return run


def _values(run: Run, metric: str) -> list[float]:
    return run.series_frame(metric).get_column("value").to_list()


def _notes(run: Run) -> str:
    return "\n".join(d.message for d in run.data_quality)


# ---- COCO's undefined results -----------------------------------------------------------


def test_detectron2_tensorboard_nan_ap_is_no_value(tmp_path: Path) -> None:
    """detectron2's TensorboardXWriter puts its evaluation results beside the training
    scalars; a NaN `bbox/APs` (no small objects) drew NAN001 before."""
    torch_tb = pytest.importorskip("torch.utils.tensorboard")
    writer = torch_tb.SummaryWriter(str(tmp_path))
    for it in range(19, 400, 20):
        writer.add_scalar("total_loss", 2.5 * math.exp(-it / 200), it)
        writer.add_scalar("lr", 2e-4, it)
        if it % 100 == 99:
            writer.add_scalar("bbox/AP", 20.0 + it / 10, it)
            writer.add_scalar("bbox/APs", float("nan"), it)
    writer.close()
    (a,) = analyze(tmp_path)
    assert not a.run.has("bbox/APs") or _values(a.run, "bbox/APs") == []
    assert len(_values(a.run, "bbox/AP")) == 4
    assert "NaN result(s) left out" in _notes(a.run)
    assert "NAN001" not in {f.code for f in a.findings}


def test_openmmlab_minus_one_is_no_value(tmp_path: Path) -> None:
    """MMEngine's scalars.json as LoggerHook writes it, with CocoMetric's -1 for sizes
    with no ground truth (and mmpose's names with a space)."""
    vis = tmp_path / "20240101_000000" / "vis_data"
    vis.mkdir(parents=True)
    lines = []
    for epoch in range(1, 6):
        for it in range(10, 60, 10):
            step = (epoch - 1) * 50 + it
            lines.append(
                {"lr": 0.01, "data_time": 0.01, "loss": 2.0 / epoch, "time": 0.3,
                 "epoch": epoch, "iter": step, "memory": 3000, "step": step}
            )  # fmt: skip
        lines.append(
            {"coco/bbox_mAP": 0.1 * epoch, "coco/bbox_mAP_s": -1.0, "coco/AP (M)": -1.0,
             "data_time": 0.1, "time": 0.2, "step": epoch}
        )  # fmt: skip
    (vis / "scalars.json").write_text("".join(json.dumps(x) + "\n" for x in lines))
    run = _one(vis / "scalars.json")
    assert _values(run, "val/coco/bbox_mAP") == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.5])
    assert not run.has("val/coco/bbox_mAP_s") and not run.has("val/coco/AP (M)")
    assert "10 undefined (NaN or -1) result(s) left out" in _notes(run)


# ---- a summed loss and chance --------------------------------------------------------------


def test_a_detectors_total_loss_is_no_ln_k(tmp_path: Path) -> None:
    """detectron2's metrics.json (as JSONWriter writes it) of a short fine-tune: the total
    of five parts at 1.83 is near ln 6, and the detection head's fg_cls_accuracy wandered
    0.46 → 0.02 → 0.30 around 1/6: no finding (it was LOSS004 "at chance of 6 classes")."""
    fg = [0.4581, 0.2279, 0.0244, 0.0179, 0.3013, 0.28]
    total = [2.036, 1.8317, 1.5462, 1.401, 1.2803, 1.2]
    rows = [
        {"data_time": 0.009, "eta_seconds": 1000.0 - i, "fast_rcnn/cls_accuracy": 0.4 + 0.08 * i,
         "fast_rcnn/fg_cls_accuracy": fg[i], "iteration": 19 + 20 * i,
         "loss_box_reg": 0.3, "loss_cls": 0.5, "loss_mask": 0.6, "loss_rpn_cls": 0.1,
         "loss_rpn_loc": 0.1, "lr": 1e-4, "time": 18.0, "total_loss": total[i]}
        for i in range(6)
    ]  # fmt: skip
    path = tmp_path / "metrics.json"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (a,) = analyze(path)
    assert "LOSS004" not in {f.code for f in a.findings}


def test_a_single_cross_entropy_still_meets_chance(tmp_path: Path) -> None:
    """The same accuracy beside one cross-entropy at ln 10 (no parts) is judged: at 1/10."""
    rng = np.random.default_rng(0)
    rows = [
        {"step": s, "loss": math.log(10) - 0.001 * s / 100 + 0.01 * rng.standard_normal(),
         "accuracy": 0.1 + 0.01 * rng.standard_normal()}
        for s in range(0, 2000, 20)
    ]  # fmt: skip
    path = tmp_path / "log.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (a,) = analyze(path)
    assert {"LOSS002", "LOSS004"} & {f.code for f in a.findings}


# ---- LLaMA-Factory: tokens not counted ----------------------------------------------------


def test_llamafactory_zero_throughput_is_no_measurement(tmp_path: Path) -> None:
    rows = [
        {"current_steps": s, "total_steps": 100, "loss": 2.0 - s / 100, "learning_rate": 1e-5,
         "epoch": s / 100, "percentage": s, "elapsed_time": f"0:{s // 60:02d}:{s % 60:02d}",
         "remaining_time": "0:01:00", "throughput": "0.00", "total_tokens": 0}
        for s in range(10, 101, 10)
    ]  # fmt: skip
    path = tmp_path / "trainer_log.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = _one(path)
    assert not run.has("tokens_per_sec") and not run.has("tokens")
    assert "counted no tokens" in _notes(run)
    assert len(_values(run, "train/loss")) == 10


# ---- YOLOX and pycocotools ---------------------------------------------------------------

_YOLOX_PREFIX = "2023-01-13 19:36:11.931 | INFO     | yolox.core.trainer:after_iter:253 - "


def _yolox(epoch: int, it: int, loss: float) -> str:
    return (
        f"{_YOLOX_PREFIX}epoch: {epoch}/3, iter: {it}/30, mem: 4605Mb, iter_time: 0.671s, "
        f"data_time: 0.001s, total_loss: {loss}, iou_loss: 2.0, l1_loss: 0.0, conf_loss: "
        f"6.7, cls_loss: 3.0, lr: 9.965e-08, size: 640, ETA: 0:24:55\n"
    )


_COCO = [
    " Average Precision  (AP) @[ IoU=0.50:0.95 | area=   all | maxDets=100 ] = {ap}",
    " Average Precision  (AP) @[ IoU=0.50      | area=   all | maxDets=100 ] = 0.912",
    " Average Precision  (AP) @[ IoU=0.50:0.95 | area= small | maxDets=100 ] = -1.000",
    " Average Recall     (AR) @[ IoU=0.50:0.95 | area=   all | maxDets=100 ] = 0.850",
]


def test_yolox_lines_and_coco_summary(tmp_path: Path) -> None:
    text = ""
    for epoch in (1, 2, 3):
        for it in (10, 20, 30):
            text += _yolox(epoch, it, round(12.0 - epoch - it / 30, 3))
        text += f"{_YOLOX_PREFIX}Evaluate in main process...\n"
        text += "\n".join(_COCO).format(ap=0.5 + epoch / 10) + "\n"
    text += f"{_YOLOX_PREFIX}Training of experiment is done and the best AP is 80.00\n"
    path = tmp_path / "train_log.txt"
    path.write_text(text)
    run = _one(path)
    assert run.series_frame("train/loss").get_column("step").to_list() == [
        (e - 1) * 30 + i for e in (1, 2, 3) for i in (10, 20, 30)
    ]
    assert _values(run, "mem/allocated")[0] == 4605 * 2**20
    assert _values(run, "step_time")[0] == pytest.approx(0.671)
    assert _values(run, "val/coco/ap") == pytest.approx([0.6, 0.7, 0.8])
    assert run.series_frame("val/coco/ap").get_column("step").to_list() == [30, 60, 90]
    assert _values(run, "val/coco/ap50") == pytest.approx([0.912] * 3)
    assert not run.has("val/coco/aps")  # -1: nothing of that size
    assert run.has("val/coco/ar@100")
    assert not run.has("eta") and not run.has("size")
    assert run.metadata["run_end"]["state"] == "finished"


def test_a_finished_last_launch_after_crashed_ones_is_finished(tmp_path: Path) -> None:
    crash = "Traceback (most recent call last):\n  File x\nRuntimeError: cuDNN error\n"
    text = _yolox(1, 10, 12.0) + crash + _yolox(1, 10, 11.0) + _yolox(1, 20, 10.0)
    text += f"{_YOLOX_PREFIX}Training of experiment is done and the best AP is 1.00\n"
    path = tmp_path / "train_log.txt"
    path.write_text(text)
    run = _one(path)
    assert run.metadata["run_end"]["state"] == "finished"
    assert run.metadata["run_end"]["step"] == 20


# ---- MMEngine keys with a space ----------------------------------------------------------


def test_mmengine_eval_keys_with_a_space(tmp_path: Path) -> None:
    pre = "2023/06/05 20:17:40 - mmengine - INFO - "
    text = (
        f"{pre}Epoch(train)   [1][6/6]  lr: 4.0e-03  eta: 4:59:11  time: 7.5  data_time: "
        "6.9  loss: 0.35  loss_kpt: 0.35  acc_pose: 0.3\n"
        f"{pre}Epoch(train)   [2][6/6]  lr: 4.0e-03  eta: 4:58:11  time: 7.5  data_time: "
        "6.9  loss: 0.30  loss_kpt: 0.30  acc_pose: 0.4\n"
        f"{pre}Epoch(val) [2][6/6]    coco/AP: 0.000891  coco/AP .5: 0.002970  coco/AP (M): "
        "-1.000000  coco/AP (L): 0.000891  PCK: 0.317460  data_time: 1.4  time: 1.5\n"
    )
    path = tmp_path / "20230605_200941.log"
    path.write_text(text)
    run = _one(path)
    names = run.metrics
    assert "val/coco/ap .5" in names and "val/coco/ap (l)" in names
    assert not any(n.endswith(")") and "(" not in n for n in names)  # no `val/l)` left
    assert "val/coco/ap (m)" not in names  # -1: undefined


# ---- two writers in turn -------------------------------------------------------------------


def test_two_writers_in_turn_are_no_restarts(tmp_path: Path) -> None:
    """Two processes appending LLaMA-Factory lines to one trainer_log.jsonl, one a line
    behind the other; then a real resume from step 150."""
    steps = [10]
    for s in range(20, 210, 10):
        steps += [s, s - 10]
    steps += [200, *range(150, 260, 10)]  # the job resumed from a checkpoint at 150
    rows = [
        {"current_steps": s, "total_steps": 300, "loss": 2.0 - s / 300, "epoch": s / 100,
         "percentage": s / 3, "elapsed_time": f"0:{i // 60:02d}:{i % 60:02d}",
         "remaining_time": "0:05:00"}
        for i, s in enumerate(steps)
    ]  # fmt: skip
    path = tmp_path / "trainer_log.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (a,) = analyze(path)
    restarts = [f for f in a.findings if f.code == "DATA001"]
    assert [(f.step_start, f.step_end) for f in restarts] == [(150, 200)]
    kinds = {d.kind: d for d in a.run.data_quality}
    assert "two writers" in kinds["out-of-order"].message
    assert kinds["out-of-order"].severity == "warning"


def test_one_line_out_of_order_is_read_in_step_order(tmp_path: Path) -> None:
    rows = [{"step": s, "loss": 1.0 / (1 + s)} for s in (10, 20, 40, 30, 50, 60)]
    path = tmp_path / "log.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (a,) = analyze(path)
    assert "DATA001" not in {f.code for f in a.findings}
    assert a.run.series_frame("train/loss").get_column("step").to_list() == [10, 20, 30, 40, 50, 60]
    (note,) = [d for d in a.run.data_quality if d.kind == "out-of-order"]
    assert note.severity == "info"


# ---- a key said again after the evaluation's ---------------------------------------------


def test_keys_after_a_val_key_are_the_evaluations(tmp_path: Path) -> None:
    """A hand-written seq2seq loop's line (general key/value reader): both halves name
    Token Acc and Seq Acc; the second are the validation's. Seq Acc at 0 throughout while
    the loss crawls 11.2 → 8.7 is a model that never learned."""
    text = "start training...\n"
    for e in range(40):
        loss = 11.2 - 2.5 * (1 - math.exp(-e / 15))
        text += (
            f"Epoch {e} |             Train Loss: {loss:.4f} | Token Acc: 0.0660 | Seq Acc: "
            f"0.0000 |             Val Loss: {loss - 0.05:.4f} | Token Acc: 0.0661 | Seq Acc: "
            "0.0000\n"
        )
    path = tmp_path / "train.log"
    path.write_text(text)
    (a,) = analyze(path)
    assert a.run.has("val/token acc") and a.run.has("Token Acc")
    assert _values(a.run, "Token Acc") == pytest.approx([0.066] * 40)
    assert "LOSS004" in {f.code for f in a.findings}
    frame = a.run.frame.filter(pl.col("metric") == "Token Acc")
    assert frame.height == 40  # one training value per epoch, none overwritten
