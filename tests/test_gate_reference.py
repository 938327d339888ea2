"""Golden curves (``gate --reference``) on real runs: fixtures/golden, made by
fixtures/make_golden.py (the small CPU transformer, three seeds as references, and
candidates with one real change each; labels.json says what each must fail on).

Every healthy candidate passes; every changed one fails on the metric its change moves,
from the step it departs, and on no metric its label does not allow.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from trainlens.cli import main
from trainlens.gate import gate
from trainlens.gate._band import build_band, compare
from trainlens.gate.golden import from_runs, read_golden
from trainlens.readers import read_runs

ROOT = Path(__file__).resolve().parent.parent / "fixtures" / "golden"
LABELS = json.loads((ROOT / "labels.json").read_text())
REFS = [ROOT / "runs" / n / "metrics.jsonl" for n in LABELS["references"]]
CANDIDATES = LABELS["candidates"]


def _run(name: str) -> Path:
    return ROOT / "runs" / name / "metrics.jsonl"


@pytest.fixture(scope="module")
def golden():
    runs = [(p.parent.name, read_runs([p])[0]) for p in REFS]
    return from_runs(runs)


@pytest.fixture(scope="module")
def results(golden):
    out = {}
    for name in CANDIDATES:
        res = gate([_run(name)], golden=golden, jobs=1)
        (report,) = res.reports
        out[name] = report
    return out


def _departs(report) -> dict[str, list]:
    by: dict[str, list] = {}
    for g in report.findings:
        if g.finding.code == "REF001":
            by.setdefault(g.finding.metric, []).append(g.finding)
    return by


@pytest.mark.parametrize("name", list(CANDIDATES))
def test_each_candidate_fails_on_its_metric_from_its_step(results, name):
    label = CANDIDATES[name]
    report = results[name]
    departs = _departs(report)
    if label.get("pass"):
        assert departs == {}, [f.message for fs in departs.values() for f in fs]
        return
    allowed = set(label["fails_on"]) | set(label.get("may_fail_on", []))
    assert set(departs) <= allowed, {m: [f.message for f in fs] for m, fs in departs.items()}
    for metric, step in label["fails_on"].items():
        assert metric in departs, f"{name}: no departure on {metric}"
        first = departs[metric][0]
        assert first.severity.value == "error"
        # from the step it truly departs: not before it, and within a few steps of it
        assert step <= first.step_start <= step + 10, first.message
        want = label.get("direction", {}).get(metric)
        if want == "lower":
            assert first.evidence["side"] == "below"
    ref_fails = [c for c in report.checks if c.kind == "reference" and c.status == "fail"]
    assert {c.name.split(":", 1)[1] for c in ref_fails} <= allowed


def test_the_same_seed_is_bit_identical(results):
    name, label = next((n, lab) for n, lab in CANDIDATES.items() if "identical_to" in lab)
    report = results[name]
    same = {g.finding.metric: g.finding for g in report.findings if g.finding.code == "REF002"}
    # everything that depends only on the seed; the timing columns are measured
    assert {"train/loss", "lr", "grad_norm", "val/loss"} <= set(same)
    assert all(f.evidence["reference"] == label["identical_to"] for f in same.values())
    assert "step_time" not in same


def test_a_change_is_told_where_and_how(results):
    (f,) = _departs(results["repeat_batch"])["train/loss"][:1]
    assert f.evidence["side"] == "below" and "too fast" in f.evidence["meaning"]
    assert f.evidence["band_units"] > 4 and f.evidence["delta"] < 0
    (s,) = _departs(results["slow_step"])["step_time"][:1]
    assert s.evidence["side"] == "above" and "slowdown" in s.message
    assert 0.12 < s.evidence["relative"] < 0.35  # a 20 % sleep on top of the compute
    (lr,) = _departs(results["lr_up"])["lr"][:1]
    assert "config change" in lr.message and lr.step_start == 1


def test_golden_file_round_trip_gives_the_same_verdicts(tmp_path, golden, results, capsys):
    path = tmp_path / "golden.json"
    assert main(["gate", *map(str, REFS), "--write-golden", str(path)]) == 0
    assert "wrote" in capsys.readouterr().err
    assert path.stat().st_size < sum(p.stat().st_size for p in REFS) / 5  # not the runs
    stored = read_golden(path)
    assert stored is not None and set(stored.bands) == set(golden.bands)
    for name in CANDIDATES:
        res = gate([_run(name)], golden=stored, jobs=1)
        assert set(_departs(res.reports[0])) == set(_departs(results[name])), name
        assert res.reports[0].verdict == results[name].verdict, name
        same = {g.finding.metric for g in res.reports[0].findings if g.finding.code == "REF002"}
        assert same == {
            g.finding.metric for g in results[name].findings if g.finding.code == "REF002"
        }


def test_cli_reference_runs_exit_codes_and_junit(capsys):
    refs = [a for p in REFS for a in ("--reference", str(p))]
    assert main(["gate", str(_run("seed3")), *refs, "-j", "1"]) == 0
    capsys.readouterr()
    assert main(["gate", str(_run("repeat_batch")), *refs, "-j", "1", "-f", "junit"]) == 1
    tree = ET.fromstring(capsys.readouterr().out)
    failing = [
        c.get("name", "")
        for c in tree.iter("testcase")
        if c.find("failure") is not None
        and "REF001" in (c.find("failure").get("message") or "") + (c.find("failure").text or "")
    ]
    assert failing, "no JUnit failure names REF001"


def _with_tokens(src: Path, dst: Path, step_factor: int = 1) -> Path:
    """The run as logged with a cumulative ``tokens`` (512 a step: its config's batch) and
    its steps numbered ``step_factor`` times finer (the same tokens in smaller steps)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    with open(src) as fin, open(dst, "w") as out:
        for line in fin:
            rec = json.loads(line)
            rec["tokens"] = rec["step"] * 512
            rec["step"] = rec["step"] * step_factor
            out.write(json.dumps(rec) + "\n")
    return dst


def test_tokens_alignment_compares_runs_of_other_step_sizes(tmp_path, results):
    from trainlens.core.config import Config
    from trainlens.gate import parse_rules
    from trainlens.gate.runner import load_reference

    refs = [str(_with_tokens(p, tmp_path / p.parent.name / "m.jsonl")) for p in REFS]
    cfg = Config()
    cfg.gate = {"reference": {"align": "tokens"}}
    g = load_reference(refs, cfg, parse_rules(cfg))
    assert g.axis == "tokens"
    for name in ("seed3", "repeat_batch"):
        # the candidate numbers its steps twice as fine: on steps nothing would line up
        cand = _with_tokens(_run(name), tmp_path / "cand" / name / "m.jsonl", step_factor=2)
        res = gate([cand], golden=g, jobs=1).reports[0]
        assert set(_departs(res)) == set(_departs(results[name])), name
        for metric, fs in _departs(res).items():  # said in the candidate's own steps
            want = 2 * _departs(results[name])[metric][0].step_start
            assert abs(fs[0].step_start - want) <= 4, (metric, fs[0].step_start, want)


def test_megatron_golden_values_are_read(tmp_path):
    steps = list(range(1, 51))
    loss = [10.5 - 0.02 * s for s in steps]
    doc = {
        "lm loss": {
            "start_step": 1,
            "end_step": 50,
            "step_interval": 1,
            "values": {str(s): v for s, v in zip(steps, loss, strict=True)},
        },
        "iteration-time": {
            "start_step": 1,
            "end_step": 50,
            "step_interval": 1,
            "values": [1.0] * 50,
        },
    }
    path = tmp_path / "golden_values_dev_dgx_h100.json"
    path.write_text(json.dumps(doc))
    g = read_golden(path)
    assert g is not None and set(g.bands) == {"train/loss", "step_time"}
    # a candidate 3 % above the lm loss passes Megatron's 5 %; 8 % above fails
    run = tmp_path / "cand.jsonl"
    for factor, verdict in ((1.03, "pass"), (1.08, "fail")):
        run.write_text(
            "".join(
                json.dumps({"step": s, "loss": v * factor, "step_time": 1.0}) + "\n"
                for s, v in zip(steps, loss, strict=True)
            )
        )
        res = gate([run], golden=g, jobs=1)
        assert res.reports[0].verdict == verdict, (
            factor,
            [x.line() for x in res.reports[0].findings],
        )


def test_a_sparser_candidate_is_aligned_on_steps(golden):
    run = read_runs([_run("seed3")])[0]
    x, v = run.series("train/loss")
    band = golden.bands["train/loss"]
    every10 = x % 10 == 0
    deps, info = compare(band, x[every10].astype(float), v[every10])
    assert deps == [] and info["compared"] == every10.sum()


def test_outliers_in_one_reference_widen_the_band_only_where_they_are():
    rng = np.random.default_rng(0)
    x = np.arange(1, 1001, dtype=float)
    base = 3 * np.exp(-x / 300) + 1
    refs = {f"s{i}": (x, base + rng.normal(0, 0.02, x.size)) for i in range(3)}
    clean = build_band("train/loss", refs, window=20, rtol=0.05)
    spiky = dict(refs)
    xv = spiky["s1"][1].copy()
    xv[[200, 201, 650]] += 2.0
    spiky["s1"] = (x, xv)
    dirty = build_band("train/loss", spiky, window=20, rtol=0.05)
    assert clean is not None and dirty is not None
    ratio = dirty.scale / clean.scale
    far = (np.abs(x - 200) > 80) & (np.abs(x - 650) > 80)
    assert np.median(ratio[far]) < 1.05  # the rest of the band is as it was


def test_what_was_not_compared_is_said(tmp_path, golden):
    run = tmp_path / "short.jsonl"
    run.write_text("".join(json.dumps({"step": s, "loss": 3.0}) + "\n" for s in range(700, 800)))
    res = gate([run], golden=golden, jobs=1)
    codes = {(g.finding.code, g.finding.metric) for g in res.reports[0].findings}
    assert ("REF003", "train/loss") in codes  # logged, but at no reference step
    assert ("REF003", "val/loss") in codes  # the references log it, this run does not


def test_unknown_tolerance_syntax_is_a_usage_error(capsys):
    argv = ["gate", str(_run("seed3")), "--reference", str(REFS[0]), "--rtol", "loss=abc"]
    assert main(argv) == 2
    assert "METRIC=VALUE" in capsys.readouterr().err
    assert main(["gate", str(_run("seed3")), "--reference", "nope/"]) == 2
    assert "reference not found" in capsys.readouterr().err


def test_report_draws_the_band_and_the_departure(tmp_path):
    # a 60-step slice around the change keeps the rest of the report small
    src, cand = _run("repeat_batch"), tmp_path / "repeat_batch" / "metrics.jsonl"
    cand.parent.mkdir()
    cand.write_text(
        "".join(t for t in src.read_text().splitlines(True) if 280 <= json.loads(t)["step"] <= 340)
    )
    refs = [a for p in REFS for a in ("--reference", str(p))]
    out = tmp_path / "rep"
    assert main(["report", str(cand), *refs, "-o", str(out)]) == 0
    page = (out / "report.html").read_text()
    assert "Against the references" in page
    assert "train/loss: repeat_batch against 3 references — departs from step 30" in page
    assert (out / "golden_0.png").stat().st_size > 10_000
