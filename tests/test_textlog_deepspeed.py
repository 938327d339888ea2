"""Text logs that failed before: DeepSpeed-Chat SFT stdout, a crash with no metric, Megatron
lines with missing fields. Written here in the exact shapes of the real files, then the real
files themselves (through the ``shared_dir`` fixture)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

import trainlens
from trainlens.cli import main


def _ts(t: float) -> str:
    m, s = divmod(int(t), 60)
    return f"[2023-04-18 01:{40 + m:02d}:{s:02d},{round((t % 1) * 1000):03d}]"


def _deepspeed_chat(path: Path, *, epochs: int = 3, per_epoch: int = 40) -> Path:
    """DeepSpeed-Chat step-1 SFT stdout: steps_per_print 10, two OVERFLOW lines (one with
    hysteresis) in the first interval and one reducing the scale at step 47."""
    out = [
        "[2023-04-18 01:39:00,000] [INFO] [real_accelerator.py:110] Setting ds_accelerator",
        "[2023-04-18 01:39:10,000] [INFO] [logging.py:96:log_dist] [Rank 0] step=0, "
        "skipped=0, lr=[1e-05, 1e-05], mom=[(0.9, 0.95), (0.9, 0.95)]",
        f"***** Evaluating perplexity, Epoch 0/{epochs} *****",
        "ppl: 4998.29638671875",
    ]
    t, step, skipped = 0.0, 0, 0
    ppl = [2.0179, 1.9718, 1.9801]
    for e in range(epochs):
        out.append(f"Beginning of Epoch {e + 1}/{epochs}, Total Micro Batches {per_epoch}")
        for micro in range(1, per_epoch + 1):
            step += 1
            t += 0.75
            if step in (3, 4):
                tail = (
                    "but hysteresis is 2. Reducing hysteresis to 1"
                    if step == 3
                    else "reducing to 32768"
                )
                out.append(
                    f"{_ts(t)} [INFO] [loss_scaler.py:181:update_scale] [deepspeed] OVERFLOW! "
                    f"Rank 0 Skipping step. Attempted loss scale: 65536, {tail}"
                )
                skipped += 1
            if step == 47:
                out.append(
                    f"{_ts(t)} [INFO] [loss_scaler.py:181:update_scale] [deepspeed] OVERFLOW! "
                    "Rank 0 Skipping step. Attempted loss scale: 32768, reducing to 16384"
                )
                skipped += 1
            if step % 10 == 0:
                lr = 1e-5 * (1 - step / (epochs * per_epoch))
                out.append(
                    f"{_ts(t)} [INFO] [logging.py:96:log_dist] [Rank 0] step={step}, "
                    f"skipped={skipped}, lr=[{lr}, {lr}], mom=[(0.9, 0.95), (0.9, 0.95)]"
                )
                out.append(
                    f"{_ts(t + 0.02)} [INFO] [timer.py:199:stop] epoch={e}/micro_step={micro}"
                    f"/global_step={step}, RunningAvgSamplesPerSec=171.8, "
                    f"CurrSamplesPerSec={170 + step % 3}.5, MemAllocated=3.96GB, "
                    "MaxMemAllocated=22.95GB"
                )
        out.append(f"***** Evaluating perplexity, Epoch {e + 1}/{epochs} *****")
        out.append(f"ppl: {ppl[e]}")
    out.append("saving the final model ...")
    out.append(
        "[2023-04-18 03:20:41,455] [INFO] [launch.py:460:main] Process 1 exits successfully."
    )
    path.write_text("\n".join(out) + "\n")
    return path


def test_deepspeed_chat_perplexity_is_val_loss_at_the_global_step(tmp_path: Path) -> None:
    run = trainlens.read(_deepspeed_chat(tmp_path / "training.log"))[0]  # no --format
    assert run.format == "text"
    s, v = run.series("val/perplexity")
    assert s.tolist() == [0, 40, 80, 120]
    assert v.tolist() == pytest.approx([4998.29638671875, 2.0179, 1.9718, 1.9801])
    s, v = run.series("val/loss")
    assert v.tolist() == pytest.approx(
        [math.log(x) for x in (4998.29638671875, 2.0179, 1.9718, 1.9801)]
    )
    assert run.raw_names["val/loss"] == "ln(ppl)"
    assert run.raw_names["val/perplexity"] == "ppl"


def test_deepspeed_overflows_give_loss_scale_and_skipped_counts(tmp_path: Path) -> None:
    run = trainlens.read(_deepspeed_chat(tmp_path / "training.log"))[0]
    s, v = run.series("loss_scale")
    # steps 3 (hysteresis: kept 65536) and 4 (→ 32768) are in the interval logged at 10
    assert s.tolist() == [10, 50] and v.tolist() == [32768.0, 16384.0]
    s, v = run.series("overflow steps")
    assert s.tolist() == [10, 50] and v.tolist() == [2.0, 1.0]
    s, v = run.series("skipped steps")
    assert v[-1] == 3.0 and s[0] == 10  # step=0 (start-up report) left out
    assert any(d.kind == "inferred-step" and "OVERFLOW" in d.message for d in run.data_quality)


def test_deepspeed_timer_lines_give_throughput_memory_epoch_and_wall_time(tmp_path: Path) -> None:
    run = trainlens.read(_deepspeed_chat(tmp_path / "training.log"))[0]
    s, v = run.series("samples_per_sec")
    assert s[0] == 10 and v[0] == pytest.approx(171.5)
    _, mem = run.series("mem/allocated")
    assert mem[0] == pytest.approx(3.96 * 2**30)
    s, ep = run.series("epoch")
    assert ep[s.tolist().index(40)] == pytest.approx(1.0)  # end of the first epoch
    assert ep[-1] == pytest.approx(3.0)
    lr_steps, lr = run.series("lr")
    assert lr_steps[0] == 10 and lr[0] == pytest.approx(1e-5 * (1 - 10 / 120))
    summary = trainlens.analyze(run)[0].summary
    assert summary["wall_clock_source"] == "wall_time"
    assert summary["step_time"]["p50"] == pytest.approx(0.75, abs=1e-3)
    assert summary["val_loss"]["final_perplexity"] == pytest.approx(1.9801)


def test_megatron_deepspeed_keeps_its_own_lines(tmp_path: Path) -> None:
    # Megatron-DeepSpeed prints DeepSpeed's step lines too: its own iteration lines stand
    lines = [
        "[2022-10-28 22:57:01,564] [INFO] [logging.py:68:log_dist] [Rank 0] step=10, "
        "skipped=0, lr=[5.3e-07, 5.3e-07], mom=[(0.9, 0.95), (0.9, 0.95)]",
        " iteration       10/ 1716613 | consumed samples:         2560 | learning rate: "
        "5.308E-07 | lm loss: 1.069E+01 | loss scale: 2048.0 | number of skipped "
        "iterations:   0 |",
    ]
    (tmp_path / "m.log").write_text("\n".join(lines) + "\n")
    run = trainlens.read(tmp_path / "m.log")[0]
    assert "skipped steps" not in run.metrics
    assert run.raw_names["lr"] == "learning rate"
    assert any("DeepSpeed engine line" in d.message for d in run.data_quality)


def test_crash_before_the_first_step_quotes_the_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = [
        "[2023-06-09 05:24:38,195] [INFO] [logging.py:96:log_dist] [Rank 0] step=0, "
        "skipped=0, lr=[0.0001], mom=[(0.9, 0.95)]",
        "***** Evaluating perplexity, Epoch 0/5 *****",
        "Traceback (most recent call last):",
        '  File "main.py", line 381, in <module>',
        "    main()",
    ]
    for dev in (9, 15):
        lines.append(
            "RuntimeError: Expected all tensors to be on the same device, but found at "
            f"least two devices, cuda:{dev} and cpu!"
        )
    lines.append("[2023-06-09 05:24:52,259] [INFO] [launch.py:314:sigkill_handler] Killing 75746")
    path = tmp_path / "training.log"
    path.write_text("\n".join(lines) + "\n")
    assert main(["analyze", str(path)]) == 2
    err = capsys.readouterr().err
    assert "no training step was logged" in err
    assert "RuntimeError: Expected all tensors to be on the same device" in err
    assert "cuda:15 and cpu!" in err  # the error the log ends with
    assert "not a format trainlens knows" not in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_megatron_line_without_lm_loss_keeps_its_other_fields(tmp_path: Path) -> None:
    # sink_torch: iterations 1-2 print no lm loss; grad norm nan and 0.000
    lines = [
        " [2026-01-20 10:00:01] iteration        1/      15 | consumed samples:            8 | "
        "elapsed time per iteration (ms): 11262.3 | learning rate: 1.500000E-04 | "
        "global batch size:     8 | loss scale: 1.0 | grad norm: nan | "
        "number of skipped iterations:   1 | number of nan iterations:   0 |",
        " [2026-01-20 10:00:09] iteration        2/      15 | consumed samples:           16 | "
        "elapsed time per iteration (ms): 8012.0 | learning rate: 3.000000E-04 | "
        "global batch size:     8 | loss scale: 1.0 | grad norm: 0.000 | "
        "number of skipped iterations:   0 | number of nan iterations:   0 |",
        " [2026-01-20 10:00:17] iteration        3/      15 | consumed samples:           24 | "
        "elapsed time per iteration (ms): 8001.1 | learning rate: 2.800000E-04 | "
        "global batch size:     8 | lm loss: 1.040111E+01 | loss scale: 1.0 | "
        "grad norm: 0.000 | number of skipped iterations:   0 | number of nan iterations:   0 |",
    ]
    (tmp_path / "stdout.log").write_text("\n".join(lines) + "\n")
    run = trainlens.read(tmp_path / "stdout.log")[0]
    s, v = run.series("grad_norm")
    assert s.tolist() == [1, 2, 3] and math.isnan(v[0]) and v[1] == 0.0
    assert run.series("lr")[1].tolist() == pytest.approx([1.5e-4, 3.0e-4, 2.8e-4])
    assert run.series("train/loss")[0].tolist() == [3]
    assert run.series("step_time")[1].tolist() == pytest.approx([11.2623, 8.012, 8.0011])


# ---- the real files -------------------------------------------------------------------------

DS = "real-logs/microsoft_DeepSpeedExamples"


def test_real_deepspeed_chat_sft(shared_dir: Path) -> None:
    run = trainlens.read(shared_dir / DS / "opt-1.3b-globalBatchSize128.log")[0]
    s, ppl = run.series("val/perplexity")
    assert ppl.size == 17 and ppl[0] == pytest.approx(4998.29638671875)
    assert ppl[1] == pytest.approx(2.0179834365844727) and s[1] == 460
    best = int(ppl.argmin())
    assert ppl[best] == pytest.approx(1.8033, abs=1e-4) and ppl[-1] == pytest.approx(
        1.8085, abs=1e-4
    )
    _, n = run.series("overflow steps")
    assert n.sum() == 139  # every OVERFLOW line, counted once
    assert run.series("skipped steps")[1][-1] == 139  # DeepSpeed's own count agrees
    assert run.series("loss_scale")[1].min() > 0
    summary = trainlens.analyze(run)[0].summary
    assert summary["wall_clock_seconds"] == pytest.approx(93 * 60 + 27, abs=2)
    assert summary["val_loss"]["best"] == pytest.approx(math.log(ppl[best]))


def test_real_crash_log_exits_2_with_its_error(
    shared_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["analyze", str(shared_dir / DS / "check-7b_training.log")]) == 2
    err = capsys.readouterr().err
    assert "no training step was logged" in err
    assert "RuntimeError: Expected all tensors to be on the same device" in err
    assert len(err.strip().splitlines()) == 1


def test_real_sink_torch_keeps_fields_without_lm_loss(shared_dir: Path) -> None:
    path = (
        shared_dir
        / "real-logs/elena-lyulina_Megatron-LM-Attention-Benchmark"
        / "correctness_sink_torch_1737333_stdout.log"
    )
    run = trainlens.read(path)[0]
    s, g = run.series("grad_norm")
    assert s[0] == 1 and math.isnan(g[0]) and g[1] == 0.0
    assert run.series("lr")[0][:2].tolist() == [1, 2]
    assert run.series("train/loss")[0][0] == 3


def test_real_megatron_sample_draw_does_not_overwrite_validation(shared_dir: Path) -> None:
    path = shared_dir / "real-logs/stark-sim_megatron-deepspeed-lock-clock/qwen7b_baseline_500.log"
    run = trainlens.read(path)[0]
    s, v = run.series("val/loss")
    assert s.tolist() == [100, 200, 300, 400, 500]
    assert v[-1] == pytest.approx(6.314754)
    assert run.series("lm loss validation draw")[1].tolist() == pytest.approx([6.335348])


def test_later_deepspeed_chat_prints_the_eval_loss_with_ppl(tmp_path: Path) -> None:
    lines = [
        "***** Evaluating perplexity, Epoch 0/1 *****",
        "ppl: 40.31, loss: 3.6967",
        "Beginning of Epoch 1/1, Total Micro Batches 20",
        "[2024-01-01 00:00:10,000] [INFO] [logging.py:96:log_dist] [Rank 0] step=10, "
        "skipped=0, lr=[9e-06], mom=[(0.9, 0.95)]",
        "***** Evaluating perplexity *****",  # a mid-epoch evaluation names no epoch
        "ppl: 12.5, loss: 2.5257",
        "[2024-01-01 00:00:20,000] [INFO] [logging.py:96:log_dist] [Rank 0] step=20, "
        "skipped=0, lr=[8e-06], mom=[(0.9, 0.95)]",
        "***** Evaluating perplexity, Epoch 1/1 *****",
        "ppl: 9.8, loss: 2.2824",
    ]
    (tmp_path / "train.log").write_text("\n".join(lines) + "\n")
    run = trainlens.read(tmp_path / "train.log")[0]
    s, v = run.series("val/loss")
    assert s.tolist() == [0, 10, 20]
    assert v.tolist() == pytest.approx([3.6967, 2.5257, 2.2824])  # as printed, not ln ppl
    assert run.raw_names["val/loss"] == "loss (after ppl:)"
    assert run.series("val/perplexity")[1].tolist() == pytest.approx([40.31, 12.5, 9.8])


def test_newer_deepspeed_without_step_lines(tmp_path: Path) -> None:
    # DeepSpeed ≥ 0.10 wording, steps_per_print off: no global step anywhere
    tput = (
        "Model Parameters: 1.429 B, Latency: 0.73s, TFLOPs: 63.71, Samples/sec: 21.92, "
        "Time/seq 0.05s, Batch Size: 16, Sequence Length: 512"
    )
    lines = [
        "***** Running training *****",
        "***** Evaluating perplexity, Epoch 0/1 *****",
        "ppl: 4390.5380859375, loss: 8.38720703125",
        "Beginning of Epoch 1/1, Total Micro Batches 954",
        tput,
        "[2023-11-06 11:54:09,446] [INFO] [fused_optimizer.py:347:_update_scale]",
        "Grad overflow on iteration 0",
        "[2023-11-06 11:54:09,446] [INFO] [fused_optimizer.py:348:_update_scale] Reducing "
        "dynamic loss scale from 65536 to 32768.0",
        "[2023-11-06 11:54:09,446] [INFO] [logging.py:96:log_dist] [Rank 0] Overflow "
        "detected. Skipping step. Attempted loss scale: 65536, reducing to 32768.0",
        tput,
        "***** Evaluating perplexity, Epoch 1/1 *****",
        "ppl: 2.148517608642578, loss: 0.7647781372070312",
        "saving the final model ...",
    ]
    (tmp_path / "sft.log").write_text("\n".join(lines) + "\n")
    run = trainlens.read(tmp_path / "sft.log")[0]
    s, v = run.series("val/loss")
    assert s.tolist() == [0, 1]  # at the epoch numbers, said in a note
    assert v.tolist() == pytest.approx([8.38720703125, 0.7647781372070312])
    kinds = {d.kind: d.message for d in run.data_quality}
    assert "epoch number" in kinds["inferred-step"]
    assert "1 DeepSpeed overflow line(s) were left out" in kinds["ignored-lines"]
    assert "loss_scale" not in run.metrics
