"""Namespaced tags map by rule: one real fixture run written as JSONL with canonical keys and as
TensorBoard (torch's SummaryWriter) with namespaced tags gets the same findings."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from trainlens.api import analyze
from trainlens.core.names import EXACT_ALIASES, AliasTable

# key in the fixture file (canonical: the monitor wrote it) -> (namespaced tag, factor the
# tag's value is multiplied by)
NAMESPACED = {
    "train/loss": ("train/loss", 1.0),
    "val/loss": ("eval/loss", 1.0),
    "lr": ("optim/lr", 1.0),
    "grad_norm": ("optim/grad_norm", 1.0),
    "update_ratio": ("train/update_to_weight", 1.0),
    "entropy": ("train/entropy", 1.0),
    "tokens_per_sec": ("perf/tokens_per_sec", 1.0),
    "samples_per_sec": ("throughput/samples_per_sec", 1.0),
    "step_time": ("time/step_time_ms", 1000.0),  # logged in ms, read back in seconds
    "mem/rss": ("sys/rss", 1.0),
    "dataloader_wait": ("timing/data_time", 1.0),
    "padding_frac": ("stats/padding_frac", 1.0),
}


def _tag(key: str) -> tuple[str, float]:
    if key in NAMESPACED:
        return NAMESPACED[key]
    if key.startswith(("grad_norm/", "update_ratio/")):
        return "optim/" + key, 1.0  # per-tensor names under a folder too
    raise AssertionError(f"no namespaced spelling for {key!r}")


def _rewrite_as_tensorboard(jsonl: Path, out: Path) -> None:
    tb = pytest.importorskip("torch.utils.tensorboard")
    writer = tb.SummaryWriter(str(out))
    for line in jsonl.read_text().splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue  # a torn line (crash_resume): the JSONL read reports it, nothing to write
        if not isinstance(row, dict) or "step" not in row:
            continue
        step, wall = int(row.pop("step")), row.pop("time", None)
        for key, value in row.items():
            if not isinstance(value, (int, float)):
                continue
            tag, factor = _tag(key)
            writer.add_scalar(tag, float(value) * factor, step, walltime=wall)
    writer.close()


def _findings(analysis: object) -> list[tuple[str, str, int | None, int | None]]:
    return sorted(
        (f.code, f.metric, f.step_start, f.step_end)
        for f in analysis.findings  # type: ignore[attr-defined]
    )


@pytest.mark.parametrize("fixture", ["lr_shock_diverge", "memory_leak", "slow_loader", "overfit"])
def test_namespaced_tensorboard_equals_plain_jsonl(
    fixture_runs: Path, tmp_path: Path, fixture: str
) -> None:
    src = fixture_runs / fixture / "metrics.jsonl"
    plain = tmp_path / "plain" / "metrics.jsonl"
    plain.parent.mkdir()
    shutil.copy(src, plain)  # no config beside either copy: both are judged alike
    _rewrite_as_tensorboard(src, tmp_path / "tb")
    [a_jsonl] = analyze(plain)
    [a_tb] = analyze(tmp_path / "tb")
    assert a_tb.run.format == "tensorboard"
    # every namespaced tag landed on its canonical name (nothing kept its folder)
    assert not [m for m in a_tb.run.metrics if m.split("/")[0] in {"optim", "perf", "sys"}]
    assert set(a_tb.run.metrics) == set(a_jsonl.run.metrics)
    steps_j, st_j = a_jsonl.run.series("step_time")
    steps_t, st_t = a_tb.run.series("step_time")
    assert steps_j.tolist() == steps_t.tolist()
    assert float(st_t[-1]) == pytest.approx(float(st_j[-1]), rel=1e-5)  # ms scaled back
    assert _findings(a_tb) == _findings(a_jsonl)
    assert a_jsonl.findings  # each of these fixtures has something to find
    assert a_tb.skipped == a_jsonl.skipped  # detector -> reason


@pytest.mark.parametrize(
    ("raw", "canonical", "scale"),
    [
        ("perf/tokens_per_sec", "tokens_per_sec", 1.0),
        ("sys/mem_bytes", "mem/allocated", 1.0),
        ("memory/reserved", "mem/reserved", 1.0),
        ("train/update_to_weight", "update_ratio", 1.0),
        ("optim/grad_norm", "grad_norm", 1.0),
        ("optimizer/learning_rate", "lr", 1.0),
        ("throughput/samples_per_sec", "samples_per_sec", 1.0),
        ("time/step_time_ms", "step_time", 1e-3),
        ("charts/learning_rate", "lr", 1.0),
        ("trainer/optim/lr", "lr", 1.0),
        ("train/grad_norm/layer0.attn", "grad_norm/layer0.attn", 1.0),
        # split folders: validation names, never training ones
        ("eval/loss", "val/loss", 1.0),
        ("validation/loss", "val/loss", 1.0),
        ("test/accuracy", "val/accuracy", 1.0),
        ("eval/ppl", "val/perplexity", 1.0),
        ("val/train_loss", "val/loss", 1.0),
        ("val/loss_epoch", "val/loss_epoch", 1.0),
        ("val_loss_epoch", "val/loss_epoch", 1.0),  # an aggregate, not a domain
        ("val_loss_code", "val/loss/code", 1.0),  # a domain
        # torchtitan
        ("loss_metrics/global_avg_loss", "train/loss", 1.0),
        ("validation_metrics/loss", "val/loss", 1.0),
        ("mfu(%)", "mfu", 0.01),
        ("memory/max_reserved(GiB)", "mem/reserved", float(1 << 30)),
        ("time_metrics/end_to_end(s)", "step_time", 1.0),
    ],
)
def test_namespace_rule(raw: str, canonical: str, scale: float) -> None:
    alias = AliasTable().lookup(raw)
    assert alias is not None and alias.canonical == canonical
    assert math.isclose(alias.scale, scale)


def test_unmatched_rest_keeps_the_whole_name() -> None:
    table = AliasTable()
    # (system/gpu.0.temp is gpu0/temp since the device rule; a GPU key with no field of
    # ours still keeps its name)
    kept = ("train/f1", "train/loss_epoch", "system/gpu.0.smClock", "charts/episodic_return")
    for raw in kept:
        assert table.lookup(raw) is None, raw
    assert table.lookup("loss/norm") is None  # `loss/` names a metric, not a folder


def test_exact_table_holds_no_spelling_the_rule_covers() -> None:
    """One rule, one place: an exact entry that the namespace rule gives anyway is a copy."""
    table = AliasTable()
    covered = [
        key
        for key, alias in EXACT_ALIASES.items()
        if table._namespaced(key, 4) == alias or table._separated(key, 4) == alias
    ]
    assert covered == []


@pytest.mark.parametrize(
    ("raw", "canonical"),
    [
        ("grad norm", "grad_norm"),  # Megatron's log lines
        ("learning-rate", "lr"),  # Megatron's TensorBoard tags
        ("loss-scale", "loss_scale"),
        ("iteration-time", "step_time"),
        ("params-norm", "weight_norm"),
        ("train_step_timing in s", "step_time"),  # NeMo
        ("eval/lm loss", "val/loss"),  # with the namespace rule
        ("lr-AdamW", "lr"),  # Lightning's pattern still comes first
    ],
)
def test_separator_rule(raw: str, canonical: str) -> None:
    alias = AliasTable().lookup(raw)
    assert alias is not None and alias.canonical == canonical
