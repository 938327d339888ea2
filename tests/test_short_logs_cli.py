"""A short Megatron excerpt as a user runs it: the blow-up is an error, and what could not
be judged is listed with its reason (text and JSON), never a bare "nothing looks wrong"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainlens.cli import main


def _megatron(path: Path, rows: list[tuple[int, float, float]]) -> Path:
    """Megatron-LM iteration lines, as its training_log prints them."""
    with path.open("w") as fh:
        for it, loss, gnorm in rows:
            fh.write(
                f" iteration {it:8d}/  100000 | consumed samples: {it * 512:12d} | elapsed time "
                "per iteration (ms): 9123.4 | learning rate: 1.500000E-04 | global batch size:"
                f"   512 | lm loss: {loss:.6E} | loss scale: 1.0 | grad norm: {gnorm:.3f} | "
                "number of skipped iterations:   0 | number of nan iterations:   0 |\n"
            )
    return path


def test_five_line_excerpt_blowup_fails_at_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the example: an excerpt from iteration 29,020 whose loss goes 2.77 -> 7.34
    # -> 8.72 and stays there
    rows = [(29020, 2.78, 0.21), (29030, 2.77, 0.22), (29040, 7.34, 0.23), (29050, 8.72, 0.2)]
    rows.append((29060, 8.65, 0.21))
    path = _megatron(tmp_path / "excerpt.log", rows)
    assert main(["analyze", str(path), "--fail-on", "error"]) == 1
    out = capsys.readouterr().out
    assert "ERROR" in out and "LOSS001" in out and "step 29040" in out
    assert "nothing looks wrong" not in out
    # loss_trend cannot judge 5 points; it says so
    assert "loss_trend: train/loss has 5 finite values; a trend needs at least 10" in out

    assert main(["analyze", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)["runs"][0]
    errors = [f for f in doc["findings"] if f["severity"] == "error"]
    assert [(f["code"], f["step_start"]) for f in errors] == [("LOSS001", 29040)]
    assert doc["skipped_detectors"]["loss_trend"].startswith("train/loss has 5 finite values")


def test_short_quiet_excerpt_says_what_was_not_judged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # nanotron-like excerpt of a long healthy run: 4 iterations, nothing wrong in them
    rows = [(327281, 2.38, 1.25), (327282, 2.35, 1.22), (327283, 2.51, 1.21), (327284, 2.36, 1.18)]
    path = _megatron(tmp_path / "quiet.log", rows)
    assert main(["analyze", str(path), "--fail-on", "warning"]) == 0
    out = capsys.readouterr().out
    assert "findings    none in what could be judged" in out
    assert "nothing looks wrong" not in out
    assert "loss_trend: train/loss has 4 finite values" in out


def _megatron_fp16(path: Path, rows: list[tuple[int, float, float]]) -> Path:
    """Megatron-DeepSpeed fp16 lines as BLOOM's tr1-13B printed them: loss scale moving,
    grad norm 0.000 (not computed)."""
    with path.open("w") as fh:
        for it, loss, scale in rows:
            fh.write(
                f" iteration {it:8d}/  311541 | consumed samples: {it * 1024:12d} | elapsed "
                "time per iteration (ms): 22306.6 | learning rate: 9.850E-05 | global batch "
                f"size:  1024 | lm loss: {loss:.6E} | loss scale: {scale:.1f} | grad norm: 0.000 "
                "| num zeros: 0.0 | number of skipped iterations:   0 | number of nan "
                "iterations:   0 |\n"
            )
    return path


def test_spike_still_up_before_a_gap_is_no_one_off_and_names_the_loss_scale(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the tr1-13B notes: 2.77 -> 7.34 -> 8.72 with the loss scale falling 65536 -> 8192 ->
    # 4096 in the same intervals; the excerpt ends at 29090 still at 6.85, and the next
    # line quoted is from 33240 (back at 2.72): when it came back is not in the log
    rows = [
        (29020, 2.775923, 32768.0),
        (29030, 2.772822, 32768.0),
        (29040, 2.768131, 65536.0),
        (29050, 7.343709, 8192.0),
        (29060, 8.715872, 4096.0),
        (29070, 7.654131, 4096.0),
        (29080, 7.192470, 4096.0),
        (29090, 6.849044, 4096.0),
        (33240, 2.722675, 32768.0),
        (43680, 2.635663, 131072.0),
    ]
    path = _megatron_fp16(tmp_path / "tr1-13B.log", rows)
    assert main(["analyze", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)["runs"][0]
    [spike] = [f for f in doc["findings"] if f["code"] == "LOSS001"]
    assert spike["step_start"] == 29050 and spike["severity"] == "warning"
    assert "still up at step 29090, the last logged step before a gap" in spike["message"]
    # the second drop (29060) is the same overflow episode, not evidence that drops are
    # routine in this run
    assert spike["evidence"]["first_mover"] == "loss_scale"
    assert "fp16 overflow" in spike["message"]
    assert "grad_norm was not computed there (exactly 0)" in spike["message"]
    assert "DATA006" in {f["code"] for f in doc["findings"]}
