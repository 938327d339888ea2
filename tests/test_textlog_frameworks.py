"""Frameworks' own stdout (issue 26): detectron2, MMEngine, fairseq, NeMo, Composer / LLM
Foundry, OLMo, and the general key/value reader for logs no shape was written for.

MMEngine's log is its real writer's: fixtures/frameworks/mmengine_stdout.py trains with
MMEngine's Runner and keeps the log and MMEngine's own scalars.json of the same run. The
other writers do not install here (detectron2 is not on PyPI; Composer, NeMo, fairseq and
OLMo pin their own torch or need CUDA), so their lines below are written in each
printer's exact layout (detectron2 ``CommonMetricPrinter``, MMEngine
``LogProcessor``, fairseq ``SimpleProgressBar`` and its epoch summary, Lightning's TQDM
bar as NeMo fills it, Composer ``ConsoleLogger``, OLMo's ``log_metrics_to_console``),
checked against logs committed in public repositories (Richard-cpu2333/tx2dl
models/log/R50-FPN_log.py for detectron2, YOLO-World and MMAction2 work_dirs logs for
MMEngine, NeMo launcher READMEs, LLM Foundry's README, an OLMo cluster notes file); the
numbers are made up.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from trainlens.core.errors import UnreadableInputError
from trainlens.readers import detect_format, read_runs
from trainlens.readers.textlog import frameworks, generic
from trainlens.readers.textlog.registry import SHAPES


def _read(tmp_path: Path, text: str, name: str = "train.log", newline: str = "\n"):
    path = tmp_path / name
    path.write_bytes(text.replace("\n", newline).encode())
    assert detect_format(path) == "text"
    [run] = read_runs(path)
    return run


def _series(run, metric: str) -> list[tuple[int, float]]:
    df = run.standing().filter(pl.col("metric") == metric).sort("step")
    steps, values = df.get_column("step").to_list(), df.get_column("value").to_list()
    return list(zip(steps, values, strict=True))


def _d2(it: int, loss: float, mem: int = 2725, eta: str = "0:05:22") -> str:
    return (
        f"[09/02 02:37:24 d2.utils.events]:  eta: {eta}  iter: {it}  total_loss: {loss}  "
        f"loss_cls: 0.595  loss_box_reg: 0.549  time: 0.2500  data_time: 0.0030  "
        f"lr: 1.6068e-05  max_mem: {mem}M\n"
    )


def test_detectron2_stdout(tmp_path: Path) -> None:
    text = (
        "[09/02 02:37:00 d2.engine.train_loop]: Starting training from iteration 0\n"
        + _d2(19, 1.986)
        + _d2(39, 1.872, eta="1 day, 0:05:14")
    )
    run = _read(tmp_path, text)
    assert run.metadata["text_shapes"] == {"detectron2": 2}
    assert _series(run, "train/loss") == [(19, 1.986), (39, 1.872)]  # the total is the loss
    assert _series(run, "mem/allocated")[0] == (19, 2725 * 2**20)  # MiB
    # data_time and time are seconds per iteration: a 1.2 % wait, not a fraction of 1
    assert _series(run, "dataloader_wait")[0] == (19, 0.003)
    assert _series(run, "step_time")[0] == (19, 0.25)
    assert "eta" not in run.metrics and "loss_cls" in run.metrics


def test_detectron2_log_txt_lines(tmp_path: Path) -> None:
    """detectron2's own log.txt writes the logger name outside the brackets."""
    line = _d2(19, 1.986).replace(" d2.utils.events]: ", "] d2.utils.events INFO: ")
    run = _read(tmp_path, line + line.replace("iter: 19", "iter: 39"))
    assert _series(run, "train/loss") == [(19, 1.986), (39, 1.986)]


def test_detectron2_launches_appended_to_one_file(tmp_path: Path) -> None:
    """A job started again from scratch (iteration 0) after 59 iterations: the later
    launch stands, every earlier value from its first step on is kept as superseded."""
    first = "".join(_d2(i, 2.0 - i / 100) for i in (19, 39, 59))
    second = "".join(_d2(i, 1.5 - i / 1000) for i in (19, 39))
    start = "[09/02 02:37:00 d2.engine.train_loop]: Starting training from iteration 0\n"
    run = _read(tmp_path, start + first + start + second)
    assert [i.kind for i in run.data_quality if i.kind == "restart"] == ["restart"]
    assert _series(run, "train/loss") == [(19, 1.481), (39, 1.461)]
    old = run.frame.filter((pl.col("metric") == "train/loss") & pl.col("superseded"))
    assert old.get_column("step").to_list() == [19, 39, 59]


MMENGINE = Path(__file__).parents[1] / "fixtures" / "frameworks" / "mmengine"


def test_mmengine_real_log_agrees_with_its_own_scalars_json() -> None:
    """The text log MMEngine's Runner wrote gives the steps and losses MMEngine's own
    scalars.json of the same run holds (the log prints 4 decimals)."""
    [run] = read_runs(MMENGINE / "train.log")
    assert run.metadata["text_shapes"] == {"mmengine": 8}
    records = [json.loads(x) for x in (MMENGINE / "scalars.json").read_text().splitlines()]
    train = [(r["step"], r["loss"]) for r in records if "loss" in r]
    got = _series(run, "train/loss")
    assert [s for s, _ in got] == [s for s, _ in train] == [5, 10, 15, 21, 26, 31]
    assert [v for _, v in got] == [pytest.approx(v, abs=5e-5) for _, v in train]
    waits = [v for _, v in _series(run, "dataloader_wait")]
    times = [v for _, v in _series(run, "step_time")]
    assert all(0 <= w <= t for w, t in zip(waits, times, strict=True))  # seconds, a share
    # each epoch's validation result, at the last training step logged before it
    mse = [r["mse"] for r in records if "mse" in r]
    assert _series(run, "val/mse") == [
        (15, pytest.approx(mse[0], abs=5e-5)),
        (31, pytest.approx(mse[1], abs=5e-5)),
    ]


@pytest.mark.slow
def test_mmengine_fixture_is_what_the_writer_writes(tmp_path: Path) -> None:
    pytest.importorskip("mmengine")
    script = MMENGINE.parent / "mmengine_stdout.py"
    subprocess.run([sys.executable, str(script), str(tmp_path)], check=True, capture_output=True)
    [fresh] = read_runs(tmp_path / "train.log")
    [kept] = read_runs(MMENGINE / "train.log")
    assert _series(fresh, "train/loss") == _series(kept, "train/loss")
    assert _series(fresh, "val/mse") == _series(kept, "val/mse")


def test_mmengine_epoch_iter_and_val_lines(tmp_path: Path) -> None:
    pre = "2024/06/19 01:21:51 - mmengine - INFO - "
    text = (
        f"{pre}Epoch(train)  [1][ 50/100]  base_lr: 2.0000e-04 lr: 2.1648e-06  eta: 8:27:55  "
        "time: 0.2526  data_time: 0.0334  memory: 9182  grad_norm: nan  loss: 59.1782  "
        "loss_cls: 21.0711\n"
        f"{pre}Epoch(train)  [1][100/100]  lr: 4.3738e-06  eta: 1 day, 7:02:30  time: 0.1678  "
        "data_time: 0.0038  memory: 4594  grad_norm: 439.5705  loss: 53.0932  loss_cls: 20.0\n"
        f"{pre}Epoch(val)  [1][ 50/500]    eta: 0:00:24  time: 0.0512  data_time: 0.0020  "
        "memory: 1234\n"
        f"{pre}Epoch(val) [1][500/500]    coco/bbox_mAP: 0.3740  coco/bbox_mAP_50: 0.5810  "
        "data_time: 0.0021  time: 0.0456\n"
        f"{pre}Epoch(train)  [2][ 50/100]  lr: 2.1e-06  eta: 8:27:55  time: 0.25  "
        "data_time: 0.03  memory: 9182  grad_norm: 3.0  loss: 40.1  loss_cls: 15.0\n"
    )
    run = _read(tmp_path, text)
    # the step is the iteration over the run: (epoch - 1) * 100 + i
    assert _series(run, "train/loss") == [(50, 59.1782), (100, 53.0932), (150, 40.1)]
    assert _series(run, "mem/allocated")[1] == (100, 4594 * 2**20)
    assert _series(run, "val/coco/bbox_map") == [(100, 0.374)]  # at the last train step
    assert "eta" not in run.metrics and "val/time" not in run.metrics
    loss = run.frame.filter(pl.col("metric") == "grad_norm").get_column("value")
    assert loss.is_nan().to_list() == [True, False, False]  # `nan` kept as NaN
    [it] = read_runs(_write(tmp_path, f"{pre}Iter(train) [  50/90000]  lr: 1e-4  loss: 2.5\n"))
    assert _series(it, "train/loss") == [(50, 2.5)] and it.metadata["max_steps"] == 90000


def _write(tmp_path: Path, text: str, name: str = "it.log") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


_FS_INNER = (
    "2020-10-15 11:33:32 | INFO | train_inner | epoch 001:    {n} / 200 loss={loss}, "
    "nll_loss=4.1, ppl=25.1, wps=12000, ups=3.2, wpb=3000, bsz=100, num_updates={n}, "
    "lr=0.0005, gnorm=1.23, train_wall=30, gb_free=10.2, wall=35\n"
)


def test_fairseq_interval_epoch_and_valid_lines(tmp_path: Path) -> None:
    text = (
        _FS_INNER.format(n=100, loss=4.655)
        + _FS_INNER.format(n=200, loss=4.1)
        + "2020-10-15 11:33:50 | INFO | valid | epoch 001 | valid on 'valid' subset | "
        "loss 3.9 | nll_loss 3.7 | ppl 13.2 | wps 50000 | num_updates 200\n"
        "2020-10-15 11:33:51 | INFO | train | epoch 001 | loss 4.3 | ppl 20.1 | "
        "num_updates 200 | lr 0.0005 | gnorm 1.2 | train_wall 60\n"
    )
    run = _read(tmp_path, text)
    assert _series(run, "train/loss") == [(100, 4.655), (200, 4.1)]  # the interval lines
    assert _series(run, "train_epoch/loss") == [(200, 4.3)]  # the epoch's mean, apart
    assert _series(run, "val/loss") == [(200, 3.9)]
    assert _series(run, "grad_norm")[0] == (100, 1.23)
    assert _series(run, "tokens_per_sec")[0] == (100, 12000.0)
    assert "num_updates" not in run.metrics


def test_fairseq_old_summary_only(tmp_path: Path) -> None:
    """fairseq < 0.10 without interval lines: the epoch summary gives the plain names;
    a subset other than 'valid' is its own eval set."""
    text = (
        "| epoch 001 | loss 9.215 | ppl 512.3 | wps 12345 | num_updates 1129 | lr 0.0005 | "
        "gnorm 1.234 | clip 0.000 | oom 0.000 | loss_scale 64.000 | wall 400 | train_wall 350\n"
        "| epoch 001 | valid on 'valid' subset | loss 8.1 | ppl 240.1 | num_updates 1129\n"
        "| epoch 001 | valid on 'test' subset | loss 8.3 | ppl 250.1 | num_updates 1129\n"
        "| epoch 002 | loss 7.215 | ppl 150.3 | wps 12345 | num_updates 2258 | lr 0.0005 | "
        "gnorm 1.1 | clip 0.000 | oom 0.000 | loss_scale 64.000 | wall 800 | train_wall 700\n"
    )
    run = _read(tmp_path, text)
    assert _series(run, "train/loss") == [(1129, 9.215), (2258, 7.215)]
    assert _series(run, "val/loss") == [(1129, 8.1)]
    assert _series(run, "val/loss/test") == [(1129, 8.3)]
    assert _series(run, "train_time") == [(1129, 350.0), (2258, 700.0)]


def test_nemo_progress_bar_every_redrawn_state(tmp_path: Path) -> None:
    bar = (
        "Epoch 0:   0%|          | {i}/301501 [59:12<1573:03:24, 18.79s/it, loss=7.7{i}, "
        "v_num=3-16, reduced_train_loss={loss}, global_step={g}, consumed_samples=24064.0, "
        "train_step_timing in s=18.5]"
    )
    states = [bar.format(i=i, loss=7.0 - i / 1000, g=f"{i - 1}.0") for i in (189, 190, 191)]
    text = "[NeMo I 2024-06-17 08:36:41 nlp_overrides:480] start\n" + "\r".join(states) + "\n"
    run = _read(tmp_path, text)
    assert run.metadata["text_shapes"] == {"nemo": 1}
    assert _series(run, "train/loss") == [(188, 6.811), (189, 6.81), (190, 6.809)]
    assert _series(run, "step_time")[0] == (188, 18.5)
    assert "v_num" not in run.metrics and "loss (running mean)" in run.metrics


def test_torchvision_metric_logger_lines(tmp_path: Path) -> None:
    """torchvision's references (and DETR, DeiT, MAE ...): `Epoch: [e]  [i/n]` lines,
    epochs from 0; the window's median is read, not the bracketed run mean."""
    line = (
        "Epoch: [{e}]  [{i}/6]  eta: 0:00:25  lr: 0.001  loss: {loss} (9.9)  "
        "loss_classifier: 0.72 (0.72)  time: 0.4000  data: 0.0100  max mem: 2547\n"
    )
    text = (
        line.format(e=0, i=0, loss=8.2)
        + line.format(e=0, i=5, loss=7.5)
        + "Epoch: [0] Total time: 0:00:05 (0.9880 s / it)\n"
        + line.format(e=1, i=0, loss=1.7)
    )
    run = _read(tmp_path, text)
    assert _series(run, "train/loss") == [(0, 8.2), (5, 7.5), (6, 1.7)]
    assert _series(run, "dataloader_wait")[0] == (0, 0.01)
    assert _series(run, "mem/allocated")[0] == (0, 2547 * 2**20)
    assert "eta" not in run.metrics


def test_pytorch_imagenet_example_lines(tmp_path: Path) -> None:
    """pytorch/examples imagenet/main.py: `Epoch: [e][i/n]` training lines, per-batch
    `Test: [i/n]` running means (left out), and the ` * Acc@1` result."""
    train = (
        "Epoch: [{e}][{i:4d}/5005]\tTime  0.311 ( 0.522)\tData  0.100 ( 0.191)\t"
        "Loss {loss:.4e} (6.9140e+00)\tAcc@1   0.00 (  0.11)\tAcc@5   0.78 (  0.57)\n"
    )
    text = (
        train.format(e=0, i=10, loss=6.896)
        + train.format(e=0, i=20, loss=6.5)
        + "Test: [ 10/196]\tTime  0.200 ( 0.300)\tLoss 9.9e+00 (9.1e+00)\tAcc@1 1.0 ( 1.0)\n"
        + " * Acc@1 12.130 Acc@5 32.862\n"
        + train.format(e=1, i=10, loss=5.1)
    )
    run = _read(tmp_path, text)
    assert _series(run, "train/loss") == [(10, 6.896), (20, 6.5), (5015, 5.1)]
    assert _series(run, "val/acc@1") == [(20, 12.13)]
    assert _series(run, "dataloader_wait")[0] == (10, 0.1)  # the batch's, not the mean


def test_composer_blocks_with_an_eval_block(tmp_path: Path) -> None:
    text = (
        "******************************\n"
        "[batch=1/100]:\n"
        "\t Train time/batch: 0\n"
        "\t Train loss/train/total: 10.9736\n"
        "\t Train metrics/train/LanguageCrossEntropy: 10.9736\n"
        "\t Train throughput/tokens_per_sec: 20082.8418\n"
        "\t Train expert_selection/ffn_layer: <wandb.sdk.data_types.image.Image object>\n"
        "[batch=2/100]:\n"
        "\t Train loss/train/total: 10.9724\n"
        "[Eval batch=3/3]:\n"
        "\t Eval metrics/eval/LanguageCrossEntropy: 9.0154\n"
        "0: [epoch=1][batch=3/100]:\n"
        "0:       Train loss/train/total: 10.9\n"
    )
    run = _read(tmp_path, text)
    assert run.metadata["text_shapes"] == {"composer": 7}  # member lines
    assert run.metadata["max_steps"] == 100
    assert _series(run, "train/loss") == [(1, 10.9736), (2, 10.9724), (3, 10.9)]
    assert _series(run, "val/loss") == [(2, 9.0154)]  # the eval block: the last batch's step
    assert _series(run, "tokens_per_sec") == [(1, 20082.8418)]


def test_olmo_blocks(tmp_path: Path) -> None:
    pre = "[2024-04-17 09:42:26] INFO     [olmo.train:816, rank=0] "
    text = (
        f"{pre}[step=1/739328]\n"
        "    train/CrossEntropyLoss=11.25\n"
        "    train/Perplexity=76,631\n"
        "    System/Peak GPU Memory (MB)=42,133\n"
        f"{pre}[step=2/739328]\n"
        "    train/CrossEntropyLoss=10.73\n"
        "    throughput/device/tokens_per_second=45,538\n"
        f"{pre}v3-small-c4_en-validation\n"
        "    eval/v3-small-c4_en-validation/CrossEntropyLoss=10.5\n"
    )
    run = _read(tmp_path, text)
    assert _series(run, "train/loss") == [(1, 11.25), (2, 10.73)]
    assert _series(run, "train/Perplexity") == [(1, 76631.0)]  # thousands separators
    assert _series(run, "mem/allocated") == [(1, 42133e6)]  # MB of 10^6 bytes
    # per device, not the whole job's: not tokens_per_sec
    assert "tokens_per_sec" not in run.metrics
    evals = [m for m in run.metrics if m.startswith("val/")]
    assert len(evals) == 1 and _series(run, evals[0]) == [(2, 10.5)]


def test_blocks_cut_between_pieces(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A block that a piece boundary cuts still belongs to its header."""
    from trainlens.readers.textlog import cursor

    monkeypatch.setattr(cursor, "PIECE_BYTES", 64)
    text = "".join(
        f"[batch={i}/50]:\n\t Train loss/train/total: {10 - i / 10}\n\t Train lr: 0.001\n"
        for i in range(1, 21)
    )
    run = _read(tmp_path, text)
    assert _series(run, "train/loss") == [(i, pytest.approx(10 - i / 10)) for i in range(1, 21)]


def test_framework_shapes_sniff_their_lines() -> None:
    from trainlens.readers.textlog import has_metric_line

    assert has_metric_line(_d2(19, 1.9).encode())
    assert has_metric_line(_FS_INNER.format(n=1, loss=2).encode())
    assert all(s in SHAPES for s in frameworks.SHAPES)


# ---- the general key/value reader ---------------------------------------------------------


def _only_note(run) -> str:
    [note] = [i for i in run.data_quality if i.kind == "inferred-step"]
    return note.message


def test_general_pipe_separated_pairs_with_units(tmp_path: Path) -> None:
    text = "".join(
        f"2024-01-01 10:00:0{i} | INFO | step {100 * i} | loss {2.4 - i / 10:.2f} | "
        f"lr 1.0e-04 | dt 120ms | mem 12.5GB\n"
        + ("2024-01-01 10:00:09 | INFO | eval | val_loss 2.5 | val_acc 45.2%\n" if i == 2 else "")
        for i in (1, 2, 3)
    )
    run = _read(tmp_path, text)
    assert run.metadata["step_column"] == "step"
    assert run.metadata["text_shapes"] == {"key_value_guess": 4}
    assert "general key/value reader" in _only_note(run) and "`step`" in _only_note(run)
    assert _series(run, "train/loss") == [(100, 2.3), (200, 2.2), (300, 2.1)]
    assert _series(run, "dt") == [(s, 0.12) for s in (100, 200, 300)]  # ms -> s
    assert _series(run, "mem") == [(s, 12.5e9) for s in (100, 200, 300)]  # GB -> bytes
    assert _series(run, "val/accuracy") == [(200, pytest.approx(0.452))]  # % -> fraction


def test_general_batch_counter_per_epoch(tmp_path: Path) -> None:
    rows = [(1, 100), (1, 200), (1, 300), (2, 100), (2, 200)]
    text = "".join(
        f"Epoch [{e}/2], Step [{s}/300], Loss: {1 - k / 10:.4f}, Acc: 0.5\n"
        for k, (e, s) in enumerate(rows)
    )
    run = _read(tmp_path, text)
    assert [s for s, _ in _series(run, "train/loss")] == [100, 200, 300, 400, 500]
    assert "epochs" in _only_note(run)


def test_general_counter_named_after_its_number(tmp_path: Path) -> None:
    """PyTorch's word_language_model example (and its many copies): `200/ 2983 batches`
    counts within an epoch; `end of epoch` lines carry the validation."""
    line = "| epoch {e:3d} | {b:5d}/ 600 batches | lr 20.00 | ms/batch 11.77 | loss {l:5.2f} |\n"
    end = "| end of epoch {e:3d} | time: 36.35s | valid loss {v:5.2f} | valid ppl 273.43\n"
    text = (
        "".join(line.format(e=e, b=b, l=7 - e - b / 1000) for b in (200, 400) for e in [1])
        + end.format(e=1, v=5.6)
        + "".join(line.format(e=2, b=b, l=5 - b / 1000) for b in (200, 400))
        + end.format(e=2, v=5.4)
    )
    run = _read(tmp_path, text)
    assert [s for s, _ in _series(run, "train/loss")] == [200, 400, 800, 1000]
    assert _series(run, "val/loss") == [(400, 5.6), (1000, 5.4)]
    assert _series(run, "step_time")[0] == (200, pytest.approx(0.01177))  # ms/batch
    assert "of epoch" not in run.metrics and "epoch" not in run.metrics


def test_general_block_under_a_step_header(tmp_path: Path) -> None:
    text = "Step 10:\n    loss=2.5\n    lr=0.001\nStep 20:\n    loss=2.4\n    lr=0.001\n"
    run = _read(tmp_path, text)
    assert _series(run, "train/loss") == [(10, 2.5), (20, 2.4)]


def test_general_printed_dicts_with_quoted_numbers(tmp_path: Path) -> None:
    text = "".join(f"{{'step': {s}, 'loss': '{3 - s / 100}', 'lr': 0.0001}}\n" for s in (10, 20))
    run = _read(tmp_path, text)
    assert _series(run, "train/loss") == [(10, 2.9), (20, 2.8)]
    assert "step" not in run.metrics


def test_general_epoch_only(tmp_path: Path) -> None:
    text = "".join(
        f"epoch {e} train_loss={1 - e / 10} val_loss={1.1 - e / 10}\n" for e in (1, 2, 3)
    )
    run = _read(tmp_path, text)
    assert run.metadata["step_column"] == "epoch"
    assert _series(run, "val/loss") == [(1, 1.0), (2, pytest.approx(0.9)), (3, pytest.approx(0.8))]


def test_general_epoch_on_every_batch_line(tmp_path: Path) -> None:
    """`Epoch 1 - Batch loss: …` on each batch: the epoch cannot be the step (every
    batch would overwrite the last); the k-th such line is step k, the epoch a metric."""
    text = "".join(
        f"2025-03-02 05:16:2{k} - INFO - Epoch {e} - Batch loss: {9 - k / 10:.2f}\n"
        for k, e in enumerate((1, 1, 1, 2, 2, 2))
    )
    run = _read(tmp_path, text)
    assert [s for s, _ in _series(run, "Batch loss")] == [1, 2, 3, 4, 5, 6]
    assert _series(run, "epoch") == [(k, 1.0 if k <= 3 else 2.0) for k in range(1, 7)]
    assert "counts the lines" in _only_note(run)


def test_general_evaluation_lines_are_val_metrics(tmp_path: Path) -> None:
    """A line led by an evaluation word holds evaluation metrics, not the train loss."""
    text = (
        "iter 10 | loss 2.0 | lr 0.1\n"
        "iter 20 | loss 1.9 | lr 0.1\n"
        "Test: [10/50] | loss 3.5 | acc 0.4\n"
        "iter 30 | loss 1.8 | lr 0.1\n"
    )
    run = _read(tmp_path, text)
    assert _series(run, "train/loss") == [(10, 2.0), (20, 1.9), (30, 1.8)]
    assert _series(run, "val/loss") == [(20, 3.5)]


def test_general_one_relaunch_in_a_short_log(tmp_path: Path) -> None:
    """A job launched again and appended to its log: one move down is a restart, not a
    reason to give up on the step."""
    epochs = (1, 2, 3, 4, 1, 2)
    text = "".join(
        f"2020-11-09 15:46:38 - DEBUG - Training Epoch: {e}, Loss: {0.3 - k / 100:.3f}.\n"
        for k, e in enumerate(epochs)
    )
    run = _read(tmp_path, text)
    assert [i.kind for i in run.data_quality if i.kind == "restart"] == ["restart"]
    assert _series(run, "train/loss") == [(1, 0.26), (2, 0.25)]


def test_general_never_runs_beside_a_known_shape(tmp_path: Path) -> None:
    text = _d2(19, 1.9) + "iter=5 loss=2.0 lr=0.1\niter=6 loss=1.9 lr=0.1\n"
    run = _read(tmp_path, text)
    assert run.metadata["text_shapes"] == {"detectron2": 1}
    assert "step_column" not in run.metadata


@pytest.mark.parametrize(
    "text",
    [
        "We trained the model for 3 epochs and the loss went down from 2.3 to 1.1.\n"
        "In epoch 2 the learning rate was 0.001 and we saw step 500 reach accuracy 0.9.\n"
        "Then at step 900 the run finished with loss 1.1 after 5 hours of training.\n",
        "Traceback (most recent call last):\n"
        '  File "train.py", line 10, in <module>\n'
        "    main(step=5, lr=0.1)\n"
        "ValueError: bad lr: 0.1\n",
        "step 5 | loss 2.0\n",  # one line is no run
        "{'epoch': 0.01, 'step': 'x'}\n{'epoch': 0.02, 'step': 'y'}\n",
    ],
    ids=["prose", "traceback", "one-line", "no-whole-step"],
)
def test_general_refuses(tmp_path: Path, text: str) -> None:
    path = _write(tmp_path, text, "notes.log")
    with pytest.raises(UnreadableInputError) as err:
        read_runs(path)
    assert str(path) in str(err.value)
    assert "not a format" in str(err.value) or "no training" in str(err.value)


def test_step_choice_prefers_the_finest_rising_name() -> None:
    pairs = pl.DataFrame(
        {
            "_lower": ["epoch", "iter", "epoch", "iter", "epoch", "iter"],
            "value": [1.0, 10, 1, 20, 2, 30],
            "of": [None] * 6,
        },
        schema_overrides={"of": pl.Int64},
    )
    assert generic.choose_step(pairs) == ("iter", None)
    falling = pairs.with_columns(
        pl.when(pl.col("_lower") == "iter").then(5.0).otherwise("value").alias("value")
    )
    assert generic.choose_step(falling) == ("iter", None)  # flat is not falling
    down = pairs.with_columns(pl.Series("value", [1.0, 30, 1, 20, 2, 10]))
    assert generic.choose_step(down) == ("epoch", None)
