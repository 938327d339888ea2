"""The run summary says what is true: final is the last value, perplexity only for a
per-token LM loss (config overrides), wall clock and step time from a logged train_time."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

import trainlens
from trainlens.cli import main
from trainlens.core.config import parse_config
from trainlens.core.errors import ConfigError
from trainlens.summary import FINAL_WINDOW, summarize

REAL = "real-logs"


def _megatron(path: Path, losses: list[float]) -> Path:
    lines = ["using world size: 1", ""]
    for i, loss in enumerate(losses, start=1):
        lines.append(
            f" iteration {i:>8}/ {len(losses):>8} | consumed samples: {i * 8:>10} | "
            f"elapsed time per iteration (ms): 812.4 | learning rate: 3.000E-04 | "
            f"global batch size:     8 | lm loss: {loss:.6E} | loss scale: 1.0 | "
            f"grad norm: 1.234 | number of skipped iterations:   0 |"
        )
    path.write_text("\n".join(lines) + "\n")
    return path


def _keras_csv(path: Path, n: int) -> Path:
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["epoch", "accuracy", "loss", "val_accuracy", "val_loss"])
        for e in range(n):
            w.writerow([e, 0.5 + e / (2 * n), 1.3 / (e + 1), 0.6, 0.8 + 0.01 * e])
    return path


def test_final_is_the_last_value_and_the_window_mean_is_named(tmp_path: Path) -> None:
    losses = [10.0 - 0.03 * i for i in range(300)]
    losses[-1] = 4.5  # a last value that differs from the mean of the last ten
    run = trainlens.read(_megatron(tmp_path / "a.log", losses))[0]
    t = summarize(run)["train_loss"]
    assert t["final"] == pytest.approx(4.5) and t["final_step"] == 300
    assert t["final_window"] == FINAL_WINDOW
    assert t["final_mean_last_k"] == pytest.approx(sum(losses[-FINAL_WINDOW:]) / FINAL_WINDOW)
    assert t["final_perplexity"] == pytest.approx(math.exp(4.5))


def test_no_window_mean_when_the_window_is_most_of_the_log(tmp_path: Path) -> None:
    # six points: "the mean of the last 10" would be the mean of the whole log
    run = trainlens.read(_megatron(tmp_path / "a.log", [284.9, 161.2, 9.9, 6.1, 5.5, 5.0]))[0]
    t = summarize(run)["train_loss"]
    assert t["final"] == pytest.approx(5.0)
    assert t["final_mean_last_k"] is None and t["final_window"] is None


def test_megatron_lm_loss_gets_a_perplexity_and_says_why(tmp_path: Path) -> None:
    run = trainlens.read(_megatron(tmp_path / "a.log", [10.5, 8.0, 7.0, 6.5]))[0]
    s = summarize(run)
    assert s["perplexity"]["shown"] is True
    assert "lm loss" in s["perplexity"]["basis"]
    assert s["train_loss"]["final_perplexity"] == pytest.approx(math.exp(6.5))


def test_nanogpt_log_gets_a_perplexity_and_says_why(tmp_path: Path) -> None:
    # nanoGPT's own lines carry no LM loss name and no token count: the shape says it
    lines = [f"iter {i}: loss {4.0 - 0.1 * i:.4f}, time 93.70ms, mfu 16.68%" for i in range(6)]
    (tmp_path / "train.log").write_text("\n".join(lines) + "\n")
    s = summarize(trainlens.read(tmp_path / "train.log")[0])
    assert s["perplexity"]["shown"] is True
    assert "nanoGPT" in s["perplexity"]["basis"]
    assert s["train_loss"]["final_perplexity"] == pytest.approx(math.exp(3.5))


def test_a_classifier_gets_no_perplexity_unless_config_asks(tmp_path: Path) -> None:
    run = trainlens.read(_keras_csv(tmp_path / "training_log.csv", 25))[0]
    s = summarize(run)
    assert s["train_loss"]["final_perplexity"] is None
    assert s["val_loss"]["final_perplexity"] is None
    assert s["perplexity"]["shown"] is False and "accuracy" in s["perplexity"]["basis"]
    forced = summarize(run, perplexity=True)
    assert forced["val_loss"]["final_perplexity"] == pytest.approx(math.exp(0.8 + 0.24))
    assert forced["perplexity"]["basis"] == "config: perplexity = true"
    lm = trainlens.read(_megatron(tmp_path / "a.log", [10.5, 8.0]))[0]
    assert summarize(lm, perplexity=False)["train_loss"]["final_perplexity"] is None


def test_a_loss_beyond_per_token_range_gets_no_perplexity(tmp_path: Path) -> None:
    # 40 nats is no mean per token (a sum over tokens): exp(40) is no perplexity
    run = trainlens.read(_megatron(tmp_path / "a.log", [60.0, 50.0, 40.0]))[0]
    assert summarize(run)["train_loss"]["final_perplexity"] is None
    assert summarize(run, perplexity=True)["train_loss"]["final_perplexity"] is None


def test_config_perplexity_key_is_validated() -> None:
    assert parse_config({"perplexity": False}).perplexity is False
    assert parse_config({"perplexity": "Auto"}).perplexity == "auto"
    assert parse_config({}).perplexity == "auto"
    with pytest.raises(ConfigError, match="'perplexity' must be true, false or"):
        parse_config({"perplexity": "yes"})
    with pytest.raises(ConfigError, match="'perplexity' must be"):
        parse_config({"perplexity": 1})


def test_config_reaches_the_printed_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = _megatron(tmp_path / "a.log", [10.5, 8.0, 7.0, 6.5])
    assert main(["analyze", str(log)]) == 0
    assert "perplexity 665" in capsys.readouterr().out
    cfg = tmp_path / "trainlens.toml"
    cfg.write_text("perplexity = false\n")
    assert main(["analyze", str(log), "--config", str(cfg), "--json"]) == 0
    s = json.loads(capsys.readouterr().out)["runs"][0]["summary"]
    assert s["train_loss"]["final_perplexity"] is None
    assert s["perplexity"] == {
        "setting": "false",
        "shown": False,
        "basis": "config: perplexity = false",
    }


def _modded_nanogpt(path: Path) -> Path:
    """The shape of modded-nanogpt's records: the timer restarts after 10 steps."""
    lines = ["import os", "print0(f'step:{step}/{n} val_loss:{v:.4f}')", ""]
    lines.append("step:0/40 val_loss:10.9264 train_time:285ms step_avg:nanms")
    t = 74701
    for step in range(1, 41):
        if step == 11:
            t = 214  # the timer restarts: compile steps are not timed
        elif step > 1:
            t += 214 if step <= 10 else 213
        avg = "nan" if step <= 12 else f"{t / (step - 10):.2f}"
        lines.append(
            f"step:{step}/40 train_loss:{7.0 - 0.05 * step:.4f} train_time:{t}ms step_avg:{avg}ms"
        )
    lines.append(f"step:40/40 val_loss:5.1 train_time:{t + 2}ms step_avg:{(t + 2) / 30:.2f}ms")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_train_time_gives_wall_clock_and_step_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = trainlens.read(_modded_nanogpt(tmp_path / "run.txt"))[0]
    s = summarize(run)
    end = 214 + 29 * 213 + 2  # the second segment's last value, ms
    first = 74701 + 9 * 214 - 285  # the first segment's span, ms
    assert s["wall_clock_source"] == "train_time"
    assert s["wall_clock_seconds"] == pytest.approx((first + end) / 1000)
    st = s["step_time"]
    assert st["source"] == "train_time"
    assert st["p50"] == pytest.approx(0.213)
    assert main(["analyze", str(tmp_path / "run.txt")]) == 0
    out = capsys.readouterr().out
    assert "wall clock 1m 23s (train_time as logged)" in out
    assert "step time   mean" in out and "p50 0.213 s" in out


# ---- the real logs ------------------------------------------------------------------------


def test_real_modded_nanogpt_wall_clock_and_step_time(shared_dir: Path) -> None:
    run = trainlens.read(shared_dir / REAL / "modded_nanogpt/2024-10-10_Muon_eb5659d0.txt")[0]
    s = summarize(run)
    # 77.676 s - 0.285 s before the timer restart at step 11, then 1339.067 s
    assert s["wall_clock_seconds"] == pytest.approx(77.391 + 1339.067, abs=1e-3)
    assert s["step_time"]["p50"] == pytest.approx(0.214, abs=0.002)
    assert s["train_loss"]["final"] == pytest.approx(3.2533)
    assert s["perplexity"]["shown"] is True


def test_real_gpt_lab_step_time(shared_dir: Path) -> None:
    run = trainlens.read(shared_dir / REAL / "AkramjitS_gpt-lab-diffusion/train.log")[0]
    s = summarize(run)
    assert s["wall_clock_seconds"] == pytest.approx(31848.444, abs=1e-3)
    assert 4.2 < s["step_time"]["p50"] < 4.7  # step_avg reads 4453.70ms at the end
    assert s["train_loss"]["final"] == pytest.approx(6.580660e-02)


@pytest.mark.parametrize(
    "path",
    [
        "Althea80_DM2025-Lab2-Exercise/logs/training_log.csv",
        "fabiom91_ConvNeXt_AI_Competition_Platform/trainer_state.json",
        "aigoncharov_trainer_state_viz/trainer_state.json",
    ],
)
def test_real_classifiers_get_no_perplexity(shared_dir: Path, path: str) -> None:
    s = summarize(trainlens.read(shared_dir / REAL / path)[0])
    assert s["perplexity"]["shown"] is False
    assert (s.get("val_loss") or {}).get("final_perplexity") is None
    assert s["train_loss"]["final_perplexity"] is None


def test_real_megatron_gets_perplexity_of_its_last_loss(shared_dir: Path) -> None:
    path = shared_dir / REAL / "stark-sim_megatron-deepspeed-lock-clock/qwen7b_baseline_500.log"
    s = summarize(trainlens.read(path)[0])
    assert s["train_loss"]["final"] == pytest.approx(6.234454)
    assert s["train_loss"]["final_perplexity"] == pytest.approx(math.exp(6.234454))


def test_real_law_llm_final_is_not_a_mean_with_its_first_loss(shared_dir: Path) -> None:
    s = summarize(trainlens.read(shared_dir / REAL / "aaghaazkhan_law-llm/trainer_state.json")[0])
    # six points, the first 284.87: "final" was their mean, 78.6, with perplexity 1e34
    assert s["train_loss"]["final"] == pytest.approx(5.0244, abs=1e-4)
    assert s["train_loss"]["final_mean_last_k"] is None
    assert s["train_loss"]["final_perplexity"] is None


def test_a_token_count_or_token_accuracy_marks_an_lm_loss(tmp_path: Path) -> None:
    # TRL's SFTTrainer logs mean_token_accuracy and num_tokens beside a plain `loss`
    path = tmp_path / "metrics.jsonl"
    with path.open("w") as fh:
        for i in range(1, 6):
            row = {"step": i, "loss": 2.0 - 0.1 * i, "mean_token_accuracy": 0.5 + 0.01 * i}
            fh.write(json.dumps({**row, "num_tokens": 4096 * i}) + "\n")
    s = summarize(trainlens.read(path)[0])
    assert s["perplexity"]["shown"] is True
    assert s["train_loss"]["final_perplexity"] == pytest.approx(math.exp(1.5))
    plain = tmp_path / "plain.jsonl"
    plain.write_text("".join(json.dumps({"step": i, "loss": 1.0}) + "\n" for i in range(5)))
    assert summarize(trainlens.read(plain)[0])["perplexity"]["shown"] is False


def test_epoch_times_leave_out_the_final_epoch_mark(tmp_path: Path) -> None:
    # HF's Trainer logs epoch 3.0 at the very last step, after epochs 0-2 (T5 run): no
    # "epoch 3: 0.0s"
    path = tmp_path / "log.jsonl"
    rows = [
        {"step": s, "epoch": s / 100, "loss": 3.0 - s / 1000, "time": 1000.0 + s}
        for s in range(10, 300, 10)
    ]
    rows.append({"step": 300, "epoch": 3.0, "time": 1300.0})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary = trainlens.summarize(trainlens.read(path)[0])
    assert list(summary["epochs"]["seconds_per_epoch"]) == ["0", "1", "2"]
