"""Every rendering writes a finding's steps and a summary number the same way.

The terminal summary, the gate's outputs and the report each had their own spelling of
"where" (``step 400`` / ``400`` / ``steps 400–1000`` / ``400–1,000``) and of numbers; one
function each now (:func:`trainlens.core.findings.steps_text`,
:func:`trainlens.formatters.text.number_text`). These tests run every output on one real
fixture run and look for the same text in each.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainlens.cli import main
from trainlens.core.findings import Finding, Severity, steps_text
from trainlens.formatters.text import number_text
from trainlens.report.html import _number


@pytest.fixture
def shock(fixture_runs: Path) -> Path:
    return fixture_runs / "lr_shock_diverge"


def test_steps_text_spellings() -> None:
    assert steps_text(400, 1000) == "steps 400–1000"
    assert steps_text(400, 400) == "step 400"
    assert steps_text(400, None) == "step 400"
    # a finding that knows only where it ends is still placed (the gate's copy said "")
    assert steps_text(None, 9) == "step 9"
    assert steps_text(None, None) == ""
    f = Finding("LR001", "x", Severity.WARNING, "lr", 5, 7, "m")
    assert f.where == "steps 5–7"


def test_every_output_places_findings_alike(
    shock: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    main(["analyze", str(shock), "--json"])
    findings = json.loads(capsys.readouterr().out)["runs"][0]["findings"]
    wheres = {steps_text(f["step_start"], f["step_end"]) for f in findings}
    assert "steps 400–1000" in wheres and "step 400" in wheres

    outputs: dict[str, str] = {}
    main(["analyze", str(shock)])
    outputs["analyze text"] = capsys.readouterr().out
    for fmt in ("text", "markdown", "github"):
        main(["gate", str(shock), "--format", fmt, "--fail-on", "info", "-j", "1"])
        outputs[f"gate {fmt}"] = capsys.readouterr().out
    main(["report", str(shock), "-o", str(tmp_path / "r")])
    capsys.readouterr()
    outputs["report html"] = (tmp_path / "r" / "report.html").read_text()
    outputs["report md"] = (tmp_path / "r" / "report.md").read_text()
    for name, text in outputs.items():
        assert "steps 400–1000" in text, name
        assert "400–1,000" not in text, name


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (None, "—"),
        (1234567, "1,234,567"),
        (0.5, "0.5"),
        (123456.0, "1.235e+05"),
        (1e-5, "1.000e-05"),
    ],
)
def test_numbers_read_the_same_in_terminal_and_report(value: float | None, text: str) -> None:
    assert number_text(value) == text
    assert _number(value) == text


def test_report_escapes_what_number_text_passes_through() -> None:
    assert _number("<b>") == "&lt;b&gt;"  # type: ignore[arg-type]
