"""The real-logs corpus: trainlens on third-party logs nobody here wrote.

Every expectation lives in tests/real_logs.yml (read also by docs/gen_precision_recall.py)
and comes from the events ../shared/real-logs/README.md documents: each file reads (or
fails with one sentence and exit 2 when nothing usable is in it), the documented events
are found at their steps, and the healthy runs get no warning or error.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from trainlens.api import Analysis, analyze
from trainlens.cli import main
from trainlens.core.findings import Severity

CORPUS = yaml.safe_load((Path(__file__).parent / "real_logs.yml").read_text())["logs"]


def _id(entry: dict[str, Any]) -> str:
    return str(entry["path"])


@pytest.fixture(scope="module")
def analyses() -> dict[str, list[Analysis]]:
    """Each log analyzed once per module (a folder and a file in it are separate keys)."""
    return {}


def _analyzed(
    root: Path, entry: dict[str, Any], cache: dict[str, list[Analysis]]
) -> list[Analysis]:
    key = entry["path"]
    if key not in cache:
        cache[key] = analyze(root / key)
    return cache[key]


def event_found(results: list[Analysis], event: dict[str, Any]) -> bool:
    """One of the event's codes starts within its tolerance, at least at its severity."""
    codes = set(event["code"])
    least = Severity.parse(event.get("severity", "info")).rank
    tol = int(event.get("tol", 0))
    return any(
        f.code in codes
        and f.step_start is not None
        and abs(f.step_start - int(event["step"])) <= tol
        and f.severity.rank >= least
        for a in results
        for f in a.findings
    )


READABLE = [pytest.param(e, id=_id(e)) for e in CORPUS if e.get("exit", 0) == 0]
FAILING = [pytest.param(e, id=_id(e)) for e in CORPUS if e.get("exit", 0) == 2]


@pytest.mark.parametrize("entry", READABLE)
def test_reads_and_finds_documented_events(
    shared_dir: Path, entry: dict[str, Any], analyses: dict[str, list[Analysis]]
) -> None:
    results = _analyzed(shared_dir / "real-logs", entry, analyses)
    assert len(results) == entry.get("runs", 1), [a.run.name for a in results]
    for a in results:
        missing = [m for m in entry.get("metrics", []) if not a.run.has(m)]
        assert not missing, f"{a.run.name}: {missing} not read; has {a.run.metrics}"
        for key in entry.get("summary", []):
            assert a.summary.get(key) is not None, f"summary {key} is missing"
    for event in entry.get("events", []):
        if event.get("required", True):
            found = [(f.code, f.severity.value, f.step_start) for a in results for f in a.findings]
            assert event_found(results, event), f"{event} not found; found {found}"
    loud = [
        (a.run.name, f.code, f.step_start, f.message)
        for a in results
        for f in a.findings
        if f.severity.rank >= Severity.WARNING.rank
    ]
    if entry.get("healthy"):
        assert not loud, f"false alarms on a healthy run: {loud}"
    absent = set(entry.get("absent", []))
    assert not [f.code for a in results for f in a.findings if f.code in absent]
    for phrase in entry.get("notes", []):
        notes = [d.message for a in results for d in a.run.data_quality]
        assert any(phrase in n for n in notes), f"no data-quality note about {phrase!r}: {notes}"


@pytest.mark.parametrize("entry", FAILING)
def test_unusable_input_is_one_sentence_and_exit_2(
    shared_dir: Path, entry: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["analyze", str(shared_dir / "real-logs" / entry["path"])])
    err = capsys.readouterr().err
    assert code == 2
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert entry["error"] in err


def test_every_real_log_is_covered(shared_dir: Path) -> None:
    """A log added to ../shared/real-logs gets an expectation here, or this fails."""
    root = shared_dir / "real-logs"
    covered = {str(e["path"]).split("/")[0] for e in CORPUS}
    present = {p.name for p in root.iterdir() if p.is_dir()}
    assert present <= covered, f"no expectation for {sorted(present - covered)}"


def test_json_lists_skipped_detectors_on_a_short_log(
    shared_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A one-point run is judged as far as it can be; the rest is skipped with a reason,
    never a silent 'nothing looks wrong'."""
    path = shared_dir / "real-logs" / "10tanmay100_DEEPCNNCLASSIFIER" / "mlruns"
    assert main(["analyze", str(path), "--json"]) == 0
    [run] = json.loads(capsys.readouterr().out)["runs"]
    skipped = run["skipped_detectors"]
    assert "grad_spikes" in skipped and "loss_trend" in skipped, skipped
    assert all(reason for reason in skipped.values())
