"""VAL001 on noisy evaluations: the evals after the best are judged against the eval noise
seen before it, and the trainer's own best checkpoint (HF's ``best_metric`` /
``best_model_checkpoint``) is the one the finding names.

The trainer_state.json files are written by transformers' own ``TrainerState``
(``save_to_json``), the class HF Trainer writes them with. The numbers are an HF run's as
issue 26 reports it: eval loss lowest (0.232) at step 800, the trainer's best checkpoint,
then 0.25-0.30 for seven evals, 0.288 at the end (+24 %), while the train loss fell
0.18 -> 0.028; before the change it got nothing (the noise guard absorbed it)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import trainlens

EVALS = [0.61, 0.42, 0.35, 0.30, 0.272, 0.255, 0.243, 0.232]  # steps 100 … 800
AFTER = [0.251, 0.274, 0.262, 0.301, 0.279, 0.295, 0.288]  # steps 900 … 1500


def _state(path: Path, evals: list[float], best: tuple[int, float] | None) -> Path:
    transformers = pytest.importorskip("transformers")
    history: list[dict[str, float | int]] = []
    n = len(evals)
    train = np.geomspace(0.18, 0.028, 2 * n)
    for i in range(2 * n):
        step = 50 * (i + 1)
        history.append({"loss": round(float(train[i]), 4), "step": step, "epoch": step / 500})
        if step % 100 == 0:
            ev = evals[step // 100 - 1]
            history.append({"eval_loss": ev, "step": step, "epoch": step / 500})
    state = transformers.TrainerState(
        global_step=50 * 2 * n,
        max_steps=50 * 2 * n,
        num_train_epochs=3,
        log_history=history,
        best_metric=best[1] if best else None,
        best_model_checkpoint=f"out/checkpoint-{best[0]}" if best else None,
    )
    path.mkdir(parents=True, exist_ok=True)
    state.save_to_json(str(path / "trainer_state.json"))
    return path


def _val001(path: Path) -> list[trainlens.Finding]:
    [analysis] = trainlens.analyze(path)
    return [f for f in analysis.findings if f.code == "VAL001"]


def test_rise_after_the_trainers_best_within_eval_swings_is_found(tmp_path: Path) -> None:
    run_dir = _state(tmp_path / "out", EVALS + AFTER, best=(800, 0.232))
    [f] = _val001(run_dir)
    assert f.evidence["best_step"] == 800 and f.evidence["best_val"] == pytest.approx(0.232)
    assert f.evidence["best_checkpoint"] == "out/checkpoint-800"
    assert "out/checkpoint-800" in f.message
    assert f.evidence["noise_from"] == "before-best"
    assert f.evidence["rise_rel"] == pytest.approx((0.279 + 0.295 + 0.288) / 3 / 0.232 - 1)
    assert f.severity.value == "error"  # +24 % from the best, the train loss still falling


def test_without_the_trainers_record_the_lowest_eval_is_named(tmp_path: Path) -> None:
    run_dir = _state(tmp_path / "out", EVALS + AFTER, best=None)
    [f] = _val001(run_dir)
    assert f.evidence["best_step"] == 800 and f.evidence["best_checkpoint"] is None
    assert "keep the step-800 checkpoint" in f.message


def test_best_recorded_for_another_metric_is_not_taken_for_the_loss(tmp_path: Path) -> None:
    # best_metric 0.91 (an accuracy) at checkpoint-1200: not the loss' best checkpoint
    run_dir = _state(tmp_path / "out", EVALS + AFTER, best=(1200, 0.91))
    [f] = _val001(run_dir)
    assert f.evidence["best_step"] == 800 and f.evidence["best_checkpoint"] is None


def test_noisy_evals_that_keep_their_level_are_silent(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    level = 0.30 + 0.05 * np.exp(-np.arange(15) / 3)  # falls, then flat
    noisy = (level * (1 + 0.04 * rng.standard_normal(15))).round(4).tolist()
    best = int(np.argmin(noisy))
    run_dir = _state(tmp_path / "out", noisy, best=(100 * (best + 1), noisy[best]))
    assert not _val001(run_dir)
