"""grad_spikes and loss_trend on real third-party logs, a long heavy-tailed run, and the
fixture runs (each part skips cleanly when its data is absent)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

import trainlens
from tests.conftest import REAL_LOGS, fixture_path, labels_or_skip, read_fixture
from trainlens.core.findings import Finding
from trainlens.core.run import Run, build_run
from trainlens.detectors import grad_spikes, loss_trend
from trainlens.detectors.base import Context

LOGS = REAL_LOGS
BLOOM = LOGS / "bigscience" / "tr11-176B-ml_chronicles.md"
NANOGPT = LOGS / "modded_nanogpt"
MY_CODES = set(grad_spikes.CODES) | set(loss_trend.CODES)


def _read_text(path: Path) -> Run:
    if not path.exists():
        pytest.skip(f"{path} not present")
    return trainlens.read(path, format="text")[0]


def _detect(run: Run, ctx: Context | None = None) -> list[Finding]:
    ctx = ctx or Context()
    out = grad_spikes.detect(run, grad_spikes.Params(), ctx)
    out += loss_trend.detect(run, loss_trend.Params(), ctx)
    return out


def _loud(found: list[Finding]) -> list[str]:
    return [f"{f.code}@{f.step_start} {f.severity}: {f.message}" for f in found if f.severity.rank]


# ---- BLOOM-176B: the first lm-loss spike (chronicles, 2022-04-12) ---------------------------


def test_bloom_first_loss_spike_is_found_with_its_lead() -> None:
    run = _read_text(BLOOM)
    found = _detect(run)
    hits = [f for f in found if f.code == "GRAD001" and 31200 <= (f.step_start or 0) <= 31230]
    assert len(hits) == 1, [f.message for f in found]
    f = hits[0]
    ev = f.evidence
    # grad norm left its baseline (0.17-0.24) at 31215-31217; the loss jumped at 31216
    # (2.60 vs 2.20) and peaked at 31219 (5.10); the notes say it recovered by ~31250
    assert 31214 <= ev["lead_step"] <= 31219
    assert ev["lead_step"] <= ev["lag_step"] <= 31222
    assert ev["lag"] == ev["lag_step"] - ev["lead_step"] >= 0
    assert ev["grad_peak"] == pytest.approx(960.351)
    assert ev["grad_peak_step"] == 31219
    assert ev["loss_peak_step"] == 31219 and ev["loss_peak"] == pytest.approx(5.098124)
    assert ev["grad_ratio"] > 100
    assert ev["recovered_step"] == 31250
    assert f.severity.value == "warning"  # it persisted, then recovered: not an error
    # nothing else in that log is loud (the 42783 throughput drop is not ours)
    assert _loud([x for x in found if x is not f]) == []


# ---- modded-nanogpt records: healthy runs, must stay quiet -----------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "2024-06-06_AdamW_f66d43d7.log",
        "2024-10-10_Muon_eb5659d0.txt",
        "2024-10-13_llmc_main.log",
    ],
)
def test_modded_nanogpt_records_raise_no_warning(name: str) -> None:
    run = _read_text(NANOGPT / name)
    found = _detect(run)
    assert _loud(found) == []
    # one-off outliers are listed at most max_info_findings per code
    per_code: dict[str, int] = {}
    for f in found:
        per_code[f.code] = per_code.get(f.code, 0) + 1
    assert all(n <= grad_spikes.Params().max_info_findings for n in per_code.values())


def test_llmc_grad_norm_outliers_are_one_offs() -> None:
    """llm.c logs norm: every step for 19560 steps: heavy-tailed real grad norms. Its
    largest outliers (7.5x at 9025, 5.3x at 7435 with a same-step loss bump) are found
    as info, one-off."""
    run = _read_text(NANOGPT / "2024-10-13_llmc_main.log")
    found = grad_spikes.detect(run, grad_spikes.Params(), Context())
    grads = {f.step_start: f for f in found if f.code in ("GRAD001", "GRAD002")}
    assert 9025 in grads and grads[9025].code == "GRAD002"
    assert 7435 in grads and grads[7435].code == "GRAD001"
    assert grads[7435].evidence["lag"] == 0
    assert all(f.severity.value == "info" for f in grads.values())


# ---- a long run of heavy-tailed noise: many tests, no false alarm -------------------------------


def _heavy_tailed_run(n: int, seed: int) -> Run:
    rng = np.random.default_rng(seed)
    steps = np.arange(n)
    t = steps / n
    # right-skewed batch-loss noise (hard batches), Student-t(3) tails
    noise = np.abs(rng.standard_t(3, n)) * 0.012
    noise = np.where(rng.random(n) < 0.5, noise, -0.5 * noise)
    loss = (2.5 + 8 * np.exp(-30 * t) + 0.5 * np.exp(-3 * t)) * (1 + noise)
    grad = (0.3 + 5 * np.exp(-200 * t)) * np.exp(0.08 * rng.standard_t(3, n))
    long = pl.DataFrame(
        {
            "step": np.r_[steps, steps],
            "metric": ["train/loss"] * n + ["grad_norm"] * n,
            "value": np.r_[loss, grad],
        }
    )
    return build_run(long, name="heavy", source="<synthetic>", fmt="synthetic")


@pytest.mark.slow
def test_long_heavy_tailed_run_gives_no_warning() -> None:
    run = _heavy_tailed_run(300_000, seed=0)
    found = _detect(run)
    assert _loud(found) == []
    # the noise does make outliers; they are reported as capped one-offs
    info = [f for f in found if f.code == "LOSS001"]
    assert 0 < len(info) <= grad_spikes.Params().max_info_findings
    assert info[0].evidence["similar_total"] > len(info)


# ---- fixture runs (ground truth in fixtures/labels.json) ------------------------------------


_fixture_labels = labels_or_skip
_fixture = read_fixture


def _events(labels: dict[str, Any], name: str, code: str) -> list[dict[str, Any]]:
    return [e for e in labels.get(name, {}).get("events", []) if e.get("code") == code]


@pytest.mark.parametrize("name", ["lr_shock_recover", "lr_shock_diverge"])
def test_fixture_grad_spike_leads_loss_spike(name: str) -> None:
    labels = _fixture_labels()
    run, ctx = _fixture(name)
    found = _detect(run, ctx)
    [label] = _events(labels, name, "GRAD001")
    tol = int(label.get("tolerance", 2))
    hits = [
        f
        for f in found
        if f.code == "GRAD001" and abs((f.step_start or 0) - int(label["step"])) <= tol
    ]
    assert hits, [f.message for f in found]
    ev = hits[0].evidence
    lag_tol = int(label.get("lag_tolerance", 2))
    assert abs(ev["lead_step"] - int(label["lead_step"])) <= tol
    assert abs(ev["lag"] - int(label["lag"])) <= lag_tol
    assert abs(ev["lag_step"] - int(label["lag_step"])) <= lag_tol
    if label.get("recovers", name == "lr_shock_recover"):
        assert hits[0].severity.value in ("info", "warning")
    else:
        diverging = [f for f in found if f.code == "LOSS003" and f.severity.rank >= 1]
        assert hits[0].severity.value == "error" or diverging


@pytest.mark.parametrize("name", ["healthy_cosine", "healthy_wsd", "healthy_constant"])
def test_fixture_healthy_runs_are_quiet(name: str) -> None:
    _fixture_labels()
    run, ctx = _fixture(name)
    assert _loud(_detect(run, ctx)) == []


def test_fixture_runs_of_other_faults_are_quiet_unless_labeled() -> None:
    """Faults that belong to other detectors give no warning from ours, unless the labels
    list one of our codes for that run (a legitimate consequence)."""
    labels = _fixture_labels()
    checked = 0
    for name, info in labels.items():
        if name.startswith("healthy") or name.startswith("lr_shock"):
            continue
        if not fixture_path(name, skip=False).exists():
            continue
        ours = {e.get("code") for e in info.get("events", [])} & MY_CODES
        run, ctx = _fixture(name)
        loud = [f for f in _detect(run, ctx) if f.severity.rank and f.code not in ours]
        assert loud == [], (name, [f.message for f in loud])
        checked += 1
    assert checked > 0
