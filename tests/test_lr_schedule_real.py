"""The LR schedule detector on real logs, on the fixture runs, and the declared-schedule
function against the schedulers of real libraries (PyTorch, Hugging Face)."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

from tests.conftest import FIXTURES, REAL_LOGS, labels_or_skip, read_fixture
from trainlens.core.config import Config
from trainlens.core.findings import Finding
from trainlens.core.run import Run, build_run
from trainlens.core.schedules import declared_lr
from trainlens.detectors import _lr_precision, lr_schedule
from trainlens.detectors.base import Context, Skip

LLMC = REAL_LOGS / "modded_nanogpt" / "2024-10-13_llmc_main.log"
BLOOM = REAL_LOGS / "bigscience" / "tr11-176B-ml_chronicles.md"
NANOGPT = REAL_LOGS / "modded_nanogpt"

# llm.c's schedule in that record run (train_gpt2.cu: linear warmup (step+1)/W over 700
# steps, cosine to 0 at the last step 19560; learning_rate 6e-4, final_lr_frac 0)
LLMC_SCHEDULE = {
    "shape": "cosine",
    "warmup_steps": 700,
    "peak_lr": 6e-4,
    "min_lr": 0.0,
    "total_steps": 19560,
    "first_step": 0,
}


def _detect(run: Run, schedule: dict[str, Any] | None = None) -> list[Finding]:
    return lr_schedule.detect(run, lr_schedule.Params(), Context(schedule=dict(schedule or {})))


def _read_text(path: Path) -> Run:
    import trainlens

    if not path.exists():
        pytest.skip(f"{path} not present")
    return trainlens.read(path, format="text")[0]


def _lr_run(steps: np.ndarray, lr: np.ndarray, name: str = "lr") -> Run:
    df = pl.DataFrame(
        {"step": steps.astype(np.int64), "metric": ["lr"] * len(steps), "value": lr},
        schema={"step": pl.Int64, "metric": pl.String, "value": pl.Float64},
    )
    return build_run(df, name=name, source=f"<{name}>", fmt="synthetic")


def _loud(found: list[Finding]) -> list[str]:
    return [f"{f.code}@{f.step_start}: {f.message}" for f in found if f.severity.rank >= 1]


# ---- real logs ---------------------------------------------------------------------------


def test_llmc_log_is_silent_without_a_declared_schedule() -> None:
    run = _read_text(LLMC)
    _, lr = run.series("lr", finite=True)
    # the curve the detector must accept: printed with %f (1e-6 resolution), a 700-step
    # warmup, cosine to 0, and the last ~350 steps printed as 0.000000
    assert _lr_precision.print_quantum(lr) == pytest.approx(1e-6)
    assert lr.max() == pytest.approx(6e-4)
    assert (lr[-300:] == 0).all()
    assert _detect(run) == []


def test_llmc_log_matches_llmc_schedule_when_declared() -> None:
    run = _read_text(LLMC)
    assert _detect(run, LLMC_SCHEDULE) == []
    # the same plan counted from step 1 (off by one everywhere) is not a mismatch either
    assert _detect(run, {**LLMC_SCHEDULE, "first_step": 1}) == []


def test_llmc_log_against_a_wrong_declaration_is_a_mismatch() -> None:
    run = _read_text(LLMC)
    found = _detect(run, {**LLMC_SCHEDULE, "shape": "linear"})
    codes = {f.code for f in found}
    assert codes == {"LR001"}, [f.message for f in found]
    first = min(f.step_start or 0 for f in found)
    assert 700 < first < 2000  # warmup agrees; the curves part soon after it
    assert max(f.evidence["max_rel_deviation"] for f in found) > 0.1


def test_llmc_lr_made_to_double_step_is_lr002() -> None:
    """The real (quantized) curve, realized(t) = real(2t): a scheduler stepped twice."""
    run = _read_text(LLMC)
    steps, lr = run.series("lr", finite=True)
    half = steps[: len(steps) // 2]
    bad = _lr_run(half, lr[np.minimum(2 * half + 1, len(lr) - 1)])
    found = _detect(bad, LLMC_SCHEDULE)
    assert [f.code for f in found] == ["LR002"], [f.message for f in found]
    assert found[0].evidence["factor"] == 2
    assert found[0].step_start is not None and found[0].step_start < 50


def test_llmc_lr_frozen_after_warmup_is_lr003() -> None:
    run = _read_text(LLMC)
    steps, lr = run.series("lr", finite=True)
    frozen = _lr_run(steps, lr[np.minimum(steps, 700)])
    found = _detect(frozen, LLMC_SCHEDULE)
    assert [f.code for f in found] == ["LR003"], [f.message for f in found]
    assert found[0].evidence["flat_from_step"] == pytest.approx(700, abs=5)
    # undeclared, a flat LR is a sane (constant) schedule
    assert _detect(frozen) == []


def test_bloom_log_is_silent() -> None:
    run = _read_text(BLOOM)
    _, lr = run.series("lr", finite=True)
    assert len(lr) >= 10 and np.all(np.diff(lr) <= 0)  # sparse, slowly decaying
    assert _detect(run) == []


def test_modded_nanogpt_logs_without_lr_are_skipped() -> None:
    for name in ("2024-06-06_AdamW_f66d43d7.log", "2024-10-10_Muon_eb5659d0.txt"):
        run = _read_text(NANOGPT / name)
        with pytest.raises(Skip, match="needs lr"):
            _detect(run)


# ---- fixture runs --------------------------------------------------------------------------


_labels = labels_or_skip
_fixture = read_fixture


def test_fixture_lr_events_found_at_their_steps() -> None:
    labels = _labels()
    checked = 0
    for name, label in labels.items():
        events = [e for e in label.get("events", []) if str(e.get("code", "")).startswith("LR")]
        if not events:
            continue
        run, ctx = _fixture(name)
        assert ctx.schedule, f"{name}: no declared schedule found beside the run"
        found = lr_schedule.detect(run, lr_schedule.Params(), ctx)
        for ev in events:
            tol = int(ev.get("tolerance", 0))
            hits = [
                f
                for f in found
                if f.code == ev["code"] and abs((f.step_start or 0) - int(ev["step"])) <= tol
            ]
            assert hits, f"{name}: {ev['code']} near {ev['step']}±{tol}; got " + "; ".join(
                f"{f.code}@{f.step_start}" for f in found
            )
            assert hits[0].severity.rank >= 1
            checked += 1
        # nothing else at warning or above
        expected = {e["code"] for e in events}
        stray = [f for f in found if f.code not in expected and f.severity.rank >= 1]
        assert not stray, _loud(stray)
    assert checked >= 2


def test_fixture_runs_without_lr_faults_are_silent() -> None:
    labels = _labels()
    for name, label in labels.items():
        if any(str(e.get("code", "")).startswith("LR") for e in label.get("events", [])):
            continue
        run, ctx = _fixture(name)
        if not run.has("lr"):
            continue
        found = lr_schedule.detect(run, lr_schedule.Params(), ctx)
        assert not _loud(found), f"{name}: {_loud(found)}"
        if label.get("healthy"):
            assert found == [], f"{name}: {[f.message for f in found]}"


# ---- declared_lr against real schedulers ---------------------------------------------------


def _torch_lrs(make: Any, steps: int, *, after_step: bool) -> np.ndarray:
    """The LR of a real torch scheduler per optimizer step (read before or after
    scheduler.step())."""
    torch = pytest.importorskip("torch")
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = make(opt)
    out = []
    for _ in range(steps):
        if not after_step:
            out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
        if after_step:
            out.append(opt.param_groups[0]["lr"])
    return np.asarray(out)


def test_declared_lr_equals_hf_schedulers_as_the_trainer_logs_them() -> None:
    """HF Trainer logs the LR after scheduler.step() at global_step 1, 2, ...: our plan
    with first_step 1 is the same curve, to float precision."""
    opt_mod = pytest.importorskip("transformers.optimization")
    W, T, peak = 30, 300, 1.0
    steps = np.arange(1, T + 1)  # (HF does not clamp past T: its cosine rises again)
    cases = [
        (lambda o: opt_mod.get_cosine_schedule_with_warmup(o, W, T), {"shape": "cosine"}),
        (lambda o: opt_mod.get_linear_schedule_with_warmup(o, W, T), {"shape": "linear"}),
        (lambda o: opt_mod.get_constant_schedule_with_warmup(o, W), {"shape": "constant"}),
        (lambda o: opt_mod.get_inverse_sqrt_schedule(o, W), {"shape": "inverse-sqrt"}),
        (
            lambda o: opt_mod.get_cosine_with_min_lr_schedule_with_warmup(o, W, T, min_lr=0.1),
            {"shape": "cosine", "min_lr": 0.1},
        ),
        (
            lambda o: opt_mod.get_wsd_schedule(
                o, W, num_decay_steps=60, num_stable_steps=T - W - 60, decay_type="linear"
            ),
            {"shape": "warmup-stable-decay", "decay_steps": 60},
        ),
        (
            lambda o: opt_mod.get_wsd_schedule(
                o, W, num_decay_steps=60, num_stable_steps=T - W - 60, decay_type="1-sqrt"
            ),
            {"shape": "wsd", "decay_steps": 60, "decay_shape": "1-sqrt"},
        ),
    ]
    for make, extra in cases:
        real = _torch_lrs(make, len(steps), after_step=True)
        sched = {"warmup_steps": W, "peak_lr": peak, "total_steps": T, "first_step": 1, **extra}
        plan = declared_lr(sched, steps)
        np.testing.assert_allclose(plan, real, rtol=1e-6, atol=1e-12, err_msg=str(extra))
        # and the detector agrees, also when the LR is read before scheduler.step()
        before = _torch_lrs(make, len(steps), after_step=False)
        scaled = {**sched, "peak_lr": 3e-4, "min_lr": 3e-4 * float(sched.get("min_lr", 0.0))}
        for lr in (real, before):
            assert _detect(_lr_run(steps, lr * 3e-4), scaled) == [], extra


def test_declared_lr_equals_torch_schedulers() -> None:
    torch = pytest.importorskip("torch")
    T = 200
    steps = np.arange(0, T)
    # StepLR: the LR used at step e (0-based, read before scheduler.step())
    real = _torch_lrs(lambda o: torch.optim.lr_scheduler.StepLR(o, 50, 0.5), T, after_step=False)
    plan = declared_lr({"shape": "step", "peak_lr": 1.0, "step_size": 50, "gamma": 0.5}, steps)
    np.testing.assert_allclose(plan, real, rtol=1e-12)
    # CosineAnnealingLR (its recursive form drifts ~1e-7): epoch e is our n = e (first_step 1)
    real = _torch_lrs(
        lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=T, eta_min=0.01),
        T,
        after_step=False,
    )
    sched = {"shape": "cosine", "peak_lr": 1.0, "min_lr": 0.01, "total_steps": T, "first_step": 1}
    np.testing.assert_allclose(declared_lr(sched, steps), real, rtol=1e-5)
    # PyTorch's LinearLR warmup (start factor 1/3) then cosine: a convention, not a bug
    warm = _torch_lrs(
        lambda o: torch.optim.lr_scheduler.SequentialLR(
            o,
            [
                torch.optim.lr_scheduler.LinearLR(o, start_factor=1 / 3, total_iters=20),
                torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=T - 20),
            ],
            milestones=[20],
        ),
        T,
        after_step=False,
    )
    decl = {"shape": "cosine", "peak_lr": 1.0, "warmup_steps": 20, "total_steps": T}
    assert _detect(_lr_run(steps, warm), decl) == []


def test_declared_lr_equals_the_fixture_plan() -> None:
    """fixtures/make_runs.py documents its plan; ours gives the same numbers."""
    import importlib.util

    path = FIXTURES / "make_runs.py"
    if not path.exists():
        pytest.skip("fixture script absent")
    spec_obj = importlib.util.spec_from_file_location("_make_runs", path)
    assert spec_obj is not None and spec_obj.loader is not None
    mod = importlib.util.module_from_spec(spec_obj)
    sys.modules["_make_runs"] = mod  # its dataclasses look their module up
    try:
        spec_obj.loader.exec_module(mod)
    finally:
        sys.modules.pop("_make_runs", None)
    for spec in mod.SPECS:
        sched = {**mod.schedule_dict(spec), "first_step": mod.FIRST_STEP}
        steps = np.arange(mod.FIRST_STEP, spec.total_steps + 1)
        theirs = np.array([mod.declared_lr(spec, int(s)) for s in steps])
        np.testing.assert_allclose(declared_lr(sched, steps), theirs, rtol=1e-12, err_msg=spec.name)


def test_declared_lr_reports_missing_keys() -> None:
    with pytest.raises(ValueError, match="total_steps"):
        declared_lr({"shape": "cosine", "peak_lr": 1e-3}, np.arange(10))
    with pytest.raises(ValueError, match="unknown schedule shape"):
        declared_lr({"shape": "polynomial", "peak_lr": 1e-3}, np.arange(10))
    # a WSD with only total_steps decays over the last 20 % after warmup
    lr = declared_lr(
        {"shape": "wsd", "peak_lr": 1.0, "warmup_steps": 0, "total_steps": 100}, np.arange(100)
    )
    assert lr[79] == 1.0 and 0 < lr[90] < 1.0 and lr[99] == pytest.approx(0.0)


# ---- a reset on resume, as a real log of a resumed run shows it -----------------------


def test_resume_that_resets_the_schedule_is_lr006_and_a_restored_one_is_silent() -> None:
    sched = {
        "shape": "cosine",
        "warmup_steps": 50,
        "peak_lr": 3e-3,
        "min_lr": 3e-4,
        "total_steps": 1000,
        "first_step": 1,
    }
    first = np.arange(1, 701)
    second = np.arange(601, 1001)  # crashed after 700, resumed from the step-600 checkpoint
    steps = np.concatenate([first, second])
    restored = np.concatenate([declared_lr(sched, first), declared_lr(sched, second)])
    assert _detect(_lr_run(steps, restored), sched) == []
    reset = np.concatenate([declared_lr(sched, first), declared_lr(sched, second - 600)])
    found = _detect(_lr_run(steps, reset), sched)
    assert [f.code for f in found] == ["LR006"], [f.message for f in found]
    assert found[0].step_start == 601
    # undeclared, the replayed warmup is a drop and a rise after decay began
    found = _detect(_lr_run(steps, reset))
    assert [f.code for f in found] == ["LR007"] and found[0].step_start == 601


def test_print_quantum() -> None:
    x = np.round(np.linspace(0, 6e-4, 500), 6)
    assert _lr_precision.print_quantum(x) == pytest.approx(1e-6)
    assert _lr_precision.print_quantum(np.array([0.1, 0.01, 0.001])) == 0.0  # few values
    assert _lr_precision.print_quantum(np.float32(np.linspace(1e-4, 6e-4, 500))) == 0.0
    assert math.isclose(_lr_precision.print_quantum(np.array([5.279e-5] * 20)), 0.0)


# ---- a seeded sweep over the conventions real code uses ------------------------------------


def _printed(lr: np.ndarray, fmt: str) -> np.ndarray:
    if fmt == "float32":
        return lr.astype(np.float32).astype(np.float64)
    if fmt == "raw":
        return lr
    return np.array([float(format(x, fmt)) for x in lr])


def _sweep_case(rng: np.random.Generator) -> tuple[dict[str, Any], np.ndarray, np.ndarray]:
    """A sane declared schedule, logged the way some real loop would log it."""
    shape = str(rng.choice(["cosine", "linear", "warmup-stable-decay", "inverse-sqrt"]))
    total = int(rng.choice([1000, 5000]))
    sched = {
        "shape": shape,
        "warmup_steps": int(rng.choice([20, 100, total // 20])),
        "peak_lr": float(10 ** rng.uniform(-4.5, -1)),
        "total_steps": total,
        "decay_steps": total // 5,
    }
    sched["min_lr"] = float(rng.choice([0.0, 0.1])) * sched["peak_lr"]
    if shape == "inverse-sqrt":
        sched["min_lr"] = 0.0
    first = int(rng.integers(0, 2))  # the log counts steps from 0 or from 1
    offset = int(rng.integers(-2, 2))  # LR read before/after scheduler.step(), first_step
    every = int(rng.choice([1, 1, 10]))
    steps = np.arange(first, total + first, every)
    n = (steps - first + 1 + offset).astype(np.float64)
    sched_log = {**sched, "first_step": int(rng.integers(0, 2))}
    return sched_log, steps, n


@pytest.mark.slow
def test_sweep_sane_schedules_silent_and_bugs_named() -> None:
    from trainlens.core.schedules import lr_at

    rng = np.random.default_rng(20240601)
    bugs = {
        "LR002": lambda s, n: lr_at(s, 2 * n - 1),
        "LR003": lambda s, n: lr_at(s, np.minimum(n, s["warmup_steps"])),
        "LR004": lambda s, n: lr_at({**s, "warmup_steps": 0}, n),
        "LR006": lambda s, n: lr_at(s, np.where(n < n[len(n) // 2], n, n - n[len(n) // 2] + 1)),
    }
    for i in range(40):
        sched, steps, n = _sweep_case(rng)
        fmt = str(rng.choice(["raw", "float32", "f", ".2e", ".6g"]))
        healthy = _lr_run(steps, _printed(lr_at(sched, n), fmt))
        assert _loud(_detect(healthy, sched)) == [], (i, sched, fmt)
        assert _loud(_detect(healthy)) == [], (i, sched, fmt)
        code = list(bugs)[i % len(bugs)]
        values = _printed(bugs[code](sched, n), fmt)
        buggy = _lr_run(steps, values)
        found = [f.code for f in _detect(buggy, sched) if f.severity.rank >= 1]
        # a bug that drives the LR to exactly 0 early is also an LR005 stretch
        zero_early = bool((np.asarray(values, dtype=float) == 0).any())
        assert found[:1] == [code], (i, code, sched, fmt, found)
        assert set(found) <= ({code, "LR005"} if zero_early else {code}), (i, code, found)


# ---- a log whose steps are offset from the plan's (resumed, excerpted) ----------------------

LIGHTNING = Path("real-logs") / "Arshya-Guru_deepmind-research" / "lightning_logs"


def _real_lightning(shared_dir: Path, version: str) -> tuple[Run, Context]:
    import trainlens
    from trainlens.api import build_context

    run = trainlens.read(shared_dir / LIGHTNING / version / "metrics.csv")[0]
    return run, build_context(run, Config())


def test_resumed_lightning_log_is_aligned_not_flagged(shared_dir: Path) -> None:
    """version_18 was resumed at epoch 100 (625 steps per epoch): its logged step restarts at
    9, its scheduler does not. Judged at the logged steps it looks like a missing warmup and
    a mismatch; aligned, it follows the declared cosine exactly."""
    run, ctx = _real_lightning(shared_dir, "version_18")
    sched = ctx.schedule
    assert (sched["shape"], sched["warmup_steps"], sched["total_steps"]) == ("cosine", 6250, 187500)
    steps, lr = run.series("lr", finite=True)
    assert steps[0] == 9 and lr[0] == pytest.approx(7.805e-4, rel=1e-3)
    # at its logged steps the plan is far off (still warming up at 1.6e-6) ...
    assert declared_lr(sched, steps[:1])[0] < 0.01 * lr[0]
    found = lr_schedule.detect(run, lr_schedule.Params(), ctx)
    assert not _loud(found)
    (note,) = found
    assert note.code == "LR008" and note.severity.value == "info"
    # ... 62,500 steps later it is the LR logged: epoch 100 x 625 steps per epoch
    offset = note.evidence["step_offset"]
    assert offset == pytest.approx(62_500, abs=5)
    assert note.evidence["first_epoch"] == 100
    assert note.evidence["explained_frac"] == 1.0
    np.testing.assert_allclose(declared_lr(sched, steps + offset), lr, rtol=1e-3)
    assert "+62,49" in note.message or "+62,50" in note.message


def test_fresh_lightning_log_inside_its_warmup_is_silent(shared_dir: Path) -> None:
    """version_13 ends at step 7269, inside its declared 12,500-step warmup: the ramp in the
    log is the plan's at the logged steps — no offset, no finding."""
    run, ctx = _real_lightning(shared_dir, "version_13")
    assert ctx.schedule["warmup_steps"] == 12500
    _, lr = run.series("lr", finite=True)
    assert lr[-1] < 0.6 * float(ctx.schedule["peak_lr"])  # still warming up
    assert lr_schedule.detect(run, lr_schedule.Params(), ctx) == []


def test_sweep_offset_logs_are_aligned() -> None:
    """Sane schedules logged from a random step on, with their steps counted from the start
    again (a resumed run whose step count restarted): the offset is found within the timing
    conventions (±3 steps) and nothing is flagged."""
    from trainlens.core.schedules import lr_at

    rng = np.random.default_rng(7)
    for i in range(24):
        sched, steps, n = _sweep_case(rng)
        fmt = str(rng.choice(["raw", "float32", "f", ".2e", ".6g"]))
        k = int(rng.integers(len(n) // 10, len(n) * 9 // 10))
        offset = int(steps[k] - steps[0])
        resumed = _lr_run(steps[k:] - offset, _printed(lr_at(sched, n[k:]), fmt))
        found = _detect(resumed, sched)
        assert _loud(found) == [], (i, sched, fmt)
        notes = [f for f in found if f.code == "LR008"]
        assert len(notes) == 1, (i, sched, fmt, [f.message for f in found])
        assert abs(notes[0].evidence["step_offset"] - offset) <= 3, (i, offset, notes[0].evidence)


def test_offset_log_with_a_shock_is_aligned_and_the_shock_flagged() -> None:
    sched = {
        "shape": "cosine",
        "warmup_steps": 2000,
        "peak_lr": 3e-4,
        "min_lr": 3e-5,
        "total_steps": 100_000,
    }
    steps = np.arange(0, 5000, 5)
    lr = declared_lr(sched, steps + 29_020)
    lr[600:603] *= 40  # steps 3000-3010: the LR of three logged steps is 40x
    found = _detect(_lr_run(steps, lr), sched)
    codes = [(f.code, f.severity.value, f.step_start) for f in found]
    assert codes == [("LR008", "info", 0), ("LR001", "warning", 3000)], codes
    assert found[1].evidence["step_offset"] == found[0].evidence["step_offset"]
    assert abs(found[0].evidence["step_offset"] - 29_020) <= 3


def test_offset_candidates_invert_the_plan() -> None:
    from trainlens.core.schedules import offset_candidates

    sched = {"shape": "cosine", "warmup_steps": 100, "peak_lr": 1.0, "total_steps": 10_000}
    n = np.arange(1.0, 2001.0, 50.0)
    values = declared_lr(sched, n - 1 + 4321)  # first_step 0: step s is n = s + 1
    best = offset_candidates(sched, n, values, 1e-3 * values)
    assert best and best[0][0] == pytest.approx(4321, abs=1)
    assert best[0][1] <= 4321 <= best[0][2]
    # a value the warmup ramp and the decay both take: two candidates for one point
    two = offset_candidates(sched, np.array([1.0]), np.array([0.5]), np.array([1e-3]))
    assert sorted(round(c[0], -1) for c in two) == [50, 5050]
    # on a constant plan every offset past the warmup fits: one wide range
    flat = {"shape": "constant", "warmup_steps": 100, "peak_lr": 1.0}
    (wide,) = offset_candidates(flat, n, np.ones(len(n)), np.full(len(n), 1e-3))
    assert wide[2] - wide[1] > 10 * (n[-1] - n[0])
