"""Training frameworks' own CSV / TSV logs (issue 26): each read from a file its writer made.

- Stable-Baselines3: written here by its own logger (a test dependency);
- Ultralytics, timm, fastai, Ray Tune, DVCLive: their writers cannot be installed beside
  the test environment's torch (or pull a tree of packages), so fixture scripts under
  fixtures/frameworks/ ran the real writer and their small outputs are committed; each is
  regenerated and compared here when its framework is installed (skipped otherwise);
- Ultralytics' TensorBoard: written here with a real SummaryWriter, the tags and steps its
  callback (``ultralytics/utils/callbacks/tensorboard.py``) writes.
"""

from __future__ import annotations

import importlib.util
import math
import runpy
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

from tests.conftest import FIXTURES
from trainlens.api import analyze
from trainlens.cli import main
from trainlens.core.findings import Severity
from trainlens.core.run import Run
from trainlens.readers import detect_format, read_runs

FW = FIXTURES / "frameworks"
ULTRA = FW / "ultralytics"


def _one(path: Path) -> Run:
    (run,) = read_runs(path)
    return run


def _notes(run: Run) -> str:
    return " | ".join(i.message for i in run.data_quality)


def _values(run: Run, metric: str) -> tuple[list[int], list[float]]:
    steps, values = run.series(metric)
    return steps.tolist(), values.tolist()


def _script(name: str) -> dict[str, Any]:
    return runpy.run_path(str(FW / name))


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


# ---- Ultralytics YOLO -------------------------------------------------------------------


def _expected_sum(epoch: int, split: str, *, bias_first: bool = False) -> float:
    m = _script("ultralytics/make_results.py")["epoch_metrics"](epoch, bias_first=bias_first)
    return sum(m[f"{split}/{k}"] for k in ("box_loss", "cls_loss", "dfl_loss"))


def test_ultralytics_results_csv_sums_its_loss_parts_into_the_train_loss() -> None:
    run = _one(ULTRA / "results.csv")
    steps, loss = _values(run, "train/loss")
    assert steps == list(range(1, 13))  # the epoch, from 1
    assert loss[0] == pytest.approx(1.8 + 2.9 + 1.3)
    assert loss[4] == pytest.approx(_expected_sum(4, "train"), rel=1e-5)
    assert math.isnan(loss[8])  # the NaN epoch stays NaN in the sum
    assert _values(run, "val/loss")[1][2] == pytest.approx(_expected_sum(2, "val"), rel=1e-5)
    assert run.raw_names["train/loss"] == "train/box_loss + train/cls_loss + train/dfl_loss"
    # the parts are kept, under their own names
    assert {"train/box_loss", "val/dfl_loss", "metrics/mAP50-95(B)"} <= set(run.metrics)
    assert "sum" in _notes(run) and "no total" in _notes(run)
    assert run.metadata["framework"] == "ultralytics"
    # `time` (seconds since training began) is the wall time: 40 s an epoch
    wall = run.series_frame("train/loss").get_column("wall_time").diff().drop_nulls()
    assert wall.to_list() == pytest.approx([40.0] * 11, abs=0.01)


def test_ultralytics_lr_is_the_weights_group_whatever_the_version_put_first() -> None:
    """8.4 builds the groups weight, bn, bias; before, bias first: the bias group (which
    warms up downwards from warmup_bias_lr) is never the run's LR."""
    current, padded = _one(ULTRA / "results.csv"), _one(ULTRA / "results_padded.csv")
    assert current.raw_names["lr"] == "lr/pg0"
    assert padded.raw_names["lr"] == "lr/pg1"
    lr = _values(current, "lr")[1]
    assert lr[:3] == sorted(lr[:3])  # it rises through warmup, the bias group falls
    assert _values(current, "lr/pg2")[1][:3] == sorted(_values(current, "lr/pg2")[1][:3])[::-1]
    assert _values(padded, "lr")[1] == pytest.approx(lr, rel=1e-4)


def test_ultralytics_padded_header_and_cells_read_as_plain_names_and_numbers() -> None:
    run = _one(ULTRA / "results_padded.csv")
    assert all(m == m.strip() for m in run.metrics)
    assert _values(run, "train/loss")[0] == list(range(1, 13))  # the padded epoch is the step
    assert _values(run, "metrics/mAP50(B)")[1][0] == pytest.approx(0.1)
    assert math.isnan(_values(run, "train/box_loss")[1][8])


def test_ultralytics_run_folder_is_read_and_the_nan_epoch_is_the_incident(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["analyze", str(ULTRA / "results.csv")])
    out = capsys.readouterr().out
    assert "NAN001" in out and "step 9" in out
    assert code == 0  # a NaN that recovers is a warning: below the default fail level
    (a,) = analyze(ULTRA / "results.csv")
    assert {f.code for f in a.findings if f.severity.rank >= Severity.WARNING.rank} == {"NAN001"}


def test_ultralytics_bad_cell_is_named_by_line_and_the_other_epochs_are_kept(
    tmp_path: Path,
) -> None:
    lines = (ULTRA / "results.csv").read_text().splitlines()
    cells = lines[4].split(",")  # epoch 4
    cells[2] = "1.2x"  # train/box_loss
    lines[4] = ",".join(cells)
    (tmp_path / "results.csv").write_text("\n".join(lines) + "\n")
    run = _one(tmp_path / "results.csv")
    bad = [i for i in run.data_quality if i.kind == "non-numeric"]
    assert len(bad) == 1 and bad[0].location == "line 5" and "train/box_loss" in bad[0].message
    # no sum where a part is missing; every other epoch and every other metric is kept
    assert 4 not in _values(run, "train/loss")[0] and len(_values(run, "train/loss")[0]) == 11
    assert _values(run, "train/cls_loss")[0] == list(range(1, 13))


def _ultralytics_tensorboard(logdir: Path) -> None:
    """What the callback writes: on_train_epoch_end the train losses and the lrs, on
    on_fit_epoch_end the validator's metrics and val losses, all at step epoch + 1."""
    from torch.utils.tensorboard import SummaryWriter

    metrics = _script("ultralytics/make_results.py")["epoch_metrics"]
    with SummaryWriter(str(logdir)) as writer:
        for epoch in range(12):
            for k, v in metrics(epoch).items():
                writer.add_scalar(k, v, epoch + 1)


def test_ultralytics_tensorboard_reads_like_its_results_csv(tmp_path: Path) -> None:
    # (its default run folder is runs/detect/train: no Keras train/ split for all that)
    logdir = tmp_path / "runs" / "detect" / "train"
    _ultralytics_tensorboard(logdir)
    assert detect_format(logdir) == "tensorboard"
    tb, csv = _one(logdir), _one(ULTRA / "results.csv")
    assert tb.name == "train" and not any(m.startswith("train/train/") for m in tb.metrics)
    assert tb.raw_names["lr"] == csv.raw_names["lr"] == "lr/pg0"
    for metric in ("train/loss", "val/loss", "lr"):
        t_steps, t_vals = _values(tb, metric)
        c_steps, c_vals = _values(csv, metric)
        assert t_steps == c_steps
        assert np.allclose(t_vals, c_vals, rtol=1e-5, equal_nan=True)  # float32 in TB


def test_ultralytics_old_tensorboard_running_means_per_batch_end_in_the_epoch_mean(
    tmp_path: Path,
) -> None:
    """Before 8.1 the callback wrote the running mean loss at every batch, all at step
    epoch + 1, and no lr: the last value of each epoch (the epoch's mean) stands."""
    from torch.utils.tensorboard import SummaryWriter

    logdir = tmp_path / "train"
    with SummaryWriter(str(logdir)) as writer:
        for epoch in range(10):
            batches = [3.0 - 0.2 * epoch + 0.1 * b for b in range(4)]
            for b in range(4):
                mean = sum(batches[: b + 1]) / (b + 1)
                for part in ("box_loss", "cls_loss", "dfl_loss"):
                    writer.add_scalar(f"train/{part}", mean, epoch + 1)
            writer.add_scalar("metrics/mAP50(B)", 0.1 * epoch, epoch + 1)
    run = _one(logdir)
    steps, loss = _values(run, "train/loss")
    assert steps == list(range(1, 11))
    assert loss[0] == pytest.approx(3 * (3.0 + 3.1 + 3.2 + 3.3) / 4)
    assert "running mean" in _notes(run) and not run.has("lr")


@pytest.mark.skipif(not _installed("ultralytics"), reason="ultralytics not installed")
def test_ultralytics_fixture_is_what_save_metrics_writes(tmp_path: Path) -> None:
    _script("ultralytics/make_results.py")["write_current"](tmp_path)
    fresh = pl.read_csv(tmp_path / "results.csv").drop("time")
    kept = pl.read_csv(ULTRA / "results.csv").drop("time")
    assert fresh.equals(kept, null_equal=True)


# ---- timm ---------------------------------------------------------------------------------


def test_timm_summary_reads_epochs_and_top1_as_a_fraction() -> None:
    run = _one(FW / "timm" / "summary.csv")
    assert run.metadata["framework"] == "timm"
    steps, acc = _values(run, "val/accuracy")
    assert steps == list(range(15))  # epoch from 0, the step
    assert acc[0] == pytest.approx(0.12) and max(acc) < 1
    assert _values(run, "val/accuracy_top5")[1][0] == pytest.approx(0.39)
    assert _values(run, "train/loss")[1][0] == pytest.approx(2.7)
    assert run.has("val/loss") and run.has("lr")
    assert "percentages, read as fractions" in _notes(run)


@pytest.mark.skipif(not _installed("timm"), reason="timm not installed")
def test_timm_fixture_is_what_update_summary_writes(tmp_path: Path) -> None:
    _script("timm/make_summary.py")["main"](tmp_path)
    assert (tmp_path / "summary.csv").read_bytes() == (FW / "timm" / "summary.csv").read_bytes()


# ---- fastai -------------------------------------------------------------------------------


def test_fastai_history_metrics_are_validation_and_time_is_the_epoch_duration() -> None:
    first, second = read_runs(FW / "fastai" / "history.csv")
    assert first.metadata["framework"] == "fastai"
    assert _values(first, "val/accuracy")[0] == list(range(6))
    assert not first.has("train/accuracy")  # fastai's metrics are computed on the valid set
    durations = _values(first, "epoch_time")[1]
    assert all(d in (0.0, 1.0, 2.0, 3.0) for d in durations)  # "00:01" is one second
    assert first.series_frame("val/loss").get_column("wall_time").null_count() == 6
    # CSVLogger(append=True) wrote its header again before the second fit's rows
    assert _values(second, "val/accuracy")[0] == [0, 1, 2]
    notes = _notes(first)
    assert "header is written again" in notes and "line 9" in notes


@pytest.mark.slow
@pytest.mark.skipif(not _installed("fastai"), reason="fastai not installed")
def test_fastai_fixture_is_what_csvlogger_writes(tmp_path: Path) -> None:
    try:
        _script("fastai/make_history.py")["main"](tmp_path)
    except ImportError as exc:  # fastai present but its own dependencies are not
        pytest.skip(f"fastai does not import: {exc}")
    fresh = pl.read_csv(tmp_path / "history.csv", infer_schema=False).drop("time")
    kept = pl.read_csv(FW / "fastai" / "history.csv", infer_schema=False).drop("time")
    assert fresh.columns == kept.columns and fresh.height == kept.height
    assert fresh.get_column("epoch").to_list() == kept.get_column("epoch").to_list()


# ---- Ray Tune / Train ---------------------------------------------------------------------


def test_ray_progress_csv_steps_by_training_iteration_without_bookkeeping() -> None:
    run = _one(FW / "ray_tune" / "progress.csv")
    assert run.metadata["framework"] == "ray"
    steps, loss = _values(run, "train/loss")
    assert steps == list(range(1, 13))
    assert loss[0] == pytest.approx(2.1)
    assert run.has("nested/acc")  # the reported dict's nesting, flattened with /
    assert run.has("step_time") and run.has("train_time")
    for not_a_metric in ("pid", "done", "time_since_restore", "iterations_since_restore"):
        assert not run.has(not_a_metric)
    assert run.metadata["ray"]["trial_id"]
    wall = run.series_frame("train/loss").get_column("wall_time")
    assert wall.null_count() == 0 and wall.min() > 1.6e9  # unix seconds


@pytest.mark.slow
@pytest.mark.skipif(not _installed("ray"), reason="ray not installed")
def test_ray_fixture_is_what_csvloggercallback_writes(tmp_path: Path) -> None:
    _script("ray_tune/make_progress.py")["main"](tmp_path)
    fresh, kept = _one(tmp_path / "progress.csv"), _one(FW / "ray_tune" / "progress.csv")
    assert fresh.metrics == kept.metrics
    assert _values(fresh, "train/loss") == _values(kept, "train/loss")


# ---- Stable-Baselines3 --------------------------------------------------------------------


@pytest.fixture(scope="module")
def sb3_progress(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A PPO-shaped log by SB3's own logger: rollout/time keys at every dump, train/* from
    the second on (the CSV writer then rewrites the file with the wider header)."""
    logger_mod = pytest.importorskip("stable_baselines3.common.logger")
    folder = tmp_path_factory.mktemp("sb3")
    logger = logger_mod.configure(str(folder), ["csv"])
    for it in range(1, 13):
        logger.record("rollout/ep_rew_mean", 20.0 + 10 * it)
        logger.record("time/iterations", it)
        logger.record("time/time_elapsed", 3 * it)
        logger.record("time/total_timesteps", 2048 * it)
        logger.record("time/fps", 680)
        if it > 1:
            logger.record("train/loss", 5.0 / it)
            logger.record("train/learning_rate", 3e-4)
            logger.record("train/entropy_loss", -0.69 + 0.01 * it)
            # what SB3's explained_variance gives for returns with no variance
            logger.record("train/explained_variance", math.nan if it < 4 else 0.1 * it)
        logger.dump(step=2048 * it)
    logger.close()
    return folder / "progress.csv"


def test_sb3_progress_steps_are_timesteps_and_sparse_columns_are_absent(
    sb3_progress: Path,
) -> None:
    run = _one(sb3_progress)
    assert run.metadata["framework"] == "stable-baselines3"
    # the RL objective is no training loss to judge: its own name, not train/loss
    assert not run.has("train/loss")
    steps, loss = _values(run, "train/rl_loss")
    assert steps == [2048 * it for it in range(2, 13)]  # nothing at the first dump
    assert loss[0] == pytest.approx(2.5)
    # SB3's NaN for an undefined explained variance is left out, and counted in a note
    assert _values(run, "train/explained_variance")[0][0] == 2048 * 4
    assert "2 NaN value(s) of train/explained_variance" in _notes(run)
    assert _values(run, "rollout/ep_rew_mean")[0][0] == 2048
    assert _values(run, "lr")[1] == [3e-4] * 11
    assert not run.has("samples_per_sec")  # fps is a mean since the start
    assert run.has("time/fps")
    wall = run.series_frame("rollout/ep_rew_mean").get_column("wall_time").to_list()
    assert wall == [3.0 * it for it in range(1, 13)]


def test_sb3_actor_critic_losses_are_parts_and_no_total_is_made(tmp_path: Path) -> None:
    logger_mod = pytest.importorskip("stable_baselines3.common.logger")
    logger = logger_mod.configure(str(tmp_path), ["csv"])
    for it in range(1, 4):
        logger.record("time/total_timesteps", 100 * it)
        logger.record("time/fps", 50)
        logger.record("train/actor_loss", -1.0 * it)
        logger.record("train/critic_loss", 0.5 / it)
        logger.dump(step=100 * it)
    logger.close()
    run = _one(tmp_path / "progress.csv")
    assert not run.has("train/loss") and not run.has("train/rl_loss")
    assert "no total" in _notes(run) and "train/actor_loss" in _notes(run)


@pytest.mark.slow  # (a real training loop: ~5 s of CPU)
def test_sb3_ppo_run_is_silent(tmp_path: Path) -> None:
    """A real PPO run on CartPole (SB3's own training loop and logger): read as SB3 and
    no warning — its loss rises as returns grow, which is no fault in RL."""
    sb3 = pytest.importorskip("stable_baselines3")
    from stable_baselines3.common.logger import configure

    model = sb3.PPO("MlpPolicy", "CartPole-v1", n_steps=64, batch_size=32, n_epochs=2, seed=0)
    model.set_logger(configure(str(tmp_path), ["csv"]))
    model.learn(64 * 12)
    (a,) = analyze(tmp_path / "progress.csv")
    assert a.run.metadata["framework"] == "stable-baselines3"
    assert a.run.has("train/rl_loss") and a.run.has("rollout/ep_rew_mean")
    # (DATA002 aside: a real loop on a loaded machine can really pause for seconds, and this
    # run lasts about ten; tests/test_stalls_clock.py judges SB3's whole-second clock)
    warned = [f.code for f in a.findings if f.severity.rank >= Severity.WARNING.rank]
    assert [c for c in warned if c != "DATA002"] == []


# ---- DVCLive ------------------------------------------------------------------------------


def test_dvclive_folder_is_one_run_named_by_the_metric_paths() -> None:
    folder = FW / "dvclive"
    assert detect_format(folder) == "dvclive"
    run = _one(folder / "dvclive")
    assert run.format == "dvclive"
    assert {"train/loss", "val/loss", "val/accuracy", "lr"} <= set(run.metrics)
    steps, loss = _values(run, "train/loss")
    assert steps == list(range(20)) and loss[0] == pytest.approx(2.2)
    assert run.raw_names["val/loss"] == "eval/loss"
    assert run.metadata["dvclive"]["params"] == {"lr": 0.003, "epochs": 20}
    assert "params" not in run.metadata  # DVCLive's step is no optimizer step
    # the same run from the folder above, from plots/ and from plots/metrics/
    for where in (folder, folder / "dvclive" / "plots", folder / "dvclive" / "plots" / "metrics"):
        assert _values(_one(where), "train/loss") == (steps, loss)


def test_dvclive_one_tsv_is_named_by_its_place(tmp_path: Path) -> None:
    run = _one(FW / "dvclive" / "dvclive" / "plots" / "metrics" / "eval" / "accuracy.tsv")
    assert run.metrics == ["val/accuracy"]


def test_dvclive_bad_cell_is_reported_with_its_file_and_line(tmp_path: Path) -> None:
    metrics = tmp_path / "dvclive" / "plots" / "metrics"
    (metrics / "train").mkdir(parents=True)
    good = (FW / "dvclive" / "dvclive" / "plots" / "metrics" / "lr.tsv").read_text()
    (metrics / "lr.tsv").write_text(good)
    (metrics / "train" / "loss.tsv").write_text("step\tloss\n0\t1.5\n1\toops\n2\t1.1\n")
    run = _one(tmp_path)
    assert _values(run, "train/loss") == ([0, 2], [1.5, 1.1])
    bad = [i for i in run.data_quality if i.kind == "non-numeric"]
    assert bad and bad[0].location == "line 3" and "loss.tsv" in bad[0].source
    assert len(_values(run, "lr")[0]) == 20


@pytest.mark.skipif(not _installed("dvclive"), reason="dvclive not installed")
def test_dvclive_fixture_is_what_live_writes(tmp_path: Path) -> None:
    _script("dvclive/make_dvclive.py")["main"](tmp_path)
    kept = FW / "dvclive" / "dvclive" / "plots" / "metrics"
    for tsv in sorted(kept.rglob("*.tsv")):
        fresh = tmp_path / "dvclive" / "plots" / "metrics" / tsv.relative_to(kept)
        assert fresh.read_bytes() == tsv.read_bytes(), tsv.name


# ---- healthy runs stay silent -------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "timm/summary.csv",
        "fastai/history.csv",
        "ray_tune/progress.csv",
        "dvclive/dvclive",
    ],
)
def test_healthy_framework_runs_get_no_warning(path: str) -> None:
    for a in analyze(FW / path):
        loud = [f.code for f in a.findings if f.severity.rank >= Severity.WARNING.rank]
        assert loud == [], (a.run.name, loud)
