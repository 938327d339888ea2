"""CLI: trainlens mfu / flops / memory / energy / gpus — output, --json, exit codes, errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from trainlens.cli import main

REPO = Path(__file__).resolve().parents[1]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    rc, out, err = run(capsys, *argv, "--json")
    assert rc == 0, err
    payload = json.loads(out)
    assert isinstance(payload, dict)
    return payload


def assert_usage_error(rc: int, out: str, err: str, *fragments: str) -> None:
    assert rc == 2
    assert out == ""
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("trainlens: error: ")
    for fragment in fragments:
        assert fragment in lines[0]


# ---- mfu --------------------------------------------------------------------------------


def test_mfu_design_brief_example(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run(capsys, "mfu", "--params", "1.3e9", "--tps", "40000", "--gpu", "h100")
    assert rc == 0, err
    assert out.startswith("MFU 31.5 %")
    assert "989.4 TFLOP/s per device, dense bf16 (H100 SXM)" in out
    assert "Assumptions:" in out
    assert "'h100' read as H100 SXM" in out
    assert "HFU" not in out.split("Assumptions:")[0]  # no recomputation: no HFU line


def test_mfu_json_has_the_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    payload = run_json(capsys, "mfu", "--params", "1.3B", "--tps", "40k", "--gpu", "h100")
    assert payload["mfu"] == pytest.approx(0.31534, abs=1e-5)
    assert payload["mfu_percent"] == pytest.approx(31.534, abs=1e-3)
    assert payload["peak_flops"] == pytest.approx(989.4e12)
    assert payload["peak_is_dense"] is True
    assert payload["gpu"] == "H100 SXM" and payload["dtype"] == "bf16"
    assert payload["assumptions"] and isinstance(payload["assumptions"], list)


def test_mfu_tokens_per_sec_is_the_whole_job(capsys: pytest.CaptureFixture[str]) -> None:
    payload = run_json(
        capsys, "mfu", "--params", "1.3e9", "--tps", "320k", "--gpu", "h100", "--gpus", "8"
    )
    assert payload["mfu"] == pytest.approx(0.31534, abs=1e-5)
    assert payload["tokens_per_sec_per_gpu"] == 40_000


def test_mfu_attention_and_hfu(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["mfu", "--params", "540e9", "--tps", "238.3k", "--gpu", "tpu v4", "--gpus", "6144"]
    shapes = ["--layers", "118", "--heads", "48", "--head-dim", "256", "--seq-len", "2048"]
    rc, out, err = run(capsys, *argv, *shapes, "--recompute", "selective")
    assert rc == 0, err
    assert out.startswith("MFU 46.2 %")
    assert "HFU " in out and "selective" in out
    payload = run_json(capsys, *argv, *shapes, "--recompute", "selective")
    assert payload["mfu"] == pytest.approx(0.462, abs=5e-4)
    assert payload["hfu"] > payload["mfu"]
    assert payload["attention_flops_per_token"] == 12 * 118 * 48 * 256 * 2048


def test_mfu_above_100_percent_says_peak_or_params_wrong(
    capsys: pytest.CaptureFixture[str],
) -> None:
    rc, out, _ = run(
        capsys,
        "mfu",
        "--params", "123587328",
        "--tps", "491520",
        "--peak-tflops", "312",
        "--layers", "12", "--heads", "12", "--head-dim", "64", "--seq-len", "1024",
    )  # fmt: skip
    assert rc == 0
    assert out.startswith("MFU 134.7 %: impossible")
    assert "warning: MFU 134.7 % is impossible: " in out
    assert "Check the peak given (a dense rate, not the sparse headline)" in out
    assert "(peak used: 312 TFLOP/s as given, taken as dense bf16)" in out


def test_mfu_of_exactly_100_percent_is_impossible_and_names_peak_and_precision(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """6 × 1.3e9 × 40,000 = 312 TFLOP/s: exactly the A100's dense bf16 peak. It printed
    "MFU 100.0 %" with no word; it is impossible, and the precision was the default."""
    rc, out, _ = run(capsys, "mfu", "--params", "1.3e9", "--tps", "40000", "--gpu", "a100")
    assert rc == 0
    first = out.splitlines()[0]
    assert first.startswith("MFU 100.0 %: impossible")
    assert "A100 SXM4 40GB dense bf16 312 TFLOP/s; precision bf16 by default" in first
    assert "warning: MFU 100.0 % is impossible: " in out
    assert "no run reaches the dense peak" in out
    # named --dtype: the words say so, and fp32's own peak gives its own figure
    rc, out, _ = run(
        capsys, "mfu", "--params", "1.3e9", "--tps", "40000", "--gpu", "a100", "--dtype", "fp32"
    )
    assert out.startswith("MFU 1600.0 %: impossible")
    assert "dense fp32 19.5 TFLOP/s; precision from --dtype" in out
    # just below: a figure that could be true gets no such words
    rc, out, _ = run(capsys, "mfu", "--params", "1.3e9", "--tps", "39000", "--gpu", "a100")
    assert out.startswith("MFU 97.5 %  (model FLOPs / A100 SXM4 40GB dense bf16")
    assert "impossible" not in out
    payload = run_json(capsys, "mfu", "--params", "1.3e9", "--tps", "40000", "--gpu", "a100")
    assert payload["impossible"] is True
    assert payload["dtype_source"].startswith("bf16 by default")


def test_mfu_below_20_percent_names_the_usual_causes(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(capsys, "mfu", "--params", "1.3e9", "--tps", "5000", "--gpu", "h100")
    assert rc == 0
    assert "warning: MFU below 20 %" in out
    for cause in ("input pipeline", "micro-batches", "unfused kernels", "communication"):
        assert cause in out


def test_mfu_dtype_changes_the_peak(capsys: pytest.CaptureFixture[str]) -> None:
    payload = run_json(
        capsys, "mfu", "--params", "1e9", "--tps", "1e4", "--gpu", "h100", "--dtype", "fp8"
    )
    assert payload["peak_flops"] == pytest.approx(1978.9e12)


@pytest.mark.parametrize(
    ("gpu", "suggestion"), [("rtx4080", "RTX 4090"), ("h1000", "H100"), ("a100-90gb", "A100")]
)
def test_mfu_unknown_gpu_suggests(
    capsys: pytest.CaptureFixture[str], gpu: str, suggestion: str
) -> None:
    rc, out, err = run(capsys, "mfu", "--params", "1e9", "--tps", "1e4", "--gpu", gpu)
    assert_usage_error(rc, out, err, f"unknown GPU {gpu!r}", "did you mean", suggestion)


@pytest.mark.parametrize(
    ("argv", "fragments"),
    [
        (["--params", "-5"], ["--params must be positive", "'-5'"]),
        (["--params=-1.3e9"], ["--params must be positive"]),
        (["--params", "0"], ["--params must be greater than zero"]),
        (["--params", "abc"], ["--params must be a number", "'abc'"]),
        (["--params", "nan"], ["--params must be a finite number"]),
        (["--params", "1e9", "--tps", "-40000"], ["--tps must be positive"]),
        (["--params", "1e9", "--tps", "0"], ["--tps must be greater than zero"]),
        (["--params", "1e9", "--tps", "fast"], ["--tps must be a number"]),
        (["--params", "1e9", "--gpus", "0"], ["--gpus must be greater than zero"]),
        (["--params", "1e9", "--gpus", "2.5"], ["--gpus must be a whole number"]),
        (["--params", "1e9", "--dtype", "int4"], ["--dtype must be one of"]),
        (["--params", "1e9", "--recompute", "some"], ["--recompute must be one of"]),
        (["--params", "1e9", "--layers", "12"], ["attention term needs", "--heads"]),
    ],
)
def test_mfu_bad_numbers_are_one_sentence_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], fragments: list[str]
) -> None:
    full = ["mfu", *argv]
    if "--tps" not in " ".join(argv):
        full += ["--tps", "1e4"]
    if "--params" not in " ".join(argv):
        full += ["--params", "1e9"]
    full += ["--gpu", "h100"]
    rc, out, err = run(capsys, *full)
    assert_usage_error(rc, out, err, *fragments)


def test_mfu_missing_inputs(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run(capsys, "mfu", "--params", "1e9", "--gpu", "h100")
    assert_usage_error(rc, out, err, "--tps is required")
    rc, out, err = run(capsys, "mfu", "--params", "1e9", "--tps", "1e4")
    assert_usage_error(rc, out, err, "--gpu", "--peak-tflops")


def test_mfu_user_table(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    extra = tmp_path / "site.csv"
    extra.write_text("name,aliases,bf16_dense_tflops,source\nOurChip,ours,500,our lab\n")
    payload = run_json(
        capsys, "mfu", "--params", "1e9", "--tps", "1e4", "--gpu", "ours", "--table", str(extra)
    )
    assert payload["peak_flops"] == 500e12 and payload["gpu"] == "OurChip"


# ---- flops ------------------------------------------------------------------------------


def test_flops_gpt3(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run(capsys, "flops", "--params", "175e9", "--tokens", "300e9")
    assert rc == 0, err
    assert "3.15e23 FLOPs" in out and "Assumptions:" in out
    payload = run_json(capsys, "flops", "--params", "175e9", "--tokens", "300e9")
    assert payload["compute"]["flops"] == pytest.approx(3.15e23)


def test_flops_gpu_hours_and_wall_time(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["flops", "--params", "70B", "--tokens", "1.4T", "--gpu", "a100", "--gpus", "1024"]
    rc, out, err = run(capsys, *argv, "--mfu", "50%")
    assert rc == 0, err
    assert "GPU-hours" in out and "days on 1024 GPUs" in out and "50 % MFU" in out
    payload = run_json(capsys, *argv, "--mfu", "0.5")
    compute = payload["compute"]
    assert compute["flops"] == pytest.approx(5.88e23)
    assert compute["gpu_hours"] == pytest.approx(5.88e23 / (312e12 * 0.5) / 3600)
    assert compute["wall_days"] == pytest.approx(compute["gpu_hours"] / 24 / 1024)


def test_flops_llama3_and_default_mfu_stated(capsys: pytest.CaptureFixture[str]) -> None:
    payload = run_json(capsys, "flops", "--params", "405B", "--tokens", "15.6T", "--gpu", "h100")
    assert payload["compute"]["flops"] == pytest.approx(3.79e25, rel=1e-3)
    assert payload["compute"]["mfu"] == 0.4
    assert any("40 % MFU" in a for a in payload["compute"]["assumptions"])


def test_flops_chinchilla_budget(capsys: pytest.CaptureFixture[str]) -> None:
    payload = run_json(capsys, "flops", "--budget", "5.88e23")
    assert payload["chinchilla"]["params"] == pytest.approx(70e9)
    assert payload["chinchilla"]["tokens"] == pytest.approx(1.4e12)
    rc, out, _ = run(capsys, "flops", "--budget", "5.88e23")
    assert rc == 0 and "Chinchilla-optimal" in out and "20 per parameter" in out


def test_flops_per_iteration(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["flops", "--batch", "8", "--layers", "24", "--seq-len", "2048", "--hidden", "2048"]
    payload = run_json(capsys, *argv, "--vocab", "51200", "--recompute", "selective")
    it = payload["per_iteration"]
    b, n_layers, s, h, v = 8, 24, 2048, 2048, 51200
    assert it["model_flops"] == pytest.approx(
        72 * b * n_layers * s * h * h * (1 + s / (6 * h) + v / (12 * h * n_layers))
    )
    assert it["hardware_flops"] == pytest.approx(
        72 * b * n_layers * s * h * h * (1 + s / (3 * h) + v / (12 * h * n_layers))
    )
    rc, out, err = run(capsys, *argv)
    assert_usage_error(rc, out, err, "missing --vocab")


def test_flops_needs_something(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run(capsys, "flops")
    assert_usage_error(rc, out, err, "--params", "--budget")
    rc, out, err = run(capsys, "flops", "--params", "1e9", "--tokens", "-1")
    assert_usage_error(rc, out, err, "--tokens must be positive")


# ---- memory -----------------------------------------------------------------------------


def test_memory_zero_example(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run(
        capsys, "memory", "--params", "1.5B", "--precision", "fp16", "--optimizer", "adam"
    )
    assert rc == 0, err
    assert "Memory per GPU: 24.00 GB" in out
    assert "16 B/param" in out and "Assumptions:" in out
    payload = run_json(capsys, "memory", "--params", "1.5B", "--optimizer", "adam")
    assert payload["total_bytes"] == pytest.approx(24e9)
    assert payload["weights_bytes"] == pytest.approx(3e9)
    assert payload["owners_bytes"]["optimizer states"] == pytest.approx(12e9)


def test_memory_zero_stage_3_and_fit(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["memory", "--params", "7B", "--gpu", "a100-80gb"]
    rc, out, _ = run(capsys, *argv)
    assert rc == 0
    assert "does NOT fit, over by 32.00 GB" in out and "warning: Does not fit" in out
    rc, out, _ = run(capsys, *argv, "--zero", "3", "--dp", "8")
    assert rc == 0 and "fits, 66.00 GB spare" in out
    payload = run_json(capsys, *argv, "--zero", "3", "--dp", "8")
    assert payload["fits"] is True and payload["total_bytes"] == pytest.approx(16 * 7e9 / 8)


def test_memory_gpt3_activations(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["memory", "--params", "175B", "--micro-batch", "1", "--seq-len", "2048"]
    argv += ["--layers", "96", "--hidden", "12288", "--heads", "96"]
    payload = run_json(capsys, *argv)
    assert payload["activations_per_layer_bytes"] / 1e9 == pytest.approx(2.87, abs=0.005)
    assert payload["activations_bytes"] / 1e9 == pytest.approx(275, abs=0.5)
    rc, out, _ = run(capsys, *argv, "--recompute", "full")
    assert rc == 0 and "per layer x 96" in out and "2·s·b·h" in out


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--params", "1e9", "--zero", "4"], "--zero must be 0, 1, 2 or 3"),
        (["--params", "1e9", "--optimizer", "lion"], "--optimizer must be one of"),
        (["--params", "1e9", "--dp", "-2"], "--dp must be positive"),
        (["--params", "1e9", "--micro-batch", "2"], "missing --seq-len"),
        (["--params", "lots"], "--params must be a number"),
        ([], "--params is required"),
    ],
)
def test_memory_errors(capsys: pytest.CaptureFixture[str], argv: list[str], fragment: str) -> None:
    rc, out, err = run(capsys, "memory", *argv)
    assert_usage_error(rc, out, err, fragment)


# ---- energy -----------------------------------------------------------------------------


def test_energy_bloom(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["energy", "--gpu-hours", "1,082,990", "--gpu", "a100", "--pue", "1"]
    rc, out, err = run(capsys, *argv, "--grid", "bloom-jean-zay")
    assert rc == 0, err
    assert out.startswith("Energy 433,196 kWh  ->  24.69 tCO2e")
    assert "Luccioni" in out
    payload = run_json(capsys, *argv, "--grid", "57")
    assert payload["kwh"] == pytest.approx(433_196, abs=0.5)
    assert payload["tco2e"] == pytest.approx(24.7, abs=0.05)


def test_energy_llama2_7b(capsys: pytest.CaptureFixture[str]) -> None:
    payload = run_json(
        capsys, "energy", "--gpu-hours", "184320", "--watts", "400", "--pue", "1",
        "--grid", "llama2-implied",
    )  # fmt: skip
    assert payload["tco2e"] == pytest.approx(31.22, abs=0.01)


def test_energy_defaults_and_per_token(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["energy", "--gpus", "8", "--hours", "2.5d", "--gpu", "h100", "--tokens", "2B"]
    rc, out, _ = run(capsys, *argv)
    assert rc == 0
    assert "PUE 1.1 (the default" in out and "preset 'world' (the default)" in out
    payload = run_json(capsys, *argv)
    assert payload["gpu_hours"] == 480
    assert payload["kwh"] == pytest.approx(480 * 700 * 1.1 / 1000)
    assert payload["kwh_per_million_tokens"] == pytest.approx(payload["kwh"] / 2000)


def test_energy_grid_presets_listed(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(capsys, "energy", "--grids")
    assert rc == 0
    assert "bloom-jean-zay" in out and "llama2-implied" in out and "(default)" in out
    payload = run_json(capsys, "energy", "--grids")
    assert payload["default"] == "world"
    assert all(p["source"] for p in payload["presets"])


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--gpu-hours", "100", "--gpu", "a10g"], "--watts"),
        (["--gpu-hours", "100", "--watts", "300", "--grid", "mars"], "unknown grid"),
        (["--gpu-hours", "-100", "--watts", "300"], "--gpu-hours must be positive"),
        (["--gpus", "8", "--hours", "3 weeks", "--watts", "300"], "duration"),
        (["--watts", "300"], "GPU-hours"),
        (["--gpu-hours", "100", "--watts", "300", "--pue", "0.8"], "PUE is at least 1"),
    ],
)
def test_energy_errors(capsys: pytest.CaptureFixture[str], argv: list[str], fragment: str) -> None:
    rc, out, err = run(capsys, "energy", *argv)
    assert_usage_error(rc, out, err, fragment)


# ---- gpus -------------------------------------------------------------------------------


def test_gpus_lists_the_table_with_sources(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(capsys, "gpus")
    assert rc == 0
    assert out.startswith("name")
    assert "DENSE" in out and "Sources:" in out
    for name in ("H100 SXM", "A100 SXM4 80GB", "MI250X GCD", "TPU v4", "Gaudi3"):
        assert f"\n{name}" in out and f"  {name}: " in out


def test_gpus_one_row_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(capsys, "gpus", "h100")
    assert rc == 0
    assert out.startswith("H100 SXM (NVIDIA)") and "989.4 TFLOP/s dense" in out
    assert "source" in out and "read as H100 SXM" in out
    payload = run_json(capsys, "gpus")
    rows = {g["name"]: g for g in payload["gpus"]}
    assert rows["H100 SXM"]["bf16_dense_tflops"] == 989.4
    assert rows["A10G"]["notes"].startswith("CHOICE:")
    one = run_json(capsys, "gpus", "NVIDIA GeForce RTX 4090")
    assert one["name"] == "RTX 4090" and one["source"]


def test_gpus_user_table(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    extra = tmp_path / "site.csv"
    extra.write_text("name,tdp_w,source\nH100 SXM,650,measured\n")
    rc, out, _ = run(capsys, "gpus", "--table", str(extra))
    assert rc == 0 and "H100 SXM *" in out and "from the user table" in out
    payload = run_json(capsys, "gpus", "h100", "--table", str(extra))
    assert payload["tdp_w"] == 650 and payload["bf16_dense_tflops"] == 989.4
    rc, out, err = run(capsys, "gpus", "--table", str(tmp_path / "missing.csv"))
    assert_usage_error(rc, out, err, "not found")


def test_gpus_unknown_name(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run(capsys, "gpus", "h1OO")
    assert_usage_error(rc, out, err, "unknown GPU", "H100")


# ---- the command set --------------------------------------------------------------------


def test_every_calculator_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(capsys, "--help")
    assert rc == 0
    for command in ("mfu", "flops", "memory", "energy", "gpus"):
        assert command in out
        rc, out_cmd, _ = run(capsys, command, "--help")
        assert rc == 0 and "--json" in out_cmd


def test_mfu_startup_imports_no_heavy_library() -> None:
    code = (
        "import sys\n"
        "from trainlens.cli import main\n"
        "rc = main(['mfu', '--params', '1.3e9', '--tps', '40000', '--gpu', 'h100'])\n"
        "heavy = [m for m in ('polars', 'numpy', 'matplotlib', 'scipy') if m in sys.modules]\n"
        "print('HEAVY', heavy, rc)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert "MFU 31.5 %" in proc.stdout
    assert "HEAVY [] 0" in proc.stdout


@pytest.mark.parametrize(("given", "expected"), [(None, "1"), ("4", "4")])
def test_cli_keeps_openblas_to_one_thread_unless_told(given: str | None, expected: str) -> None:
    import os

    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if given is not None:
        env["OPENBLAS_NUM_THREADS"] = given
    code = "import os, trainlens.cli\nprint(os.environ.get('OPENBLAS_NUM_THREADS'))\n"
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True
    )
    assert proc.stdout.strip() == expected


@pytest.mark.slow
@pytest.mark.parametrize(
    "command", [["gpus"], ["mfu", "--params", "1.3e9", "--tps", "4e4", "--gpu", "h100"]]
)
def test_a_closed_pipe_is_not_an_error(command: list[str]) -> None:
    # `trainlens gpus | head -1`: the reader is gone before the table is written; typer
    # turns that into exit 1, the command line into a quiet exit 0
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainlens", *command],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # no reader: the first write fails with EPIPE
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 0
    assert err == ""


def test_docs_cover_every_command_preset_and_choice() -> None:
    from trainlens.calculators import GRID_PRESETS, load_hardware_table

    docs = (REPO / "docs" / "calculators.md").read_text(encoding="utf-8")
    for command in ("mfu", "flops", "memory", "energy", "gpus"):
        assert f"`trainlens {command}" in docs
    for name, preset in GRID_PRESETS.items():
        assert f"`{name}`" in docs and f"| {preset.g_per_kwh:g} |" in docs
    for row in load_hardware_table():
        if row.notes.startswith("CHOICE:"):
            assert f"**{row.name.split()[0]}:" in docs, row.name
