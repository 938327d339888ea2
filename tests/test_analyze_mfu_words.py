"""analyze's MFU says which peak and which precision it used, and where the precision came
from; a figure of 100 % or more is called impossible, and the gate does not pass it.

``analyze healthy_cosine --params 1.3e9 --gpu h100`` printed "MFU mean 634.9%" against
H100's fp32 peak, taken from the run config's ``dtype: float32`` without a word: the run
(a CPU model of 116k parameters, written by trainlens.monitor, fixtures/make_runs.py) logs
54k tokens/s, and 6 × 1.3e9 × 54k is six times the fp32 peak."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainlens.cli import main

H100_FP32, H100_BF16 = 66.9e12, 989.4e12


def analyze_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict]:
    code = main(["analyze", *args, "--json"])
    return code, json.loads(capsys.readouterr().out)["runs"][0]["summary"]


def test_an_impossible_mfu_names_its_peak_and_the_run_configs_precision(
    fixture_runs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = fixture_runs / "healthy_cosine" / "metrics.jsonl"
    args = [str(run), "--params", "1.3e9", "--gpu", "h100"]
    assert main(["analyze", *args, "--fail-on", "warning"]) == 0  # no finding: a note
    out = capsys.readouterr().out
    [line] = [x for x in out.splitlines() if x.startswith("mfu ")]
    assert "dense fp32 66.9 TFLOP/s" in line
    assert "precision from the run config's `dtype: float32`" in line
    assert "metrics.config.json" in line
    problem = out.splitlines()[out.splitlines().index(line) + 1].strip()
    assert problem.startswith("MFU 634.9 % is impossible: ")
    assert "N = 1.3e+09 (from --params" in problem
    assert "(peak used: H100 SXM dense fp32 66.9 TFLOP/s; precision from the run config's" in (
        problem
    )

    _, summary = analyze_json(capsys, *args)
    mfu = summary["mfu"]
    assert mfu["impossible"] is True and mfu["dtype"] == "fp32"
    assert mfu["peak_flops"] == pytest.approx(H100_FP32)
    assert mfu["problem"].startswith("MFU 634.9 % is impossible")

    # --dtype wins over the run config, and says it is the flag's: the same logged
    # tokens/s against the bf16 peak, a figure that can be true
    _, summary = analyze_json(capsys, *args, "--dtype", "bf16")
    fixed = summary["mfu"]
    assert fixed["dtype_source"] == "from --dtype"
    assert fixed["impossible"] is False and "problem" not in fixed
    assert fixed["mean"] == pytest.approx(mfu["mean"] * H100_FP32 / H100_BF16, rel=1e-9)


def _plain_run(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as fh:
        for i in range(50):
            fh.write(json.dumps({"step": i, "loss": 2.0 - i / 100, "tokens_per_sec": 50_000}))
            fh.write("\n")
    return path


def test_the_default_precision_and_a_config_files_are_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _plain_run(tmp_path / "run" / "metrics.jsonl")
    _, summary = analyze_json(capsys, str(run), "--params", "1e8", "--gpu", "h100")
    assert summary["mfu"]["dtype"] == "bf16"
    assert summary["mfu"]["dtype_source"] == "bf16 by default, none given; --dtype sets it"
    assert summary["mfu"]["mean"] == pytest.approx(6 * 1e8 * 50_000 / H100_BF16)

    cfg = tmp_path / "trainlens.toml"
    cfg.write_text("[model]\nn_params = 1e8\ngpu = 'h100'\ndtype = 'fp16'\n")
    _, summary = analyze_json(capsys, str(run), "--config", str(cfg))
    assert summary["mfu"]["dtype_source"] == f"from [tool.trainlens.model] in {cfg}"
    assert "(precision from [tool.trainlens.model] in" in summary["mfu"]["text"]


def test_an_unknown_dtype_flag_is_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _plain_run(tmp_path / "run" / "metrics.jsonl")
    assert main(["analyze", str(run), "--params", "1e8", "--gpu", "h100", "--dtype", "fp64"]) == 2
    err = capsys.readouterr().err
    assert "--dtype must be one of bf16, fp16, fp8, tf32, fp32" in err and "'fp64'" in err


def test_a_run_configs_unknown_precision_is_said_not_dropped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The run config's precision the table has no peak for: MFU is not computed, and the
    text says why (the note was in the JSON only)."""
    run = _plain_run(tmp_path / "run" / "metrics.jsonl")
    (run.parent / "config.json").write_text(json.dumps({"precision": "64-true"}))
    assert main(["analyze", str(run), "--params", "1e8", "--gpu", "h100"]) == 0
    [line] = [x for x in capsys.readouterr().out.splitlines() if x.startswith("mfu ")]
    assert "MFU not computed" in line and "'64-true'" in line


def test_the_gate_does_not_pass_min_mfu_on_an_impossible_figure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _plain_run(tmp_path / "runs" / "a" / "metrics.jsonl")
    cfg = tmp_path / "trainlens.toml"
    # 6 × 1e10 × 50k = 3e15 FLOP/s: three H100s' worth on one
    cfg.write_text("[model]\nn_params = 1e10\ngpu = 'h100'\n[gate.checks]\nmin_mfu = 0.3\n")
    main(["gate", str(run.parent.parent), "--config", str(cfg), "--format", "json", "-j", "1"])
    doc = json.loads(capsys.readouterr().out)
    [check] = [c for c in doc["runs"][0]["checks"] if c["name"] == "check:min_mfu"]
    assert check["status"] == "skipped"
    assert "impossible" in check["detail"]
