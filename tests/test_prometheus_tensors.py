"""The bound on per-tensor Prometheus series: ``prometheus_tensors`` (8) of each family per
run, the most telling first, and how many were left out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests._promtool import record
from tests.conftest import fixture_path
from trainlens.core.errors import ConfigError
from trainlens.watch.settings import WatchSettings


def _exported(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> dict[str, float]:
    return {
        dict(lb)["metric"]: v for (name, lb), v in samples.items() if name == "trainlens_metric"
    }


def _last_logged(path: Path) -> dict[str, float]:
    """Each metric's last value in the file, read with json."""
    last: dict[str, float] = {}
    for line in path.read_text().splitlines():
        for k, v in json.loads(line).items():
            if k not in ("step", "time") and isinstance(v, (int, float)):
                last[k] = float(v)
    return last


@pytest.fixture(scope="module")
def wide_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 60-layer MLP (122 parameter tensors) trained 20 steps under trainlens' Monitor,
    which logs each tensor's grad norm and update ratio: 244 per-tensor series."""
    from tests.test_prometheus_rules import _monitor_run

    return _monitor_run(tmp_path_factory.mktemp("wide"), "wide", layers=60, steps=20, inf_from=None)


@pytest.mark.slow
def test_a_run_with_hundreds_of_tensors_exports_the_bound(wide_run: Path, tmp_path: Path) -> None:
    last = _last_logged(wide_run)
    per_tensor = {
        m: v
        for m, v in last.items()
        if m.split("/")[0] in ("grad_norm", "update_ratio") and "/" in m
    }
    assert len(per_tensor) == 244
    rec = record(wide_run, tmp_path / "k8", steps=10)
    exported = _exported(rec.scrapes[-1])
    for family in ("grad_norm", "update_ratio"):
        got = {m for m in exported if m.startswith(family + "/")}
        values = {m: v for m, v in per_tensor.items() if m.startswith(family + "/")}
        largest = sorted(values, key=lambda m: -values[m])[:8]
        assert got == set(largest), family  # no finding names one: the largest
        assert all(exported[m] == values[m] for m in got)
    assert rec.series("trainlens_tensor_series_omitted")[-1] == 244 - 16
    # every metric that is not per tensor is there, the global grad norm too
    assert {m for m in last if m not in per_tensor} <= set(exported)
    assert "grad_norm" in exported and "train/loss" in exported
    none = record(wide_run, tmp_path / "k0", steps=10, tensors=0)
    assert not [
        m
        for m in _exported(none.scrapes[-1])
        if "/" in m and m.split("/")[0] in ("grad_norm", "update_ratio")
    ]
    assert none.series("trainlens_tensor_series_omitted")[-1] == 244


def test_the_tensors_a_finding_names_come_first(tmp_path: Path) -> None:
    """frozen_embedding: the embeddings stop getting gradients at step 300 (TENSOR001 on
    grad_norm/wte.weight and wpe.weight): their zero norms are exported with k = 2,
    though every other tensor's norm is larger."""
    src = fixture_path("frozen_embedding")
    rec = record(src, tmp_path, steps=1000, tensors=2)
    named = {e.finding.metric for e in rec.events[-1] if e.code == "TENSOR001" and e.finding}
    assert {"grad_norm/wte.weight", "grad_norm/wpe.weight"} <= named
    exported = _exported(rec.scrapes[-1])
    grads = sorted(m for m in exported if m.startswith("grad_norm/"))
    assert grads == ["grad_norm/wpe.weight", "grad_norm/wte.weight"]
    last = _last_logged(src)
    others = [v for m, v in last.items() if m.startswith("grad_norm/") and m not in grads]
    assert max(exported[m] for m in grads) < min(others)


def test_the_bound_is_a_setting_and_a_flag(capsys: pytest.CaptureFixture[str]) -> None:
    from trainlens.cli import main
    from trainlens.watch.sinks import build_sink

    assert WatchSettings().prometheus_tensors == 8
    assert WatchSettings.from_table({"prometheus_tensors": 3}).prometheus_tensors == 3
    for bad in (-1, True, 2.5, "all"):
        with pytest.raises(ConfigError, match="'prometheus_tensors' must be a whole number"):
            WatchSettings.from_table({"prometheus_tensors": bad})
    settings = WatchSettings(prometheus="127.0.0.1:0").with_flags(prometheus_tensors=5)
    fan = build_sink(settings, json=True, tty=False)
    try:
        [prom] = [s for s in fan.sinks if type(s).__name__ == "PrometheusSink"]
        assert prom.tensors == 5
    finally:
        fan.close()
    run = fixture_path("healthy_constant")
    code = main(["watch", str(run), "--once", "--json", "--prometheus-tensors", "-1"])
    assert code == 2
    assert (
        "--prometheus-tensors must be a whole number of at least 0, not -1"
        in capsys.readouterr().err
    )
