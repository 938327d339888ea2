"""Measured energy: sampled GPU power (``gpu<i>/power_w``) integrated over wall time.

The integration is checked on samples built here; the whole path on a run the real W&B
SDK writes offline with GPU stats records (tests/_wandb_gpu_writer.py says why the
records are sent through the SDK's interface) and on an nvidia-smi-style JSONL.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tests.conftest import run_wandb_offline
from trainlens.calculators import DEFAULT_PUE, GRID_PRESETS, integrate_power, measured_energy
from trainlens.calculators.energy import GAP_INTERVALS
from trainlens.cli import main
from trainlens.core.names import AliasTable
from trainlens.readers import read_runs

WORLD = GRID_PRESETS["world"].g_per_kwh


def _trapezoid(t: list[float], w: list[float], max_dt: float) -> float:
    """Joules by hand: the plain trapezoid sum, a step longer than max_dt skipped."""
    total = 0.0
    for i in range(1, len(t)):
        if t[i] - t[i - 1] <= max_dt:
            total += (w[i] + w[i - 1]) / 2 * (t[i] - t[i - 1])
    return total


# ---- the integral ------------------------------------------------------------------------


def test_constant_draw_is_watts_times_time() -> None:
    t = [15.0 * k for k in range(241)]  # one hour, W&B's interval
    got = integrate_power(t, [300.0] * len(t))
    assert got is not None
    assert got.joules == pytest.approx(300.0 * 3600)
    assert (got.seconds, got.left_out_seconds, got.gaps, got.interval) == (3600.0, 0.0, 0, 15.0)


def test_a_pause_longer_than_three_intervals_is_left_out_and_counted() -> None:
    t = [0.0, 15.0, 30.0, 45.0, 45.0 + 15 * GAP_INTERVALS, 45.0 + 15 * GAP_INTERVALS + 400]
    w = [100.0, 200.0, 200.0, 100.0, 300.0, 300.0]
    got = integrate_power(t, w)
    assert got is not None
    # the step of exactly 3 intervals is integrated; the 400 s one is not
    assert got.joules == pytest.approx(_trapezoid(t, w, 45.0))
    assert got.joules == pytest.approx(15 * (150 + 200 + 150) + 45 * 200)
    assert (got.left_out_seconds, got.gaps) == (400.0, 1)
    assert got.seconds == pytest.approx(90.0)


def test_samples_out_of_order_and_non_finite_ones() -> None:
    t = [30.0, 0.0, 15.0, float("nan"), 45.0]
    w = [3.0, 1.0, 2.0, 99.0, float("nan")]  # no wall time / no value: no sample
    got = integrate_power(t, w)
    assert got is not None
    assert got.samples == 3
    assert got.joules == pytest.approx(15 * 1.5 + 15 * 2.5)
    assert integrate_power([1.0], [5.0]) is None
    assert integrate_power([1.0, 1.0], [5.0, 6.0]) is None  # no time between them


def test_devices_are_summed_and_pue_and_grid_applied() -> None:
    t = [15.0 * k for k in range(5)]
    got = measured_energy({"gpu0/power_w": (t, [100.0] * 5), "gpu1/power_w": (t, [300.0] * 5)})
    assert got is not None
    joules = 60 * 100 + 60 * 300
    assert got.kwh == pytest.approx(joules / 3.6e6 * DEFAULT_PUE)
    assert got.tco2e == pytest.approx(got.kwh * WORLD / 1e6)
    assert (got.n_gpus, got.seconds) == (2, 60.0)
    assert got.gpu_hours == pytest.approx(120 / 3600)
    assert got.mean_watts == pytest.approx(200.0)
    pue15 = measured_energy({"gpu0/power_w": (t, [100.0] * 5)}, pue=1.5, grid="france")
    assert pue15 is not None and pue15.kwh == pytest.approx(6000 / 3.6e6 * 1.5)
    assert pue15.tco2e == pytest.approx(pue15.kwh * 56.0 / 1e6)
    assert measured_energy({"gpu0/power_w": ([1.0], [5.0])}) is None


# ---- names: one device rule for W&B's keys and nvidia-smi's fields -----------------------


@pytest.mark.parametrize(
    ("logged", "canonical", "scale"),
    [
        ("system/gpu.0.powerWatts", "gpu0/power_w", 1.0),
        ("system.gpu.3.powerWatts", "gpu3/power_w", 1.0),  # the public API's dumps
        ("system/gpu.1.gpu", "gpu1/util", 1.0),
        ("system/gpu.0.memoryAllocatedBytes", "gpu0/mem_used", 1.0),
        ("system/gpu.0.memoryAllocated", "gpu0/mem_used_pct", 1.0),
        ("system/gpu.0.powerPercent", "gpu0/power_pct", 1.0),
        ("system/gpu.0.temp", "gpu0/temp", 1.0),
        ("gpu0/power.draw [W]", "gpu0/power_w", 1.0),
        ("gpu_1/memory.used [MiB]", "gpu1/mem_used", 2.0**20),
        ("gpu2/utilization.gpu [%]", "gpu2/util", 1.0),
        ("gpu0/power_w", "gpu0/power_w", 1.0),
    ],
)
def test_per_gpu_names(logged: str, canonical: str, scale: float) -> None:
    alias = AliasTable().lookup(logged)
    assert alias is not None
    assert (alias.canonical, alias.scale) == (canonical, scale)


def test_wandbs_per_process_copy_of_a_gpu_is_not_a_second_gpu() -> None:
    assert AliasTable().lookup("system/gpu.process.0.powerWatts") is None
    assert AliasTable().lookup("system/gpu.0.memoryClock") is None  # no field of ours


# ---- the whole path ----------------------------------------------------------------------


def _energy(path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    capsys.readouterr()
    main(["analyze", str(path), "--json"])
    (doc,) = json.loads(capsys.readouterr().out)["runs"]
    energy: dict[str, Any] = doc["summary"]["energy"]
    return energy


def test_nvidia_smi_columns_in_a_jsonl(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = []
    for step in range(100):
        row: dict[str, float] = {"step": step, "time": 1000.0 + 10 * step, "loss": 1.0}
        if step % 3 == 0:  # sampled less often than logged; not every step
            row["gpu0/power.draw [W]"] = 250.0 + step
        rows.append(json.dumps(row))
    (tmp_path / "metrics.jsonl").write_text("\n".join(rows) + "\n")
    energy = _energy(tmp_path / "metrics.jsonl", capsys)
    t = [1000.0 + 10 * s for s in range(0, 100, 3)]
    joules = _trapezoid(t, [250.0 + s for s in range(0, 100, 3)], math.inf)
    assert energy["source"] == "measured"
    assert energy["kwh"] == pytest.approx(joules / 3.6e6 * DEFAULT_PUE)
    assert energy["measured"]["source"] == "logged GPU power"
    assert energy["estimated"] is None  # no GPU named: no TDP to estimate from
    assert "measured from logged GPU power, 1 GPU over" in energy["text"]


def test_power_without_wall_times_is_said(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [json.dumps({"step": s, "loss": 1.0, "gpu0/power_w": 250.0}) for s in range(20)]
    (tmp_path / "metrics.jsonl").write_text("\n".join(rows) + "\n")
    energy = _energy(tmp_path / "metrics.jsonl", capsys)
    assert energy["kwh"] is None and energy["source"] is None and energy["measured"] is None
    assert energy["text"].startswith("GPU power logged without two timed samples per GPU")


def test_no_power_no_energy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "loss": 2.0}\n{"step": 2, "loss": 1.0}\n')
    capsys.readouterr()
    main(["analyze", str(tmp_path / "metrics.jsonl"), "--json"])
    (doc,) = json.loads(capsys.readouterr().out)["runs"]
    assert "energy" not in doc["summary"]


@pytest.fixture(scope="module")
def gpu_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("wandb")
    root = tmp_path_factory.mktemp("wandb_gpu")
    run_wandb_offline(Path(__file__).with_name("_wandb_gpu_writer.py"), root)
    return root / "wandb"


def _written() -> Any:
    sys.path.insert(0, str(Path(__file__).parent))
    try:
        import _wandb_gpu_writer as written  # the values and times the writer used
    finally:
        sys.path.pop(0)
    return written


@pytest.mark.slow
def test_wandb_run_energy_is_measured_beside_the_tdp_estimate(
    gpu_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    w = _written()
    joules = 0.0
    for gpu in range(w.N_GPUS):
        watts = [w.watts(gpu, k) for k in range(len(w.OFFSETS))]
        joules += _trapezoid([float(t) for t in w.OFFSETS], watts, 3 * 15.0)
    energy = _energy(gpu_run, capsys)
    assert energy["source"] == "measured"
    assert energy["kwh"] == pytest.approx(joules / 3.6e6 * DEFAULT_PUE, rel=1e-12)
    assert energy["tco2e"] == pytest.approx(energy["kwh"] * WORLD / 1e6)  # carbon follows
    m = energy["measured"]
    assert (m["n_gpus"], m["gaps"], m["sampling_interval"]) == (2, 2, 15.0)
    assert m["left_out_seconds"] == 2 * 300.0  # the pause, on each GPU
    assert m["seconds"] == w.OFFSETS[-1]
    assert m["source"] == "W&B GPU power"
    # the TDP estimate beside it: the config's 2 × A100 80GB (400 W) over the wall clock
    est = energy["estimated"]
    assert (est["gpu"], est["watts"], est["n_gpus"]) == ("A100 SXM4 80GB", 400.0, 2)
    assert energy["text"].startswith(f"{energy['kwh']:.3g} kWh")
    assert "measured from W&B GPU power, 2 GPUs over 8.25 min" in energy["text"]
    assert (
        "10 min of GPU time in 2 gaps longer than 3 sampling intervals left out" in (energy["text"])
    )
    assert "estimated from TDP, 2 × A100 SXM4 80GB at 400 W" in energy["text"]
    # (over the run's wall clock, the stats' last sample included: every GPU busy)
    assert est["kwh"] == pytest.approx(2 * 400 * w.OFFSETS[-1] / 3.6e6 * DEFAULT_PUE, rel=1e-9)


@pytest.mark.slow
def test_wandb_gpu_metrics_get_per_gpu_names(gpu_run: Path) -> None:
    (run,) = read_runs(gpu_run)
    assert {"gpu0/power_w", "gpu1/power_w", "gpu0/util", "gpu1/mem_used", "gpu0/temp"} <= set(
        run.metrics
    )
    assert run.raw_names["gpu0/power_w"] == "system/gpu.0.powerWatts"
    # W&B's per-process copy of GPU 0 keeps its own name: not summed as a third GPU
    assert "system/gpu.process.0.powerWatts" in run.metrics
    _, mem = run.series("gpu1/mem_used")
    assert set(mem.tolist()) == {2e9}
    power = run.frame.filter(pl.col("metric") == "gpu1/power_w")
    assert power.height == len(_written().OFFSETS)  # every sample, several at one step
    # several samples at one step is how W&B places them: no "repeated step" note
    assert not [i for i in run.data_quality if i.kind == "duplicate-step"]


def test_wandb_system_history_dump_in_parquet(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """W&B's public API gives system metrics as a history too (``run.history(stream=
    "system")``: ``system.gpu.<i>.powerWatts``, ``_runtime``, ``_timestamp``, no ``_step``),
    saved with pandas like any dump; its GPU power gives the measured energy."""
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    t = [1_700_000_000.0 + 15.0 * k for k in range(20)]
    rows = [
        {
            "system.gpu.0.powerWatts": 300.0 + k,
            "system.gpu.1.powerWatts": 310.0 - k,
            "system.gpu.process.0.powerWatts": 300.0 + k,  # GPU 0 again: not a third GPU
            "system.gpu.0.gpu": 97.0,
            "_runtime": when - t[0],
            "_timestamp": when,
        }
        for k, when in enumerate(t)
    ]
    out = tmp_path / "system.parquet"
    pd.DataFrame(rows).to_parquet(out)
    energy = _energy(out, capsys)
    joules = _trapezoid(t, [300.0 + k for k in range(20)], math.inf)
    joules += _trapezoid(t, [310.0 - k for k in range(20)], math.inf)
    assert energy["kwh"] == pytest.approx(joules / 3.6e6 * DEFAULT_PUE)
    assert energy["measured"]["n_gpus"] == 2
    assert energy["measured"]["source"] == "W&B GPU power"


def test_energy_is_in_the_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = [
        json.dumps({"step": s, "time": 100.0 + 15 * s, "loss": 2.0, "gpu0/power_w": 200.0})
        for s in range(30)
    ]
    (tmp_path / "metrics.jsonl").write_text("\n".join(rows) + "\n")
    assert main(["report", str(tmp_path / "metrics.jsonl"), "-o", str(tmp_path / "r")]) == 0
    capsys.readouterr()
    kwh = f"{200.0 * 15 * 29 / 3.6e6 * DEFAULT_PUE:.3g} kWh"
    for name in ("report.html", "report.md"):
        text = (tmp_path / "r" / name).read_text()
        assert f"{kwh}, " in text and "measured from logged GPU power, 1 GPU over" in text, name


@pytest.mark.slow
def test_wandb_system_samples_do_not_set_the_step_time(gpu_run: Path) -> None:
    """The 40 history steps are logged within a second; the GPU samples, minutes later, are
    placed at the last step with their own wall time. The step time is the history's."""
    from trainlens.summary import summarize

    (run,) = read_runs(gpu_run)
    st = summarize(run)["step_time"]
    assert st["source"] == "wall_time"
    assert st["mean"] < 1.0 and st["p95"] < 1.0
