"""Frameworks' own JSON logs (issue 26, JSON family), read by what their writers meant.

Writers, by framework:

- detectron2 (not on PyPI): public ``metrics.json`` samples under tests/data/frameworks
  (their origin and licence in its README);
- MMEngine: its real Runner wrote ``fixtures/frameworks/mmengine/*/vis_data/scalars.json``
  (``make_logs.py`` there); the layout test re-runs it when MMEngine is installed;
- Sacred, DVCLive: their real writers, here (installed with the ``test`` extra);
- fairseq (0.12 does not install on Python 3.11): the sample output in fairseq's own
  ``examples/moe_lm/README.md`` (tests/data/frameworks/fairseq);
- MMCV 1.x, LLaMA-Factory, Ray Tune (not installed: mmcv 1.x builds CUDA ops, llamafactory
  and ray pin heavy stacks): lines written here exactly as their writers' code writes
  them (``TextLoggerHook._dump_log``, ``LogCallback._write_log``,
  ``JsonLoggerCallback.log_trial_result``), every value made in the test.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
import types
from pathlib import Path
from typing import Any, ClassVar

import pytest

import trainlens
from trainlens.api import analyze_run
from trainlens.core.run import Run

DATA = Path(__file__).parent / "data" / "frameworks"
MMENGINE = Path(__file__).parents[1] / "fixtures" / "frameworks" / "mmengine"
D2_RELAUNCHED = DATA / "detectron2" / "kevindic_metrics.json"
D2_HEALTHY = DATA / "detectron2" / "elbhnasy_metrics_head40.json"
FAIRSEQ = DATA / "fairseq" / "moe_lm_v100.log"


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _values(run: Run, metric: str) -> list[float]:
    return run.series_frame(metric).get_column("value").to_list()


def _steps(run: Run, metric: str) -> list[int]:
    return run.series_frame(metric).get_column("step").to_list()


def _codes(run: Run) -> list[str]:
    return [f.code for f in analyze_run(run).findings]


def _notes(run: Run, kind: str) -> list[str]:
    return [i.message for i in run.data_quality if i.kind == kind]


# ---- detectron2 -----------------------------------------------------------------------------


def test_detectron2_total_loss_is_the_train_loss_and_time_is_no_clock() -> None:
    (run,) = trainlens.read(D2_HEALTHY)
    lines = _lines(D2_HEALTHY)
    assert run.metadata["framework"] == "detectron2"
    assert _steps(run, "train/loss") == [r["iteration"] for r in lines]
    assert _values(run, "train/loss") == [r["total_loss"] for r in lines]
    assert _values(run, "step_time") == [r["time"] for r in lines]
    assert _values(run, "dataloader_wait") == [r["data_time"] for r in lines]
    assert run.frame.get_column("wall_time").null_count() == run.frame.height
    # the parts stay under their own names, and the note says the total is the loss
    assert _values(run, "loss_cls") == [r["loss_cls"] for r in lines]
    assert any("`total_loss` is the train loss" in n for n in _notes(run, "framework"))


def test_detectron2_healthy_loader_wait_is_silent() -> None:
    """data_time ~0.02 s beside time ~2.4 s: a wait of ~1 %, which DATA004 read as 100 %
    when `time` was taken for a wall clock."""
    (run,) = trainlens.read(D2_HEALTHY)
    wait, step = _values(run, "dataloader_wait"), _values(run, "step_time")
    share = sorted(w / s for w, s in zip(wait, step, strict=True))[len(wait) // 2]
    assert 0.005 < share < 0.02
    assert "DATA004" not in _codes(run)


def test_detectron2_relaunch_appended_keeps_both_and_the_later_stands() -> None:
    (run,) = trainlens.read(D2_RELAUNCHED)
    lines = _lines(D2_RELAUNCHED)
    assert [r["iteration"] for r in lines[:2]] == [19, 19]  # two launches, one file
    frame = run.frame.filter(run.frame.get_column("metric") == "train/loss")
    at19 = frame.filter(frame.get_column("step") == 19)
    assert at19.height == 2  # nothing lost
    standing = run.series_frame("train/loss")
    assert standing.get_column("value").to_list()[0] == lines[1]["total_loss"]
    assert "DATA004" not in _codes(run)


def test_detectron2_eval_lines_are_validation_metrics(tmp_path: Path) -> None:
    """detectron2's evaluation results share the file: a line of bbox/* at the iteration
    (the JSONWriter layout: sorted keys, one object a line)."""
    lines = _lines(D2_RELAUNCHED)[1:6]
    last = lines[-1]["iteration"]
    # (COCOeval's -1 for "no small objects" is written NaN: no value, not a value gone bad)
    ap = {"bbox/AP": 41.5, "bbox/AP50": 63.0, "bbox/APs": math.nan, "iteration": last + 1}
    path = tmp_path / "metrics.json"
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in [*lines, ap]))
    (run,) = trainlens.read(path)
    assert _values(run, "val/bbox/AP") == [41.5]
    assert _steps(run, "val/bbox/AP") == [last + 1]
    assert "bbox/AP" not in run.metrics
    assert "val/bbox/APs" not in run.metrics
    assert any("1 NaN result(s) left out" in n for n in _notes(run, "framework"))
    assert "NAN001" not in _codes(run)


# ---- MMEngine ---------------------------------------------------------------------------------


def test_mmengine_scalars_json_from_its_runner() -> None:
    path = MMENGINE / "healthy" / "vis_data" / "scalars.json"
    lines = _lines(path)
    train = [r for r in lines if "loss" in r]
    val = [r for r in lines if "mse" in r]
    (run,) = trainlens.read(path)
    assert run.metadata["framework"] == "mmengine"
    assert _steps(run, "train/loss") == [r["step"] for r in train]
    assert _values(run, "step_time") == [r["time"] for r in train]
    assert _values(run, "dataloader_wait") == [r["data_time"] for r in train]
    # validation was logged at step = epoch (1, 2, 3) among iterations 2..120: each is
    # placed at the iteration it followed, and its timings are not the training loop's
    assert [r["step"] for r in val] == [1, 2, 3]
    after, last = [], 0
    for r in lines:
        last = r["step"] if "loss" in r else last
        after += [] if "loss" in r else [last]
    assert _steps(run, "val/mse") == after
    assert _values(run, "val/mse") == [r["mse"] for r in val]
    assert len(_values(run, "val/dataloader_wait")) == len(val)
    assert "iter" not in run.metrics
    assert "DATA004" not in _codes(run)


def test_mmengine_slow_loader_is_found() -> None:
    path = MMENGINE / "slow_loader" / "vis_data" / "scalars.json"
    (run,) = trainlens.read(path)
    found = [f for f in analyze_run(run).findings if f.code == "DATA004"]
    assert len(found) == 1 and found[0].severity.name.lower() == "warning"
    train = [r for r in _lines(path) if "loss" in r]
    shares = sorted(r["data_time"] / r["time"] for r in train)
    median = shares[len(shares) // 2]
    assert abs(found[0].evidence["share"] - median) < 0.1
    # iteration-based: its validation lines say step 0; they follow iterations 20, 40, 60
    assert _steps(run, "val/mse") == [20, 40, 60]


def test_mmengine_memory_in_mb_is_read_as_bytes(tmp_path: Path) -> None:
    path = tmp_path / "vis_data" / "scalars.json"
    path.parent.mkdir()
    rows = [
        {"lr": 0.01, "data_time": 0.01, "loss": 2.0 - i / 10, "time": 0.5, "memory": 3000 + i}
        | {"epoch": 1, "iter": i * 10, "step": i * 10}
        for i in range(1, 6)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run,) = trainlens.read(path)
    assert _values(run, "mem/allocated") == [float((3000 + i) * 2**20) for i in range(1, 6)]


@pytest.mark.skipif(
    importlib.util.find_spec("mmengine") is None or os.environ.get("CI") == "true",
    reason="MMEngine is not installed (or CI: the run takes ~30 s)",
)
@pytest.mark.slow
def test_mmengine_fixture_layout_matches_a_fresh_run(tmp_path: Path) -> None:
    script = MMENGINE / "make_logs.py"
    subprocess.run([sys.executable, str(script), str(tmp_path)], check=True, capture_output=True)
    for name in ("healthy", "slow_loader"):
        fresh = _lines(tmp_path / name / "vis_data" / "scalars.json")
        kept = _lines(MMENGINE / name / "vis_data" / "scalars.json")
        assert [sorted(r) for r in fresh] == [sorted(r) for r in kept]
        assert [r["step"] for r in fresh] == [r["step"] for r in kept]


# ---- MMCV 1.x .log.json ---------------------------------------------------------------------


def _mmcv_log(tmp_path: Path) -> tuple[Path, list[dict[str, Any]]]:
    """TextLoggerHook's .log.json of an epoch-based run: an env line, then per epoch
    train lines with `iter` counting within the epoch and a val line."""
    rows: list[dict[str, Any]] = [{"env_info": "sys.platform: linux", "seed": 0}]
    for epoch in (1, 2):
        for it in (50, 100, 150):
            rows.append(
                {"mode": "train", "epoch": epoch, "iter": it, "lr": 0.02, "memory": 3660}
                | {"data_time": 0.05, "loss_cls": 0.5, "loss_bbox": 0.4, "loss": 0.9 - epoch / 10}
                | {"time": 0.6}
            )
        rows.append(
            {"mode": "val", "epoch": epoch, "iter": 625, "lr": 0.02, "bbox_mAP": 0.2 * epoch}
        )
    path = tmp_path / "20200504_210455.log.json"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path, rows


def test_mmcv_log_json_epoch_iterations_become_global_steps(tmp_path: Path) -> None:
    path, _ = _mmcv_log(tmp_path)
    (run,) = trainlens.read(path)
    assert run.metadata["framework"] == "mmcv"
    assert _steps(run, "train/loss") == [50, 100, 150, 200, 250, 300]
    assert _steps(run, "val/bbox_mAP") == [150, 300]
    assert _values(run, "val/bbox_mAP") == [0.2, 0.4]
    assert _steps(run, "lr") == [50, 100, 150, 200, 250, 300]  # a val line's lr is no value
    assert _values(run, "mem/allocated")[0] == 3660 * 2**20
    assert any("150" in n and "epoch" in n for n in _notes(run, "framework"))
    assert any("total of its 2 parts" in n for n in _notes(run, "framework"))


# ---- LLaMA-Factory -----------------------------------------------------------------------------


def test_llamafactory_trainer_log(tmp_path: Path) -> None:
    rows = [
        {"current_steps": s, "total_steps": 60, "loss": 2.0 / s, "lr": 1e-5, "epoch": s / 60}
        | {"percentage": round(100 * s / 60, 2), "elapsed_time": f"0:{s // 60:02d}:{s % 60:02d}"}
        | {"remaining_time": "1 day, 0:08:23", "throughput": 4000.0 + s, "total_tokens": 1000 * s}
        for s in range(5, 61, 5)
    ]
    rows.append(
        {"current_steps": 60, "total_steps": 60, "eval_loss": 0.5, "epoch": 1.0}
        | {"percentage": 100.0, "elapsed_time": "0:01:05", "remaining_time": "0:00:00"}
    )
    path = tmp_path / "trainer_log.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run,) = trainlens.read(path)
    assert run.metadata["framework"] == "llamafactory"
    assert run.metadata["total_steps"] == 60
    assert _steps(run, "train/loss") == list(range(5, 61, 5))
    assert _values(run, "tokens_per_sec")[0] == 4005.0
    assert _values(run, "tokens")[-1] == 60000.0
    assert _values(run, "val/loss") == [0.5]
    walls = run.series_frame("train/loss").get_column("wall_time").to_list()
    assert walls[:2] == [5.0, 10.0]
    assert not {"percentage", "total_steps", "remaining_time"} & set(run.metrics)


# ---- Ray Tune ------------------------------------------------------------------------------------


def test_ray_tune_result_json(tmp_path: Path) -> None:
    rows = [
        {"loss": 1.0 / i, "accuracy": 0.5 + i / 100, "timestamp": 1700000000 + 10 * i}
        | {"checkpoint_dir_name": None, "done": False, "training_iteration": i}
        | {"trial_id": "41d2a_00007", "date": "2023-12-17_18-16-37", "time_this_iter_s": 10.0}
        | {"time_total_s": 10.0 * i, "pid": 718364, "hostname": "h", "node_ip": "127.0.0.1"}
        | {"config": {"lr": 0.01, "batch_size": 32}, "time_since_restore": 10.0 * i}
        | {"iterations_since_restore": i}
        for i in range(1, 8)
    ]
    path = tmp_path / "result.json"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run,) = trainlens.read(path)
    assert run.metadata["framework"] == "ray-tune"
    assert run.metadata["params"] == {"lr": 0.01, "batch_size": 32}
    assert _steps(run, "train/loss") == list(range(1, 8))
    assert _values(run, "train_time") == [10.0 * i for i in range(1, 8)]
    walls = run.series_frame("train/loss").get_column("wall_time").to_list()
    assert walls[0] == 1700000010.0
    assert not {"pid", "done", "config/lr", "iterations_since_restore"} & set(run.metrics)


# ---- fairseq ---------------------------------------------------------------------------------


def test_fairseq_json_lines_public_sample() -> None:
    (run,) = trainlens.read(FAIRSEQ)
    assert run.format == "framework-json"
    stats = [json.loads(line.split(" | ", 3)[3]) for line in FAIRSEQ.read_text().splitlines()[4:]]
    assert _steps(run, "train/loss") == [int(s["num_updates"]) for s in stats]
    bits = [float(s["loss"]) for s in stats]
    assert _values(run, "train/loss") == pytest.approx([b * math.log(2) for b in bits])
    assert _values(run, "grad_norm") == [float(s["gnorm"]) for s in stats]
    assert _values(run, "tokens_per_sec") == [float(s["wps"]) for s in stats]
    walls = run.series_frame("train/loss").get_column("wall_time").to_list()
    assert walls == [float(s["wall"]) for s in stats]


def test_fairseq_valid_lines_are_validation(tmp_path: Path) -> None:
    """The JSON progress bar's `valid` lines (keys prefixed by the subset) and the
    end-of-epoch `train` line, as fairseq_cli/train.py's logging format prints them."""
    head = "2021-03-08 12:31:36 | INFO | "
    inner = [
        head
        + "train_inner | "
        + json.dumps(
            {"epoch": 1, "update": u / 100, "loss": f"{10 - u / 10:.3f}", "num_updates": str(u)}
            | {"gnorm": "1.5", "wall": str(u * 2)}
        )
        for u in range(10, 101, 10)
    ]
    valid = (
        head
        + "valid | "
        + json.dumps(
            {"epoch": 1, "valid_loss": "8.5", "valid_ppl": "362.04", "valid_num_updates": "100"}
        )
    )
    valid2 = (
        head + "test | " + json.dumps({"epoch": 1, "test_loss": "8.9", "test_num_updates": "100"})
    )
    train = (
        head
        + "train | "
        + json.dumps({"epoch": 1, "train_loss": "9.5", "train_num_updates": "100"})
    )
    path = tmp_path / "train.log"
    path.write_text("\n".join(["some other line", *inner, valid, valid2, train]) + "\n")
    (run,) = trainlens.read(path)
    assert _steps(run, "val/loss") == [100]
    assert _values(run, "val/loss") == pytest.approx([8.5 * math.log(2)])
    assert _values(run, "val/perplexity") == [362.04]
    assert _values(run, "val/loss/test") == [8.9]
    assert len(_values(run, "train/loss")) == 10  # the epoch summary repeats, left out


# ---- Sacred ----------------------------------------------------------------------------------


def _pkg_resources_shim(monkeypatch: pytest.MonkeyPatch) -> None:
    """sacred 0.8.7 imports setuptools' pkg_resources (gone from setuptools 81 on) for
    its dependency discovery and a data file's path; the run itself needs neither."""
    if importlib.util.find_spec("pkg_resources") is not None:
        return
    shim = types.ModuleType("pkg_resources")

    class _WorkingSet(list):  # type: ignore[type-arg]
        by_key: ClassVar[dict[str, Any]] = {}

    def resource_filename(package: str, name: str) -> str:
        spec = importlib.util.find_spec(package)
        assert spec and spec.origin
        return str(Path(spec.origin).parent / name)

    shim.working_set = _WorkingSet()  # type: ignore[attr-defined]
    shim.resource_filename = resource_filename  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pkg_resources", shim)


def test_sacred_metrics_json_from_its_observer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if importlib.util.find_spec("sacred") is None:
        pytest.skip("sacred is not installed")
    _pkg_resources_shim(monkeypatch)
    from sacred import Experiment
    from sacred.observers import FileStorageObserver

    ex = Experiment("toy", save_git_info=False)
    ex.observers.append(FileStorageObserver(str(tmp_path / "runs")))
    losses = [2.0 / (i + 1) for i in range(12)]

    @ex.main
    def main(_run: Any) -> None:
        for i, loss in enumerate(losses):
            _run.log_scalar("training.loss", loss, i)
            _run.log_scalar("lr", 0.1)
        _run.log_scalar("validation.accuracy", 0.8, 11)

    ex.run(options={"--loglevel": "ERROR"})
    (path,) = (tmp_path / "runs").glob("*/metrics.json")
    (run,) = trainlens.read(path)
    assert run.format == "framework-json"
    assert _values(run, "train/loss") == losses
    assert _steps(run, "train/loss") == list(range(12))
    assert _values(run, "val/accuracy") == [0.8]
    walls = run.series_frame("train/loss").get_column("wall_time").to_list()
    assert all(w is not None for w in walls) and walls == sorted(walls)


# ---- DVCLive ----------------------------------------------------------------------------------


def test_dvclive_metrics_json_is_a_summary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("dvclive")
    from dvclive import Live

    monkeypatch.chdir(tmp_path)
    with Live(str(tmp_path / "dvclive"), save_dvc_exp=False) as live:
        for i in range(4):
            live.log_metric("train/loss", 1.0 / (i + 1))
            live.log_metric("val/acc", 0.5 + i / 10)
            live.next_step()
    path = tmp_path / "dvclive" / "metrics.json"
    (run,) = trainlens.read(path)
    summary = json.loads(path.read_text())
    assert _values(run, "train/loss") == [summary["train"]["loss"]]
    assert _steps(run, "train/loss") == [summary["step"]]
    assert _values(run, "val/acc") == [summary["val"]["acc"]]
    assert any("not the history" in n for n in _notes(run, "summary-only"))


# ---- units and meanings (any format) ------------------------------------------------------------


def _jsonl(tmp_path: Path, rows: list[dict[str, Any]]) -> Run:
    path = tmp_path / "log.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return trainlens.read(path)[0]


def test_a_hand_rolled_log_with_a_timestamp_time_is_no_framework(tmp_path: Path) -> None:
    rows = [
        {"step": s, "loss": 2.0 - s / 100, "data_time": 0.01, "time": 1.7e9 + 2.5 * s}
        for s in range(1, 21)
    ]
    run = _jsonl(tmp_path, rows)
    assert "framework" not in run.metadata
    assert run.series_frame("loss" if run.has("loss") else "train/loss").get_column(
        "wall_time"
    ).to_list()[:2] == [1.7e9 + 2.5, 1.7e9 + 5.0]


def test_units_memory_ms_and_percent_are_decided_and_noted(tmp_path: Path) -> None:
    rows = [
        {"step": s, "loss": 2.0 - s / 100, "step_time": 850.0 + s, "mfu": 41.5}
        | {"mem_allocated": 20.5, "mem_reserved": 3000.0 + s, "mem_rss": 5e9}
        for s in range(1, 21)
    ]
    run = _jsonl(tmp_path, rows)
    assert _values(run, "mem/allocated")[0] == 20.5 * 2**30  # GB by its size
    assert _values(run, "mem/reserved")[0] == 3001.0 * 2**20  # MB by its size
    assert _values(run, "mem/rss")[0] == 5e9  # bytes already
    assert _values(run, "mfu")[0] == pytest.approx(0.415)
    assert _values(run, "step_time")[0] == 851.0  # under 1000 s: seconds stand
    notes = _notes(run, "units")
    assert len(notes) == 3 and any("percent" in n for n in notes)


def test_units_step_time_in_ms_takes_its_wait_along(tmp_path: Path) -> None:
    rows = [{"step": s, "loss": 1.0, "step_time": 2400.0, "data_wait": 30.0} for s in range(1, 21)]
    run = _jsonl(tmp_path, rows)
    assert _values(run, "step_time")[0] == pytest.approx(2.4)
    assert _values(run, "dataloader_wait")[0] == pytest.approx(0.03)
    assert "DATA004" not in _codes(run)


def test_units_name_says_the_unit(tmp_path: Path) -> None:
    rows = [{"step": s, "loss": 1.0, "memory/peak_gb": 12.0} for s in range(1, 6)]
    run = _jsonl(tmp_path, rows)
    (raw,) = [m for m in run.metrics if "peak" in m]
    assert raw == "memory/peak_gb"  # no alias: its name and value as logged
    rows = [{"step": s, "loss": 1.0, "mem_allocated_mb": 900.0 + s} for s in range(1, 6)]
    run = _jsonl(tmp_path, rows)
    assert "mem_allocated_mb" in run.metrics  # no alias: the rule never guesses a name


def test_only_loss_parts_is_said(tmp_path: Path) -> None:
    rows = [{"step": s, "loss_cls": 1.0, "loss_bbox": 0.5, "lr": 0.1} for s in range(1, 6)]
    run = _jsonl(tmp_path, rows)
    assert "train/loss" not in run.metrics
    (note,) = [n for n in _notes(run, "units") if "parts of its loss" in n]
    assert "loss_bbox" in note and "loss_cls" in note


def test_a_total_beside_its_parts_is_the_train_loss(tmp_path: Path) -> None:
    rows = [{"step": s, "loss/total": 3.0 - s / 10, "loss/cls": 1.0} for s in range(1, 6)]
    run = _jsonl(tmp_path, rows)
    assert _values(run, "train/loss") == [3.0 - s / 10 for s in range(1, 6)]


def test_per_device_throughput_is_said(tmp_path: Path) -> None:
    rows = [{"step": s, "loss": 1.0, "tps": 5000.0} for s in range(1, 6)]
    run = _jsonl(tmp_path, rows)
    assert _values(run, "tokens_per_sec") == [5000.0] * 5
    assert any("per device" in n for n in _notes(run, "units"))
