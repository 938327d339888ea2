"""What moved before the loss (detectors/_causes.py): the chain and first mover on the
fixture runs (labels.json says what was injected), on real third-party logs, on direct
series, and its calibration on healthy noise."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import trainlens
from tests.conftest import fixture_path, labels_or_skip
from tests.detector_cases.series import make_run, run_of
from trainlens.core.config import Config
from trainlens.core.findings import Finding, Severity
from trainlens.core.run import Run
from trainlens.detectors import _causes
from trainlens.detectors._causes import chain_for
from trainlens.detectors.base import Context


def _fixture(name: str) -> trainlens.api.Analysis:
    return trainlens.analyze(fixture_path(name))[0]


def _label(run: str, code: str) -> dict[str, Any]:
    labels = labels_or_skip()[run]["events"]
    return next(e for e in labels if e["code"] == code)


def _chain(f: Finding) -> list[tuple[str, int]]:
    return [(c["metric"], c["step"]) for c in f.evidence["chain"]]


def _event(code: str, step: int, sev: str = "warning", **ev: Any) -> Finding:
    return Finding(code, "x", Severity.parse(sev), "train/loss", step, step + 10, "m.", ev)


# ---- fixtures -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["lr_shock_recover", "lr_shock_diverge"])
def test_lr_shock_lr_is_first_mover(name: str) -> None:
    grad = _label(name, "GRAD001")
    lr = _label(name, "LR001")
    f = next(f for f in _fixture(name).findings if f.code == "GRAD001")
    assert f.evidence["first_mover"] == "lr"
    assert f.evidence["first_mover_step"] == lr["step"]
    # the LR and the corrupted gradient of the same step, then the loss one step later
    assert _chain(f)[0] == ("lr", lr["step"])
    assert ("grad_norm", grad["lead_step"]) in _chain(f)
    assert _chain(f)[-1] == ("train/loss", grad["lag_step"])
    # the lead/lag of grad_spikes stay
    assert (f.evidence["lead_step"], f.evidence["lag_step"]) == (
        grad["lead_step"],
        grad["lag_step"],
    )
    assert "check the scheduler" in f.message
    assert _causes.GRAD_ADVICE not in f.message and _causes.DATA_ADVICE not in f.message
    assert f"lr rose ×40 at step {lr['step']}" in f.message


def test_lr_shock_without_a_declared_schedule_is_found_from_the_lr_history() -> None:
    a = _fixture("lr_shock_recover")
    f = next(f for f in a.findings if f.code == "GRAD001")
    (moves,) = [chain_for(f, a.run, Context())]
    assert [(m.metric, m.step) for m in moves][:1] == [("lr", 400)]
    assert moves[0].what.startswith("rose ×39.6 at step 400 (from 0.0022")  # its level, no plan


def test_resume_lr_reset_names_the_reset() -> None:
    reset = _label("resume_lr_reset", "LR006")
    a = _fixture("resume_lr_reset")
    rises = [f for f in a.findings if f.code in ("LOSS003", "LOSS001") and "chain" in f.evidence]
    assert rises, [f.message for f in a.findings]
    for f in rises:
        assert f.evidence["first_mover"] == "lr"
        assert f.evidence["first_mover_step"] == reset["step"]
        assert "fell ×0.0575 from step 601" in f.message


def test_nan_divergence_nothing_moved_first() -> None:
    a = _fixture("nan_divergence")
    (f,) = [f for f in a.findings if f.code == "NAN001" and f.metric == "train/loss"]
    assert f.evidence["first_mover"] is None
    assert _chain(f) == [("train/loss", 450)]
    assert "nothing optimizer-side (lr, grad norm, update ratio) moved" in f.message
    assert "a bad batch or data" in f.message
    # the grad norm's NaN of the same step is the same event, not a mover
    others = [f for f in a.findings if f.code == "NAN001" and f.metric != "train/loss"]
    assert others and all("chain" not in f.evidence for f in others)


def test_healthy_fixtures_name_no_mover() -> None:
    runs = labels_or_skip()
    for name, spec in runs.items():
        if not spec["healthy"]:
            continue
        for f in _fixture(name).findings:
            assert f.evidence.get("first_mover") is None, (name, f.message)


# ---- real logs ------------------------------------------------------------------------------


def _real(shared_dir: Path, rel: str, **kw: Any) -> Run:
    path = shared_dir / "real-logs" / rel
    if not path.exists():
        pytest.skip(f"{rel} not present")
    return trainlens.read(path, **kw)[0]


def test_bloom_grad_norm_left_its_tail_a_step_before_the_loss(shared_dir: Path) -> None:
    run = _real(shared_dir, "bigscience/tr11-176B-ml_chronicles.md")
    a = trainlens.analyze(run)[0]
    (f,) = [f for f in a.findings if f.code == "GRAD001"]
    # 0.242 at 31214, 0.947 at 31215 (x4.6 its tail), 2.39 at 31216; the loss' +17 % at
    # 31216 is the 4th of the notes' 18 loss values, judged only against its neighbours
    # (grad_spikes pairs the loss at 31219, lag 3), so the chain ends there
    assert _chain(f) == [("grad_norm", 31215), ("train/loss", 31219)]
    assert f.evidence["first_mover"] == "grad_norm"
    assert f.evidence["lead_step"] == 31216  # grad_spikes' own spike onset is kept


def test_megatron_loss_scale_growth_is_never_a_mover(shared_dir: Path) -> None:
    run = _real(
        shared_dir,
        "microsoft_Megatron-DeepSpeed/"
        "gpt3-0.125B-tokendropping-graduallyIncrease-lr-3.0e-4-with-kernel.log",
    )
    _, v = run.series("loss_scale")
    assert (np.diff(v) >= 0).all() and v[-1] / v[0] == 16  # it only doubles
    for step in (510, 1010, 1510, 2010, 520):  # at and just after each doubling
        for sev in ("info", "warning"):
            ev = _event("LOSS001", step, sev, recovered_step=step + 20)
            metrics = [m.metric for m in chain_for(ev, run, Context())]
            assert metrics == ["train/loss"], (step, metrics)


def test_lightning_version_13_lr_warmup_is_the_first_mover(shared_dir: Path) -> None:
    run = _real(shared_dir, "Arshya-Guru_deepmind-research/lightning_logs/version_13/metrics.csv")
    # the loss, near 0.001 for epochs 1-2, rises from ~3500 while the LR keeps climbing
    # (7.2e-7 at step 9 to 2.95e-4): a sustained rise, whoever reports it
    for code in ("LOSS003", "LOSS001"):
        for step in (3509, 3689, 3909):
            moves = chain_for(_event(code, step), run, Context())
            assert [(m.metric, m.step) for m in moves] == [("lr", 9), ("train/loss", step)]
            assert "its highest yet" in moves[0].what
    # analyzed as a user runs it, the hparams.yaml beside the run declares a 12,500-step
    # warmup: the climb follows that plan, so it is no first mover, and the finding says
    # the planned ramp goes too high instead
    a = trainlens.analyze(run)[0]
    assert a.context.schedule.get("warmup_steps") == 12500
    rises = [f for f in a.findings if f.code == "LOSS003"]
    assert rises
    for f in rises:
        assert f.evidence["first_mover"] is None
        assert f.evidence["planned_lr_ramp"]["metric"] == "lr"
        assert "lower the peak LR or lengthen the warmup" in f.message
        assert f.message.count("lengthen the warmup") == 1  # said once, not by both steps
    # a one-off spike on the way is no sustained rise: the climbing LR is not its cause
    spikes = [f for f in a.findings if f.code == "LOSS001" and f.severity.value == "info"]
    assert spikes and all(f.evidence["first_mover"] is None for f in spikes)
    assert all("planned_lr_ramp" not in f.evidence for f in spikes)


@pytest.mark.parametrize(
    "rel",
    [
        "modded_nanogpt/2024-10-13_llmc_main.log",
        "modded_nanogpt/2024-06-06_AdamW_f66d43d7.log",
        "modded_nanogpt/2024-10-10_Muon_eb5659d0.txt",
        "stark-sim_megatron-deepspeed-lock-clock/qwen7b_baseline_500.log",
    ],
)
def test_healthy_real_runs_gain_no_warning(shared_dir: Path, rel: str) -> None:
    a = trainlens.analyze(_real(shared_dir, rel))[0]
    bad = [f for f in a.findings if f.severity.rank >= 1]
    assert not bad, [f.message for f in bad]
    for f in a.findings:  # only a grad spike can be named, by the finding that says so
        assert f.evidence.get("first_mover") in (None, "grad_norm"), f.message


def test_qwen_grad_norm_doubling_is_noise_not_a_mover(shared_dir: Path) -> None:
    # grad norm ~20, 44.3 at 18 and 43.3 at 19, 18.7 at 20: x2.2, short of a departure
    run = _real(shared_dir, "stark-sim_megatron-deepspeed-lock-clock/qwen7b_baseline_500.log")
    for step in (19, 20, 21):
        ev = _event("LOSS001", step, recovered_step=step + 5)
        assert [m.metric for m in chain_for(ev, run, Context())] == ["train/loss"]


# ---- direct series --------------------------------------------------------------------------


def _warmuprun_of() -> Run:
    s = np.arange(1, 3001)
    lr = 1e-3 * np.minimum(s / 2000, 1.0)  # 2000-step linear warmup
    rng = np.random.default_rng(0)
    loss = 3.0 * np.exp(-s / 300) + 0.5 + rng.normal(0, 0.005, s.size)
    loss[s >= 1500] += 0.002 * (s[s >= 1500] - 1500)  # turns up as the LR keeps rising
    return run_of({"lr": (s, lr), "train/loss": (s, loss)})


def test_planned_warmup_is_not_a_mover_but_is_said() -> None:
    run = _warmuprun_of()
    plan = {"shape": "linear", "warmup_steps": 2000, "peak_lr": 1e-3, "total_steps": 100_000}
    ctx = Context(schedule=plan)
    ev = _event("LOSS003", 1500)
    (out,) = _causes.attach_causes(run, ctx, [ev])
    assert out.evidence["first_mover"] is None
    assert out.evidence["planned_lr_ramp"]["metric"] == "lr"
    assert "nothing departed from its plan" in out.message
    assert _causes.DATA_ADVICE not in out.message
    # undeclared, the same ramp is the LR's own move
    (own,) = _causes.attach_causes(run, Context(), [ev])
    assert own.evidence["first_mover"] == "lr" and own.evidence["first_mover_step"] == 1


def test_a_move_over_before_the_loss_is_another_event() -> None:
    # grad spike at 500, back at 501; a loss spike at 540 is not its consequence
    s = np.arange(0, 1000)
    g = np.ones(s.size)
    g[500] = 50.0
    loss = np.full(s.size, 2.0)
    run = run_of({"grad_norm": (s, g), "train/loss": (s, loss)})
    assert [m.metric for m in chain_for(_event("LOSS001", 540), run, Context())] == ["train/loss"]
    # within the pairing lag (10 steps) it leads
    moves = chain_for(_event("LOSS001", 505), run, Context())
    assert [(m.metric, m.step) for m in moves] == [("grad_norm", 500), ("train/loss", 505)]


def test_onset_is_where_it_left_the_tail_not_where_it_crossed_3x() -> None:
    # grad norm 1.0, then 1.8, 2.5, 4, 10 before the loss: onset at the first 1.8
    s = np.arange(0, 300)
    rng = np.random.default_rng(1)
    g = np.exp(rng.normal(0, 0.05, s.size))
    g[200:204] = [1.8, 2.5, 4.0, 10.0]
    run = run_of({"grad_norm": (s, g), "train/loss": (s, np.full(s.size, 2.0))})
    moves = chain_for(_event("LOSS001", 204), run, Context())
    assert moves[0].metric == "grad_norm" and moves[0].step == 200


def test_routine_loss_scale_drops_are_not_movers() -> None:
    # an fp16 run that overflows ~1 % of its steps: one halving in a window is routine
    s = np.arange(0, 4000)
    rng = np.random.default_rng(2)
    drops = rng.random(s.size) < 0.01
    scale = 2.0 ** (16 + np.cumsum(np.where(drops, -1, 0)) + s // 200)
    run = run_of({"loss_scale": (s, scale), "train/loss": (s, np.full(s.size, 2.0))})
    named = 0
    for step in range(300, 3900, 100):
        named += any(
            m.metric == "loss_scale" for m in chain_for(_event("LOSS001", step), run, Context())
        )
    assert named == 0


# ---- calibration ----------------------------------------------------------------------------


def test_bad_batches_on_healthy_noise_name_nothing() -> None:
    """Bad-batch loss spikes (after warmup and inside an undeclared one) on runs whose
    optimizer-side signals are healthy noise: cosine LR, fp16 scale doubling every 500
    steps, log-normal grad norm and update ratio (sigma 0.05 to 0.3)."""
    from trainlens.core.config import Config
    from trainlens.detectors import run_detectors

    named, events = [], 0
    for seed in range(24):
        rng = np.random.default_rng(seed)
        at = int(rng.integers(120, 1900))
        sigma = float(rng.choice([0.05, 0.1, 0.2, 0.3]))
        case = {
            "steps": 2000,
            "seed": seed,
            "series": {
                "lr": {
                    "base": "warmup_cosine",
                    "peak": 3e-3,
                    "min": 3e-4,
                    "warmup": 200,
                    "total": 2000,
                },
                "grad_norm": {
                    "base": "decay",
                    "start": 3.0,
                    "end": 0.5,
                    "noise": {"kind": "lognormal", "sigma": sigma},
                },
                "update_ratio": {
                    "base": "constant",
                    "value": 1e-3,
                    "noise": {"kind": "lognormal", "sigma": sigma},
                },
                "loss_scale": {
                    "base": "constant",
                    "value": 1024,
                    "events": [{"at": k, "len": 2000, "mult": 2} for k in (500, 1000, 1500)],
                },
                "train/loss": {
                    "base": "decay",
                    "start": 6,
                    "end": 2.5,
                    "noise": {"kind": "relative", "sigma": 0.01},
                    "events": [
                        {"at": at, "len": int(rng.choice([1, 3, 20])), "mult": 1.5, "recover": 10}
                    ],
                },
            },
        }
        sched = (
            {
                "shape": "cosine",
                "warmup_steps": 200,
                "peak_lr": 3e-3,
                "min_lr": 3e-4,
                "total_steps": 2000,
            }
            if seed % 2
            else {}
        )
        res = run_detectors(make_run(case), Config(), Context(schedule=sched))
        for f in res.findings:
            if "chain" in f.evidence:
                events += 1
                if f.evidence["first_mover"] is not None:
                    named.append((seed, at, f.message))
    assert events >= 20
    assert not named


def test_grad_spikes_builds_its_advice_from_the_shared_clauses() -> None:
    """The step replaces grad_spikes' default advice by matching these clauses: if their
    wording drifted apart, both advices would be printed."""
    from trainlens.detectors import grad_spikes

    case = {
        "steps": 2000,
        "seed": 3,
        "series": {
            "grad_norm": {
                "base": "constant",
                "value": 1.0,
                "noise": {"kind": "lognormal", "sigma": 0.1},
                "events": [{"at": 1000, "len": 1, "mult": 30}],
            },
            "train/loss": {
                "base": "decay",
                "start": 6.0,
                "end": 2.5,
                "noise": {"kind": "relative", "sigma": 0.01},
                "events": [
                    {"at": 1002, "len": 3, "mult": 1.5, "recover": 15},
                    {"at": 1500, "len": 3, "mult": 1.5, "recover": 15},
                ],
            },
        },
    }
    found = grad_spikes.detect(make_run(case), grad_spikes.Params(), Context())
    by_code = {f.code: f for f in found if f.severity.rank >= 1}
    assert "; " + _causes.GRAD_ADVICE in by_code["GRAD001"].message
    assert "; " + _causes.DATA_ADVICE in by_code["LOSS001"].message


def test_chain_goes_out_as_json() -> None:
    a = _fixture("lr_shock_recover")
    out = json.loads(json.dumps(a.to_dict()))
    (f,) = [f for f in out["findings"] if f["code"] == "GRAD001"]
    assert f["evidence"]["first_mover"] == "lr"
    assert f["evidence"]["chain"][0] == {
        "metric": "lr",
        "step": 400,
        "what": "rose ×40 at step 400 against its declared schedule (0.0877 vs planned "
        "0.00219 at step 400)",
    }


def test_an_lr_blip_that_ended_before_the_loss_is_no_mover() -> None:
    s = np.arange(0, 1000)
    lr = np.full(s.size, 1e-3)
    lr[500] = 4e-2  # one step at x40, then back
    run = run_of({"lr": (s, lr), "train/loss": (s, np.full(s.size, 2.0))})
    late = chain_for(_event("LOSS001", 540), run, Context())
    assert [m.metric for m in late] == ["train/loss"]  # neither the jump nor the way back
    moves = chain_for(_event("LOSS001", 501), run, Context())
    assert [(m.metric, m.step) for m in moves] == [("lr", 500), ("train/loss", 501)]
    assert moves[0].what == "rose ×40 at step 500 (from 0.001)"
    lr[500:] = 1e-4  # a drop that stays is a move, however long before (in the window)
    run = run_of({"lr": (s, lr), "train/loss": (s, np.full(s.size, 2.0))})
    moves = chain_for(_event("LOSS001", 540), run, Context())
    assert [(m.metric, m.step) for m in moves] == [("lr", 500), ("train/loss", 540)]
    assert moves[0].what.startswith("fell ×0.1 at step 500")


def test_a_grad001_always_names_its_own_lead() -> None:
    # a flat run where the tails see nothing: the GRAD001's own lead stands in
    s = np.arange(0, 200)
    run = run_of({"grad_norm": (s, np.ones(s.size)), "train/loss": (s, np.full(s.size, 2.0))})
    ev = _event(
        "GRAD001", 150, lead_step=150, lag_step=151, grad_ratio_at_lead=9.9, grad_baseline=0.242
    )
    (out,) = _causes.attach_causes(run, Context(), [ev])
    assert out.evidence["first_mover"] == "grad_norm"
    assert _chain(out) == [("grad_norm", 150), ("train/loss", 151)]
    assert "grad norm spiked at step 150 (×9.9 its rolling median 0.242)" in out.message


def test_a_slow_rise_looks_back_further() -> None:
    """LOSS003 is seen late (it needs 5 % of the run above the minimum): an undeclared LR
    tripled 78 steps before its onset is still what moved first."""
    from trainlens.core.config import Config
    from trainlens.detectors import run_detectors

    case = {
        "steps": 3000,
        "seed": 4,
        "series": {
            "lr": {
                "base": "constant",
                "value": 1e-3,
                "events": [{"at": 1500, "len": 1500, "mult": 3}],
            },
            "grad_norm": {
                "base": "constant",
                "value": 1.0,
                "noise": {"kind": "lognormal", "sigma": 0.1},
            },
            "train/loss": {
                "base": "decay",
                "start": 6,
                "end": 2.5,
                "noise": {"kind": "relative", "sigma": 0.01},
                "events": [{"at": 1500, "ramp": 0.002}],
            },
        },
    }
    found = run_detectors(make_run(case), Config(select=["loss_trend"]), Context()).findings
    (f,) = [f for f in found if f.code == "LOSS003"]
    assert f.step_start is not None and f.step_start - 1500 > 50  # beyond the short look
    assert f.evidence["first_mover"] == "lr" and f.evidence["first_mover_step"] == 1500
    assert "lr rose ×3 at step 1500 (from 0.001)" in f.message


def test_a_resumed_log_is_compared_with_its_plan_at_the_real_steps(shared_dir: Path) -> None:
    # version_18's step count restarted at 9 while its scheduler went on (LR008 pins the
    # offset, +62,499): its LR is on its declared plan at every step, so no loss spike is
    # blamed on it, and the declared warmup is long over (the loss is judged from step 9)
    run = _real(shared_dir, "Arshya-Guru_deepmind-research/lightning_logs/version_18/metrics.csv")
    a = trainlens.analyze(run)[0]
    assert a.context.step_offset == 62499
    assert [f.code for f in a.findings if f.code.startswith("LR")] == ["LR008"]
    spikes = [f for f in a.findings if f.code == "LOSS001"]
    assert spikes and all(f.evidence.get("first_mover") is None for f in spikes)
    assert all("planned" not in f.message for f in spikes)
    (flat,) = [f for f in a.findings if f.code == "LOSS002"]
    assert flat.step_start == 9


def test_a_spike_that_never_came_back_inside_a_rise_is_one_finding(shared_dir: Path) -> None:
    # version_13: the loss climbs back from ~0.001 from step 3469 and stays up; grad_spikes
    # also saw a spike at 3569 that never returned (an error) — one event, one finding
    run = _real(shared_dir, "Arshya-Guru_deepmind-research/lightning_logs/version_13/metrics.csv")
    a = trainlens.analyze(run)[0]
    (rise,) = [f for f in a.findings if f.code == "LOSS003"]
    inside = [
        f
        for f in a.findings
        if f.code == "LOSS001" and rise.step_start <= f.step_start <= rise.step_end
    ]
    assert all(f.evidence["recovered_step"] is not None for f in inside)
    assert rise.severity.value == "error"  # the spike's: it never came back
    assert rise.evidence["spike_step"] == 3569
    # a config that sets LOSS003's severity keeps it
    cfg = Config(severity={"LOSS003": "warning"})
    (kept,) = [f for f in trainlens.analyze(run, config=cfg)[0].findings if f.code == "LOSS003"]
    assert kept.severity.value == "warning"
