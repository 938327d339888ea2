"""One driver for every detector's cases (tests/detector_cases/<detector>.yml).

A case: ``series`` (see series.py), optional ``schedule``, ``model``, ``params``
(overrides for the detector under test), ``expect`` (findings that must appear:
code, step within tol, optional evidence bounds; ``key: null`` for a key that must be
None) and ``forbid`` (codes that must not appear, or "warning" for "no warning or error
from this detector").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

yaml = pytest.importorskip("yaml")

from tests.conftest import DOCS  # noqa: E402
from tests.detector_cases.series import make_run  # noqa: E402
from trainlens.core.config import Config  # noqa: E402
from trainlens.detectors import available, load, run_detectors  # noqa: E402
from trainlens.detectors.base import Context  # noqa: E402

CASES_DIR = Path(__file__).parent / "detector_cases"


def _cases() -> list[Any]:
    out = []
    for path in sorted(CASES_DIR.glob("*.yml")):
        doc = yaml.safe_load(path.read_text())
        detector = doc["detector"]
        for case in doc["cases"]:
            out.append(pytest.param(detector, case, id=f"{path.stem}:{case['name']}"))
    return out


@pytest.mark.parametrize(("detector", "case"), _cases())
def test_case(detector: str, case: dict[str, Any]) -> None:
    assert detector in available(), f"unknown detector {detector}"
    run = make_run(case, name=case["name"])
    cfg = Config(select=[detector], detectors={detector: case.get("params", {})})
    ctx = Context(schedule=case.get("schedule", {}), model=case.get("model", {}))
    result = run_detectors(run, cfg, ctx)
    if case.get("skipped"):
        assert detector in result.skipped, f"expected {detector} to be skipped"
        return
    assert detector not in result.skipped, result.skipped.get(detector)
    found = result.findings
    undeclared = {f.code for f in found} - set(load(detector).CODES)
    assert not undeclared, f"{detector} emitted codes not in its CODES: {undeclared}"
    for exp in case.get("expect", []):
        tol = int(exp.get("tol", 0))
        hits = [
            f
            for f in found
            if f.code == exp["code"]
            and (exp.get("step") is None or abs((f.step_start or 0) - int(exp["step"])) <= tol)
        ]
        assert hits, (
            f"expected {exp['code']} near step {exp.get('step')} (±{tol}); got "
            + "; ".join(f"{f.code}@{f.step_start}:{f.message}" for f in found)
        )
        f = hits[0]
        if "severity" in exp:
            assert f.severity.value == exp["severity"], f.message
        for key, bound in exp.get("evidence", {}).items():
            got = f.evidence.get(key)
            if bound is None:  # `key: null`: present, and None
                assert key in f.evidence and got is None, (key, got, f.message)
                continue
            assert got is not None, f"evidence {key} missing in {f.evidence}"
            if isinstance(bound, list):  # [expected, tolerance]
                assert abs(float(got) - float(bound[0])) <= float(bound[1]), (key, got, bound)
            else:
                assert got == bound, (key, got, bound)
    forbid = case.get("forbid", [])
    if forbid == "warning":
        bad = [f for f in found if f.severity.rank >= 1]
        assert not bad, "; ".join(f"{f.code}@{f.step_start}: {f.message}" for f in bad)
    else:
        for code in forbid:
            bad = [f for f in found if f.code == code]
            assert not bad, "; ".join(f"{f.code}@{f.step_start}: {f.message}" for f in bad)


def test_every_detector_documents_its_sections() -> None:
    from trainlens.detectors import DOC_SECTIONS, available

    for name in available():
        doc = load(name).__doc__ or ""
        for section in DOC_SECTIONS:
            assert section in doc, f"detector {name}: docstring lacks '{section}'"


def test_every_available_detector_has_cases() -> None:
    from trainlens.detectors import available

    have = {p.stem for p in CASES_DIR.glob("*.yml")}
    missing = [d for d in available() if d not in have]
    assert not missing, f"detectors without cases: {missing}"


def test_every_detector_has_a_docs_page() -> None:
    from trainlens.detectors import DOC_SECTIONS, available

    docs = DOCS / "detectors"
    for name in available():
        page = docs / f"{name}.md"
        assert page.is_file(), f"docs/detectors/{name}.md missing"
        text = page.read_text()
        for code in load(name).CODES:
            assert code in text, f"{page.name} does not mention {code}"
        for section in DOC_SECTIONS:
            assert section.lower() in text.lower(), f"{page.name} lacks '{section}'"
