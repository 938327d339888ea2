"""Incidents: findings grouped by root cause (trainlens/incidents.py, docs/incidents.md).

Real runs first (the fixture runs, trained on the CPU and logged by trainlens' monitor; a
real HF trainer_state with six eval sets): each gives the expected incidents with the
expected members. Then one case per grouping rule, which fails without that rule.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

import trainlens
from tests.conftest import fixture_path
from trainlens.core.findings import Finding, Severity
from trainlens.core.incidents import Incident
from trainlens.incidents import RULES, group


def analyzed(path: Path) -> trainlens.Analysis:
    [a] = trainlens.analyze(path)
    return a


def _contract(a: trainlens.Analysis) -> None:
    """Every finding in exactly one incident; the list is worst first."""
    members = [m for inc in a.incidents for m in inc.members]
    assert sorted(members) == list(range(len(a.findings)))
    ranks = [i.severity.rank for i in a.incidents]
    assert ranks == sorted(ranks, reverse=True)
    for inc in a.incidents:
        worst = max(a.findings[m].severity.rank for m in inc.members)
        assert inc.severity.rank == worst
        assert a.findings[inc.members[0]].code == inc.code
        assert inc.onset == min(
            a.findings[m].step_start for m in inc.members if a.findings[m].step_start is not None
        )


def _codes(a: trainlens.Analysis, inc: Incident) -> Counter[str]:
    return Counter(a.findings[m].code for m in inc.members)


def test_nan_run_is_one_incident() -> None:
    a = analyzed(fixture_path("nan_divergence"))
    _contract(a)
    assert len(a.findings) == 21
    [inc] = a.incidents
    assert inc.id == "NAN001@450" and inc.severity is Severity.ERROR
    assert _codes(a, inc) == Counter({"NAN001": 21})
    assert a.findings[inc.members[0]].metric == "train/loss"  # the loss heads it
    assert {"val/loss", "entropy", "grad_norm"} <= set(inc.metrics)
    assert inc.headline().startswith("steps 450–469  train/loss became NaN at step 450")


def test_lr_shock_is_one_incident_led_by_the_lr() -> None:
    a = analyzed(fixture_path("lr_shock_diverge"))
    _contract(a)
    [inc] = a.incidents
    assert _codes(a, inc) == Counter({"GRAD001": 1, "LR001": 1, "GRAD004": 1, "LOSS003": 1})
    assert inc.severity is Severity.ERROR and inc.code == "GRAD001"
    assert (inc.first_mover, inc.first_mover_step) == ("lr", 400)
    assert "first: lr ×40 at 400 → grad norm" in inc.headline()
    assert "cause-chain" in inc.rules


def test_independent_second_problem_stays_apart() -> None:
    """An LR shock at 300 and a throughput drop from 800: two incidents, not one."""
    a = analyzed(fixture_path("shock_then_slow"))
    _contract(a)
    by_code = {inc.code: inc for inc in a.incidents}
    assert set(by_code) == {"GRAD001", "TPUT001"}
    assert _codes(a, by_code["GRAD001"]) == Counter({"GRAD001": 1, "LR001": 1, "LOSS003": 1})
    assert _codes(a, by_code["TPUT001"]) == Counter({"TPUT001": 1})
    assert by_code["TPUT001"].onset == 800
    assert abs((by_code["GRAD001"].onset or 0) - 300) <= 2


def test_restart_and_the_lr_reset_it_caused() -> None:
    a = analyzed(fixture_path("resume_lr_reset"))
    _contract(a)
    [inc] = a.incidents
    assert _codes(a, inc) == Counter({"LR006": 1, "DATA001": 1, "LOSS003": 1})


def test_six_eval_sets_one_regression(shared_dir: Path) -> None:
    path = shared_dir / "real-logs" / "aigoncharov_trainer_state_viz" / "trainer_state.json"
    a = analyzed(path)
    _contract(a)
    assert [f.code for f in a.findings] == ["VAL001"] * 6
    [inc] = a.incidents
    assert inc.severity is Severity.ERROR and inc.onset == 401
    assert set(inc.metrics) == {f"val/loss/g{k}" for k in range(6)}
    assert inc.rules == ("same-signature",)


def test_healthy_run_has_no_incident() -> None:
    assert analyzed(fixture_path("healthy_cosine")).incidents == []


@pytest.mark.slow
def test_real_nan_training_run_pages_once(tmp_path: Path) -> None:
    """examples/tiny_gpt.py --inject nan@200, trained here (about 5 s on one core)."""
    import runpy
    import sys

    pytest.importorskip("torch")
    out = tmp_path / "nan"
    script = Path(__file__).parents[1] / "examples" / "tiny_gpt.py"
    argv = sys.argv
    sys.argv = [str(script), "--out", str(out), "--steps", "230", "--inject", "nan@200"]
    try:
        runpy.run_path(str(script), run_name="__main__")
    finally:
        sys.argv = argv
    a = analyzed(out)
    _contract(a)
    nan_codes = [f.code for f in a.findings].count("NAN001")
    assert nan_codes >= 20
    nan = [i for i in a.incidents if "NAN001" in i.codes]
    assert len(nan) == 1 and nan[0].onset == 200 and len(nan[0].members) == nan_codes
    assert a.incidents[0] is nan[0]  # the error comes first


# ---- one case per rule: it groups as expected, and not without that rule ---------------------


def F(code: str, metric: str | None, start: int | None, end: int | None, **ev: object) -> Finding:
    sev = Severity.ERROR if code == "NAN001" and metric == "train/loss" else Severity.WARNING
    return Finding(code, code.lower(), sev, metric, start, end, f"{code} on {metric}.", dict(ev))


LOSS = "train/loss"
CHAIN = [
    {"metric": "lr", "step": 400, "what": "rose ×40 at step 400"},
    {"metric": "train/loss", "step": 401, "what": "left its tail at step 401"},
]
CASES: dict[str, tuple[list[Finding], dict[str, int], list[set[int]]]] = {
    # the entropy turns NaN 200 steps after the loss, while the loss is still NaN
    "nonfinite-spread": (
        [F("NAN001", LOSS, 200, 600), F("NAN001", "entropy", 400, 600)],
        {},
        [{0, 1}],
    ),
    # six eval sets every 400 steps, the last one's best one evaluation later
    "same-signature": (
        [F("VAL001", f"val/loss/g{k}", 400 if k < 5 else 800, 4000) for k in range(6)],
        {f"val/loss/g{k}": 400 for k in range(6)},
        [set(range(6))],
    ),
    # a loss rise whose chain starts at the LR, and the LR finding at that step
    "cause-chain": (
        [
            F(
                "LOSS003",
                LOSS,
                415,
                600,
                chain=CHAIN,
                first_mover="lr",
                first_mover_step=400,
            ),
            F("LR001", "lr", 400, 400),
        ],
        {},
        [{0, 1}],
    ),
    # an LR shock and the grad-norm spike of that step, before the loss answers
    "optimizer-step": (
        [F("LR001", "lr", 400, 400), F("GRAD002", "grad_norm", 400, 401)],
        {},
        [{0, 1}],
    ),
    "one-slowdown": (
        [F("TPUT001", "tokens_per_sec", 300, 900), F("DATA004", "dataloader_wait", 302, 900)],
        {},
        [{0, 1}],
    ),
    "restart-reset": ([F("DATA001", None, 601, 700), F("LR006", "lr", 601, 900)], {}, [{0, 1}]),
    "schedule-handover": ([F("LR001", "lr", 66, 499), F("LR005", "lr", 500, 797)], {}, [{0, 1}]),
    "data-change": (
        [F("DATA003", "padding_frac", 600, 900), F("LOSS003", LOSS, 604, 700)],
        {},
        [{0, 1}],
    ),
    "spike-in-rise": ([F("LOSS003", LOSS, 600, 735), F("LOSS001", LOSS, 650, 650)], {}, [{0, 1}]),
}


def _groups(incidents: list[Incident]) -> list[set[int]]:
    return sorted((set(i.members) for i in incidents), key=min)


def test_every_rule_has_a_case() -> None:
    assert set(CASES) == set(RULES)


@pytest.mark.parametrize("rule", sorted(CASES))
def test_rule_case(rule: str) -> None:
    findings, intervals, expected = CASES[rule]
    got = group(findings, intervals)
    assert _groups(got) == expected
    assert any(rule in i.rules for i in got)
    without = {k: v for k, v in RULES.items() if k != rule}
    assert _groups(group(findings, intervals, without)) != expected


# ---- and when they are not merged (docs/incidents.md) ----------------------------------------

APART: dict[str, list[Finding]] = {
    # the same code at two onsets: two events
    "two spikes": [F("LOSS001", LOSS, 200, 200), F("LOSS001", LOSS, 400, 400)],
    # a NaN in a side series long before the loss's: not the loss's NaN spreading
    "earlier side NaN": [F("NAN001", "update_ratio/emb", 10, 900), F("NAN001", LOSS, 500, 900)],
    # an LR shock inside an LR that never decays: two problems in one series
    "shock inside no-decay": [F("LR003", "lr", 51, 1000), F("LR001", "lr", 400, 400)],
    # two rises with a gap
    "two rises": [F("LOSS003", LOSS, 600, 735), F("LOSS003", LOSS, 760, 834)],
    # a throughput drop 500 steps after a loader wait rose
    "later slowdown": [F("DATA004", "dataloader_wait", 300, 900), F("TPUT001", "tok", 800, 900)],
}


@pytest.mark.parametrize("case", sorted(APART))
def test_not_merged(case: str) -> None:
    got = group(APART[case])
    assert len(got) == 2 and all(i.rules == () for i in got)


def test_ids_are_unique_and_findings_without_steps_group() -> None:
    got = group(
        [F("MFU001", None, None, None), F("MFU001", None, None, None), F("X001", None, 5, 5)]
    )
    assert sorted(i.id for i in got) == ["MFU001@run", "X001@5"]
    twins = group([F("A001", "a", 5, 5), F("B001", "b", 5, 5)], rules={})
    assert sorted(i.id for i in twins) == ["A001@5", "B001@5"]


def test_a_headline_keeps_a_metric_name_with_parentheses_whole() -> None:
    from trainlens.core.findings import Finding, Severity
    from trainlens.incidents import title_of

    f = Finding(
        "NAN001",
        "non-finite-value",
        Severity.ERROR,
        "loss(train); total",
        40,
        40,
        "loss(train); total became NaN at step 40 (1 non-finite value); look at the batch",
    )
    assert title_of(f) == "loss(train); total became NaN at step 40"
