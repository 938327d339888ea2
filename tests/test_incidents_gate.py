"""The gate speaks in incidents: one JUnit failure, one GitHub annotation, one Markdown row
per incident; acknowledgements and overrides work by code and by incident headline."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

import trainlens.cli.gate  # noqa: F401  (registers the command)
from tests.conftest import fixture_path
from trainlens.cli import main


def gate(
    args: list[str], capsys: pytest.CaptureFixture[str], tmp_path: Path, toml: str = ""
) -> tuple[int, str]:
    cfg = tmp_path / "trainlens.toml"
    cfg.write_text(toml)
    code = main(["gate", *args, "--config", str(cfg), "-j", "1", "--fail-on", "warning"])
    return code, capsys.readouterr().out


def as_json(
    args: list[str], capsys: pytest.CaptureFixture[str], tmp_path: Path, toml: str = ""
) -> tuple[int, dict[str, Any]]:
    code, out = gate([*args, "-f", "json"], capsys, tmp_path, toml)
    return code, json.loads(out)


@pytest.fixture
def shock() -> str:
    return str(fixture_path("lr_shock_diverge"))


def test_json_incidents_index_the_findings(
    shock: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    nan = str(fixture_path("nan_divergence"))
    code, doc = as_json([shock, nan], capsys, tmp_path)
    assert code == 1 and doc["version"] == 2
    assert [i["id"] for i in doc["incidents"]] == ["GRAD001@400", "NAN001@450"]
    for inc in doc["incidents"]:
        members = [doc["findings"][m] for m in inc["members"]]
        assert {f["run"] for f in members} == {inc["run"]}
        assert {f["incident"] for f in members} == {inc["id"]}
        assert inc["fails_gate"] is True
    assert sum(len(i["members"]) for i in doc["incidents"]) == len(doc["findings"]) == 25
    counts = {r["run"]: r["incident_counts"] for r in doc["runs"]}
    assert counts["nan_divergence"] == {"info": 0, "warning": 0, "error": 1, "acknowledged": 0}


def test_one_failure_annotation_and_row_per_incident(
    shock: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    _, out = gate([shock, "-f", "junit"], capsys, tmp_path)
    failures = ET.fromstring(out).findall(".//failure")
    assert [f.get("type") for f in failures] == ["GRAD001"]  # was 4: one per check
    assert len((failures[0].text or "").splitlines()) == 4
    _, out = gate([shock, "-f", "github"], capsys, tmp_path)
    annotations = [line for line in out.splitlines() if line.startswith("::")]
    assert len(annotations) == 1 and annotations[0].startswith("::error ")
    assert "incident GRAD001@400; first: lr ×40 at 400" in annotations[0]
    _, out = gate([shock, "-f", "markdown"], capsys, tmp_path)
    rows = [
        line
        for line in out.splitlines()
        if line.startswith("| <code>lr\\_shock\\_diverge</code> | error")
    ]
    assert len(rows) == 1 and "<code>GRAD001@400</code>" in rows[0]
    assert "4 findings: GRAD001, LOSS003, LR001, GRAD004" in rows[0]
    _, out = gate([shock], capsys, tmp_path)
    table = out.splitlines()
    assert table[0].split() == ["run", "verdict", "worst", "incident", "err", "warn", "info", "ack"]
    assert table[1].split()[-4:] == ["1", "0", "0", "0"]  # one error incident, not 1 + 3


ACK = """
[[gate.acknowledge]]
runs = "lr_shock_*"
code = "{code}"
reason = "known LR shock test"
"""


def test_acknowledging_the_headline_code_acknowledges_the_incident(
    shock: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, doc = as_json([shock], capsys, tmp_path, ACK.format(code="GRAD001"))
    assert code == 0
    [inc] = doc["incidents"]
    assert inc["acknowledged"] and not inc["fails_gate"]
    assert all(f["acknowledged"] for f in doc["findings"])  # every member, not just GRAD001
    assert doc["unused_acknowledgements"] == []
    _, out = gate([shock, "-f", "github"], capsys, tmp_path, ACK.format(code="GRAD001"))
    assert out.startswith("::notice ") and "(acknowledged: known LR shock test)" in out


def test_acknowledging_a_member_code_acknowledges_that_finding(
    shock: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, doc = as_json([shock], capsys, tmp_path, ACK.format(code="LR001"))
    assert code == 1
    [inc] = doc["incidents"]
    assert not inc["acknowledged"] and inc["fails_gate"]
    acked = {f["code"] for f in doc["findings"] if f["acknowledged"]}
    assert acked == {"LR001"}


def test_overrides_by_code_set_the_incident_severity(
    shock: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # the headline's code downgraded: still one incident, as bad as its worst other
    # member, which heads it now
    one = '[[gate.overrides]]\nruns = "*"\nseverity = { GRAD001 = "info" }\n'
    code, doc = as_json([shock], capsys, tmp_path, one)
    [inc] = doc["incidents"]
    assert code == 1 and inc["severity"] == "warning" and inc["code"] == "LOSS003"
    assert len(inc["members"]) == 4
    every = '[[gate.overrides]]\nruns = "*"\nseverity = { GRAD001 = "info", LR001 = "info", ' + (
        'GRAD004 = "info", LOSS003 = "info" }\n'
    )
    code, doc = as_json([shock], capsys, tmp_path, every)
    [inc] = doc["incidents"]
    assert code == 0 and inc["severity"] == "info" and not inc["fails_gate"]
    # a code ignored for these runs: its finding is not there, the rest still one incident
    ignored = '[[gate.overrides]]\nruns = "*"\nignore = ["LR001"]\n'
    code, doc = as_json([shock], capsys, tmp_path, ignored)
    [inc] = doc["incidents"]
    assert code == 1 and inc["codes"] == ["GRAD001", "LOSS003", "GRAD004"]
