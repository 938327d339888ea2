"""A TensorBoard logdir inside a Hydra output folder (``outputs/<date>/<time>/`` with
``.hydra/config.yaml`` beside ``tb/``) gets its declared schedule from there, and says where
the config was found (an info note). The event files are written by the real writers:
torch's SummaryWriter straight into ``tb/``, and Lightning's TensorBoardLogger into
``tb/lightning_logs/version_0/`` (three folders below the Hydra output dir)."""

from __future__ import annotations

from pathlib import Path

import pytest

import trainlens
from trainlens.api import build_context
from trainlens.core.config import Config

yaml = pytest.importorskip("yaml")

HYDRA = {
    "optim": {"name": "adamw", "lr": 3e-4},
    "scheduler": {"name": "cosine", "warmup_steps": 100},
    "trainer": {"max_steps": 1000},
}
DECLARED = {"shape": "cosine", "warmup_steps": 100, "peak_lr": 3e-4, "total_steps": 1000}


def _hydra_out(root: Path) -> Path:
    out = root / "outputs" / "2024-01-01" / "12-00-00"
    (out / ".hydra").mkdir(parents=True)
    (out / ".hydra" / "config.yaml").write_text(yaml.safe_dump(HYDRA))
    return out


def _summary_writer(logdir: Path) -> None:
    tb = pytest.importorskip("torch.utils.tensorboard")
    w = tb.SummaryWriter(str(logdir))
    for step in range(0, 400, 10):
        w.add_scalar("train/loss", 5.0 - step / 200, step)
    w.close()


def _lightning_logger(save_dir: Path) -> Path:
    loggers = pytest.importorskip("lightning.pytorch.loggers")
    logger = loggers.TensorBoardLogger(str(save_dir), name="lightning_logs", version=0)
    for step in range(0, 400, 10):
        logger.log_metrics({"train/loss": 5.0 - step / 200}, step=step)
    logger.finalize("success")
    return Path(logger.log_dir)


def _context(path: Path) -> tuple[trainlens.Run, dict]:
    [run] = trainlens.read(path)
    ctx = build_context(run, Config())
    return run, {"schedule": ctx.schedule, "source": ctx.schedule_source}


def test_summary_writer_logdir_beside_dot_hydra(tmp_path: Path) -> None:
    out = _hydra_out(tmp_path)
    _summary_writer(out / "tb")
    run, ctx = _context(out / "tb")
    assert ctx["schedule"] == DECLARED
    assert ctx["source"] == str(out / ".hydra" / "config.yaml")
    [note] = [d for d in run.data_quality if d.kind == "run-config"]
    assert note.severity == "info" and str(out / ".hydra" / "config.yaml") in note.message
    assert "1 folder above" in note.message


def test_lightning_version_folder_three_levels_below(tmp_path: Path) -> None:
    out = _hydra_out(tmp_path)
    version_dir = _lightning_logger(out / "tb")
    assert version_dir == out / "tb" / "lightning_logs" / "version_0"
    run, ctx = _context(version_dir)
    assert ctx["schedule"] == DECLARED
    [note] = [d for d in run.data_quality if d.kind == "run-config"]
    assert "3 folders above" in note.message


def test_a_config_beside_the_run_needs_no_note(tmp_path: Path) -> None:
    out = _hydra_out(tmp_path)
    _summary_writer(out)  # the events file in the Hydra output dir itself
    run, ctx = _context(out)
    assert ctx["schedule"] == DECLARED
    assert not [d for d in run.data_quality if d.kind == "run-config"]


def test_no_hydra_dir_four_levels_up(tmp_path: Path) -> None:
    out = _hydra_out(tmp_path)
    _summary_writer(out / "a" / "b" / "c" / "tb")
    _run, ctx = _context(out / "a" / "b" / "c" / "tb")
    assert ctx["schedule"] == {} and ctx["source"] is None


def test_wandb_run_folder_inside_a_hydra_output_dir(tmp_path: Path) -> None:
    """W&B's own files/config.yaml (only W&B's keys: the script passed no config) is found
    first, beside the run; the schedule comes from the Hydra config two folders up."""
    pytest.importorskip("wandb")
    from tests.conftest import run_wandb_offline

    out = _hydra_out(tmp_path)
    run_wandb_offline(Path(__file__).with_name("_wandb_plain_writer.py"), out, "60")
    [run_dir] = (out / "wandb").glob("*run-*plain01")
    run, ctx = _context(run_dir)
    assert run.format == "wandb-run"
    assert ctx["schedule"] == DECLARED
    assert ctx["source"] == str(out / ".hydra" / "config.yaml")
    [note] = [d for d in run.data_quality if d.kind == "run-config"]
    assert "2 folders above" in note.message
