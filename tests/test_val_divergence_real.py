"""VAL001 on real third-party logs: overfitting found from the best step, per eval set,
with the percent measured from the best it names; silent where val keeps falling."""

from __future__ import annotations

from pathlib import Path

import pytest

import trainlens
from trainlens.core.config import Config
from trainlens.detectors import run_detectors
from trainlens.detectors.base import Context


def _val001(path: Path) -> list[trainlens.Finding]:
    run = trainlens.read(path)[0]
    result = run_detectors(run, Config(select=["val_divergence"]), Context())
    return [f for f in result.findings if f.code == "VAL001"]


def _percent(message: str) -> float:
    return float(message.split(" rose ")[1].split("%")[0]) / 100


@pytest.mark.parametrize(
    ("path", "best_step", "best"),
    [
        ("Althea80_DM2025-Lab2-Exercise/logs/training_log.csv", 3, 0.7876),  # epoch 3: the step
        ("fabiom91_ConvNeXt_AI_Competition_Platform/trainer_state.json", 1280, 0.9216),
    ],
)
def test_overfitting_is_an_error_from_the_best(
    shared_dir: Path, path: str, best_step: int, best: float
) -> None:
    (f,) = _val001(shared_dir / "real-logs" / path)
    assert f.severity.value == "error"
    assert f.step_start == best_step and f.evidence["best_val"] == pytest.approx(best, abs=1e-4)
    assert f"from its best {best:.4g} at step {best_step}" in f.message
    # the printed percent is from the named best to the mean it names
    rel = (f.evidence["tail_mean"] - f.evidence["best_val"]) / f.evidence["best_val"]
    assert _percent(f.message) == pytest.approx(rel, abs=5e-4)


def test_per_set_eval_losses_are_judged(shared_dir: Path) -> None:
    found = _val001(shared_dir / "real-logs/aigoncharov_trainer_state_viz/trainer_state.json")
    by_domain = {f.evidence["domain"]: f for f in found}
    assert sorted(by_domain) == [f"g{k}" for k in range(6)]
    g0 = by_domain["g0"]
    assert g0.step_start == 401 and g0.step_end == 12030
    assert g0.evidence["best_val"] == pytest.approx(1.114, abs=1e-3)
    assert g0.evidence["final_val"] == pytest.approx(2.749, abs=1e-3)
    assert by_domain["g5"].step_start == 802  # g5 is lowest at epoch 2
    assert all(f.severity.value == "error" for f in found)
    # HF's eval_<set>_loss is the set's validation loss, by the one alias table
    assert [f.metric for f in found] == [f"val/loss/g{k}" for k in range(6)]


@pytest.mark.parametrize(
    "path",
    [
        "aaghaazkhan_law-llm/trainer_state.json",
        "microsoft_Megatron-DeepSpeed/"
        "gpt3-0.125B-tokendropping-graduallyIncrease-lr-3.0e-4-with-kernel.log",
        "stark-sim_megatron-deepspeed-lock-clock/qwen7b_baseline_500.log",
        "modded_nanogpt/2024-10-13_llmc_main.log",
    ],
)
def test_quiet_where_validation_keeps_falling(shared_dir: Path, path: str) -> None:
    assert _val001(shared_dir / "real-logs" / path) == []
